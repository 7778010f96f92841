//! `quarry cache du` and `quarry cache prune`: the local tier's size per
//! bucket, and removing entries least recently used first.
//!
//! An entry's last use is its stamp (its mtime; every lookup that finds it
//! and every commit sets it, see `lease`). A layer is its record; its blob
//! goes with the last record that names it. Blobs no record names are the
//! pulled base images'. `prune` holds the prune lock for its whole pass and
//! never removes an entry stamped since the start of a live lease: what a
//! running build found or made stays.

use super::bucket::{Bucket, Shape};
use super::lease::PruneGuard;
use super::local::Local;
use super::CacheError;
use crate::oci::LayerBlob;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// One bucket's share of the local tier.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BucketUsage {
    pub bucket: Bucket,
    pub entries: u64,
    pub bytes: u64,
}

/// One removable thing.
struct Item {
    bucket: Bucket,
    /// The files or directories it is made of (a layer: its record).
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
    /// A layer record's blob.
    blob: Option<PathBuf>,
}

fn size_of(path: &Path) -> u64 {
    walkdir::WalkDir::new(path)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::symlink_metadata(path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A blob's last use: its access time, which lookups stamp (`lease::stamp_blob`).
fn atime(path: &Path) -> SystemTime {
    std::fs::symlink_metadata(path).and_then(|m| m.accessed()).unwrap_or(SystemTime::UNIX_EPOCH)
}

fn children(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

/// Every entry of the local tier, and how often each blob is named by a layer record.
fn inventory(local: &Local) -> (Vec<Item>, BTreeMap<PathBuf, u32>) {
    let mut items = Vec::new();
    let mut blob_refs: BTreeMap<PathBuf, u32> = BTreeMap::new();
    // Records first: a blob a record names counts in its layer, not as an image.
    let mut buckets = Bucket::ALL;
    buckets.sort_by_key(|b| b.shape() != Shape::Records);
    for bucket in buckets {
        let item = |p: PathBuf, blob| Item { bucket, used: mtime(&p), bytes: size_of(&p), path: p, blob };
        match bucket.shape() {
            Shape::Records => {
                for rec in children(&local.bucket_dir(bucket)) {
                    let blob = std::fs::read(&rec)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<LayerBlob>(&b).ok())
                        .map(|l| local.blobs().path(&l.digest))
                        .filter(|p| p.is_file());
                    if let Some(b) = &blob {
                        *blob_refs.entry(b.clone()).or_default() += 1;
                    }
                    items.push(item(rec, blob));
                }
            }
            Shape::Blobs => {
                let unnamed: Vec<PathBuf> =
                    children(local.blobs().dir()).into_iter().filter(|b| !blob_refs.contains_key(b)).collect();
                items.extend(unnamed.into_iter().map(|b| Item { used: atime(&b), ..item(b, None) }));
            }
            Shape::Entries => items.extend(children(&local.bucket_dir(bucket)).into_iter().map(|p| item(p, None))),
            Shape::Kinds => {
                for kind in children(&local.bucket_dir(bucket)) {
                    items.extend(children(&kind).into_iter().map(|p| item(p, None)));
                }
            }
        }
    }
    (items, blob_refs)
}

fn blob_bytes(blob_refs: &BTreeMap<PathBuf, u32>) -> u64 {
    blob_refs.keys().map(|b| size_of(b)).sum()
}

/// The local tier's size per bucket (a layer's blob counts in `layers`),
/// and the scratch of builds running now (what dead ones left is removed
/// first, see `scratch`).
pub fn du(dir: &Path) -> Result<(Vec<BucketUsage>, u64), CacheError> {
    let opened = open(dir)?;
    let local = &opened.local;
    let (items, blob_refs) = inventory(local);
    let mut out: Vec<BucketUsage> =
        Bucket::ALL.iter().map(|&bucket| BucketUsage { bucket, entries: 0, bytes: 0 }).collect();
    for i in &items {
        let u = out.iter_mut().find(|u| u.bucket == i.bucket).expect("every bucket listed");
        u.entries += 1;
        u.bytes += i.bytes;
    }
    out.iter_mut().find(|u| u.bucket == Bucket::Layers).expect("listed").bytes += blob_bytes(&blob_refs);
    let scratch = super::scratch::bytes(&super::local::scratch_root(dir));
    Ok((out, scratch))
}

/// The local tier opened for `du` and `prune`, as any process opens it: a
/// lease, its own (empty) scratch, and what dead processes left swept.
struct Opened {
    local: Local,
    /// What dead processes had left in `tmp/`, removed on the way in.
    swept: u64,
    _scratch: super::scratch::Scratch,
    _lease: super::lease::Lease,
}

fn open(dir: &Path) -> Result<Opened, CacheError> {
    let err = |what: &str| {
        let (dir, what) = (dir.display().to_string(), what.to_string());
        move |err| CacheError::Io { dir, what, err }
    };
    if !dir.is_dir() {
        return Err(err("no cache there")(std::io::Error::from(std::io::ErrorKind::NotFound)));
    }
    let lease = super::lease::Lease::take(dir).map_err(err("cannot take a lease"))?;
    let swept = super::scratch::sweep(dir, lease.name());
    let scratch = super::scratch::Scratch::create(dir, lease.name()).map_err(err("cannot create its scratch"))?;
    let local = Local::open(dir, scratch.dir()).map_err(err("cannot open"))?;
    Ok(Opened { local, swept, _scratch: scratch, _lease: lease })
}

#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// Remove least recently used entries until the cache holds at most this many bytes.
    pub keep_bytes: Option<u64>,
    /// Remove entries not used for this long.
    pub older_than: Option<Duration>,
    /// Say what would go, remove nothing.
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PruneReport {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub removed: u64,
    pub freed_bytes: u64,
    /// Entries kept because a running build uses them.
    pub in_use: u64,
    pub removed_by_bucket: BTreeMap<String, u64>,
    /// Scratch that killed builds left in `tmp/`, removed (whatever the options).
    pub scratch_freed_bytes: u64,
    pub dry_run: bool,
}

/// Remove entries: first those unused for `older_than`, then the least
/// recently used until at most `keep_bytes` remain.
pub fn prune(dir: &Path, opts: &PruneOptions) -> Result<PruneReport, CacheError> {
    let opened = open(dir)?;
    let local = &opened.local;
    let guard = PruneGuard::take(dir).map_err(|err| CacheError::Io {
        dir: dir.display().to_string(),
        what: "cannot take the prune lock".into(),
        err,
    })?;
    let (mut items, mut blob_refs) = inventory(local);
    items.sort_by_key(|i| i.used);
    let total: u64 = items.iter().map(|i| i.bytes).sum::<u64>() + blob_bytes(&blob_refs);
    let mut report = PruneReport {
        bytes_before: total,
        dry_run: opts.dry_run,
        scratch_freed_bytes: opened.swept,
        ..Default::default()
    };
    let cutoff = opts.older_than.and_then(|d| SystemTime::now().checked_sub(d));
    let mut left = total;
    for i in &items {
        let old = cutoff.is_some_and(|c| i.used < c);
        let over = opts.keep_bytes.is_some_and(|k| left > k);
        if !old && !over {
            continue;
        }
        if !guard.may_remove(i.used) {
            report.in_use += 1;
            continue;
        }
        let mut freed = i.bytes;
        let mut blob_gone = None;
        if let Some(b) = &i.blob {
            let n = blob_refs.get_mut(b).expect("counted");
            *n -= 1;
            if *n == 0 {
                freed += size_of(b);
                blob_gone = Some(b.clone());
            }
        }
        if !opts.dry_run {
            remove(local, &i.path);
            if let Some(b) = blob_gone {
                let _ = std::fs::remove_file(b);
            }
        }
        left -= freed.min(left);
        report.removed += 1;
        report.freed_bytes += freed;
        *report.removed_by_bucket.entry(i.bucket.name().to_string()).or_default() += 1;
    }
    report.bytes_after = left;
    Ok(report)
}

/// Remove an entry: a directory is first renamed into `tmp/`, so it
/// disappears whole.
fn remove(local: &Local, path: &Path) {
    if path.is_dir() {
        let aside = local.tmp().join(format!(
            "pruned-{}-{}",
            std::process::id(),
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        if std::fs::rename(path, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    } else {
        let _ = std::fs::remove_file(path);
    }
}

/// A size that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("`{0}` is not a size; write e.g. 10G, 500M or 4096")]
    NotANumber(String),
    #[error("`{0}`: unknown unit `{1}`; use K, M, G or T")]
    Unit(String, String),
}

/// `10G`, `500M`, `1.5GiB`, `4096`: a size in bytes (K, M, G, T are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| SizeError::NotANumber(s.to_string()))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(SizeError::Unit(s.to_string(), other.to_string())),
    };
    Ok((n * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Cache, KeyEncoder, Sharing};

    fn key(s: &str) -> crate::cache::Key {
        let mut e = KeyEncoder::new("test", 1);
        e.str("k", s);
        e.finish()
    }

    fn age(path: &Path, secs_ago: u64) {
        let t = SystemTime::now() - Duration::from_secs(secs_ago);
        filetime::set_file_mtime(path, filetime::FileTime::from_system_time(t)).unwrap();
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert!(parse_size("ten").is_err() && parse_size("3X").is_err());
    }

    #[test]
    fn prune_removes_least_recently_used_first_and_spares_a_running_build() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("cache");
        let cache = Cache::open(&dir).unwrap();
        // Three kernel entries of 1000 bytes, used 300, 200 and 100 s ago.
        for (i, ago) in [(1, 300), (2, 200), (3, 100)] {
            let s = cache.stage().unwrap();
            std::fs::write(s.files().join("out.bin"), vec![0u8; 1000]).unwrap();
            let e = cache.commit(Bucket::Kernels, &format!("k{i}"), s, &Sharing::Shared).unwrap();
            age(e.files().parent().unwrap(), ago);
        }
        // A layer whose blob two records share.
        let mut w = cache.blobs().writer().unwrap();
        std::io::Write::write_all(&mut w, &[7u8; 500]).unwrap();
        let stored = w.commit().unwrap();
        let blob = LayerBlob { digest: stored.digest, diff_id: stored.digest, size: 500, media_type: "x".into() };
        cache.put_layer(&key("a"), &blob, &Sharing::Shared).unwrap();
        cache.put_layer(&key("b"), &blob, &Sharing::Shared).unwrap();
        drop(cache);
        let (usage, scratch) = du(&dir).unwrap();
        assert_eq!(scratch, 0, "no build runs: nothing in tmp/");
        let k = usage.iter().find(|u| u.bucket == Bucket::Kernels).unwrap();
        assert_eq!((k.entries, k.bytes), (3, 3000));
        let l = usage.iter().find(|u| u.bucket == Bucket::Layers).unwrap();
        assert_eq!(l.entries, 2);
        assert!(l.bytes > 500);

        // Keep about two kernel entries' worth: the oldest kernels go first.
        let r = prune(&dir, &PruneOptions { keep_bytes: Some(2100), ..Default::default() }).unwrap();
        assert!(r.bytes_after <= 2100, "{r:?}");
        assert!(!dir.join("kernels/k1").exists() && r.removed_by_bucket["kernel-outputs"] >= 1, "{r:?}");
        assert!(dir.join("layers").read_dir().unwrap().count() == 2, "the layers were used most recently");

        // A running build's lease protects what it stamps.
        let cache = Cache::open(&dir).unwrap();
        assert!(cache.entry(Bucket::Kernels, "k3", &Sharing::Shared).unwrap().is_some());
        let r = prune(&dir, &PruneOptions { keep_bytes: Some(0), ..Default::default() }).unwrap();
        assert!(dir.join("kernels/k3/files/out.bin").exists(), "in use: {r:?}");
        assert!(r.in_use >= 1);
        drop(cache);
        let r = prune(&dir, &PruneOptions { keep_bytes: Some(0), ..Default::default() }).unwrap();
        assert_eq!(r.bytes_after, 0, "{r:?}");
        assert!(!cache_blob_left(&dir, &stored.digest), "the shared blob went with its last record");
    }

    fn cache_blob_left(dir: &Path, d: &crate::oci::Digest) -> bool {
        dir.join(crate::oci::BLOBS_DIR).join(d.hex()).exists()
    }
}
