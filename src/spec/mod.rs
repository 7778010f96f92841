//! Image and layer definitions: parsing (unknown fields refused), parameter
//! substitution, layer lookup and validation. Every error names the file and
//! the field. See DESIGN.md, "Definitions", for the format.

pub mod params;
mod raw;

pub use raw::{ConfigDef, InputDef, RunDef, UserDef};

use params::{subst_value, SubstError};
use raw::{BaseDef, ImageFile, LayerBody, SourceDef};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read {what} `{file}`: {err}")]
    Read { what: &'static str, file: String, err: std::io::Error },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field { file: String, field: String, message: String },
}

fn field_err(file: &Path, field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError::Field { file: file.display().to_string(), field: field.into(), message: message.into() }
}

/// Where an image's base comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Base {
    Scratch,
    /// A rootfs tarball turned into one normalized base layer.
    Rootfs {
        path: PathBuf,
        sha256: Option<String>,
        devices: bool,
    },
    /// An OCI layout directory or OCI archive; layers reused as they are.
    Oci {
        path: PathBuf,
        reference: Option<String>,
    },
    /// A registry reference pulled by digest.
    Registry {
        reference: String,
    },
    /// A rootfs made from a Debian/Ubuntu archive's packages.
    Packages(Box<PackagesBase>),
    /// Another image definition (`base = { image = "x.toml" }`), loaded with
    /// this image's parameters; built through the cache and used as the base.
    Image(Box<Image>),
}

/// Where a `packages` base downloads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mirror {
    /// The mirror this machine's apt configuration uses for the suite.
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

/// `[base.packages]` (or a layer's `[source.packages]`), validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PackagesBase {
    pub suite: String,
    pub components: Vec<String>,
    /// Debian's name for it (`amd64`, `arm64`, `ppc64el`).
    pub architecture: String,
    pub mirror: Mirror,
    /// An OpenPGP keyring (binary, as in /usr/share/keyrings) that signs the archive.
    pub keyring: PathBuf,
    /// Packages to install (`name` or `name=version`).
    pub include: Vec<String>,
    pub variant: Variant,
    /// Run `dpkg --configure -a` in a container afterwards.
    pub configure: bool,
    pub groups: BTreeMap<String, u32>,
    pub users: Vec<UserDef>,
}

/// Debian's architecture name for an OCI one.
pub fn debian_arch(oci_arch: &str) -> String {
    match oci_arch {
        "ppc64le" => "ppc64el".into(),
        "386" => "i386".into(),
        "arm" => "armhf".into(),
        other => other.into(),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum SourceKind {
    Dir(PathBuf),
    File(PathBuf),
    Archive(PathBuf),
    /// Only whiteouts.
    Remove,
    /// ROCm build artifacts flattened into a dist tree (see `rocm::flatten`).
    RocmArtifacts {
        dir: PathBuf,
        components: Vec<String>,
        targets: Vec<String>,
    },
    /// Packages from a Debian/Ubuntu archive installed over the layers
    /// below (`variant`, `users` and `groups` are unused: base only).
    Packages(Box<PackagesBase>),
    /// A ROCm dist tree (copied as a `dir`) or an artifacts directory
    /// (flattened as `rocm_artifacts`), whichever the directory holds.
    Rocm {
        dir: PathBuf,
        components: Vec<String>,
        targets: Vec<String>,
    },
    /// A wheel fetched with pip and installed under `dest` (see `pypi::install`).
    Pypi {
        request: PypiRequest,
        /// Where the package files go: relative to `dest`, or absolute.
        site_packages: String,
        /// `NAME` -> path inside the wheel, linked as `DEST/bin/NAME`.
        bin: BTreeMap<String, String>,
    },
}

/// Which kind of file pip fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PypiFormat {
    Wheel,
    Sdist,
}

/// A file to fetch from the package index with the user's pip.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PypiRequest {
    /// As written: `cmake==3.31.6`.
    pub requirement: String,
    pub format: PypiFormat,
    /// pip's `--platform` for wheels; derived from the image's platform when absent.
    pub platform: Option<String>,
    /// pip's `--python-version` for wheels (`3.12`); pip's own when absent.
    pub python: Option<String>,
}

/// Where a `pypi` source puts package files when `site_packages` is not given.
pub const DEFAULT_SITE_PACKAGES: &str = "lib/python3/site-packages";
/// Where a `pypi` source installs when `dest` is not given.
pub const DEFAULT_PYPI_DEST: &str = "/usr/local";

/// One validated source of a layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub kind: SourceKind,
    /// Where the content lands in the image (`/` when not given).
    pub dest: String,
    pub owner: Option<(u64, u64)>,
    pub mode: Option<u32>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub sha256: Option<String>,
    pub strip_components: usize,
    pub map: BTreeMap<String, String>,
    pub remove: Vec<String>,
    pub devices: bool,
}

impl Source {
    /// `kind` at `dest` with every option at its default.
    pub fn new(kind: SourceKind, dest: &str) -> Source {
        Source {
            kind,
            dest: dest.to_string(),
            owner: None,
            mode: None,
            include: vec![],
            exclude: vec![],
            sha256: None,
            strip_components: 0,
            map: BTreeMap::new(),
            remove: vec![],
            devices: false,
        }
    }
}

