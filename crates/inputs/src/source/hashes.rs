//! Content hashes of host files, memoized by stat. A file is read and hashed
//! only when its stat fingerprint (size, mtime, ctime, inode, device, mode)
//! differs from the one recorded at its last hashing, so an unchanged tree
//! costs one `lstat` per file; `verify` ignores the memo and rehashes all.
//!
//! The memo is kept in the cache directory (`stat-memo/<id>`), one file per
//! source (its kind, absolute path and filters), rewritten atomically only
//! when something changed. It is postcard (compact binary), not JSON: it is
//! read before every build of a `dir` layer, and for tens of thousands of
//! files parsing JSON was a visible part of a build's single-threaded start. ctime is part of the fingerprint because it
//! moves on every content, mode, owner or xattr change, even when a tool puts
//! the mtime back. Like git's "racily clean" rule, a file whose timestamps are
//! younger than `RACY_SECS` is hashed but not memoized: a write within the
//! same timestamp tick would otherwise go unnoticed.
//!
//! When the hashing happens is `KeyHashing`'s choice: before anything is
//! built, or, for a first build, by the pack pipeline as it reads each file
//! into the tar (`recall` says what the memo knows, `remember` records what
//! packing learned), so a first build reads every file once, not twice.
//!
//! Over 400 lines: 85 of them are tests of the memo against real file changes.

mod memo;

use crate::cache::key::KeyEncoder;
use crate::cache::Cache;
use memo::{Memo, MemoEntry, MemoFile};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const MEMO_KIND: &str = "stat-memo";
const MEMO_VERSION: u32 = 2;
const RACY_SECS: i64 = 2;

/// Why files could not be hashed or their memo kept.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("cannot read `{}`: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the stat memo cannot be encoded: {0}")]
    Encode(#[source] postcard::Error),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
}

/// What the memo compares to decide whether a file may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFingerprint {
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
    ino: u64,
    dev: u64,
    mode: u32,
}

impl StatFingerprint {
    pub fn of(m: &Metadata) -> StatFingerprint {
        StatFingerprint {
            size: m.size(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            ctime: m.ctime(),
            ctime_nsec: m.ctime_nsec(),
            ino: m.ino(),
            dev: m.dev(),
            mode: m.mode(),
        }
    }

    fn is_racy(&self, racy_from: i64) -> bool {
        self.mtime.max(self.ctime) >= racy_from
    }
}

/// A file's content identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub sha256: [u8; 32],
    /// The `security.capability` xattr, which the layer carries.
    pub capability: Option<Vec<u8>>,
}

/// One file to hash: its path relative to the source (the memo's key) and
/// the stat taken by the scan.
pub struct FileToHash<'a> {
    pub rel: &'a [u8],
    pub path: &'a Path,
    pub meta: &'a Metadata,
}

/// When the files a cache key needs are read and hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHashing {
    /// Before anything is built, so every key of a plan is known
    /// (`quarry plan`, `quarry lock`, `--verify`).
    Upfront,
    /// A source the stat memo has never seen (a first build) is hashed
    /// while its layer is packed: packing reads every file anyway, and
    /// reading a tree of small files twice is a large part of a first
    /// build. A source the memo knows is hashed first (only what changed),
    /// so a layer built before is found in the cache.
    WhilePackingNewSources,
    /// Every file the memo does not know is hashed while packing
    /// (`--no-cache`: no key is looked up before building).
    WhilePacking,
}

/// Hashes files for cache keys, through the stat memo.
pub struct ContentHasher {
    cache: Cache,
    verify: bool,
    timing: KeyHashing,
    /// Files read and hashed so far (memo misses, or all under `verify`).
    pub files_hashed: u64,
    /// Memo entries that `verify` found wrong: content changed while the
    /// stat fingerprint did not.
    pub stale_entries: u64,
    /// Files with a timestamp at or after this (seconds) are not memoized.
    racy_from: i64,
}

/// What the memo knows of a list of files.
pub struct Recalled {
    memo: Memo,
    /// The source has a memo (it was hashed before in this cache, even if
    /// none of its files could be memoized then).
    known_source: bool,
    /// Per file, its digest when the memo holds it for its current stat.
    pub digests: Vec<Option<FileDigest>>,
}

impl Recalled {
    pub fn missing(&self) -> usize {
        self.digests.iter().filter(|d| d.is_none()).count()
    }
}

