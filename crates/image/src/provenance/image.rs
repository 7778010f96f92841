//! The provenance of an image, read off its executed plan: the subject is
//! the image manifest; the external parameters are the image's definition
//! (`image`, what `quarry verify` rebuilds), the definition files
//! (by portable path and sha256), the `--set` values, the platform, the
//! layer format and `SOURCE_DATE_EPOCH`; the resolved dependencies are the
//! base, each suite's signed InRelease, the keyring package, every .deb by
//! its archive URL, every PyPI file and every local source, in plan order.

use super::paths::portable;
use super::statement::{BuildDefinition, Metadata, ResourceDescriptor, Statement};
use super::ProvenanceError;
use crate::oci::Digest;
use crate::plan::Plan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// `buildType` of an image build: what the external parameters mean.
pub const IMAGE_BUILD_TYPE: &str = "urn:quarry:build-type:image:v1";

/// What the user chose for the build, beyond the plan.
pub struct ImageBuildParams<'a> {
    pub sets: &'a BTreeMap<String, String>,
    /// Seconds since 1970 (0 when `SOURCE_DATE_EPOCH` is unset).
    pub source_date_epoch: u64,
}

/// The provenance statement of the image `plan` built, whose manifest is `manifest`.
pub fn statement(plan: &Plan, manifest: &Digest, params: &ImageBuildParams) -> Result<Statement, ProvenanceError> {
    let subject = vec![ResourceDescriptor::sha256(plan.name.clone(), &manifest.hex())];
    let definition = BuildDefinition {
        build_type: IMAGE_BUILD_TYPE.to_string(),
        external_parameters: serde_json::json!({
            "image": portable(&plan.file),
            "definitions": definition_files(plan)?,
            "sets": params.sets,
            "platform": plan.platform.to_string(),
            "layerFormat": plan.format,
            "sourceDateEpoch": params.source_date_epoch,
        }),
        resolved_dependencies: dependencies(plan)?,
    };
    Ok(Statement::new(subject, definition, metadata(params.source_date_epoch)))
}

/// Times only from `SOURCE_DATE_EPOCH`: a build that sets it says when its
/// sources are from; one that does not carries no time at all.
fn metadata(epoch: u64) -> Option<Metadata> {
    if epoch == 0 {
        return None;
    }
    let t = chrono::DateTime::from_timestamp(epoch as i64, 0)?.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    Some(Metadata { started_on: Some(t.clone()), finished_on: Some(t) })
}

/// Every definition, layer file and lock file the plan read, once each.
fn definition_files(plan: &Plan) -> Result<Vec<ResourceDescriptor>, ProvenanceError> {
    let mut files: Vec<PathBuf> = Vec::new();
    for s in &plan.scopes {
        files.push(s.image.file.clone());
        files.extend(s.image.layers.iter().map(|l| l.file.clone()));
        if s.lock_path.is_file() {
            files.push(s.lock_path.clone());
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for f in files {
        let name = portable(&f);
        if !seen.insert(name.clone()) {
            continue;
        }
        let hex = crate::oci::digest::sha256_file(&f)
            .map_err(|err| ProvenanceError::Read { path: f.display().to_string(), err })?;
        out.push(ResourceDescriptor::sha256(name, &hex));
    }
    Ok(out)
}

fn dependencies(plan: &Plan) -> Result<Vec<ResourceDescriptor>, ProvenanceError> {
    let mut out: Vec<ResourceDescriptor> = Vec::new();
    let mut push = |d: ResourceDescriptor| {
        if !out.contains(&d) {
            out.push(d);
        }
    };
    for n in &plan.layers {
        if let (Some(pins), Some(archive)) = (&n.pins, &n.archive) {
            let mirror_of = |suite: &str| {
                archive.mirrors.iter().find(|(s, _)| s == suite).map(|(_, m)| m.trim_end_matches('/').to_string())
            };
            for (suite, digest) in &pins.release {
                let mut d = ResourceDescriptor::sha256(format!("{suite} InRelease"), digest);
                if let Some(m) = mirror_of(suite) {
                    d = d.with_uri(format!("{m}/dists/{suite}/InRelease"));
                }
                push(d);
            }
            if let Some((url, sha)) = &archive.keyring {
                let file = url.rsplit('/').next().unwrap_or(url);
                push(ResourceDescriptor::sha256(file, sha).with_uri(url.clone()));
            }
            let distro = crate::sbom::distro_of(&plan.scopes[n.scope].image).as_str();
            for p in &pins.packages {
                let suite = pins.suite_of(p);
                let purl = crate::purl::format(
                    "deb",
                    Some(distro),
                    &p.name,
                    Some(&p.version),
                    &[("arch", &p.architecture), ("distro", suite)],
                )
                .map_err(|e| ProvenanceError::Input {
                    what: format!("package `{}`", p.name),
                    message: e.to_string(),
                })?;
                let mut d = ResourceDescriptor::sha256(purl, &p.sha256);
                if let Some(m) = mirror_of(suite) {
                    d = d.with_uri(format!("{m}/{}", p.file));
                }
                push(d);
            }
            continue;
        }
        for input in &n.inputs {
            let Some(pin) = &input.pin else { continue };
            if Digest::parse(pin).is_err() {
                continue;
            }
            let d = match input.kind {
                "pypi" => match crate::sbom::PypiFile::from_file_name(&input.reference, pin, &n.name) {
                    Ok(f) => {
                        let purl = crate::purl::format("pypi", None, &f.name, Some(&f.version), &[]).map_err(|e| {
                            ProvenanceError::Input { what: input.reference.clone(), message: e.to_string() }
                        })?;
                        ResourceDescriptor::sha256(f.file, pin).with_uri(purl)
                    }
                    Err(_) => ResourceDescriptor::sha256(input.reference.clone(), pin),
                },
                // A tree's digest is quarry's fingerprint of it (names,
                // modes, owners, contents), not the sha256 of one file: it
                // gets its own algorithm name.
                "dir" | "rocm" | "rocm_artifacts" => {
                    let hex = pin.strip_prefix(Digest::PREFIX).unwrap_or(pin);
                    ResourceDescriptor {
                        name: Some(input.reference.clone()),
                        digest: BTreeMap::from([(TREE_DIGEST.to_string(), hex.to_string())]),
                        ..Default::default()
                    }
                }
                // The chosen wheels' names and sha256s, encoded together
                // (`source::wheelhouse`): neither a file's nor a tree's digest.
                "wheels" => {
                    let hex = pin.strip_prefix(Digest::PREFIX).unwrap_or(pin);
                    ResourceDescriptor {
                        name: Some(input.reference.clone()),
                        digest: BTreeMap::from([(WHEELHOUSE_DIGEST.to_string(), hex.to_string())]),
                        ..Default::default()
                    }
                }
                _ => ResourceDescriptor::sha256(input.reference.clone(), pin),
            };
            push(d);
        }
    }
    Ok(out)
}

/// The digest algorithm name of a `wheels` source's selection.
pub const WHEELHOUSE_DIGEST: &str = "quarryWheelhouseSha256";

/// The digest algorithm name of quarry's tree fingerprint.
pub const TREE_DIGEST: &str = "quarryTreeSha256";
