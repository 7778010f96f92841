//! The interface of a tier behind the local directory that many machines
//! share. The registry tier (`remote`) is the one there is; a new one (S3,
//! a shared file system) implements [`SharedTier`] and is chosen in
//! `Cache::open_with`: nothing else changes, callers least of all.
//!
//! What `Cache` guarantees around a tier: a lookup asks the local
//! tier first; what a tier fetches lands in a staging directory (or the
//! blob directory) and is committed locally before anything uses it; what
//! this machine makes is committed locally first, then pushed.

use super::{Bucket, Cache, CacheError, Entry, Key, RemoteReport, Sharing, Staged};
use crate::oci::LayerBlob;

pub(crate) trait SharedTier: Send + Sync {
    /// Whether the tier holds the entry (fetching nothing).
    fn has(&self, bucket: Bucket, name: &str) -> Result<bool, CacheError>;

    /// A layer's record, its blob fetched into `cache`'s blob directory and
    /// checked against its digests; None when the tier lacks it or cannot
    /// be reached (the build goes on locally).
    fn fetch_layer(&self, key: &Key, cache: &Cache) -> Result<Option<LayerBlob>, CacheError>;

    /// A directory entry, fetched and checked into a staging directory of `cache`.
    fn fetch_entry(&self, bucket: Bucket, name: &str, cache: &Cache) -> Result<Option<Staged>, CacheError>;

    /// Share a layer this machine made (when `sharing` and the tier's mode allow).
    fn push_layer(&self, key: &Key, blob: &LayerBlob, cache: &Cache, sharing: &Sharing) -> Result<(), CacheError>;

    /// Share a directory entry (when `sharing` and the tier's mode allow).
    fn push_entry(
        &self,
        bucket: Bucket,
        name: &str,
        entry: &Entry,
        cache: &Cache,
        sharing: &Sharing,
    ) -> Result<(), CacheError>;

    /// Whether this machine may write to the tier at all.
    fn writable(&self) -> bool;

    /// What the tier did so far, for reports.
    fn report(&self) -> RemoteReport;

    /// Push a layer this machine has when the tier lacks it (its push was
    /// killed before it completed, or it was built before the tier was used).
    fn backfill_layer(&self, key: &Key, blob: &LayerBlob, cache: &Cache, sharing: &Sharing) -> Result<(), CacheError> {
        if !self.writable() || *sharing != Sharing::Shared || self.has(Bucket::Layers, &key.hex())? {
            return Ok(());
        }
        self.push_layer(key, blob, cache, sharing)
    }

    /// [`SharedTier::backfill_layer`] for a directory entry.
    fn backfill_entry(
        &self,
        bucket: Bucket,
        name: &str,
        entry: &Entry,
        cache: &Cache,
        sharing: &Sharing,
    ) -> Result<(), CacheError> {
        if !self.writable() || *sharing != Sharing::Shared || self.has(bucket, name)? {
            return Ok(());
        }
        self.push_entry(bucket, name, entry, cache, sharing)
    }
}