/// One layer, named (from `layers/NAME.toml`) or inline (`[[layer]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// The file that defined it (for messages and relative paths).
    pub file: PathBuf,
    pub sources: Vec<Source>,
    pub remove: Vec<String>,
    pub run: Option<RunDef>,
    pub inputs: Vec<Input>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InputKind {
    File(PathBuf),
    Pypi(PypiRequest),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub kind: InputKind,
    pub sha256: Option<String>,
    pub dest: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub file: PathBuf,
    pub name: String,
    pub tag: String,
    pub base: Base,
    pub layers: Vec<Layer>,
    pub config: ConfigDef,
    /// Effective parameter values (defaults overridden by --set).
    pub params: BTreeMap<String, String>,
}

impl Image {
    /// The image at the bottom of a chain of `image` bases (itself when its
    /// base is of another kind): the one whose base `quarry lock` pins.
    pub fn root_image(&self) -> &Image {
        match &self.base {
            Base::Image(inner) => inner.root_image(),
            _ => self,
        }
    }

    /// `os/arch[/variant]` of the image.
    pub fn platform(&self) -> (String, String, Option<String>) {
        let p = self.config.platform.clone().unwrap_or_else(host_platform);
        let mut parts = p.splitn(3, '/');
        let os = parts.next().unwrap_or("linux").to_string();
        let arch = parts.next().unwrap_or("amd64").to_string();
        (os, arch, parts.next().map(String::from))
    }
}

pub fn host_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("linux/{arch}")
}

fn read(what: &'static str, file: &Path) -> Result<String, SpecError> {
    std::fs::read_to_string(file).map_err(|err| SpecError::Read { what, file: file.display().to_string(), err })
}

fn parse_err(file: &Path, e: impl std::fmt::Display) -> SpecError {
    SpecError::Parse { file: file.display().to_string(), message: e.to_string().trim_end().to_string() }
}

fn subst_err(file: &Path, e: SubstError) -> SpecError {
    match e {
        SubstError::Unset(u) => field_err(
            file,
            u.field,
            format!(
                "parameter `${{{}}}` is not set; pass `--set {}=VALUE` or declare a default under [params]",
                u.name, u.name
            ),
        ),
        SubstError::Syntax(s) => field_err(file, s.field, s.message),
    }
}

/// Find `layers/NAME.toml` in the parent of the image's directory, else beside the image.
pub fn find_layer_file(image_file: &Path, name: &str) -> Option<PathBuf> {
    let dir = image_file.parent().unwrap_or(Path::new("."));
    let mut candidates = Vec::new();
    if let Some(parent) = dir.parent() {
        candidates.push(parent.join("layers").join(format!("{name}.toml")));
    }
    candidates.push(dir.join("layers").join(format!("{name}.toml")));
    candidates.push(dir.join(format!("{name}.toml")));
    candidates.into_iter().find(|p| p.is_file())
}

fn resolve_path(base_file: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_file.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// Parse `--set K=V` arguments.
pub fn parse_sets(sets: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut m = BTreeMap::new();
    for s in sets {
        let (k, v) = s.split_once('=').ok_or_else(|| format!("`--set {s}`: expected KEY=VALUE"))?;
        if k.is_empty() {
            return Err(format!("`--set {s}`: the key is empty"));
        }
        m.insert(k.to_string(), v.to_string());
    }
    Ok(m)
}

/// Load an image definition and every layer it names.
pub fn load_image(file: &Path, sets: &BTreeMap<String, String>) -> Result<Image, SpecError> {
    load_image_in(file, sets, &mut Vec::new())
}

/// `chain`: the definitions whose `image` bases led here, to refuse cycles.
fn load_image_in(file: &Path, sets: &BTreeMap<String, String>, chain: &mut Vec<PathBuf>) -> Result<Image, SpecError> {
    let text = read("image definition", file)?;
    // First pass: structure and unknown fields, with line numbers.
    let parsed: ImageFile = toml::from_str(&text).map_err(|e| parse_err(file, e))?;
    let mut doc: toml::Value = toml::from_str(&text).map_err(|e| parse_err(file, e))?;

    // Layer files, read first so their [params] defaults are known.
    let mut layer_docs = Vec::new();
    for (i, name) in parsed.layers.iter().enumerate() {
        let lf = find_layer_file(file, name).ok_or_else(|| {
            field_err(
                file,
                format!("layers[{i}]"),
                format!(
                    "unknown layer `{name}`: no `layers/{name}.toml` next to the image's directory or beside the image file"
                ),
            )
        })?;
        let ltext = read("layer definition", &lf)?;
        let lparsed: LayerBody = toml::from_str(&ltext).map_err(|e| parse_err(&lf, e))?;
        if lparsed.name != *name {
            return Err(field_err(&lf, "name", format!("is `{}` but the file is named for `{name}`", lparsed.name)));
        }
        let ldoc: toml::Value = toml::from_str(&ltext).map_err(|e| parse_err(&lf, e))?;
        layer_docs.push((lf, lparsed.params.clone().unwrap_or_default(), ldoc));
    }

    let mut params: BTreeMap<String, String> = BTreeMap::new();
    for (_, defaults, _) in &layer_docs {
        params.extend(defaults.clone());
    }
    params.extend(parsed.params.clone());
    params.extend(sets.clone());

    subst_value(&mut doc, "", &params, &["params"]).map_err(|e| subst_err(file, e))?;
    let img: ImageFile = doc.try_into().map_err(|e| parse_err(file, e))?;

    let oci_arch = img.config.platform.clone().unwrap_or_else(host_platform);
    let oci_arch = oci_arch.split('/').nth(1).unwrap_or("amd64").to_string();
    let mut layers = Vec::new();
    for (lf, _, mut ldoc) in layer_docs {
        subst_value(&mut ldoc, "", &params, &["params"]).map_err(|e| subst_err(&lf, e))?;
        let body: LayerBody = ldoc.try_into().map_err(|e| parse_err(&lf, e))?;
        layers.push(validate_layer(&lf, "", body, &oci_arch)?);
    }
    for (i, body) in img.layer.into_iter().enumerate() {
        let prefix = format!("layer[{i}].");
        if body.params.is_some() {
            return Err(field_err(
                file,
                format!("{prefix}params"),
                "parameters of an image belong in its top-level [params] table",
            ));
        }
        layers.push(validate_layer(file, &prefix, body, &oci_arch)?);
    }
    let mut seen = std::collections::BTreeSet::new();
    for l in &layers {
        if !seen.insert(l.name.clone()) {
            return Err(field_err(
                file,
                "layers",
                format!("layer `{}` appears twice; layer names must be unique", l.name),
            ));
        }
    }

    if img.name.is_empty() {
        return Err(field_err(file, "name", "must not be empty"));
    }
    validate_config(file, &img.config)?;
    let base = validate_base(file, img.base, &oci_arch)?;
    let base = match base {
        ValidBase::Done(b) => b,
        ValidBase::Image(path) => {
            let platform = img.config.platform.clone().unwrap_or_else(host_platform);
            Base::Image(Box::new(load_base_image(file, &path, &params, &platform, chain)?))
        }
    };
    Ok(Image {
        file: file.to_path_buf(),
        name: img.name,
        tag: img.tag.unwrap_or_else(|| "latest".into()),
        base,
        layers,
        config: img.config,
        params,
    })
}

fn validate_config(file: &Path, c: &ConfigDef) -> Result<(), SpecError> {
    if let Some(p) = &c.platform {
        let parts: Vec<&str> = p.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|s| s.is_empty()) {
            return Err(field_err(
                file,
                "config.platform",
                format!("`{p}` is not of the form os/arch[/variant], e.g. linux/amd64"),
            ));
        }
    }
    for (i, port) in c.exposed_ports.iter().enumerate() {
        let (num, proto) = port.split_once('/').unwrap_or((port, "tcp"));
        if num.parse::<u16>().is_err() || !["tcp", "udp", "sctp"].contains(&proto) {
            return Err(field_err(
                file,
                format!("config.exposed_ports[{i}]"),
                format!("`{port}` is not a port like 8080 or 8080/tcp"),
            ));
        }
    }
    Ok(())
}

