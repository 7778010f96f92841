//! The `rocm` selector sdist: `rocm-<V>.tar.gz` holding PKG-INFO, the
//! pyproject.toml naming the stdlib-only backend in `_build/`, and the
//! `rocm_sdk` package with this release's `_dist_info.py`. Installing it
//! runs the backend, which picks the target family and pins every sibling
//! package at exactly `V`. Deterministic: sorted entries, owner 0:0, fixed
//! times, gzip header without name or time.

use super::PackageError;
use crate::layer::{Node, Tree};
use crate::rocm::python::{DistInfo, ROCM_SDK_FILES, SELECTOR_BACKEND, SELECTOR_PYPROJECT};
use std::io::Write;
use std::path::Path;

fn pkg_info(version: &str) -> String {
    format!(
        "Metadata-Version: 2.1\nName: rocm\nVersion: {version}\n\
         Summary: ROCm SDK: selects and pins the rocm-sdk packages for this machine\n\
         Requires-Python: >=3.8\n"
    )
}

/// Write `rocm-<V>.tar.gz` into `dist`; returns its path and member names.
pub fn write(dist: &Path, info: &DistInfo, epoch: u64) -> Result<(std::path::PathBuf, Vec<String>), PackageError> {
    let top = format!("rocm-{}", info.version);
    let mut files: Vec<(String, String)> = vec![
        ("PKG-INFO".into(), pkg_info(&info.version)),
        ("pyproject.toml".into(), SELECTOR_PYPROJECT.into()),
        ("_build/rocm_selector.py".into(), SELECTOR_BACKEND.into()),
        ("rocm_sdk/_dist_info.py".into(), info.render()),
    ];
    for (name, text) in ROCM_SDK_FILES {
        files.push((format!("rocm_sdk/{name}"), text.into()));
    }
    let mut tree = Tree::new();
    let mut names = Vec::new();
    for (name, text) in files {
        let path = format!("{top}/{name}");
        tree.insert(path.clone().into_bytes(), Node::bytes(text.into_bytes(), 0o644))
            .map_err(|e| PackageError::DevelTree(e.to_string()))?;
        names.push(path);
    }
    names.sort();
    let out = dist.join(format!("{top}.tar.gz"));
    let tmp = tempfile::Builder::new()
        .prefix(".quarry-sdist-")
        .tempfile_in(dist)
        .map_err(|source| PackageError::Io { path: dist.to_path_buf(), source })?;
    let io_fail = |source: std::io::Error| PackageError::Io { path: out.clone(), source };
    let gz = flate2::GzBuilder::new().mtime(0).write(tmp.reopen().map_err(io_fail)?, flate2::Compression::best());
    let opts = crate::layer::write::WriteOptions { source_date_epoch: epoch };
    let gz = crate::layer::write::write_tar(&tree, gz, &opts, &mut |_| {})
        .map_err(|e| PackageError::DevelTree(e.to_string()))?;
    let mut f = gz.finish().map_err(io_fail)?;
    f.flush().map_err(io_fail)?;
    drop(f);
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(io_fail)?;
    tmp.persist(&out).map_err(|e| io_fail(e.error))?;
    Ok((out, names))
}
