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
pub mod lock;
pub mod resolve;
pub mod sources;
pub mod system;
pub mod version;

use crate::digest::KeyHasher;
use crate::spec::{Mirror, PackagesBase, Variant};
use crate::store::cache::{Cache, CacheError};
use crate::tarball::Tree;
use fetch::Fetcher;
use lock::{Lock, LockFile, LockedPackage};
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
pub fn mirror_url(spec: &PackagesBase) -> Result<String, DistroError> {
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

/// What a build of this base will read, without network access.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub release: String,
    pub indexes: Vec<String>,
    pub keyring: PathBuf,
    pub lock: PathBuf,
    pub locked: bool,
}

pub fn plan(spec: &PackagesBase, image_file: &Path) -> Result<Plan, DistroError> {
    let repo = repo(spec)?;
    let lock = lock::lock_path(image_file);
    Ok(Plan {
        release: repo.release_url(),
        indexes: spec
            .components
            .iter()
            .map(|c| repo.url(&format!("dists/{}/{c}/binary-{}/Packages.xz", spec.suite, spec.architecture)))
            .collect(),
        keyring: spec.keyring.clone(),
        locked: lock.is_file(),
        lock,
    })
}

fn repo(spec: &PackagesBase) -> Result<archive::Repo, DistroError> {
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
    spec: &PackagesBase,
    variant: Option<Variant>,
    installed: &[Installed],
    below: Option<String>,
    cache: &Cache,
    spool: &Path,
) -> Result<Lock, DistroError> {
    let repo = repo(spec)?;
    let fetcher = Fetcher::new();
    let release = repo.fetch_release(&fetcher, spool)?;
    let pkgs = repo.fetch_packages(&fetcher, cache, &release)?;
    let origin = format!("{} ({}, {})", repo.release_url(), spec.components.join(" "), spec.architecture);
    let chosen = resolve::resolve(&pkgs, &spec.include, variant, installed, &origin)?;
    Ok(Lock {
        suite: spec.suite.clone(),
        architecture: spec.architecture.clone(),
        components: spec.components.clone(),
        variant,
        include: spec.include.clone(),
        release: format!("sha256:{}", release.digest),
        below,
        packages: chosen
            .into_iter()
            .map(|p| LockedPackage {
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

/// The package set for a build: the lock beside the image when there is
/// one (no resolution, no index download), else a fresh resolution.
pub fn locked_or_resolved(
    spec: &PackagesBase,
    image_file: &Path,
    cache: &Cache,
    spool: &Path,
) -> Result<(Lock, bool), DistroError> {
    let path = lock::lock_path(image_file);
    if let Some(file) = LockFile::read(&path)? {
        let l = file.base.ok_or_else(|| DistroError::Lock {
            lock: path.display().to_string(),
            message: "has no pins for the `packages` base; run `quarry lock` on the image again".into(),
        })?;
        l.check_matches(spec, Some(spec.variant), &path, "the base")?;
        return Ok((l, true));
    }
    Ok((resolve_now(spec, Some(spec.variant), &[], None, cache, spool)?, false))
}

/// The pins of the packages layer `name` over `below`: the image's lock
/// when it has them (refused when the layers below changed since), else a
/// fresh resolution (`fresh`: always, as `quarry lock` does).
pub fn layer_pins(
    spec: &PackagesBase,
    name: &str,
    image_file: &Path,
    below: &below::Below,
    fresh: bool,
    cache: &Cache,
    spool: &Path,
) -> Result<Lock, DistroError> {
    let digest = below.status_digest();
    let path = lock::lock_path(image_file);
    if !fresh {
        if let Some(file) = LockFile::read(&path)? {
            let what = format!("layer `{name}`");
            let l = file.layer.get(name).cloned().ok_or_else(|| DistroError::Lock {
                lock: path.display().to_string(),
                message: format!("has no pins for the packages {what}; run `quarry lock` on the image again"),
            })?;
            l.check_matches(spec, None, &path, &what)?;
            if l.below.as_deref() != Some(digest.as_str()) {
                return Err(DistroError::Lock {
                    lock: path.display().to_string(),
                    message: format!(
                        "pins {what} over other packages than the layers below it now install (their dpkg status changed since: {} then, {digest} now); run `quarry lock` on the image again",
                        l.below.as_deref().unwrap_or("none")
                    ),
                });
            }
            return Ok(l);
        }
    }
    let installed: Vec<Installed> =
        below.status().iter().filter(|p| below::is_present(p)).filter_map(Installed::from_status).collect();
    resolve_now(spec, None, &installed, Some(digest), cache, spool)
}

/// Everything that decides the layer's bytes: the pinned package files and
/// what the definition adds on top.
pub fn fingerprint(spec: &PackagesBase, lock: &Lock) -> String {
    let mut h = KeyHasher::new();
    h.field(concat!("packages-v3-", env!("CARGO_PKG_VERSION")))
        .field(&spec.architecture)
        .field(format!("{:?}", spec.variant));
    for p in &lock.packages {
        h.field(&p.name).field(&p.sha256);
    }
    if let Some(b) = &lock.below {
        h.field(b);
    }
    h.field(format!("{:?}", spec.groups)).field(format!("{:?}", spec.users)).field(spec.configure.to_string());
    h.finish()
}

/// Download (or take from the cache) every pinned .deb, verified.
pub fn fetch_debs(spec: &PackagesBase, lock: &Lock, cache: &Cache) -> Result<Vec<PathBuf>, DistroError> {
    let fetcher = Fetcher::new();
    let mirror = std::sync::OnceLock::new();
    let url_of = |p: &LockedPackage| -> Result<String, DistroError> {
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
                let r = fetch::cached_or_fetch(&fetcher, cache, "debs", &|| url_of(p), &p.sha256, Some(p.size));
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
fn open_debs(lock: &Lock, debs: &[PathBuf], spool: &Path) -> Result<Vec<deb::Deb>, DistroError> {
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
pub fn assemble(spec: &PackagesBase, lock: &Lock, debs: &[PathBuf], spool: &Path) -> Result<Tree, DistroError> {
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
    spec: &PackagesBase,
    lock: &Lock,
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

/// The packages layers of an image: (index, layer, spec).
pub fn packages_layers(image: &crate::spec::Image) -> Vec<(usize, &crate::spec::Layer, &PackagesBase)> {
    image
        .layers
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            l.sources.iter().find_map(|s| match &s.kind {
                crate::spec::SourceKind::Packages(p) => Some((i, l, p.as_ref())),
                _ => None,
            })
        })
        .collect()
}

/// The `packages` base of an image, else its first packages layer, or an
/// error saying there is nothing to pin.
pub fn packages_of(image: &crate::spec::Image) -> Result<&PackagesBase, DistroError> {
    match &image.base {
        crate::spec::Base::Packages(p) => Ok(p),
        _ => packages_layers(image).first().map(|(_, _, p)| *p).ok_or_else(|| DistroError::Lock {
            lock: lock::lock_path(&image.file).display().to_string(),
            message: format!(
                "has nothing to pin: `{}` has no `[base.packages]` table, no `packages` layer source and no `pypi` source or input (other inputs are pinned in the definition by sha256)",
                image.file.display()
            ),
        }),
    }
}

/// `quarry lock` for an image whose only packages are its base's: resolve
/// now (nothing is built).
pub fn lock_base(image: &crate::spec::Image, cache: &Cache) -> Result<LockFile, DistroError> {
    let spec = packages_of(image)?;
    let spool = tempfile::Builder::new()
        .prefix("lock-")
        .tempdir_in(cache.tmp_dir())
        .map_err(|e| DistroError::io(&cache.tmp_dir(), e))?;
    let lock = resolve_now(spec, Some(spec.variant), &[], None, cache, spool.path())?;
    Ok(LockFile { version: lock::LOCK_VERSION, base: Some(lock), ..Default::default() })
}
