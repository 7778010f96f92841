//! Hermetic distro bases: a rootfs layer made straight from a Debian or
//! Ubuntu archive, without a container or a registry. The flow:
//! definition (`[base.packages]`) -> mirror (given, or this machine's apt
//! source for the suite) -> signed InRelease (gpgv) -> Packages indexes
//! (hashes from Release) -> resolution (or `IMAGE.lock`) -> .deb files in the
//! content-addressed cache (sha256 checked) -> unpacked into one tree with
//! the dpkg database and the accounts a minimal system needs.

pub mod archive;
pub mod below;
pub mod control;
pub mod deb;
pub mod fetch;
pub mod ldcache;
pub mod pins;
pub mod resolve;
pub mod sources;
pub mod system;
pub mod usrmerge;
pub mod version;

use crate::cache::{Cache, CacheError};
use crate::definition::{Mirror, PackageSet, PackagesBase, Variant};
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

/// Download (or take from the cache) every pinned .deb, verified.
pub fn fetch_debs(spec: &PackageSet, lock: &PackagePins, cache: &Cache) -> Result<Vec<PathBuf>, DistroError> {
    let fetcher = Fetcher::new();
    let mirror = std::sync::OnceLock::new();
    let url_of = |p: &PinnedPackage| -> Result<String, DistroError> {
        let m = match mirror.get() {
            Some(m) => m,
            None => {
                let m = mirror_url(spec)?;
                mirror.get_or_init(|| m)
            }
        };
        Ok(format!("{m}/{}", p.file))
    };
    // A few downloads at a time: latency, not bandwidth, dominates small files.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<PathBuf, DistroError>>>> =
        lock.packages.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = lock.packages.get(i) else { break };
                let r = fetch::cached_or_fetch(
                    &fetcher,
                    cache,
                    crate::cache::Bucket::Debs,
                    &|| url_of(p),
                    &p.sha256,
                    Some(p.size),
                );
                let failed = r.is_err();
                *results[i].lock().expect("not poisoned") = Some(r);
                if failed {
                    next.store(usize::MAX / 2, std::sync::atomic::Ordering::Relaxed);
                    break;
                }
            });
        }
    });
    let mut out = Vec::new();
    for r in results {
        match r.into_inner().expect("not poisoned") {
            Some(Ok(p)) => out.push(p),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(out)
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

/// Unpack the verified .debs into one rootfs tree.
pub fn assemble(spec: &PackagesBase, lock: &PackagePins, debs: &[PathBuf], spool: &Path) -> Result<Tree, DistroError> {
    let mut sys = system::System::new(&spec.architecture);
    for d in open_debs(lock, debs, spool)? {
        sys.unpack(d, !spec.configure)?;
    }
    sys.finish(&spec.users, &spec.groups)?;
    let mut tree = sys.tree;
    tree.finalize_hardlinks().map_err(|e| DistroError::Assemble { message: e.to_string() })?;
    Ok(tree)
}

/// Unpack the verified .debs of a packages layer over the layers `below`:
/// their files, plus the merged dpkg database and loader cache.
pub fn assemble_layer(
    spec: &PackageSet,
    lock: &PackagePins,
    debs: &[PathBuf],
    below: below::Below,
    spool: &Path,
) -> Result<Tree, DistroError> {
    let mut sys = system::System::over(&spec.architecture, below);
    for d in open_debs(lock, debs, spool)? {
        sys.unpack(d, !spec.configure)?;
    }
    sys.finish_layer()?;
    let mut tree = sys.tree;
    tree.finalize_hardlinks().map_err(|e| DistroError::Assemble { message: e.to_string() })?;
    Ok(tree)
}
