//! `IMAGE.lock`: the resolved package sets of an image's `packages` base
//! and `packages` layers, written by `quarry lock` beside the image
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

use super::DistroError;
use crate::spec::{PackagesBase, Variant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const LOCK_VERSION: u32 = 2;

/// Every pin of an image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Lock>,
    /// Packages layers by layer name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layer: BTreeMap<String, Lock>,
    /// Files fetched with pip (`pypi` sources and inputs).
    #[serde(default, rename = "pypi", skip_serializing_if = "Vec::is_empty")]
    pub pypi: Vec<crate::lockfile::PypiPin>,
}

/// The pins of one `packages` base or layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub suite: String,
    pub architecture: String,
    pub components: Vec<String>,
    /// The base set added (bases only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<Variant>,
    pub include: Vec<String>,
    pub release: String,
    /// Layers: the dpkg status below (`sha256:...`, or `none`) resolved over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<String>,
    #[serde(default, rename = "package")]
    pub packages: Vec<LockedPackage>,
}

/// The version 1 format: one base's pins at the top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockV1 {
    #[allow(dead_code)]
    version: u32,
    suite: String,
    architecture: String,
    components: Vec<String>,
    variant: Variant,
    include: Vec<String>,
    release: String,
    #[serde(default, rename = "package")]
    packages: Vec<LockedPackage>,
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

impl LockFile {
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a lock always serializes");
        format!("# Written by `quarry lock`; read by `quarry build`. Do not edit: run `quarry lock` again.\n{body}")
    }

    pub fn read(path: &Path) -> Result<Option<LockFile>, DistroError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(DistroError::io(path, e)),
        };
        let bad = |e: toml::de::Error| DistroError::Lock {
            lock: path.display().to_string(),
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
                let base = Lock {
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
            v => Err(DistroError::Lock {
                lock: path.display().to_string(),
                message: format!(
                    "has version {v}, this quarry reads versions 1 and {LOCK_VERSION}; run `quarry lock` again"
                ),
            }),
        }
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

    /// Every package pinned, base and layers.
    pub fn package_count(&self) -> usize {
        self.base.iter().chain(self.layer.values()).map(|l| l.packages.len()).sum()
    }
}

impl Lock {
    /// Does the lock answer this definition? `what` names the part of the
    /// image (`the base`, `layer \`x\``); the error names the first field that differs.
    pub fn check_matches(
        &self,
        spec: &PackagesBase,
        variant: Option<Variant>,
        path: &Path,
        what: &str,
    ) -> Result<(), DistroError> {
        let differs = if self.suite != spec.suite {
            Some("suite")
        } else if self.architecture != spec.architecture {
            Some("architecture")
        } else if self.components != spec.components {
            Some("components")
        } else if self.variant != variant {
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
                    "was made for another `{f}` of {what} than the definition now has; run `quarry lock` on the image again"
                ),
            }),
            None => Ok(()),
        }
    }
}
