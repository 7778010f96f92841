//! The cache: what quarry made or fetched before, found again by key,
//! behind one interface with named buckets (see [`Bucket`]): packed layers,
//! kernel build outputs, built wheels, compiler caches, pinned tools, PyPI
//! files, Debian packages and indexes.
//!
//! Tiers: the local directory (`local`) always; with `--cache-registry`, an
//! OCI registry that many machines share (`remote`, behind the shared-tier
//! interface of `tier`, which a new tier implements): a lookup that misses
//! locally asks the registry, pulls and verifies every blob of the entry
//! into the local tier and uses it from there; what this machine makes is
//! committed locally, then pushed (unless the tier is read-only, or the
//! entry was made with the network on: its key cannot capture what it
//! downloaded). Every write to the local tier goes through one commit
//! helper (`commit`); `lease` keeps `quarry cache prune` (`usage`) away
//! from what running builds use. Keys are explicit encodings (`key`).
//!
//! Callers speak to [`Cache`]; no other module spells a path inside it.

mod bucket;
mod commit;
mod config;
pub use config::{default_dir, CacheConfig, Hit, Sharing, Tier};
mod entry;
pub mod key;
mod lazy;
mod lease;
mod local;
pub mod remote;
mod scratch;
mod seal;
mod tier;
pub mod usage;

pub use bucket::Bucket;
pub use entry::{Entry, Staged};
pub use key::{Key, KeyEncoder};
pub use lazy::LazyCache;
pub use local::{layout_dir, peek_entry_files, peek_entry_metas};
pub use remote::{Mode as RegistryMode, RegistryTierConfig, RemoteReport};

use crate::oci::{BlobDir, BlobError, BlobWriter, LayerBlob};
use lease::Lease;
use local::Local;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tier::SharedTier;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache `{dir}`: {what}: {err}")]
    Io { dir: String, what: String, err: io::Error },
    #[error("cache `{dir}`: {err}")]
    Blob { dir: String, err: Box<BlobError> },
    #[error(transparent)]
    Remote(Box<remote::RemoteError>),
}

impl From<remote::RemoteError> for CacheError {
    fn from(e: remote::RemoteError) -> CacheError {
        CacheError::Remote(Box::new(e))
    }
}

/// The notes kind of where registry blobs were seen.
const REGISTRY_NOTES: &str = "registry-blobs";

struct Inner {
    local: Local,
    /// Where registry sessions note which repositories hold which blobs.
    registry_notes: PathBuf,
    /// This process's scratch, removed before its lease is released.
    _scratch: scratch::Scratch,
    /// None for a cache opened only to be inspected.
    lease: Option<Lease>,
    /// The shared tier, when one is configured (see `tier`).
    remote: Option<Box<dyn SharedTier>>,
    /// Rehash every blob used, whatever its seal (`--verify`).
    rehash: std::sync::atomic::AtomicBool,
}

/// The cache, cheap to clone.
#[derive(Clone)]
pub struct Cache(Arc<Inner>);

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cache({})", self.root().display())
    }
}

impl Cache {
    /// The local directory only.
    pub fn open(dir: &Path) -> Result<Cache, CacheError> {
        Cache::open_with(&CacheConfig::local(dir))
    }

    /// A cache of one's own at `dir` (a fresh directory), local only, for
    /// work that must not see the user's entries: `quarry verify` rebuilds
    /// in one. The user's cache is opened by the command line instead
    /// (`cli::cache_args`), once, and passed down.
    pub fn private(dir: &Path) -> Result<Cache, CacheError> {
        Cache::open_with(&CacheConfig::local(dir))
    }

    pub fn open_with(cfg: &CacheConfig) -> Result<Cache, CacheError> {
        let err = |what: &str| {
            let dir = cfg.dir.display().to_string();
            let what = what.to_string();
            move |err| CacheError::Io { dir, what, err }
        };
        std::fs::create_dir_all(&cfg.dir).map_err(err("cannot create it"))?;
        let lease = Lease::take(&cfg.dir).map_err(err("cannot take a lease"))?;
        // What killed processes left: gone before this one stages anything.
        scratch::sweep(&cfg.dir, lease.name());
        let scratch = scratch::Scratch::create(&cfg.dir, lease.name()).map_err(err("cannot create its scratch"))?;
        let local = Local::open(&cfg.dir, scratch.dir()).map_err(err("cannot open"))?;
        // The one place a shared tier is chosen.
        let remote = cfg.registry.as_ref().map(|r| Box::new(remote::RegistryTier::new(r)) as Box<dyn SharedTier>);
        let registry_notes = local.note_dir(REGISTRY_NOTES);
        Ok(Cache(Arc::new(Inner {
            local,
            registry_notes,
            _scratch: scratch,
            lease: Some(lease),
            remote,
            rehash: Default::default(),
        })))
    }

