//! `IMAGE.lock`, the one module that reads and writes it: the resolved
//! package sets of an image's `packages` base and `packages` layers and the
//! files it takes from PyPI, written by `quarry lock` beside the image
//! definition and used by `quarry build` instead of resolving again. TOML,
//! like the definitions; the base and each layer (by name) are separate:
//!
//! ```toml
//! version = 3
//! [base]
//! suites = ["bookworm", "bookworm-updates", "bookworm-security"]
//! architecture = "amd64"        # what it was resolved for: a build refuses
//! components = ["main"]         # a lock whose inputs differ from the definition
//! variant = "required"
//! include = ["python3", "sudo"]
//! [base.release]                # digest of each suite's signed InRelease
//! bookworm = "sha256:..."
//! bookworm-security = "sha256:..."
//! [[base.package]]
//! name = "libssl3"
//! version = "3.0.17-1~deb12u3"
//! architecture = "amd64"
//! suite = "bookworm-security"   # the pocket it came from
//! priority = "optional"         # the index's Priority (apt's automatic marks)
//! file = "pool/updates/main/o/openssl/libssl3_3.0.17-1~deb12u3_amd64.deb"   # below the suite's mirror
//! sha256 = "..."
//! size = 2026208
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
//! (the base's pins at the top level) and version 2 (one suite each) are
//! still read.

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

pub const LOCK_VERSION: u32 = 3;

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

/// The version 2 format: one suite per package set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockV2 {
    #[serde(rename = "version")]
    _version: u32,
    #[serde(default)]
    base: Option<PinsV2>,
    #[serde(default)]
    layer: BTreeMap<String, PinsV2>,
    #[serde(default)]
    pypi: Vec<PypiPin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PinsV2 {
    suite: String,
    architecture: String,
    components: Vec<String>,
    #[serde(default)]
    variant: Option<Variant>,
    include: Vec<String>,
    release: String,
    #[serde(default)]
    below: Option<String>,
    #[serde(default, rename = "package")]
    packages: Vec<PinnedPackage>,
}

/// One suite's pins in the current shape.
#[allow(clippy::too_many_arguments)]
fn one_suite(
    suite: String,
    architecture: String,
    components: Vec<String>,
    variant: Option<Variant>,
    include: Vec<String>,
    release: String,
    below: Option<String>,
    packages: Vec<PinnedPackage>,
) -> PackagePins {
    PackagePins {
        release: BTreeMap::from([(suite.clone(), release)]),
        suites: vec![suite],
        architecture,
        components,
        variant,
        include,
        below,
        packages,
    }
}

impl From<PinsV2> for PackagePins {
    fn from(p: PinsV2) -> PackagePins {
        one_suite(p.suite, p.architecture, p.components, p.variant, p.include, p.release, p.below, p.packages)
    }
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
                let base = one_suite(
                    v1.suite,
                    v1.architecture,
                    v1.components,
                    Some(v1.variant),
                    v1.include,
                    v1.release,
                    None,
                    v1.packages,
                );
                Ok(Some(LockFile { version: LOCK_VERSION, base: Some(base), ..Default::default() }))
            }
            2 => {
                let v2: LockV2 = toml::from_str(&text).map_err(bad)?;
                Ok(Some(LockFile {
                    version: LOCK_VERSION,
                    base: v2.base.map(Into::into),
                    layer: v2.layer.into_iter().map(|(k, v)| (k, v.into())).collect(),
                    pypi: v2.pypi,
                }))
            }
            LOCK_VERSION => Ok(Some(toml::from_str(&text).map_err(bad)?)),
            v => Err(LockFileError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "has version {v}, this quarry reads versions 1 to {LOCK_VERSION}; run `quarry lock` again"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_locks_read_as_one_suite_and_new_ones_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let v2 = d.path().join("v2.lock");
        std::fs::write(
            &v2,
            "version = 2\n[base]\nsuite = \"bookworm\"\narchitecture = \"amd64\"\ncomponents = [\"main\"]\nvariant = \"required\"\ninclude = [\"jq\"]\nrelease = \"sha256:00\"\n[[base.package]]\nname = \"jq\"\nversion = \"1.6\"\narchitecture = \"amd64\"\nfile = \"pool/jq.deb\"\nsha256 = \"ab\"\nsize = 1\n[layer.tools]\nsuite = \"bookworm\"\narchitecture = \"amd64\"\ncomponents = [\"main\"]\ninclude = [\"x\"]\nrelease = \"sha256:01\"\nbelow = \"none\"\n",
        )
        .unwrap();
        let lock = LockFile::read(&v2).unwrap().unwrap();
        let base = lock.base.as_ref().unwrap();
        assert_eq!(base.suites, ["bookworm"]);
        assert_eq!(base.release, BTreeMap::from([("bookworm".to_string(), "sha256:00".to_string())]));
        assert_eq!(base.suite_of(&base.packages[0]), "bookworm");
        assert_eq!(base.packages[0].priority, None);
        assert_eq!(lock.layer["tools"].release["bookworm"], "sha256:01");

        let mut v3 = lock.clone();
        let b = v3.base.as_mut().unwrap();
        b.suites.push("bookworm-security".into());
        b.release.insert("bookworm-security".into(), "sha256:02".into());
        b.packages[0].suite = Some("bookworm-security".into());
        b.packages[0].priority = Some("optional".into());
        let path = d.path().join("v3.lock");
        v3.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("version = 3") && text.contains("[base.release]"), "{text}");
        assert_eq!(LockFile::read(&path).unwrap().unwrap(), v3);
        let future = d.path().join("v9.lock");
        std::fs::write(&future, "version = 9\n").unwrap();
        let e = LockFile::read(&future).unwrap_err().to_string();
        assert!(e.contains("version 9") && e.contains("1 to 3"), "{e}");
    }
}
