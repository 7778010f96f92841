//! The definitions as written (serde shapes). Unknown fields are refused.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ImageFile {
    pub name: String,
    #[serde(default)]
    pub tag: Option<String>,
    pub base: BaseDef,
    #[serde(default)]
    pub layers: Vec<String>,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    #[serde(default)]
    pub config: ConfigDef,
    #[serde(default)]
    pub layer: Vec<LayerBody>,
    #[serde(default)]
    pub family: Option<FamilyDef>,
}

/// `[family]`: one image per value of a parameter (`quarry build` builds them all).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FamilyDef {
    pub param: String,
    pub values: Vec<String>,
}

/// `base = "scratch"` or a table.
#[derive(Debug)]
pub(super) enum BaseDef {
    Named(String),
    Table(BaseTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BaseTable {
    pub rootfs: Option<String>,
    pub oci: Option<String>,
    pub r#ref: Option<String>,
    pub registry: Option<String>,
    /// Another image definition, built (through the cache) and used as the base.
    pub image: Option<String>,
    pub sha256: Option<String>,
    pub devices: Option<bool>,
    pub packages: Option<Box<PackagesDef>>,
}

/// `[base.packages]`: a rootfs made from a Debian/Ubuntu archive (also
/// a layer source, `[source.packages]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PackagesDef {
    /// The release (`suite`), or the release and its pockets (`suites`).
    pub suite: Option<String>,
    pub suites: Option<Vec<String>>,
    pub components: Option<Vec<String>>,
    pub architecture: Option<String>,
    pub mirror: String,
    /// Where Debian's `-security` suites are served (another archive).
    pub security_mirror: Option<String>,
    pub keyring: KeyringDef,
    #[serde(default)]
    pub include: Vec<String>,
    pub variant: Option<String>,
    pub configure: Option<ConfigureDef>,
    #[serde(default)]
    pub groups: BTreeMap<String, u32>,
    #[serde(default)]
    pub users: Vec<UserDef>,
}

/// `keyring = "/path/to/keyring.gpg"`, or a keyring file inside a package
/// pinned by its sha256: `{ deb = "pool/...deb", sha256 = "...", path =
/// "/usr/share/keyrings/...gpg", suite = "trixie", mirror = "host" }`.
#[derive(Debug)]
pub(super) enum KeyringDef {
    Path(String),
    Deb(KeyringDebDef),
}

impl<'de> Deserialize<'de> for KeyringDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyringDef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a keyring path, or a table like { deb = \"pool/...deb\", sha256 = \"...\", path = \"/usr/share/keyrings/...gpg\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyringDef, E> {
                Ok(KeyringDef::Path(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<KeyringDef, A::Error> {
                KeyringDebDef::deserialize(de::value::MapAccessDeserializer::new(m)).map(KeyringDef::Deb)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyringDebDef {
    pub deb: String,
    pub sha256: String,
    pub path: String,
    pub suite: Option<String>,
    pub mirror: Option<String>,
}

/// `configure = "sandbox" | "engine"` (or the older `true` = "engine",
/// `false` = the default).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum ConfigureDef {
    Bool(bool),
    Mode(String),
}

/// An account a `packages` base adds (as `useradd -m` would).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserDef {
    pub name: String,
    pub uid: u32,
    /// The primary group's id; a group named like the user is made with it.
    pub gid: Option<u32>,
    /// Supplementary groups; missing ones are made as system groups.
    #[serde(default)]
    pub groups: Vec<String>,
    pub shell: Option<String>,
    pub home: Option<String>,
    /// Passwordless sudo through `/etc/sudoers.d/NAME`.
    #[serde(default)]
    pub sudo: bool,
}

impl<'de> Deserialize<'de> for BaseDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BaseDef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"scratch\" or a table like { rootfs = \"base.tar\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<BaseDef, E> {
                Ok(BaseDef::Named(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<BaseDef, A::Error> {
                BaseTable::deserialize(de::value::MapAccessDeserializer::new(m)).map(BaseDef::Table)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigDef {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub exposed_ports: Vec<String>,
    #[serde(default)]
    pub volumes: Vec<String>,
    pub stop_signal: Option<String>,
    /// `os/arch[/variant]`; the host's platform when absent.
    pub platform: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LayerBody {
    pub name: String,
    #[serde(default)]
    pub params: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub source: Vec<SourceDef>,
    #[serde(default)]
    pub remove: Vec<String>,
    pub run: Option<RunDef>,
    #[serde(default)]
    pub input: Vec<InputDef>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Mode {
    Int(i64),
    Str(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SourceDef {
    pub dir: Option<String>,
    pub file: Option<String>,
    pub archive: Option<String>,
    pub rocm_artifacts: Option<String>,
    /// A ROCm dist tree or artifacts directory (detected when built).
    pub rocm: Option<String>,
    /// A wheel from PyPI (a requirement like `cmake==3.31.6`), installed natively.
    pub pypi: Option<String>,
    /// A wheelhouse (a directory of wheels) whose host set, or with `extra`
    /// what that device extra adds, is installed natively.
    pub wheels: Option<String>,
    /// wheels: the extra (`device-gfx942`) whose wheels this source installs.
    pub extra: Option<String>,
    /// pypi: the pip platform tag the wheel is chosen for.
    pub platform: Option<String>,
    /// pypi: the Python version the wheel is chosen for (`3.12`).
    pub python: Option<String>,
    /// pypi: where the package files go, relative to `dest` (or absolute).
    pub site_packages: Option<String>,
    /// pypi: extra links `NAME = "path/in/the/wheel"` made in `DEST/bin`.
    #[serde(default)]
    pub bin: BTreeMap<String, String>,
    #[serde(default)]
    pub components: Vec<String>,
    #[serde(default)]
    pub targets: Vec<String>,
    pub dest: Option<String>,
    pub owner: Option<String>,
    pub mode: Option<Mode>,
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    pub sha256: Option<String>,
    pub strip_components: Option<usize>,
    #[serde(default)]
    pub map: BTreeMap<String, String>,
    #[serde(default)]
    pub remove: Vec<String>,
    pub devices: Option<bool>,
    /// A layer source `packages`: the same keys as `[base.packages]`
    /// (no `variant`, `users`, `groups`), installed over the layers below.
    pub packages: Option<Box<PackagesDef>>,
}

/// A step: a script run in a container of the image built so far.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunDef {
    pub script: String,
    #[serde(default)]
    pub network: bool,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    /// The shell that runs the script; `["/bin/sh", "-ec"]` when absent.
    pub shell: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InputDef {
    pub file: Option<String>,
    pub pypi: Option<String>,
    /// pypi: `sdist` (the default) or `wheel`.
    pub format: Option<String>,
    pub platform: Option<String>,
    pub python: Option<String>,
    pub sha256: Option<String>,
    pub dest: String,
}