/// A base as validated: complete, or an image definition still to load.
enum ValidBase {
    Done(Base),
    Image(PathBuf),
}

/// Load the definition an `image` base names, with this image's parameters
/// (its own defaults < this image's [params] < --set); refuses cycles and a
/// platform other than this image's.
fn load_base_image(
    file: &Path,
    base_file: &Path,
    params: &BTreeMap<String, String>,
    platform: &str,
    chain: &mut Vec<PathBuf>,
) -> Result<Image, SpecError> {
    let field = "base.image";
    if !base_file.is_file() {
        return Err(field_err(
            file,
            field,
            format!(
                "`{}` is not an image definition file (relative paths resolve from the directory of the file that names them)",
                base_file.display()
            ),
        ));
    }
    let me = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let next = base_file.canonicalize().unwrap_or_else(|_| base_file.to_path_buf());
    let mut path: Vec<PathBuf> = chain.clone();
    path.push(me);
    if path.contains(&next) {
        path.push(next);
        let shown: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
        return Err(field_err(
            file,
            field,
            format!("image bases form a cycle: {}; an image cannot be built on itself", shown.join(" -> ")),
        ));
    }
    let saved = std::mem::replace(chain, path);
    let loaded = load_image_in(base_file, params, chain);
    *chain = saved;
    let base = loaded?;
    let base_platform = base.config.platform.clone().unwrap_or_else(host_platform);
    if base_platform != platform {
        return Err(field_err(
            file,
            field,
            format!(
                "`{}` is for {base_platform} but this image is for {platform}; set the same `config.platform` in both",
                base_file.display()
            ),
        ));
    }
    Ok(base)
}

fn validate_base(file: &Path, b: BaseDef, oci_arch: &str) -> Result<ValidBase, SpecError> {
    let done = |b: Base| Ok(ValidBase::Done(b));
    match b {
        BaseDef::Named(n) if n == "scratch" => done(Base::Scratch),
        BaseDef::Named(n) => Err(field_err(
            file,
            "base",
            format!("`{n}` is not a base; use \"scratch\", {{ rootfs = \"x.tar\" }}, {{ oci = \"dir\", ref = \"tag\" }}, {{ registry = \"host/repo@sha256:...\" }}, {{ image = \"other.toml\" }} or a [base.packages] table"),
        )),
        BaseDef::Table(t) => {
            let kinds = [t.rootfs.is_some(), t.oci.is_some(), t.registry.is_some(), t.packages.is_some(), t.image.is_some()]
                .iter()
                .filter(|x| **x)
                .count();
            if kinds != 1 {
                return Err(field_err(file, "base", "give exactly one of `rootfs`, `oci`, `registry`, `image` or `packages`"));
            }
            if let Some(p) = t.packages {
                if t.sha256.is_some() || t.devices.is_some() || t.r#ref.is_some() {
                    return Err(field_err(file, "base", "`sha256`, `devices` and `ref` do not apply to `packages` bases"));
                }
                return done(Base::Packages(Box::new(validate_packages(file, "base.packages", *p, oci_arch)?)));
            }
            if let Some(s) = &t.sha256 {
                check_sha256(file, "base.sha256", s)?;
            }
            if let Some(r) = t.rootfs {
                if t.r#ref.is_some() {
                    return Err(field_err(file, "base.ref", "applies only to `oci` bases"));
                }
                return done(Base::Rootfs { path: resolve_path(file, &r), sha256: t.sha256, devices: t.devices.unwrap_or(false) });
            }
            if t.sha256.is_some() || t.devices.is_some() {
                return Err(field_err(file, "base", "`sha256` and `devices` apply only to `rootfs` bases"));
            }
            if let Some(o) = t.oci {
                return done(Base::Oci { path: resolve_path(file, &o), reference: t.r#ref });
            }
            if t.r#ref.is_some() {
                return Err(field_err(file, "base.ref", "applies only to `oci` bases"));
            }
            if let Some(i) = t.image {
                if i.is_empty() {
                    return Err(field_err(file, "base.image", "is empty; name an image definition, e.g. \"no_rocm_image_debian12.toml\""));
                }
                return Ok(ValidBase::Image(resolve_path(file, &i)));
            }
            let reference = t.registry.expect("counted above");
            if reference.is_empty() {
                return Err(field_err(file, "base.registry", "is empty; give HOST/REPO@sha256:DIGEST"));
            }
            done(Base::Registry { reference })
        }
    }
}

