//! The PyPI part of `IMAGE.lock` (written by `quarry lock`, read by
//! `quarry build`): one `[[pypi]]` table per file fetched with pip.
//! ```toml
//! [[pypi]]
//! requirement = "cmake==3.31.6"
//! format = "wheel"                        # or "sdist"
//! platform = "manylinux_2_28_x86_64"      # wheels: what pip chose for
//! file = "cmake-3.31.6-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
//! sha256 = "..."
//! ```
//! The distro part of the same file (`distro::lock`) keeps these tables when
//! it is written; an image without a `packages` base has only `version` and
//! the `[[pypi]]` tables.

use crate::spec::PypiFormat;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PypiPin {
    pub requirement: String,
    pub format: PypiFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    pub file: String,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
#[error("lock file `{lock}`: {message}")]
pub struct LockError {
    pub lock: String,
    pub message: String,
}

/// Only the keys this module reads; the distro keys are the distro's.
#[derive(Debug, Serialize, Deserialize)]
struct PypiOnly {
    version: u32,
    #[serde(default, rename = "pypi")]
    pins: Vec<PypiPin>,
}

/// The `[[pypi]]` pins of a lock file (none when there is no file).
pub fn read_pypi_pins(path: &Path) -> Result<Vec<PypiPin>, LockError> {
    let err = |message: String| LockError { lock: path.display().to_string(), message };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err(e.to_string())),
    };
    let doc: PypiOnly = toml::from_str(&text)
        .map_err(|e| err(format!("{}; delete it and run `quarry lock` again", e.to_string().trim_end())))?;
    if doc.version != crate::distro::lock::LOCK_VERSION {
        return Err(err(format!(
            "has version {}, this quarry reads version {}; run `quarry lock` again",
            doc.version,
            crate::distro::lock::LOCK_VERSION
        )));
    }
    Ok(doc.pins)
}

/// Write a lock holding only PyPI pins, atomically.
pub fn write_pypi_only(path: &Path, pins: Vec<PypiPin>) -> Result<(), LockError> {
    let err = |message: String| LockError { lock: path.display().to_string(), message };
    let body = toml::to_string(&PypiOnly { version: crate::distro::lock::LOCK_VERSION, pins })
        .map_err(|e| err(e.to_string()))?;
    let text =
        format!("# Written by `quarry lock`; read by `quarry build`. Do not edit: run `quarry lock` again.\n{body}");
    write_atomic(path, text.as_bytes()).map_err(|e| err(e.to_string()))
}

/// Temporary file beside `path`, then rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".quarry-lock-").tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, data)?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