impl ContentHasher {
    pub fn new(cache: Cache, verify: bool) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(i64::MAX);
        ContentHasher {
            cache,
            verify,
            timing: KeyHashing::Upfront,
            files_hashed: 0,
            stale_entries: 0,
            racy_from: now.saturating_sub(RACY_SECS),
        }
    }

    /// When keys may be hashed (`Upfront` unless set; always `Upfront` under `verify`).
    pub fn with_timing(mut self, timing: KeyHashing) -> Self {
        self.timing = if self.verify { KeyHashing::Upfront } else { timing };
        self
    }

    /// Content digests of `files`, in order. `source_id` names the memo: the
    /// same source (kind, path, filters) must give the same id.
    pub fn hash_files(&mut self, source_id: &str, files: &[FileToHash]) -> Result<Vec<FileDigest>, HashError> {
        let recalled = self.recall(source_id, files);
        self.hash_missing(source_id, files, recalled)
    }

    /// What the memo knows of `files` (nothing under `verify`).
    pub fn recall(&self, source_id: &str, files: &[FileToHash]) -> Recalled {
        let loaded = crate::trace::time("fingerprint: memo load", || self.load(&memo_name(source_id)));
        let known_source = loaded.is_some();
        let memo = loaded.unwrap_or_default();
        let digests = files
            .iter()
            .map(|f| match memo.get(f.rel) {
                Some((old, d)) if *old == StatFingerprint::of(f.meta) && !self.verify => Some(d.clone()),
                _ => None,
            })
            .collect();
        Recalled { memo, known_source, digests }
    }

    /// May the files `recalled` lacks be hashed while the layer is packed,
    /// instead of now?
    pub fn may_defer(&self, recalled: &Recalled) -> bool {
        match self.timing {
            KeyHashing::Upfront => false,
            KeyHashing::WhilePackingNewSources => !recalled.known_source,
            KeyHashing::WhilePacking => true,
        }
    }

    /// Read and hash what `recalled` lacks; update the memo.
    pub fn hash_missing(
        &mut self,
        source_id: &str,
        files: &[FileToHash],
        recalled: Recalled,
    ) -> Result<Vec<FileDigest>, HashError> {
        let Recalled { memo, digests: mut out, .. } = recalled;
        let todo: Vec<usize> = (0..files.len()).filter(|&i| out[i].is_none()).collect();
        // Reading is I/O bound on cold caches and SHA-bound on warm ones:
        // either way, all cores help.
        let hashing = crate::trace::span("fingerprint: read+sha256");
        let fresh: Vec<(usize, FileDigest, bool)> = todo
            .par_iter()
            .map(|&i| {
                let f = &files[i];
                let (digest, still) = hash_file(f.path, f.meta)?;
                Ok((i, digest, still))
            })
            .collect::<Result<_, HashError>>()?;
        drop(hashing);
        self.files_hashed += fresh.len() as u64;
        let mut memoizable = vec![true; files.len()];
        for (i, d, unchanged_while_read) in fresh {
            let fp = StatFingerprint::of(files[i].meta);
            if let Some((old_fp, old)) = memo.get(files[i].rel) {
                if *old_fp == fp && *old != d {
                    self.stale_entries += 1;
                }
            }
            memoizable[i] = unchanged_while_read && !fp.is_racy(self.racy_from);
            out[i] = Some(d);
        }
        let digests: Vec<FileDigest> = out.into_iter().map(|d| d.expect("every file hashed or memoized")).collect();
        self.store(source_id, files, &digests, &memoizable, &memo)?;
        Ok(digests)
    }

    /// Record digests learned elsewhere (while packing) for files the memo
    /// lacked: `hashed` of them were read. The stat recorded is the scan's:
    /// a file changed since has a newer ctime, so its entry is never used.
    pub fn remember(
        &mut self,
        source_id: &str,
        files: &[FileToHash],
        digests: &[FileDigest],
        hashed: u64,
    ) -> Result<(), HashError> {
        self.files_hashed += hashed;
        let memoizable: Vec<bool> =
            files.iter().map(|f| !StatFingerprint::of(f.meta).is_racy(self.racy_from)).collect();
        self.store(source_id, files, digests, &memoizable, &Memo::default())
    }

    /// Rewrite the memo, only when it would change.
    fn store(
        &self,
        source_id: &str,
        files: &[FileToHash],
        digests: &[FileDigest],
        memoizable: &[bool],
        memo: &Memo,
    ) -> Result<(), HashError> {
        let changed = memo.len() != files.len()
            || memoizable.iter().any(|ok| !ok)
            || files.iter().zip(digests).any(|(f, d)| {
                memo.get(f.rel).map(|(ofp, od)| *ofp != StatFingerprint::of(f.meta) || od != d).unwrap_or(true)
            });
        if !changed {
            return Ok(());
        }
        let entries = files
            .iter()
            .zip(digests)
            .zip(memoizable)
            .filter(|(_, ok)| **ok)
            .map(|((f, d), _)| MemoEntry {
                path: f.rel.to_vec(),
                stat: StatFingerprint::of(f.meta),
                sha256: d.sha256,
                capability: d.capability.clone(),
            })
            .collect();
        let doc = MemoFile { version: MEMO_VERSION, entries };
        let bytes = postcard::to_stdvec(&doc).map_err(HashError::Encode)?;
        Ok(self.cache.write_note(MEMO_KIND, &memo_name(source_id), &bytes)?)
    }

    /// The memo; None when it is missing, unreadable or of another
    /// version (a memo is only ever an optimization: a bad one costs
    /// rehashing, never a wrong key).
    fn load(&self, name: &str) -> Option<Memo> {
        let bytes = self.cache.note(MEMO_KIND, name)?;
        // Another version's layout may not even parse: either way, rehash.
        let doc = postcard::from_bytes::<MemoFile>(&bytes).ok().filter(|d| d.version == MEMO_VERSION)?;
        Some(Memo::new(
            doc.entries
                .into_iter()
                .map(|e| (e.path, e.stat, FileDigest { sha256: e.sha256, capability: e.capability }))
                .collect(),
        ))
    }
}

