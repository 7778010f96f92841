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

/// The OpenPGP keyring (binary, as in /usr/share/keyrings) that signs an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keyring {
    /// A file on this machine.
    File(PathBuf),
    /// A file inside a package fetched from an archive and pinned by its
    /// sha256 (the pin is the trust: no signature is needed to take it), as
    /// Debian's `ubuntu-keyring` carries Ubuntu's keys.
    Deb(KeyringDeb),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyringDeb {
    /// The package's path below the mirror (`pool/main/u/...deb`).
    pub deb: String,
    pub sha256: String,
    /// The keyring's path inside the package (`/usr/share/keyrings/...gpg`).
    pub path: String,
    pub mirror: Mirror,
    /// The suite that names the mirror when it is `host`.
    pub suite: String,
}

impl Keyring {
    /// Where an image that installs the keyring's package holds it: what
    /// its apt sources name in `Signed-By`.
    pub fn image_path(&self) -> PathBuf {
        match self {
            Keyring::File(p) => p.clone(),
            Keyring::Deb(d) => PathBuf::from(&d.path),
        }
    }

    /// For messages and plans.
    pub fn describe(&self) -> String {
        match self {
            Keyring::File(p) => p.display().to_string(),
            Keyring::Deb(d) => format!("{} in {} (sha256 {})", d.path, d.deb, d.sha256),
        }
    }
}

/// Packages from one archive release and its pockets: a `packages` layer's
/// `[source.packages]`, and the heart of `[base.packages]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PackageSet {
    /// The release first (`bookworm`), then its pockets (`bookworm-updates`,
    /// `bookworm-security`), resolved together as apt does.
    pub suites: Vec<String>,
    pub components: Vec<String>,
    /// Debian's name for it (`amd64`, `arm64`, `ppc64el`), the image's platform's.
    pub architecture: String,
    pub mirror: Mirror,
    /// Where Debian's `-security` suites come from (default: `host`'s entry
    /// for them, or the `debian-security` archive beside a `.../debian` URL).
    pub security_mirror: Option<Mirror>,
    pub keyring: Keyring,
    /// Packages to install (`name` or `name=version`).
    pub include: Vec<String>,
    /// Where the packages' maintainer scripts run.
    pub configure: Configure,
}

impl PackageSet {
    /// The release: the first suite.
    pub fn suite(&self) -> &str {
        &self.suites[0]
    }
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
