//! Hermetic distro bases: a rootfs layer made straight from a Debian or
//! Ubuntu archive, without a container or a registry. The flow:
//! definition (`[base.packages]`) -> mirror (given, or this machine's apt
//! source for the suite) -> signed InRelease (gpgv) -> Packages indexes
//! (hashes from Release) -> resolution (or `IMAGE.lock`) -> .deb files in the
//! content-addressed cache (sha256 checked) -> unpacked as `dpkg --unpack`
//! leaves them (`unpack`) -> the packages' own maintainer scripts and
//! triggers run in quarry's sandbox (`configure`), made reproducible by
//! rule (`normalize`) -> what no script does: the accounts the definition
//! declares (`accounts`), apt's sources and automatic marks (`apt_state`).

pub mod accounts;
pub mod apt_state;
pub mod archive;
pub mod below;
pub mod configure;
pub mod control;
pub mod deb;
pub mod fetch;
pub use fetch::fetch_debs;
pub mod normalize;
pub mod pins;
pub mod resolve;
pub mod sources;
pub mod unpack;
pub mod usrmerge;
pub mod version;

use crate::cache::{Cache, CacheError};
use crate::definition::{Configure, Mirror, PackageSet, PackagesBase, UserDef, Variant};
use crate::layer::Tree;
use fetch::Fetcher;
use pins::{PackagePins, PinnedPackage};
use resolve::Installed;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DistroError {
    #[error("{url}: {message}; check the mirror URL and your network or proxy settings (http_proxy/https_proxy)")]
    Network { url: String, message: String },
    #[error("{url} is not served (HTTP {status}); if it is pinned in a lock file, the mirror no longer has that version: run `quarry lock` again")]
    NotServed { url: String, status: u16 },
    #[error("sha256 mismatch for {what}: expected {expected}, actual {actual}; {hint}")]
    Mismatch { what: String, expected: String, actual: String, hint: String },
    #[error("bad signature on {url} (keyring `{keyring}`): {message}; is `keyring` the key that signs this archive?")]
    BadSignature { url: String, keyring: String, message: String },
    #[error("keyring `{keyring}`: {message}")]
    Keyring { keyring: String, message: String },
    #[error("index {url}: {message}")]
    Index { url: String, message: String },
    #[error("index {url}: {source}")]
    Paragraph { url: String, source: archive::ParagraphError },
    #[error(transparent)]
    Resolve(#[from] resolve::ResolveError),
    #[error("package file `{deb}`: {message}")]
    Deb { deb: String, message: String },
    #[error("assembling the rootfs: {message}")]
    Assemble { message: String },
    #[error("lock file `{lock}` {message}")]
    Lock { lock: String, message: String },
    #[error("mirror = \"host\": this machine's apt sources ({etc}/sources.list, {etc}/sources.list.d/*.list|*.sources) have no `deb` entry for suite `{suite}`; add one, or give `mirror = \"http://...\"` in the definition")]
    NoHostMirror { suite: String, etc: String },
    #[error("`{path}`: {err}")]
    Io { path: String, err: std::io::Error },
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("{0}; or set `configure = \"engine\"` in the packages definition to run the scripts in a container step instead")]
    Sandbox(Box<crate::sandbox::SandboxError>),
    #[error("the {script} script of package `{package}` failed (exit status {code}); nothing was cached. Its output:\n{output}")]
    Script { package: String, script: String, code: i32, output: String },
}

impl DistroError {
    pub fn io(path: &Path, err: std::io::Error) -> DistroError {
        DistroError::Io { path: path.display().to_string(), err }
    }
}

/// The mirror URL for a definition.
pub fn mirror_url(spec: &PackageSet) -> Result<String, DistroError> {
    match &spec.mirror {
        Mirror::Url(u) => Ok(u.clone()),
        Mirror::Host => {
            let etc =
                std::env::var_os("QUARRY_APT_ETC").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/etc/apt"));
            sources::host_mirror(&etc, &spec.suite)
                .ok_or_else(|| DistroError::NoHostMirror { suite: spec.suite.clone(), etc: etc.display().to_string() })
        }
    }
}

/// What resolving a package set reads, without network access.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sources {
    pub release: String,
    pub indexes: Vec<String>,
    pub keyring: PathBuf,
}

pub fn sources(spec: &PackageSet) -> Result<Sources, DistroError> {
    let repo = repo(spec)?;
    Ok(Sources {
        release: repo.release_url(),
        indexes: spec
            .components
            .iter()
            .map(|c| repo.url(&format!("dists/{}/{c}/binary-{}/Packages.xz", spec.suite, spec.architecture)))
            .collect(),
        keyring: spec.keyring.clone(),
    })
}

fn repo(spec: &PackageSet) -> Result<archive::Repo, DistroError> {
    Ok(archive::Repo {
        mirror: mirror_url(spec)?,
        suite: spec.suite.clone(),
        components: spec.components.clone(),
        architecture: spec.architecture.clone(),
        keyring: spec.keyring.clone(),
    })
}

