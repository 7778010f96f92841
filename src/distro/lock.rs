//! `IMAGE.lock`: the resolved package set of a `packages` base, written by
//! `quarry lock` beside the image definition and used by `quarry build`
//! instead of resolving again. TOML, like the definitions:
//!
//! ```toml
//! version = 1
//! suite = "bookworm"            # what it was resolved for: a build refuses
//! architecture = "amd64"        # a lock whose inputs differ from the definition
//! components = ["main"]
//! variant = "required"
//! include = ["python3", "sudo"]
//! release = "sha256:..."        # digest of the signed InRelease it came from
//!
//! [[package]]
//! name = "bash"
//! version = "5.2.15-2+b7"
//! architecture = "amd64"
//! file = "pool/main/b/bash/bash_5.2.15-2+b7_amd64.deb"   # path below the mirror
//! sha256 = "..."
//! size = 1503712
//! ```
//! The mirror is not recorded: the pins are content hashes, valid on any
//! mirror (and no host name ends up in a committed file).

use super::DistroError;
use crate::spec::{PackagesBase, Variant};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    pub suite: String,
    pub architecture: String,
    pub components: Vec<String>,
    pub variant: Variant,
    pub include: Vec<String>,
    pub release: String,
    #[serde(default, rename = "package")]
    pub packages: Vec<LockedPackage>,
    /// The PyPI pins of the same image (see `lockfile`), kept as they are.
    #[serde(default, rename = "pypi", skip_serializing_if = "Vec::is_empty")]
    pub pypi: Vec<crate::lockfile::PypiPin>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPackage {
    pub name: String,
    pub version: String,
    pub architecture: String,
    pub file: String,
    pub sha256: String,
    pub size: u64,
}

/// `images/x.toml` -> `images/x.lock`.
pub fn lock_path(image_file: &Path) -> PathBuf {
    image_file.with_extension("lock")
}

impl Lock {
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a lock always serializes");
        format!("# Written by `quarry lock`; read by `quarry build`. Do not edit: run `quarry lock` again.\n{body}")
    }

    pub fn read(path: &Path) -> Result<Option<Lock>, DistroError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(DistroError::io(path, e)),
        };
        let lock: Lock = toml::from_str(&text).map_err(|e| DistroError::Lock {
            lock: path.display().to_string(),
            message: format!("{}; delete it and run `quarry lock` again", e.to_string().trim_end()),
        })?;
        if lock.version != LOCK_VERSION {
            return Err(DistroError::Lock {
                lock: path.display().to_string(),
                message: format!(
                    "has version {}, this quarry reads version {LOCK_VERSION}; run `quarry lock` again",
                    lock.version
                ),
            });
        }
        Ok(Some(lock))
    }

    /// Write atomically (temporary file beside it, then rename).
    pub fn write(&self, path: &Path) -> Result<(), DistroError> {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp =
            tempfile::Builder::new().prefix(".quarry-lock-").tempfile_in(dir).map_err(|e| DistroError::io(dir, e))?;
        std::io::Write::write_all(&mut tmp, self.to_toml().as_bytes()).map_err(|e| DistroError::io(path, e))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
        tmp.persist(path).map_err(|e| DistroError::io(path, e.error))?;
        Ok(())
    }

    /// Does the lock answer this definition? Names the first field that differs.
    pub fn check_matches(&self, spec: &PackagesBase, path: &Path) -> Result<(), DistroError> {
        let differs = if self.suite != spec.suite {
            Some("suite")
        } else if self.architecture != spec.architecture {
            Some("architecture")
        } else if self.components != spec.components {
            Some("components")
        } else if self.variant != spec.variant {
            Some("variant")
        } else if self.include != spec.include {
            Some("include")
        } else {
            None
        };
        match differs {
            Some(f) => Err(DistroError::Lock {
                lock: path.display().to_string(),
                message: format!(
                    "was made for another `{f}` than the definition now has; run `quarry lock` on the image again"
                ),
            }),
            None => Ok(()),
        }
    }
}