/// The memo's file name for a source id.
fn memo_name(source_id: &str) -> String {
    let mut k = KeyEncoder::new("stat-memo", 1);
    k.str("source", source_id);
    k.finish().hex()
}

/// An id for a source's memo: its kind, its absolute path and whatever else
/// selects its files (filters).
pub fn source_id(kind: &str, path: &Path, selectors: &[&[String]]) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut k = KeyEncoder::new("stat-memo-source", 1);
    k.str("kind", kind).bytes("path", abs.as_os_str().as_bytes());
    for s in selectors {
        k.list("selector", s.iter());
    }
    k.finish().hex()
}

/// Hash one file; also says whether its stat was unchanged while it was read.
pub(crate) fn hash_file(path: &Path, scanned: &Metadata) -> Result<(FileDigest, bool), HashError> {
    let err = |source: std::io::Error| HashError::Read { path: path.to_path_buf(), source };
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut h = Sha256::new();
    // One read buffer per thread: a fresh 256 KiB buffer per file cost an
    // mmap, page faults and an munmap for each of tens of thousands of small files.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 256 << 10]);
    }
    let mut total = 0u64;
    BUF.with_borrow_mut(|buf| loop {
        let n = match f.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(err(e)),
        };
        h.update(&buf[..n]);
        total += n as u64;
        // Once the scanned size is read, a short read is the end: skip the
        // extra read that would return 0 (a grown file fails the stat check below).
        if n < buf.len() && total == scanned.len() {
            return Ok(());
        }
    })?;
    let after = f.metadata().map_err(err)?;
    let unchanged = StatFingerprint::of(&after) == StatFingerprint::of(scanned);
    let capability = crate::layer::write::fd_capability(&f);
    Ok((FileDigest { sha256: h.finalize().into(), capability }, unchanged))
}