    fn io(&self, what: impl Into<String>) -> impl FnOnce(io::Error) -> CacheError + '_ {
        let what = what.into();
        move |err| CacheError::Io { dir: self.root().display().to_string(), what, err }
    }

    fn blob_err(&self, err: BlobError) -> CacheError {
        CacheError::Blob { dir: self.root().display().to_string(), err: Box::new(err) }
    }

    /// The directory, for messages.
    pub fn root(&self) -> &Path {
        self.0.local.root()
    }

    /// Stamp `path` as used now, kept from a running prune (see `lease`).
    fn stamped<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.0.lease {
            Some(l) => l.stamping(f),
            None => f(),
        }
    }

    // Scratch space.

    /// A temporary directory on the cache's file system (removed when dropped).
    pub fn temp_dir(&self, prefix: &str) -> Result<tempfile::TempDir, CacheError> {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(self.0.local.tmp())
            .map_err(self.io("cannot create a temporary directory"))
    }

    /// Where temporary files go (on the cache's file system, so renames work).
    pub fn tmp_dir(&self) -> PathBuf {
        self.0.local.tmp()
    }

    // Content by digest.

    /// The OCI blob directory holding layer blobs and pulled images.
    pub fn blobs(&self) -> &BlobDir {
        self.0.local.blobs()
    }

    /// With `on`, every blob a lookup uses is hashed again, whatever its
    /// seal (`--verify`; see `seal`).
    pub fn rehash_blobs(&self, on: bool) {
        self.0.rehash.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Is the blob there, whole (its size; its digest by seal or by
    /// hashing)? A damaged one is removed and `what` named in a warning.
    fn blob_intact(&self, digest: &crate::oci::Digest, size: u64, what: &str) -> bool {
        let rehash = self.0.rehash.load(std::sync::atomic::Ordering::Relaxed);
        seal::intact(&self.0.local, digest, size, rehash, what) == seal::Intact::Yes
    }

    /// The blob is there, whole, with this size (and is now marked used).
    pub fn has_blob(&self, digest: &crate::oci::Digest, size: u64) -> bool {
        self.stamped(|| {
            let ok = self.blob_intact(digest, size, "an image's blob");
            if ok {
                lease::stamp_blob(&self.blobs().path(digest));
            }
            ok
        })
    }

    // Layers.

    /// The layer `key` produced before: from the local tier, else pulled
    /// from the registry tier and verified. A local hit the registry tier
    /// lacks is pushed to it (when `sharing` allows): a push killed before
    /// its tag is completed by the next build.
    pub fn layer(&self, key: &Key, sharing: &Sharing) -> Result<Option<Hit<LayerBlob>>, CacheError> {
        if let Some(b) = self.local_layer(key) {
            if let Some(r) = &self.0.remote {
                r.backfill_layer(key, &b, self, sharing)?;
            }
            return Ok(Some(Hit { value: b, tier: Tier::Local }));
        }
        let Some(remote) = &self.0.remote else { return Ok(None) };
        let Some(blob) = remote.fetch_layer(key, self)? else { return Ok(None) };
        self.stamped(|| self.0.local.put_layer(key, &blob)).map_err(self.io("cannot store a layer record"))?;
        // Fetched and checked against its digest on the way in.
        seal::seal(&self.0.local, &blob.digest);
        Ok(self.local_layer(key).map(|b| Hit { value: b, tier: Tier::Remote }))
    }

    /// The layer `key` produced, from the local tier only; a blob found
    /// damaged is removed, and the layer is not there.
    pub fn local_layer(&self, key: &Key) -> Option<LayerBlob> {
        self.stamped(|| {
            let b = self.0.local.layer(key)?;
            if !self.blob_intact(&b.digest, b.size, &format!("layer {}", key.hex())) {
                return None;
            }
            lease::stamp(&self.0.local.record_path(key));
            lease::stamp_blob(&self.blobs().path(&b.digest));
            Some(b)
        })
    }

    /// Which tier holds `key`'s layer, fetching nothing (a damaged local
    /// blob is removed: the layer is not there).
    pub fn layer_tier(&self, key: &Key) -> Result<Option<Tier>, CacheError> {
        let local =
            self.0.local.layer(key).filter(|b| self.blob_intact(&b.digest, b.size, &format!("layer {}", key.hex())));
        if local.is_some() {
            return Ok(Some(Tier::Local));
        }
        match &self.0.remote {
            Some(r) if r.has(Bucket::Layers, &key.hex())? => Ok(Some(Tier::Remote)),
            _ => Ok(None),
        }
    }

    /// Record the layer `key` produced (its blob already in [`Cache::blobs`]),
    /// then share it when it may be.
    pub fn put_layer(&self, key: &Key, blob: &LayerBlob, sharing: &Sharing) -> Result<(), CacheError> {
        self.stamped(|| {
            lease::stamp_blob(&self.blobs().path(&blob.digest));
            self.0.local.put_layer(key, blob)
        })
        .map_err(self.io("cannot store a layer record"))?;
        // Its writer hashed it as it wrote it.
        seal::seal(&self.0.local, &blob.digest);
        if let Some(r) = &self.0.remote {
            r.push_layer(key, blob, self, sharing)?;
        }
        Ok(())
    }

    // Files by their sha256 (debs, indexes).

    /// The cached file, if there (not rehashed: callers that must trust its bytes check them).
    pub fn file(&self, bucket: Bucket, sha256: &str) -> Option<PathBuf> {
        let path = self.0.local.file_path(bucket, sha256).ok()?;
        self.stamped(|| {
            let ok = path.is_file();
            if ok {
                lease::stamp(&path);
            }
            ok.then_some(path)
        })
    }

    /// Drop a cached file found damaged.
    pub fn forget_file(&self, bucket: Bucket, sha256: &str) {
        if let Ok(p) = self.0.local.file_path(bucket, sha256) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// A writer whose content becomes the file named by its sha256 in `bucket`.
    pub fn file_writer(&self, bucket: Bucket) -> Result<BlobWriter, CacheError> {
        self.0.local.file_writer(bucket).map_err(|e| self.blob_err(e))
    }

    // Directory entries.

    /// The entry `name` of `bucket`: from the local tier, else pulled from
    /// the registry tier (shared buckets only) and verified. A local hit
    /// the registry tier lacks is pushed to it (when `sharing` allows).
    pub fn entry(&self, bucket: Bucket, name: &str, sharing: &Sharing) -> Result<Option<Hit<Entry>>, CacheError> {
        if let Some(e) = self.local_entry(bucket, name) {
            if let (Some(r), Some(_)) = (&self.0.remote, bucket.tag_prefix()) {
                r.backfill_entry(bucket, name, &e, self, sharing)?;
            }
            return Ok(Some(Hit { value: e, tier: Tier::Local }));
        }
        let Some(remote) = self.0.remote.as_ref().filter(|_| bucket.tag_prefix().is_some()) else {
            return Ok(None);
        };
        let Some(staged) = remote.fetch_entry(bucket, name, self)? else { return Ok(None) };
        let dir = self
            .stamped(|| self.0.local.commit(bucket, name, staged.into_dir()))
            .map_err(self.io(format!("cannot store a {bucket} entry")))?;
        lease::stamp(&dir);
        Ok(Some(Hit { value: Entry::new(dir), tier: Tier::Remote }))
    }

    fn local_entry(&self, bucket: Bucket, name: &str) -> Option<Entry> {
        self.stamped(|| {
            let dir = self.0.local.entry(bucket, name)?;
            lease::stamp(&dir);
            Some(Entry::new(dir))
        })
    }

    /// Drop an entry found damaged.
    pub fn forget_entry(&self, bucket: Bucket, name: &str) {
        if let Ok(dir) = self.0.local.entry_dir(bucket, name) {
            if let Ok(aside) = self.temp_dir("forget-") {
                let _ = std::fs::rename(&dir, aside.path().join("entry"));
            }
        }
    }

    /// A new entry to fill.
    pub fn stage(&self) -> Result<Staged, CacheError> {
        let dir = self.0.local.stage().map_err(self.io("cannot stage an entry"))?;
        Ok(Staged::new(dir))
    }

    /// Keep `staged` as the entry `name` of `bucket`, then share it when it
    /// may be. An entry already there under this name is kept (it is the
    /// same content), except in buckets whose entries grow (compiler caches).
    pub fn commit(&self, bucket: Bucket, name: &str, staged: Staged, sharing: &Sharing) -> Result<Entry, CacheError> {
        let dir = self
            .stamped(|| {
                let dir = self.0.local.commit(bucket, name, staged.into_dir())?;
                lease::stamp(&dir);
                Ok(dir)
            })
            .map_err(self.io(format!("cannot store a {bucket} entry")))?;
        let entry = Entry::new(dir);
        if let (Some(r), Some(_)) = (&self.0.remote, bucket.tag_prefix()) {
            r.push_entry(bucket, name, &entry, self, sharing)?;
        }
        Ok(entry)
    }

    /// Where `pull` puts images (the blob directory) and keeps its notes.
    pub fn registry_store(&self) -> crate::registry::Store<'_> {
        crate::registry::Store { blobs: self.blobs(), notes: Some(&self.0.registry_notes) }
    }

    // Notes: small documents of quarry's own bookkeeping, never shared.

    pub fn note(&self, kind: &str, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.0.local.note_path(kind, name).ok()?).ok()
    }

    pub fn write_note(&self, kind: &str, name: &str, data: &[u8]) -> Result<(), CacheError> {
        self.0.local.write_note(kind, name, data).map_err(self.io(format!("cannot write a `{kind}` note")))
    }

    /// Whether a tier many machines share is configured.
    pub fn has_shared_tier(&self) -> bool {
        self.0.remote.is_some()
    }

    /// What the registry tier did so far (None without one).
    pub fn remote_report(&self) -> Option<RemoteReport> {
        self.0.remote.as_ref().map(|r| r.report())
    }
}
