//! Running a `wheel build` again from its provenance: the sdist found by
//! sha256 (or the project directory by quarry's tree digest) in the input
//! directories, the build image taken from the engine by the config digest
//! the provenance records (a Docker image id is that digest), the recorded
//! Python tags, axes, local version, repair, split and target list, and
//! `SOURCE_DATE_EPOCH`, the lock of build requirements (found by sha256: the
//! same pins); a private cache that starts empty, so nothing built before
//! is reused and every pinned requirement is fetched and checked again. Builds on `--rocm-packages` are refused (their packages are not
//! looked for yet).

use super::inputs::{find_file, find_tree, FoundInput};
use super::{bad, VerifyError};
use crate::engine::build_image::BuildImage;
use crate::provenance::statement::BuildDefinition;
use std::path::{Path, PathBuf};

fn strings(v: &serde_json::Value) -> Option<Vec<String>> {
    serde_json::from_value(v.clone()).ok()
}

/// The products' directory and the inputs found.
pub fn rerun(
    target: &Path,
    def: &BuildDefinition,
    dirs: &[PathBuf],
    into: &Path,
) -> Result<(PathBuf, Vec<FoundInput>), VerifyError> {
    let p = &def.external_parameters;
    if !p["rocm"].is_null() {
        return Err(bad(
            target,
            "it was built on ROCm's Python packages (--rocm-packages); `quarry verify` does not rebuild those yet",
        ));
    }
    let deps = &def.resolved_dependencies;
    let (Some(source), Some(image)) = (deps.first(), deps.get(1)) else {
        return Err(bad(
            target,
            "a wheel build records its source and its build image first; this provenance does not",
        ));
    };
    let mut inputs: Vec<FoundInput> = Vec::new();
    let found_source = match source.sha256_hex() {
        Some(_) => find_file(target, source, dirs)?,
        None => find_tree(target, source, dirs, "wheel-source")?,
    };
    inputs.push(found_source.clone());
    let find_links = match deps.iter().find(|d| d.name.as_deref() == Some("find-links")) {
        Some(d) => {
            let f = find_tree(target, d, dirs, "wheel-find-links")?;
            inputs.push(f.clone());
            Some(f.path)
        }
        None => None,
    };
    // The lock the build installed its requirements from, copied: a build
    // may add to a lock, and the user's stays as it is.
    let lock = match deps.iter().find(|d| d.name.as_deref().is_some_and(|n| n.ends_with(".lock"))) {
        Some(d) => {
            let f = find_file(target, d, dirs)?;
            let copy = into.join("build.lock");
            std::fs::create_dir_all(into).and_then(|_| std::fs::copy(&f.path, &copy)).map_err(|err| {
                VerifyError::Io { path: copy.display().to_string(), what: "cannot write".into(), err }
            })?;
            inputs.push(f);
            Some(copy)
        }
        None => None,
    };
    let config = image.sha256_hex().unwrap_or_default();
    let output = into.to_path_buf();
    let cache = crate::cache::Cache::private(&into.join(".cache"))?;
    let mut r = crate::wheel::build::BuildRequest::new(found_source.path.clone(), output.join("out"), cache);
    r.pythons = strings(&p["pythons"]);
    r.axes = serde_json::from_value::<std::collections::BTreeMap<String, Vec<String>>>(p["axes"].clone())
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    r.local_version = p["localVersion"].as_str().map(str::to_string);
    r.repair = p["repair"].as_bool().unwrap_or(false);
    r.split = p["split"].as_bool().unwrap_or(false);
    r.shard = p["splitLink"].as_bool().unwrap_or(false) && !r.split;
    r.exclude = strings(&p["exclude"]).unwrap_or_default();
    r.find_links = find_links;
    r.gpu = crate::engine::gpu::GpuMode::None;
    r.targets = strings(&p["targets"])
        .map(|targets| crate::code_objects::target_list::TargetList { targets, source: "the provenance".into() });
    r.isolation = p["isolation"].as_bool().unwrap_or(true);
    r.network = p["network"].as_bool().unwrap_or(false);
    r.lock = lock;
    r.compiler_cache = crate::engine::compiler_cache::Mode::Off;
    r.no_cache = true;
    let failed = |e: crate::wheel::build::WheelBuildError| {
        bad(target, format!("running the recorded wheel build again (in image sha256:{config}) failed: {e}"))
    };
    let prepared = crate::wheel::build::prepare(r).map_err(failed)?;
    let mut opts = prepared.with_image(BuildImage::Reference(format!("sha256:{config}")), None);
    opts.epoch = p["sourceDateEpoch"].as_u64().unwrap_or(0);
    crate::wheel::build::build(&opts).map_err(failed)?;
    inputs.push(FoundInput {
        name: image.name.clone().unwrap_or_default(),
        digest: format!("sha256:{config}"),
        path: PathBuf::from("(the engine)"),
    });
    Ok((output.join("out"), inputs))
}