/// The `security.capability` xattr of a file, which layers keep.
pub(crate) fn capability(path: &Path) -> Option<Vec<u8>> {
    // Hand-written: one lgetxattr call does not justify an xattr crate.
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let name = c"security.capability";
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated and buf is valid for its length.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_of(dir: &Path, names: &[&str]) -> Vec<(Vec<u8>, std::path::PathBuf, Metadata)> {
        names
            .iter()
            .map(|n| {
                let p = dir.join(n);
                let m = std::fs::symlink_metadata(&p).unwrap();
                (n.as_bytes().to_vec(), p, m)
            })
            .collect()
    }

    fn hash(h: &mut ContentHasher, id: &str, files: &[(Vec<u8>, std::path::PathBuf, Metadata)]) -> Vec<FileDigest> {
        let list: Vec<FileToHash> = files.iter().map(|(r, p, m)| FileToHash { rel: r, path: p, meta: m }).collect();
        h.hash_files(id, &list).unwrap()
    }

    #[test]
    fn memo_skips_unchanged_files_and_catches_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(&tmp.path().join("cache")).unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("a"), b"alpha").unwrap();
        std::fs::write(src.join("b"), b"beta").unwrap();

        // Files written just now are racy: hashed every time, never memoized.
        let mut h = ContentHasher::new(cache.clone(), false);
        let first = hash(&mut h, "s", &files_of(&src, &["a", "b"]));
        assert_eq!(hex::encode(first[0].sha256), crate::oci::digest::sha256_hex(b"alpha"));
        assert_eq!(hex::encode(first[1].sha256), crate::oci::digest::sha256_hex(b"beta"));
        assert_eq!(hash(&mut h, "s", &files_of(&src, &["a", "b"])), first);
        assert_eq!(h.files_hashed, 4);

        // Once old enough, unchanged files are not read again...
        let mut h = ContentHasher::new(cache.clone(), false);
        h.racy_from = i64::MAX;
        hash(&mut h, "s", &files_of(&src, &["a", "b"]));
        assert_eq!(h.files_hashed, 2);
        assert_eq!(hash(&mut h, "s", &files_of(&src, &["a", "b"])), first);
        assert_eq!(h.files_hashed, 2, "memo hits");
        // ...a changed one is, and only it...
        std::fs::write(src.join("b"), b"BETA!").unwrap();
        let changed = hash(&mut h, "s", &files_of(&src, &["a", "b"]));
        assert_eq!(h.files_hashed, 3);
        assert_eq!(hex::encode(changed[1].sha256), crate::oci::digest::sha256_hex(b"BETA!"));
        // ...and `verify` reads everything, reporting memo entries that lied.
        let name = memo_name("s");
        let mut doc: MemoFile = postcard::from_bytes(&cache.note(MEMO_KIND, &name).unwrap()).unwrap();
        doc.entries.iter_mut().filter(|e| e.path == b"a").for_each(|e| e.sha256 = [0x11; 32]);
        cache.write_note(MEMO_KIND, &name, &postcard::to_stdvec(&doc).unwrap()).unwrap();
        let trusted = hash(&mut h, "s", &files_of(&src, &["a", "b"]));
        assert_eq!(trusted[0].sha256, [0x11; 32], "the memo is trusted without verify");
        let mut v = ContentHasher::new(cache.clone(), true);
        v.racy_from = i64::MAX;
        assert_eq!(hash(&mut v, "s", &files_of(&src, &["a", "b"])), changed);
        assert_eq!(v.files_hashed, 2);
        assert_eq!(v.stale_entries, 1);
        // The memo was repaired.
        assert_eq!(hash(&mut h, "s", &files_of(&src, &["a", "b"])), changed);
    }

    #[test]
    fn memo_round_trips_non_utf8_paths_and_ignores_other_versions() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(tmp.path()).unwrap();
        let h = ContentHasher::new(cache.clone(), false);
        let fp = StatFingerprint { size: 1, mtime: 2, mtime_nsec: 3, ctime: 4, ctime_nsec: 5, ino: 6, dev: 7, mode: 8 };
        let entry = || MemoEntry { path: b"caf\xe9".to_vec(), stat: fp, sha256: [0; 32], capability: Some(vec![1, 2]) };
        let doc = MemoFile { version: MEMO_VERSION, entries: vec![entry()] };
        cache.write_note(MEMO_KIND, &memo_name("x"), &postcard::to_stdvec(&doc).unwrap()).unwrap();
        let memo = h.load(&memo_name("x")).unwrap();
        let (got_fp, d) = memo.get(&b"caf\xe9"[..]).unwrap();
        assert_eq!(*got_fp, fp);
        assert_eq!(d.capability.as_deref(), Some(&[1u8, 2][..]));

        let old = MemoFile { version: MEMO_VERSION - 1, entries: vec![entry()] };
        cache.write_note(MEMO_KIND, &memo_name("x"), &postcard::to_stdvec(&old).unwrap()).unwrap();
        assert!(h.load(&memo_name("x")).is_none(), "another version is not trusted");
        cache.write_note(MEMO_KIND, &memo_name("x"), br#"{"version":1,"entries":[]}"#).unwrap();
        assert!(h.load(&memo_name("x")).is_none(), "a JSON memo of an older quarry is not trusted");
    }
}