fn valid_package_name(n: &str) -> bool {
    n.len() >= 2
        && n.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

fn valid_account_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && n.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn validate_packages(
    file: &Path,
    prefix: &str,
    p: raw::PackagesDef,
    oci_arch: &str,
) -> Result<PackagesBase, SpecError> {
    let f = |k: &str| format!("{prefix}.{k}");
    if p.suite.is_empty() || p.suite.contains(['/', ' ']) {
        return Err(field_err(
            file,
            f("suite"),
            format!("`{}` is not a suite name like \"bookworm\" or \"noble\"", p.suite),
        ));
    }
    let components = p.components.unwrap_or_else(|| vec!["main".into()]);
    if components.is_empty() || components.iter().any(|c| c.is_empty() || c.contains(' ')) {
        return Err(field_err(file, f("components"), "give one or more component names, e.g. [\"main\"]"));
    }
    let platform_arch = debian_arch(oci_arch);
    let architecture = p.architecture.unwrap_or_else(|| platform_arch.clone());
    if architecture != platform_arch {
        return Err(field_err(
            file,
            f("architecture"),
            format!("`{architecture}` does not match the image's platform (Debian architecture `{platform_arch}`); set `config.platform` or drop `architecture`"),
        ));
    }
    let mirror = match p.mirror.as_str() {
        "host" => Mirror::Host,
        m if m.starts_with("http://") || m.starts_with("https://") => Mirror::Url(m.trim_end_matches('/').to_string()),
        m => {
            return Err(field_err(
                file,
                f("mirror"),
                format!(
                "`{m}` is neither \"host\" (this machine's apt mirror for the suite) nor an http:// or https:// URL"
            ),
            ))
        }
    };
    if p.keyring.is_empty() {
        return Err(field_err(
            file,
            f("keyring"),
            "is empty; name the keyring that signs the archive, e.g. /usr/share/keyrings/debian-archive-keyring.gpg",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, inc) in p.include.iter().enumerate() {
        let (name, version) = match inc.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (inc.as_str(), None),
        };
        if !valid_package_name(name) || version.is_some_and(|v| v.is_empty() || v.contains(' ')) {
            return Err(field_err(
                file,
                format!("{}[{i}]", f("include")),
                format!("`{inc}` is not a package name (optionally `name=version`)"),
            ));
        }
        if !seen.insert(name.to_string()) {
            return Err(field_err(file, format!("{}[{i}]", f("include")), format!("`{name}` is listed twice")));
        }
    }
    let variant = match p.variant.as_deref() {
        None | Some("required") => Variant::Required,
        Some("essential") => Variant::Essential,
        Some(v) => return Err(field_err(file, f("variant"), format!("`{v}` is not \"required\" or \"essential\""))),
    };
    for (g, gid) in &p.groups {
        if !valid_account_name(g) || *gid == 0 || *gid >= 65534 {
            return Err(field_err(
                file,
                format!("{}.{g}", f("groups")),
                "expects a group name (lowercase) and a gid between 1 and 65533",
            ));
        }
    }
    for (i, u) in p.users.iter().enumerate() {
        let uf = format!("{}[{i}]", f("users"));
        if !valid_account_name(&u.name) {
            return Err(field_err(
                file,
                format!("{uf}.name"),
                format!("`{}` is not a user name (lowercase letters, digits, `_`, `-`)", u.name),
            ));
        }
        if u.uid == 0 || u.uid >= 65534 || u.gid.is_some_and(|g| g >= 65534) {
            return Err(field_err(file, format!("{uf}.uid"), "uid and gid must be between 1 and 65533"));
        }
        if let Some(g) = u.groups.iter().find(|g| !valid_account_name(g)) {
            return Err(field_err(file, format!("{uf}.groups"), format!("`{g}` is not a group name")));
        }
        for (k, v) in [("shell", &u.shell), ("home", &u.home)] {
            if v.as_ref().is_some_and(|v| !v.starts_with('/') || v.contains("..")) {
                return Err(field_err(file, format!("{uf}.{k}"), "must be an absolute path without `..`"));
            }
        }
    }
    Ok(PackagesBase {
        suite: p.suite,
        components,
        architecture,
        mirror,
        keyring: resolve_path(file, &p.keyring),
        include: p.include,
        variant,
        configure: p.configure,
        groups: p.groups,
        users: p.users,
    })
}

fn check_sha256(file: &Path, field: &str, s: &str) -> Result<(), SpecError> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
        return Err(field_err(file, field, format!("`{s}` is not a sha256 (64 lowercase hex digits)")));
    }
    Ok(())
}

