//! The pins of one `packages` base or layer: the package set resolved
//! from an archive (each package's name, version, file and sha256) and what
//! it was resolved for. `quarry lock` writes them into `IMAGE.lock` (see
//! `plan::lockfile`); a build checks them against the definition.

use super::DistroError;
use crate::definition::{PackageSet, Variant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The pins of one `packages` base or layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackagePins {
    /// The release, then its pockets, as the definition lists them.
    pub suites: Vec<String>,
    pub architecture: String,
    pub components: Vec<String>,
    /// The base set added (bases only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<Variant>,
    pub include: Vec<String>,
    /// Layers: the dpkg status below (`sha256:...`, or `none`) resolved over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<String>,
    /// Each suite's signed InRelease as it was resolved from, by digest.
    pub release: BTreeMap<String, String>,
    #[serde(default, rename = "package")]
    pub packages: Vec<PinnedPackage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedPackage {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// The suite (pocket) whose index gave it; none in older locks: the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// The index's Priority (apt marks by it); none in older locks: the
    /// package's own control field is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// The file's path below its suite's mirror.
    pub file: String,
    pub sha256: String,
    pub size: u64,
}

impl PackagePins {
    /// The release: the first suite.
    pub fn suite(&self) -> &str {
        self.suites.first().map(String::as_str).unwrap_or_default()
    }

    /// The suite a package came from.
    pub fn suite_of<'a>(&'a self, p: &'a PinnedPackage) -> &'a str {
        p.suite.as_deref().unwrap_or_else(|| self.suite())
    }
}

impl PackagePins {
    /// Does the lock answer this definition? `what` names the part of the
    /// image (`the base`, `layer \`x\``); the error names the first field that differs.
    pub fn check_matches(
        &self,
        spec: &PackageSet,
        variant: Option<Variant>,
        path: &Path,
        what: &str,
    ) -> Result<(), DistroError> {
        let differs = if self.suites != spec.suites {
            Some("suites")
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
