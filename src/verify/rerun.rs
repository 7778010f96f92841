//! Running a file product's command again from its provenance, its inputs
//! found first (`inputs`): `wheel split`, `wheel merge` or `rocm package`
//! with the recorded parameters into a private directory; `wheel build` in
//! `wheel_build`.

pub use super::inputs::FoundInput;
use super::inputs::{find_artifacts, find_file};
use super::{bad, VerifyError};
use crate::provenance::files::{MERGE_BUILD_TYPE, SPLIT_BUILD_TYPE, WHEEL_BUILD_TYPE};
use crate::provenance::statement::BuildDefinition;
use crate::rocm::package::provenance::ROCM_PACKAGE_BUILD_TYPE;
use std::path::{Path, PathBuf};

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
    cache: &crate::cache::LazyCache,
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
    // Recorded only when given: provenance of earlier splits has no such field.
    let device_requires: Vec<String> = serde_json::from_value(p["deviceRequiresDist"].clone()).unwrap_or_default();
    let variants = crate::wheel::split::VariantSchema::recorded(&p["variants"]);
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
            let options = crate::wheel::split::SplitOptions { device_prefix, targets, families, scheme, device_requires, variants };
            crate::wheel::split::split(&input.path, into, &options).map_err(|e| failed(e.to_string()))?;
            Ok(Rerun { products: into.to_path_buf(), inputs })
        }
        MERGE_BUILD_TYPE => {
            let inputs = files()?;
            let shards: Vec<_> =
                inputs.iter().map(|i| crate::wheel::merge::Shard { wheel: i.path.clone(), build_key: None }).collect();
            let options = crate::wheel::merge::MergeOptions { device_prefix, families, scheme, device_requires, variants };
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
            let cache = cache.get()?;
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
        WHEEL_BUILD_TYPE => {
            let (products, inputs) = super::wheel_build::rerun(target, def, dirs, into)?;
            Ok(Rerun { products, inputs })
        }
        other => Err(bad(
            target,
            format!(
                "its provenance is of a `{other}`; `quarry verify` rebuilds images and the products of `wheel build`, `wheel split`, `wheel merge` and `rocm package`, not this kind yet (its subject digest{} checked)",
                if signed { " and signature were" } else { " was" }
            ),
        )),
    }
}