fn parse_owner(file: &Path, field: &str, s: &str) -> Result<(u64, u64), SpecError> {
    let bad = || field_err(file, field, format!("`{s}` is not a numeric owner like \"0:0\" or \"1000:1000\""));
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

fn parse_mode(file: &Path, field: &str, m: &raw::Mode) -> Result<u32, SpecError> {
    let v = match m {
        raw::Mode::Int(i) => u32::try_from(*i).ok(),
        raw::Mode::Str(s) => {
            let digits = s.trim_start_matches("0o");
            u32::from_str_radix(digits, 8).ok()
        }
    };
    match v {
        Some(v) if v <= 0o7777 => Ok(v),
        _ => Err(field_err(file, field, "is not a file mode like \"0644\" or \"4755\"")),
    }
}

fn validate_layer(file: &Path, prefix: &str, body: LayerBody, oci_arch: &str) -> Result<Layer, SpecError> {
    if body.name.is_empty() {
        return Err(field_err(file, format!("{prefix}name"), "must not be empty"));
    }
    let mut sources = Vec::new();
    for (i, s) in body.source.into_iter().enumerate() {
        sources.push(validate_source(file, &format!("{prefix}source[{i}]"), s, oci_arch)?);
    }
    if let Some(i) = sources.iter().position(|s| matches!(s.kind, SourceKind::Packages(_))) {
        // The layer is the packages' files plus the merged dpkg database.
        if sources.len() > 1 || !body.remove.is_empty() || body.run.is_some() {
            return Err(field_err(
                file,
                format!("{prefix}source[{i}].packages"),
                format!(
                    "a `packages` source makes the whole layer `{}`; put other sources, removals or a `run` step in a layer of their own",
                    body.name
                ),
            ));
        }
    }
    let mut inputs = Vec::new();
    for (i, inp) in body.input.into_iter().enumerate() {
        let f = format!("{prefix}input[{i}]");
        let is_pypi = inp.pypi.is_some();
        for (k, given) in
            [("format", inp.format.is_some()), ("platform", inp.platform.is_some()), ("python", inp.python.is_some())]
        {
            if given && !is_pypi {
                return Err(field_err(file, format!("{f}.{k}"), "applies only to `pypi` inputs"));
            }
        }
        let kind = match (inp.file, inp.pypi) {
            (Some(p), None) => InputKind::File(resolve_path(file, &p)),
            (None, Some(req)) => {
                let format = match inp.format.as_deref() {
                    None | Some("sdist") => PypiFormat::Sdist,
                    Some("wheel") => PypiFormat::Wheel,
                    Some(o) => {
                        return Err(field_err(
                            file,
                            format!("{f}.format"),
                            format!("`{o}` is not \"sdist\" or \"wheel\""),
                        ))
                    }
                };
                if format == PypiFormat::Sdist && (inp.platform.is_some() || inp.python.is_some()) {
                    return Err(field_err(
                        file,
                        f,
                        "`platform` and `python` choose a wheel; add `format = \"wheel\"` or remove them",
                    ));
                }
                InputKind::Pypi(pypi_request(file, &f, req, format, inp.platform, inp.python)?)
            }
            _ => return Err(field_err(file, f, "give exactly one of `file` or `pypi`")),
        };
        if let Some(s) = &inp.sha256 {
            check_sha256(file, &format!("{f}.sha256"), s)?;
        }
        inputs.push(Input { kind, sha256: inp.sha256, dest: inp.dest });
    }
    if !inputs.is_empty() && body.run.is_none() {
        return Err(field_err(
            file,
            format!("{prefix}input"),
            "inputs are copied in for a `[run]` step; add a `run` table or remove them",
        ));
    }
    if let Some(run) = &body.run {
        if run.script.trim().is_empty() {
            return Err(field_err(file, format!("{prefix}run.script"), "is empty"));
        }
    }
    if sources.is_empty() && body.remove.is_empty() && body.run.is_none() {
        return Err(field_err(
            file,
            format!("{prefix}source"),
            format!("layer `{}` has no sources, removals or run step", body.name),
        ));
    }
    Ok(Layer { name: body.name, file: file.to_path_buf(), sources, remove: body.remove, run: body.run, inputs })
}

/// `[[source]]` with `[source.packages]`: nothing else in the same source.
fn validate_packages_source(file: &Path, f: &str, s: SourceDef, oci_arch: &str) -> Result<Source, SpecError> {
    let others = [
        ("dir", s.dir.is_some()),
        ("file", s.file.is_some()),
        ("archive", s.archive.is_some()),
        ("rocm_artifacts", s.rocm_artifacts.is_some()),
        ("components", !s.components.is_empty()),
        ("targets", !s.targets.is_empty()),
        ("dest", s.dest.is_some()),
        ("owner", s.owner.is_some()),
        ("mode", s.mode.is_some()),
        ("include", !s.include.is_empty()),
        ("exclude", !s.exclude.is_empty()),
        ("sha256", s.sha256.is_some()),
        ("strip_components", s.strip_components.is_some()),
        ("map", !s.map.is_empty()),
        ("remove", !s.remove.is_empty()),
        ("devices", s.devices.is_some()),
    ];
    if let Some((k, _)) = others.iter().find(|(_, given)| *given) {
        return Err(field_err(
            file,
            format!("{f}.{k}"),
            "does not go with `packages`; the packages' own keys go inside the `packages` table",
        ));
    }
    let p = *s.packages.expect("called for packages sources");
    let pf = format!("{f}.packages");
    for (k, given) in
        [("variant", p.variant.is_some()), ("users", !p.users.is_empty()), ("groups", !p.groups.is_empty())]
    {
        if given {
            return Err(field_err(
                file,
                format!("{pf}.{k}"),
                "applies only to `[base.packages]`; a packages layer installs what `include` names and what it depends on",
            ));
        }
    }
    let spec = validate_packages(file, &pf, p, oci_arch)?;
    if spec.include.is_empty() {
        return Err(field_err(file, format!("{pf}.include"), "is empty; name the packages this layer installs"));
    }
    Ok(Source::new(SourceKind::Packages(Box::new(spec)), "/"))
}

/// A validated `pypi` request; the requirement must name one package.
fn pypi_request(
    file: &Path,
    f: &str,
    requirement: String,
    format: PypiFormat,
    platform: Option<String>,
    python: Option<String>,
) -> Result<PypiRequest, SpecError> {
    if let Err(m) = crate::pypi::requirement_name(&requirement) {
        return Err(field_err(file, format!("{f}.pypi"), m));
    }
    if let Some(p) = &platform {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            return Err(field_err(
                file,
                format!("{f}.platform"),
                format!("`{p}` is not a platform tag like \"manylinux_2_28_x86_64\""),
            ));
        }
    }
    if let Some(v) = &python {
        let ok =
            v.split('.').count() == 2 && v.split('.').all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if !ok {
            return Err(field_err(file, format!("{f}.python"), format!("`{v}` is not a Python version like \"3.12\"")));
        }
    }
    Ok(PypiRequest { requirement, format, platform, python })
}

