//! Debian/Ubuntu packages in a definition: the set a `packages` layer
//! installs, and a `[base.packages]` rootfs (that set plus the base
//! packages of its variant and the accounts it declares).

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use super::raw::UserDef;

/// Where packages are downloaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mirror {
    /// The mirror this machine's apt configuration uses for the archive.
    Host,
    Url(String),
}

/// Which packages a base gets besides those named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// `Essential: yes` only.
    Essential,
    /// Essential plus `Priority: required` (what a minimal Debian has).
    Required,
}

impl Variant {
    pub fn as_str(&self) -> &'static str {
        match self {
            Variant::Essential => "essential",
            Variant::Required => "required",
        }
    }
}

/// Packages from one archive suite: a `packages` layer's `[source.packages]`,
/// and the heart of `[base.packages]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PackageSet {
    pub suite: String,
    pub components: Vec<String>,
    /// Debian's name for it (`amd64`, `arm64`, `ppc64el`), the image's platform's.
    pub architecture: String,
    pub mirror: Mirror,
    /// An OpenPGP keyring (binary, as in /usr/share/keyrings) that signs the archive.
    pub keyring: PathBuf,
    /// Packages to install (`name` or `name=version`).
    pub include: Vec<String>,
    /// Where the packages' maintainer scripts run.
    pub configure: Configure,
}

/// Where a packages base or layer runs its packages' maintainer scripts
/// and triggers (they always run: an unconfigured image is never shipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Configure {
    /// In quarry's own sandbox while the layer is made (no engine needed).
    #[default]
    Sandbox,
    /// In a container step after the layer (`configure = "engine"`, or the
    /// older `true`): for hosts without user namespaces.
    Engine,
}

impl Configure {
    pub fn as_str(&self) -> &'static str {
        match self {
            Configure::Sandbox => "sandbox",
            Configure::Engine => "engine",
        }
    }
}

/// `[base.packages]`: a rootfs made from an archive.
#[derive(Debug, Clone, PartialEq)]
pub struct PackagesBase {
    pub set: PackageSet,
    pub variant: Variant,
    pub groups: BTreeMap<String, u32>,
    pub users: Vec<UserDef>,
}

impl std::ops::Deref for PackagesBase {
    type Target = PackageSet;
    fn deref(&self) -> &PackageSet {
        &self.set
    }
}
