//! Hermetic distro bases: a rootfs layer made straight from a Debian or
//! Ubuntu archive, without a container or a registry. The flow:
//! definition (`[base.packages]`) -> a mirror for each suite, the release
//! and its pockets (`mirrors`: given, or this machine's apt source for the
//! suite) -> each suite's signed InRelease (gpgv, with the `keyring`) ->
//! Packages indexes (hashes from Release) -> resolution over them all, as
//! apt chooses (or `IMAGE.lock`) -> .deb files in the
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
pub mod debootstrap;
pub mod fetch;
pub use fetch::fetch_debs;
pub mod keyring;
pub mod mirrors;
pub use mirrors::{mirror_for, mirrors};
pub mod normalize;
pub mod pins;
pub mod resolve;
pub mod sources;
pub mod suites;
pub use suites::{sources, Sources};
pub mod unpack;
pub mod update;
pub mod usrmerge;
pub mod version;

use crate::cache::{Cache, CacheError};
use crate::definition::{Configure, PackageSet, PackagesBase, UserDef, Variant};
use crate::layer::Tree;
use pins::{PackagePins, PinnedPackage};
use resolve::Installed;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DistroError {
    #[error("{url}: {message}; check the mirror URL and your network or proxy settings (http_proxy/https_proxy)")]
    Network { url: String, message: String },
    #[error("{url} is not served (HTTP {status}); if it is pinned in a lock file, the mirror no longer has that version: run `quarry lock` again")]
    NotServed { url: String, status: u16 },
    #[error("suite `{suite}`: {url} is not served (HTTP {status}): the mirror has no such suite; check `suites` (and the mirror that serves it)")]
    NoSuite { suite: String, url: String, status: u16 },
    #[error("the lock pins {package} {version} from suite `{suite}` (`{file}`), which {url} no longer serves (HTTP {status}): the archive has dropped that version (a newer one replaced it); run `quarry lock` on the image again")]
    PinGone { package: String, version: String, suite: String, file: String, url: String, status: u16 },
    #[error("suite `{suite}` is Debian's security archive, which {mirror} does not name; give `security_mirror = \"http://.../debian-security\"` (or `\"host\"`) in the packages definition")]
    NoSecurityMirror { suite: String, mirror: String },
    #[error("sha256 mismatch for {what}: expected {expected}, actual {actual}")]
    Mismatch { what: String, expected: String, actual: String, hint: String },
    #[error("suite `{suite}`: bad signature on {url} (keyring `{keyring}`): {message}; is `keyring` the key that signs this archive?")]
    BadSignature { suite: String, url: String, keyring: String, message: String },
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
    #[error("mirror = \"host\": this machine's apt sources ({etc}/sources.list, {etc}/sources.list.d/*.list|*.sources) have no `deb` entry for suite `{suite}`, and no debootstrap suite script names its archive; add an entry, install `debootstrap`, or give the mirror (`--set` the image's mirror parameter, or `mirror = \"http://...\"` in the definition)")]
    NoHostMirror { suite: String, etc: String },
    #[error("`{path}`: {err}")]
    Io { path: String, err: std::io::Error },
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("{0}")]
    Sandbox(Box<crate::sandbox::SandboxError>),
    #[error("the {script} script of package `{package}` failed (exit status {code}); nothing was cached. Its output:\n{output}")]
    Script { package: String, script: String, code: i32, output: String },
}

impl DistroError {
    /// What to do about it, printed after the error (see `cli::exit`).
    pub fn hint(&self) -> Option<String> {
        const ENGINE: &str =
            "set `configure = \"engine\"` in the packages definition to run the scripts in a container step instead";
        match self {
            DistroError::Mismatch { hint, .. } => Some(hint.clone()),
            DistroError::Sandbox(e) => Some(match e.hint() {
                Some(h) => format!("{h}; or {ENGINE}"),
                None => ENGINE.to_string(),
            }),
            _ => None,
        }
    }

    pub fn io(path: &Path, err: std::io::Error) -> DistroError {
        DistroError::Io { path: path.display().to_string(), err }
    }
}

/// The mirror URL of the release (the first suite).
pub fn mirror_url(spec: &PackageSet) -> Result<String, DistroError> {
    mirror_for(spec, spec.suite())
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
    let (release, pkgs) = suites::fetch_indexes(spec, cache, spool)?;
    let origin = format!(
        "{} at {} ({}, {})",
        spec.suites.join(", "),
        mirror_url(spec)?,
        spec.components.join(" "),
        spec.architecture
    );
    let chosen = resolve::resolve(&pkgs, &spec.include, variant, installed, &origin)?;
    Ok(PackagePins {
        suites: spec.suites.clone(),
        architecture: spec.architecture.clone(),
        components: spec.components.clone(),
        variant,
        include: spec.include.clone(),
        release,
        below,
        packages: chosen
            .into_iter()
            .map(|p| PinnedPackage {
                name: p.name.clone(),
                version: p.version.clone(),
                architecture: p.architecture.clone(),
                suite: Some(p.suite.clone()),
                priority: Some(p.priority.clone()),
                file: p.filename.clone(),
                sha256: p.sha256.clone(),
                size: p.size,
            })
            .collect(),
    })
}

/// The index of a package set as the archive has it now (every suite's
/// `Packages`, checked against its signed InRelease).
pub fn index_now(spec: &PackageSet, cache: &Cache, spool: &Path) -> Result<Vec<archive::Package>, DistroError> {
    Ok(suites::fetch_indexes(spec, cache, spool)?.1)
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
/// with dpkg (no marks) and names the `required` ones and the includes to
/// apt. `Required` is the archive index's Priority, as apt reads it (the
/// lock's; a lock without it: the package's own control field).
fn named(
    control: &control::Paragraph,
    lock: &PackagePins,
    include: &[String],
    variant: Option<Variant>,
    essential: bool,
) -> bool {
    let name = control.get("Package").unwrap_or_default();
    let in_include = include.iter().any(|i| i.split_once('=').map(|(n, _)| n).unwrap_or(i) == name);
    let priority = lock
        .packages
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.priority.as_deref())
        .or_else(|| control.get("Priority"));
    let in_variant = match variant {
        None => false,
        // apt never marks itself automatic (its pkgCacheGen::ForceEssential).
        Some(_) if essential || name == "apt" => true,
        Some(Variant::Required) => priority == Some("required"),
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
    let _phase = crate::progress::phase(format!("unpacking {} packages", opened.len()));
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
        (named(c, lock, &spec.include, Some(spec.variant), e), e)
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
    apt_state::add_sources(&mut tree, None, &spec.set, &mirrors(spec)?)?;
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
    let scripts = unpack_all(&mut u, opened, spec.configure, |c| (named(c, lock, &spec.include, None, false), false))?;
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
    apt_state::add_sources(&mut tree, Some(&below_tree), spec, &mirrors(spec)?)?;
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