/// Resolve the definition against the archive as it is now: the lock's
/// contents. A base adds its `variant`'s set; a layer (`variant` None)
/// adds only what is not `installed` below (`below`: that status's digest).
pub fn resolve_now(
    spec: &PackageSet,
    variant: Option<Variant>,
    installed: &[Installed],
    below: Option<String>,
    cache: &Cache,
    spool: &Path,
) -> Result<PackagePins, DistroError> {
    let repo = repo(spec)?;
    let fetcher = Fetcher::new();
    let release = repo.fetch_release(&fetcher, spool)?;
    let pkgs = repo.fetch_packages(&fetcher, cache, &release)?;
    let origin = format!("{} ({}, {})", repo.release_url(), spec.components.join(" "), spec.architecture);
    let chosen = resolve::resolve(&pkgs, &spec.include, variant, installed, &origin)?;
    Ok(PackagePins {
        suite: spec.suite.clone(),
        architecture: spec.architecture.clone(),
        components: spec.components.clone(),
        variant,
        include: spec.include.clone(),
        release: release.digest.to_string(),
        below,
        packages: chosen
            .into_iter()
            .map(|p| PinnedPackage {
                name: p.name.clone(),
                version: p.version.clone(),
                architecture: p.architecture.clone(),
                file: p.filename.clone(),
                sha256: p.sha256.clone(),
                size: p.size,
            })
            .collect(),
    })
}

/// Resolve a packages layer's set over the layers below it: only what
/// they do not install already, recording their dpkg status's digest.
pub fn resolve_over(
    spec: &PackageSet,
    below: &below::Below,
    cache: &Cache,
    spool: &Path,
) -> Result<PackagePins, DistroError> {
    let installed: Vec<Installed> =
        below.status().iter().filter(|p| below::is_present(p)).filter_map(Installed::from_status).collect();
    resolve_now(spec, None, &installed, Some(below.status_digest()), cache, spool)
}

/// Pins a build over `below` may use: made over the same dpkg status.
pub fn check_below(pins: &PackagePins, below: &below::Below, what: &str, lock: &Path) -> Result<(), DistroError> {
    let digest = below.status_digest();
    if pins.below.as_deref() != Some(digest.as_str()) {
        return Err(DistroError::Lock {
            lock: lock.display().to_string(),
            message: format!(
                "pins {what} over other packages than the layers below it now install (their dpkg status changed since: {} then, {digest} now); run `quarry lock` on the image again",
                pins.below.as_deref().unwrap_or("none")
            ),
        });
    }
    Ok(())
}

/// Open every verified .deb, checking each holds the pinned package.
fn open_debs(lock: &PackagePins, debs: &[PathBuf], spool: &Path) -> Result<Vec<deb::Deb>, DistroError> {
    use rayon::prelude::*;
    let opened: Vec<Result<deb::Deb, DistroError>> = debs.par_iter().map(|d| deb::read_deb(d, spool)).collect();
    let mut out = Vec::new();
    for (d, p) in opened.into_iter().zip(&lock.packages) {
        let d = d?;
        if d.control.get("Package") != Some(p.name.as_str()) || d.control.get("Version") != Some(p.version.as_str()) {
            return Err(DistroError::Deb {
                deb: p.file.clone(),
                message: format!(
                    "holds {} {}, not {} {} as pinned",
                    d.control.get("Package").unwrap_or("?"),
                    d.control.get("Version").unwrap_or("?"),
                    p.name,
                    p.version
                ),
            });
        }
        out.push(d);
    }
    Ok(out)
}

/// Did the definition name this package (or is it in the base's variant)?
/// apt marks the others automatic. mmdebstrap installs the essential set
/// with dpkg (no marks) and names the `required` ones and the includes to apt.
fn named(control: &control::Paragraph, include: &[String], variant: Option<Variant>, essential: bool) -> bool {
    let name = control.get("Package").unwrap_or_default();
    let in_include = include.iter().any(|i| i.split_once('=').map(|(n, _)| n).unwrap_or(i) == name);
    let in_variant = match variant {
        None => false,
        // apt never marks itself automatic (its pkgCacheGen::ForceEssential).
        Some(_) if essential || name == "apt" => true,
        Some(Variant::Required) => control.get("Priority") == Some("required"),
        Some(Variant::Essential) => false,
    };
    in_include || in_variant
}

/// Unpack every opened .deb into `u` as `dpkg --unpack` would; `marks` says
/// of a package whether apt would mark it named (not automatic) and whether
/// it is in the essential set. Returns whether scripts must run; when none
/// need to, the packages are settled as configured here.
fn unpack_all(
    u: &mut unpack::Unpacked,
    opened: Vec<deb::Deb>,
    configure: Configure,
    marks: impl Fn(&control::Paragraph) -> (bool, bool),
) -> Result<bool, DistroError> {
    let _span = crate::trace::span("packages: unpack");
    for d in opened {
        let (named, essential) = marks(&d.control);
        u.unpack(d, named, essential)?;
    }
    let scripts = u.needs_scripts() || configure == Configure::Engine;
    if !scripts {
        u.settle_without_scripts()?;
    }
    u.finish()?;
    Ok(scripts)
}