fn validate_source(file: &Path, f: &str, s: SourceDef, oci_arch: &str) -> Result<Source, SpecError> {
    if s.packages.is_some() {
        return validate_packages_source(file, f, s, oci_arch);
    }
    let given: Vec<&str> = [
        ("dir", s.dir.is_some()),
        ("file", s.file.is_some()),
        ("archive", s.archive.is_some()),
        ("rocm_artifacts", s.rocm_artifacts.is_some()),
        ("rocm", s.rocm.is_some()),
        ("pypi", s.pypi.is_some()),
    ]
    .iter()
    .filter(|(_, g)| *g)
    .map(|(n, _)| *n)
    .collect();
    if given.len() > 1 {
        return Err(field_err(
            file,
            f,
            format!(
                "give one of `dir`, `file`, `archive`, `rocm_artifacts`, `rocm` or `pypi`, not {}",
                given.join(" and ")
            ),
        ));
    }
    let kind = if let Some(d) = &s.dir {
        SourceKind::Dir(resolve_path(file, d))
    } else if let Some(p) = &s.file {
        SourceKind::File(resolve_path(file, p))
    } else if let Some(a) = &s.archive {
        SourceKind::Archive(resolve_path(file, a))
    } else if let Some(r) = &s.rocm_artifacts {
        SourceKind::RocmArtifacts {
            dir: resolve_path(file, r),
            components: s.components.clone(),
            targets: s.targets.clone(),
        }
    } else if let Some(r) = &s.rocm {
        SourceKind::Rocm { dir: resolve_path(file, r), components: s.components.clone(), targets: s.targets.clone() }
    } else if let Some(req) = &s.pypi {
        let request = pypi_request(file, f, req.clone(), PypiFormat::Wheel, s.platform.clone(), s.python.clone())?;
        let site_packages = s.site_packages.clone().unwrap_or_else(|| DEFAULT_SITE_PACKAGES.into());
        if crate::tarball::path::normalize_dest(&site_packages).is_err() {
            return Err(field_err(
                file,
                format!("{f}.site_packages"),
                format!("`{site_packages}` must not contain `..`"),
            ));
        }
        for (name, path) in &s.bin {
            let bad_name = name.is_empty() || name.contains('/') || name == "." || name == "..";
            if bad_name || crate::tarball::path::normalize_member(path.as_bytes()).map_or(true, |p| p.is_empty()) {
                return Err(field_err(
                    file,
                    format!("{f}.bin.{name}"),
                    format!("`{name}` = `{path}`: keys are command names, values relative paths inside the wheel"),
                ));
            }
        }
        SourceKind::Pypi { request, site_packages, bin: s.bin.clone() }
    } else if !s.remove.is_empty() {
        SourceKind::Remove
    } else {
        return Err(field_err(
            file,
            f,
            "give one of `dir`, `file`, `archive`, `rocm_artifacts`, `rocm`, `pypi` or `remove`",
        ));
    };
    let only = |field: &str, ok: bool, what: &str| -> Result<(), SpecError> {
        if ok {
            Ok(())
        } else {
            Err(field_err(file, format!("{f}.{field}"), format!("applies only to {what} sources")))
        }
    };
    let is_dir = matches!(kind, SourceKind::Dir(_));
    let is_file = matches!(kind, SourceKind::File(_));
    let is_archive = matches!(kind, SourceKind::Archive(_));
    let is_rocm = matches!(kind, SourceKind::RocmArtifacts { .. } | SourceKind::Rocm { .. });
    let is_pypi = matches!(kind, SourceKind::Pypi { .. });
    only("platform", s.platform.is_none() || is_pypi, "`pypi`")?;
    only("python", s.python.is_none() || is_pypi, "`pypi`")?;
    only("site_packages", s.site_packages.is_none() || is_pypi, "`pypi`")?;
    only("bin", s.bin.is_empty() || is_pypi, "`pypi`")?;
    only("mode", s.mode.is_none() || is_file, "`file`")?;
    only("components", s.components.is_empty() || is_rocm, "`rocm_artifacts`")?;
    only("targets", s.targets.is_empty() || is_rocm, "`rocm_artifacts`")?;
    only("include", s.include.is_empty() || is_dir, "`dir`")?;
    only("exclude", s.exclude.is_empty() || is_dir, "`dir`")?;
    only("strip_components", s.strip_components.is_none() || is_archive, "`archive`")?;
    only("map", s.map.is_empty() || is_archive, "`archive`")?;
    only("sha256", s.sha256.is_none() || is_archive || is_file || is_pypi, "`archive`, `file` and `pypi`")?;
    only("devices", s.devices.is_none() || is_archive || is_dir, "`archive` and `dir`")?;
    if matches!(kind, SourceKind::Remove) && (s.dest.is_some() || s.owner.is_some()) {
        return Err(field_err(file, f, "a `remove` source takes no `dest` or `owner`"));
    }
    let owner = s.owner.as_deref().map(|o| parse_owner(file, &format!("{f}.owner"), o)).transpose()?;
    let mode = s.mode.as_ref().map(|m| parse_mode(file, &format!("{f}.mode"), m)).transpose()?;
    if let Some(h) = &s.sha256 {
        check_sha256(file, &format!("{f}.sha256"), h)?;
    }
    let dest = s.dest.unwrap_or_else(|| if is_pypi { DEFAULT_PYPI_DEST.into() } else { "/".into() });
    if crate::tarball::path::normalize_dest(&dest).is_err() {
        return Err(field_err(file, format!("{f}.dest"), format!("`{dest}` must not contain `..`")));
    }
    for (k, v) in &s.map {
        if crate::tarball::path::normalize_member(k.trim_start_matches("./").as_bytes()).is_err()
            || crate::tarball::path::normalize_dest(v).is_err()
        {
            return Err(field_err(
                file,
                format!("{f}.map"),
                format!("`{k}` = `{v}`: keys are paths inside the archive, values destinations, neither with `..`"),
            ));
        }
    }
    for (i, g) in s.include.iter().chain(s.exclude.iter()).enumerate() {
        if let Err(e) = globset::Glob::new(g) {
            return Err(field_err(
                file,
                format!("{f}.include/exclude[{i}]"),
                format!("`{g}` is not a valid glob: {e}"),
            ));
        }
    }
    Ok(Source {
        kind,
        dest,
        owner,
        mode,
        include: s.include,
        exclude: s.exclude,
        sha256: s.sha256,
        strip_components: s.strip_components.unwrap_or(0),
        map: s.map,
        remove: s.remove,
        devices: s.devices.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Image, SpecError> {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("img.toml");
        std::fs::write(&f, text).unwrap();
        load_image(&f, &BTreeMap::new())
    }

    const PKG: &str = "name = \"x\"\n[config]\nplatform = \"linux/amd64\"\n[base.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\nkeyring = \"k.gpg\"\ninclude = [\"python3\", \"sudo=1.9\"]\n";

    #[test]
    fn packages_base_parses_with_defaults() {
        let img = load(PKG).unwrap();
        let Base::Packages(p) = &img.base else { panic!("{:?}", img.base) };
        assert_eq!(p.components, ["main"]);
        assert_eq!(p.architecture, "amd64");
        assert_eq!(p.mirror, Mirror::Host);
        assert_eq!(p.variant, Variant::Required);
        assert!(p.keyring.is_absolute() && p.keyring.ends_with("k.gpg"), "relative to the definition");
        assert!(!p.configure);
    }

    /// Write `files` (name, text) into a fresh directory and load the first.
    fn load_in(files: &[(&str, &str)], sets: &[(&str, &str)]) -> (tempfile::TempDir, Result<Image, SpecError>) {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let p = d.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let sets = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let r = load_image(&d.path().join(files[0].0), &sets);
        (d, r)
    }

    #[test]
    fn image_base_loads_the_named_definition_with_this_images_params() {
        let top =
            "name = \"top\"\nbase = { image = \"${BASE}\" }\n[params]\nBASE = \"sub/base.toml\"\nGREETING = \"top\"\n";
        let base = "name = \"base\"\nbase = \"scratch\"\n[params]\nGREETING = \"base\"\nOWN = \"x\"\n\
                    [config]\nuser = \"tester\"\nlabels = { g = \"${GREETING}-${OWN}\" }\n";
        let (d, r) = load_in(&[("top.toml", top), ("sub/base.toml", base)], &[]);
        let img = r.unwrap();
        let Base::Image(b) = &img.base else { panic!("{:?}", img.base) };
        assert_eq!(b.name, "base");
        assert_eq!(b.file, d.path().join("sub/base.toml"));
        assert_eq!(b.config.labels["g"], "top-x", "this image's params override the base's defaults");
        assert_eq!(img.root_image().name, "base");
        // --set reaches the base too.
        let (_d, r) = load_in(&[("top.toml", top), ("sub/base.toml", base)], &[("OWN", "y")]);
        let Base::Image(b) = &r.unwrap().base else { panic!() };
        assert_eq!(b.config.labels["g"], "top-y");
    }

    #[test]
    fn image_base_errors_name_the_field() {
        // A missing file.
        let (_d, r) = load_in(&[("a.toml", "name = \"a\"\nbase = { image = \"nope.toml\" }\n")], &[]);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("a.toml: field `base.image`") && e.contains("nope.toml"), "{e}");
        // Itself, and a longer cycle.
        let (_d, r) = load_in(&[("a.toml", "name = \"a\"\nbase = { image = \"a.toml\" }\n")], &[]);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("field `base.image`") && e.contains("cycle"), "{e}");
        let (_d, r) = load_in(
            &[
                ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n"),
                ("b.toml", "name = \"b\"\nbase = { image = \"c.toml\" }\n"),
                ("c.toml", "name = \"c\"\nbase = { image = \"a.toml\" }\n"),
            ],
            &[],
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("c.toml: field `base.image`") && e.contains("cycle"), "{e}");
        assert!(e.contains("a.toml -> ") && e.contains("b.toml -> ") && e.contains("c.toml -> "), "{e}");
        // A base defined twice in a chain is no cycle.
        let (_d, r) = load_in(
            &[
                ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n"),
                ("b.toml", "name = \"b\"\nbase = { image = \"c.toml\" }\n"),
                ("c.toml", "name = \"c\"\nbase = \"scratch\"\n"),
            ],
            &[],
        );
        assert_eq!(r.unwrap().root_image().name, "c");
        // Errors inside the base name the base's file.
        let (_d, r) = load_in(
            &[
                ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n"),
                ("b.toml", "name = \"b\"\nbase = \"scratch\"\nbogus = 1\n"),
            ],
            &[],
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("b.toml") && e.contains("bogus"), "{e}");
        // Another platform, keys of other kinds, an empty name.
        let (_d, r) = load_in(
            &[
                ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n[config]\nplatform = \"linux/amd64\"\n"),
                ("b.toml", "name = \"b\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/arm64\"\n"),
            ],
            &[],
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("field `base.image`") && e.contains("linux/arm64") && e.contains("config.platform"), "{e}");
        for (text, field) in [
            ("base = { image = \"b.toml\", ref = \"x\" }", "base.ref"),
            ("base = { image = \"b.toml\", sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\" }", "base"),
            ("base = { image = \"b.toml\", rootfs = \"x.tar\" }", "base"),
            ("base = { image = \"\" }", "base.image"),
        ] {
            let (_d, r) = load_in(
                &[("a.toml", &format!("name = \"a\"\n{text}\n")), ("b.toml", "name = \"b\"\nbase = \"scratch\"\n")],
                &[],
            );
            let e = r.unwrap_err().to_string();
            assert!(e.contains(&format!("field `{field}`")), "{text}: {e}");
        }
    }

    #[test]
    fn packages_base_errors_name_the_field() {
        let cases = [
            (PKG.replace("mirror = \"host\"", "mirror = \"ftp://x\""), "base.packages.mirror"),
            (PKG.replace("\"python3\"", "\"Python3\""), "base.packages.include[0]"),
            (PKG.replace("\"sudo=1.9\"", "\"python3\""), "base.packages.include[1]"),
            (format!("{PKG}architecture = \"arm64\"\n"), "base.packages.architecture"),
            (format!("{PKG}variant = \"tiny\"\n"), "base.packages.variant"),
            (format!("{PKG}users = [{{ name = \"Bad\", uid = 1000 }}]\n"), "base.packages.users[0].name"),
            (format!("{PKG}users = [{{ name = \"t\", uid = 0 }}]\n"), "base.packages.users[0].uid"),
        ];
        for (text, field) in cases {
            let e = load(&text).unwrap_err().to_string();
            assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
        }
        let e = load(&format!("{PKG}flavour = 1\n")).unwrap_err().to_string();
        assert!(e.contains("flavour"), "{e}");
        let e = load(&PKG.replace("[base.packages]", "[base]\nrootfs = \"x.tar\"\n[base.packages]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one of"), "{e}");
    }

    const PKG_LAYER: &str = "name = \"x\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n[[layer]]\nname = \"tools\"\n[[layer.source]]\n[layer.source.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\nkeyring = \"k.gpg\"\ninclude = [\"jq\"]\n";

    #[test]
    fn packages_layer_source_parses() {
        let img = load(PKG_LAYER).unwrap();
        let SourceKind::Packages(p) = &img.layers[0].sources[0].kind else { panic!("{:?}", img.layers[0]) };
        assert_eq!(p.include, ["jq"]);
        assert_eq!(p.architecture, "amd64");
        assert!(p.keyring.is_absolute());
        let cases = [
            (format!("{PKG_LAYER}users = [{{ name = \"t\", uid = 1000 }}]\n"), "layer[0].source[0].packages.users"),
            (format!("{PKG_LAYER}variant = \"essential\"\n"), "layer[0].source[0].packages.variant"),
            (PKG_LAYER.replace("include = [\"jq\"]", "include = []"), "layer[0].source[0].packages.include"),
            (
                PKG_LAYER.replace("[layer.source.packages]", "dest = \"/x\"\n[layer.source.packages]"),
                "layer[0].source[0].dest",
            ),
            (format!("{PKG_LAYER}[[layer.source]]\ndir = \".\"\n"), "layer[0].source[0].packages"),
            (PKG_LAYER.replace("mirror = \"host\"", "mirror = \"x\""), "layer[0].source[0].packages.mirror"),
        ];
        for (text, field) in cases {
            let e = load(&text).unwrap_err().to_string();
            assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
        }
    }
}
