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
//! The whole file is `distro::lock::LockFile`; an image without packages
//! has only `version` and the `[[pypi]]` tables.

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

/// The `[[pypi]]` pins of the lock file at `path` (none when there is no file).
pub fn read_pypi_pins(path: &Path) -> Result<Vec<PypiPin>, crate::distro::DistroError> {
    Ok(crate::distro::lock::LockFile::read(path)?.map(|l| l.pypi).unwrap_or_default())
}
