//! `IMAGE.lock`, the one module that reads and writes it: the resolved
//! package sets of an image's `packages` base and `packages` layers and the
//! files it takes from PyPI, written by `quarry lock` beside the image
//! definition and used by `quarry build` instead of resolving again. TOML,
//! like the definitions; the base and each layer (by name) are separate:
//!
//! ```toml
//! version = 2
//! [base]
//! suite = "bookworm"            # what it was resolved for: a build refuses
//! architecture = "amd64"        # a lock whose inputs differ from the definition
//! components = ["main"]
//! variant = "required"
//! include = ["python3", "sudo"]
//! release = "sha256:..."        # digest of the signed InRelease it came from
//! [[base.package]]
//! name = "bash"
//! version = "5.2.15-2+b7"
//! architecture = "amd64"
//! file = "pool/main/b/bash/bash_5.2.15-2+b7_amd64.deb"   # path below the mirror
//! sha256 = "..."
//! size = 1503712
//!
//! [layer.tools]                 # a layer's `[source.packages]`
//! suite = "bookworm"
//! ...
//! below = "sha256:..."          # the dpkg status of the layers below it was resolved over
//! [[layer.tools.package]]       # only what those layers do not have
//! ...
//! ```
//! The mirror is not recorded: the pins are content hashes, valid on any
//! mirror (and no host name ends up in a committed file). Version 1 files
//! (the base's pins at the top level) are still read.

use crate::definition::Variant;
use crate::distro::pins::{PackagePins, PinnedPackage};
use crate::pypi::PypiPin;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A lock file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error("lock file `{path}` {message}")]
    Invalid { path: String, message: String },
    #[error("lock file `{path}`: {err}")]
    Io { path: String, err: std::io::Error },
}

fn io(path: &Path, err: std::io::Error) -> LockFileError {
    LockFileError::Io { path: path.display().to_string(), err }
}

pub const LOCK_VERSION: u32 = 2;

/// Every pin of an image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<PackagePins>,
    /// Packages layers by layer name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layer: BTreeMap<String, PackagePins>,
    /// Files fetched with pip (`pypi` sources and inputs).
    #[serde(default, rename = "pypi", skip_serializing_if = "Vec::is_empty")]
    pub pypi: Vec<PypiPin>,
}

/// The version 1 format: one base's pins at the top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockV1 {
    // Read (deny_unknown_fields) but already checked by the caller.
    #[serde(rename = "version")]
    _version: u32,
    suite: String,
    architecture: String,
    components: Vec<String>,
    variant: Variant,
    include: Vec<String>,
    release: String,
    #[serde(default, rename = "package")]
    packages: Vec<PinnedPackage>,
}

/// `images/x.toml` -> `images/x.lock`.
pub fn lock_path(image_file: &Path) -> PathBuf {
    image_file.with_extension("lock")
}

impl LockFile {
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a lock always serializes");
        format!("# Written by `quarry lock`; read by `quarry build`. Do not edit: run `quarry lock` again.\n{body}")
    }

    pub fn read(path: &Path) -> Result<Option<LockFile>, LockFileError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path, e)),
        };
        let bad = |e: toml::de::Error| LockFileError::Invalid {
            path: path.display().to_string(),
            message: format!("{}; delete it and run `quarry lock` again", e.to_string().trim_end()),
        };
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let version = toml::from_str::<Version>(&text).map_err(bad)?.version;
        match version {
            1 => {
                let v1: LockV1 = toml::from_str(&text).map_err(bad)?;
                let base = PackagePins {
                    suite: v1.suite,
                    architecture: v1.architecture,
                    components: v1.components,
                    variant: Some(v1.variant),
                    include: v1.include,
                    release: v1.release,
                    below: None,
                    packages: v1.packages,
                };
                Ok(Some(LockFile { version: LOCK_VERSION, base: Some(base), ..Default::default() }))
            }
            LOCK_VERSION => Ok(Some(toml::from_str(&text).map_err(bad)?)),
            v => Err(LockFileError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "has version {v}, this quarry reads versions 1 and {LOCK_VERSION}; run `quarry lock` again"
                ),
            }),
        }
    }

    /// Write atomically (temporary file beside it, then rename).
    pub fn write(&self, path: &Path) -> Result<(), LockFileError> {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new().prefix(".quarry-lock-").tempfile_in(dir).map_err(|e| io(dir, e))?;
        std::io::Write::write_all(&mut tmp, self.to_toml().as_bytes()).map_err(|e| io(path, e))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
        tmp.persist(path).map_err(|e| io(path, e.error))?;
        Ok(())
    }

    /// Every package pinned, base and layers.
    pub fn package_count(&self) -> usize {
        self.base.iter().chain(self.layer.values()).map(|l| l.packages.len()).sum()
    }
}