/// The verified .debs of a base, unpacked and configured into one rootfs.
pub fn assemble(
    spec: &PackagesBase,
    lock: &PackagePins,
    debs: &[PathBuf],
    spool: &Path,
    epoch: u64,
) -> Result<Tree, DistroError> {
    let mut u = unpack::Unpacked::new(&spec.architecture);
    let opened = crate::trace::time("packages: open .debs", || open_debs(lock, debs, spool))?;
    let essential = unpack::essential_set(&opened.iter().map(|d| &d.control).collect::<Vec<_>>());
    let scripts = unpack_all(&mut u, opened, spec.configure, |c| {
        let e = essential.contains(c.get("Package").unwrap_or_default());
        (named(c, &spec.include, Some(spec.variant), e), e)
    })?;
    let packages = u.packages.clone();
    let mut tree = match spec.configure {
        Configure::Sandbox => {
            let mut t = if scripts { configure::run_scripts(u, &[], 0, spool, epoch)? } else { u.tree };
            accounts::add(&mut t, &spec.users, &spec.groups)?;
            t
        }
        // The step after this layer runs the scripts and adds the accounts.
        Configure::Engine => {
            configure::stage(&mut u)?;
            u.tree
        }
    };
    apt_state::add_source(&mut tree, None, &spec.set, &mirror_url(spec)?)?;
    apt_state::mark_automatic(&mut tree, None, &packages, &spec.architecture)?;
    tree.finalize_hardlinks().map_err(|e| DistroError::Assemble { message: e.to_string() })?;
    Ok(tree)
}

/// The verified .debs of a packages layer over the layers below (`blobs`,
/// lowest first): what they add and change, configured.
pub fn assemble_layer(
    spec: &PackageSet,
    lock: &PackagePins,
    debs: &[PathBuf],
    below: below::Below,
    blobs: &[PathBuf],
    spool: &Path,
    epoch: u64,
) -> Result<Tree, DistroError> {
    let lower_bytes = below.content_bytes;
    let mut u = unpack::Unpacked::over(&spec.architecture, below);
    let opened = crate::trace::time("packages: open .debs", || open_debs(lock, debs, spool))?;
    let scripts = unpack_all(&mut u, opened, spec.configure, |c| (named(c, &spec.include, None, false), false))?;
    let packages = u.packages.clone();
    let below_tree = u.below().cloned().unwrap_or_default();
    let mut tree = match spec.configure {
        Configure::Sandbox if scripts => configure::run_scripts(u, blobs, lower_bytes, spool, epoch)?,
        Configure::Sandbox => u.tree,
        Configure::Engine => {
            configure::stage(&mut u)?;
            u.tree
        }
    };
    apt_state::add_source(&mut tree, Some(&below_tree), spec, &mirror_url(spec)?)?;
    apt_state::mark_automatic(&mut tree, Some(&below_tree), &packages, &spec.architecture)?;
    let mut tree = implied_dirs_as_below(tree, &below_tree);
    tree.finalize_hardlinks().map_err(|e| DistroError::Assemble { message: e.to_string() })?;
    Ok(tree)
}

/// Directories a layer only implies (parents of what it adds) written as
/// they are below, not with default metadata.
fn implied_dirs_as_below(mut tree: Tree, below: &Tree) -> Tree {
    let implied: Vec<(Vec<u8>, crate::layer::Node)> = tree
        .iter()
        .filter(|(_, n)| n.implicit)
        .filter_map(|(p, _)| below.get(p).filter(|b| b.kind.is_dir()).map(|b| (p.clone(), b.clone())))
        .collect();
    for (p, mut n) in implied {
        n.mtime = 0;
        let _ = tree.insert(p, n);
    }
    tree
}

/// The script of the container step that configures packages left
/// unpacked (`configure = "engine"`): what the sandbox runs (see
/// `configure::SCRIPT`), then the definition's accounts as useradd makes them.
pub fn engine_configure_script(users: &[UserDef], groups: &std::collections::BTreeMap<String, u32>) -> String {
    let mut s = configure::SCRIPT.to_string();
    for (g, gid) in groups {
        s.push_str(&format!("groupadd -g {gid} {g}\n"));
    }
    for u in users {
        let gid = u.gid.unwrap_or(u.uid);
        s.push_str(&format!("getent group {gid} >/dev/null || groupadd -g {gid} {}\n", u.name));
        for g in &u.groups {
            s.push_str(&format!("getent group {g} >/dev/null || groupadd --system {g}\n"));
        }
        let home = u.home.clone().unwrap_or_else(|| format!("/home/{}", u.name));
        let shell = u.shell.clone().unwrap_or_else(|| "/bin/bash".into());
        let extra = if u.groups.is_empty() { String::new() } else { format!(" -G {}", u.groups.join(",")) };
        s.push_str(&format!("useradd -m -u {} -g {gid}{extra} -s {shell} -d {home} {}\n", u.uid, u.name));
        if u.sudo {
            s.push_str(&format!(
                "echo '{0} ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/{0}\nchmod 0440 /etc/sudoers.d/{0}\n",
                u.name
            ));
        }
    }
    s
}
