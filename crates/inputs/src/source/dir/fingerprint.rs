//! A directory's fingerprint: the content-based key of what it puts in a
//! layer, from its files' digests (memoized by stat), computed before the
//! layer is packed or, for a source new to the cache, from what packing
//! read (`complete`).

use super::DirOptions;
use super::{DirError, DirScan};
use crate::cache::key::{Key, KeyEncoder};
use crate::layer::write::HostDigests;
use crate::source::hashes::{hash_file, source_id, ContentHasher, FileDigest, FileToHash, HashError};
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// Where a scan's file contents are: the entries to hash, and per entry
/// its place among them or the entry it is a hardlink to.
struct ContentFiles {
    to_hash: Vec<usize>,
    hashed: Vec<Option<usize>>,
    link_to: Vec<Option<usize>>,
}

impl DirScan {
    /// A content-based key for everything this source puts in the layer:
    /// per entry its path, type, permission bits, mtime as the tar will
    /// store it (clamped to `source_date_epoch`), link target, device
    /// numbers, and for regular files the size, sha256 and capability; the
    /// hardlink structure as `into_tree` will build it. File contents come
    /// from `hasher` (memoized by stat), so `touch` costs a rehash, not a
    /// rebuild. Records each file's capability for `into_tree`.
    ///
    /// None when the hasher defers the files the memo lacks to packing
    /// (`may_defer`; never for `Upfront`): `complete` gives the key then.
    pub fn fingerprint(
        &mut self,
        s: &DirOptions,
        hasher: &mut ContentHasher,
        source_date_epoch: u64,
        may_defer: bool,
    ) -> Result<Option<Key>, DirError> {
        if let Some(key) = self.key {
            return Ok(Some(key));
        }
        let content = self.content_files();
        let to_hash = self.files_to_hash(&content);
        let id = self.source_id(s);
        let recalled = hasher.recall(&id, &to_hash);
        if may_defer && recalled.missing() > 0 && hasher.may_defer(&recalled) {
            drop(to_hash);
            // What the memo knows spares `into_tree` a capability read.
            for (&i, d) in content.to_hash.iter().zip(&recalled.digests) {
                if let Some(d) = d {
                    let _ = self.entries[i].capability.set(d.capability.clone());
                }
            }
            self.pending = Some(recalled.digests);
            return Ok(None);
        }
        let digests = hasher.hash_missing(&id, &to_hash, recalled)?;
        drop(to_hash);
        Ok(Some(self.settle(&content, &digests, source_date_epoch)))
    }

    /// The files whose hashing `fingerprint` left to packing.
    pub fn pending(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.iter().filter(|d| d.is_none()).count())
    }

    /// Finish a deferred fingerprint with the digests and capabilities
    /// packing learned (by inode). A file the layer did not take (removed,
    /// or replaced by a later source) or that was replaced since the scan
    /// is read now. Updates the memo.
    pub fn complete(
        &mut self,
        s: &DirOptions,
        hasher: &mut ContentHasher,
        source_date_epoch: u64,
        packed: &HostDigests,
    ) -> Result<Key, DirError> {
        let Some(known) = self.pending.take() else {
            return self.fingerprint(s, hasher, source_date_epoch, false).map(|k| k.expect("not deferred"));
        };
        let content = self.content_files();
        let mut read = 0;
        let digests: Vec<FileDigest> = content
            .to_hash
            .iter()
            .zip(known)
            .map(|(&i, d)| {
                let e = &self.entries[i];
                if let Some(d) = d {
                    return Ok(d);
                }
                read += 1;
                match packed.get(&(e.meta.dev(), e.meta.ino())) {
                    Some(f) => Ok(FileDigest { sha256: f.sha256, capability: f.capability.clone() }),
                    None => Ok(hash_file(&e.path, &e.meta)?.0),
                }
            })
            .collect::<Result<_, HashError>>()?;
        let to_hash = self.files_to_hash(&content);
        hasher.remember(&self.source_id(s), &to_hash, &digests, read)?;
        drop(to_hash);
        Ok(self.settle(&content, &digests, source_date_epoch))
    }

    fn source_id(&self, s: &DirOptions) -> String {
        source_id("dir", &self.root, &[&s.include, &s.exclude])
    }

    /// Regular files that carry content (the first of each hardlink
    /// group) are hashed; per entry, its place among them or the entry it
    /// is a hardlink to.
    fn content_files(&self) -> ContentFiles {
        let mut first_of_inode: HashMap<(u64, u64), usize> = HashMap::new();
        let mut c = ContentFiles {
            to_hash: Vec::new(),
            hashed: vec![None; self.entries.len()],
            link_to: vec![None; self.entries.len()],
        };
        for (i, e) in self.entries.iter().enumerate() {
            let m = &e.meta;
            if !m.file_type().is_file() {
                continue;
            }
            if m.nlink() > 1 {
                if let Some(&first) = first_of_inode.get(&(m.dev(), m.ino())) {
                    c.link_to[i] = Some(first);
                    continue;
                }
                first_of_inode.insert((m.dev(), m.ino()), i);
            }
            c.hashed[i] = Some(c.to_hash.len());
            c.to_hash.push(i);
        }
        c
    }

    fn files_to_hash(&self, c: &ContentFiles) -> Vec<FileToHash<'_>> {
        c.to_hash
            .iter()
            .map(|&i| {
                let e = &self.entries[i];
                FileToHash { rel: &e.rel, path: &e.path, meta: &e.meta }
            })
            .collect()
    }

    /// The key from every content file's digest; also hands each file's
    /// capability to `into_tree`.
    fn settle(&mut self, c: &ContentFiles, digests: &[FileDigest], source_date_epoch: u64) -> Key {
        // One group of fields per entry, in path order.
        let mut h = KeyEncoder::new("dir-content", 1);
        for (i, e) in self.entries.iter().enumerate() {
            if e.rel.is_empty() {
                continue; // the root itself is not stored in the layer
            }
            let m = &e.meta;
            let ft = m.file_type();
            let mtime = (m.mtime().max(0) as u64).min(source_date_epoch);
            h.bytes("path", &e.rel).u64("mode", (m.mode() & 0o7777) as u64).u64("mtime", mtime);
            if ft.is_dir() {
                h.str("type", "dir");
            } else if ft.is_symlink() {
                h.str("type", "symlink").bytes("target", e.link.as_deref().unwrap_or_default());
            } else if ft.is_file() {
                if let Some(first) = c.link_to[i] {
                    h.str("type", "hardlink").bytes("target", &self.entries[first].rel);
                } else if let Some(j) = c.hashed[i] {
                    let d = &digests[j];
                    h.str("type", "file").u64("size", m.size()).bytes("sha256", &d.sha256);
                    h.bytes("capability", d.capability.as_deref().unwrap_or_default());
                }
            } else if ft.is_char_device() || ft.is_block_device() {
                h.str("type", if ft.is_char_device() { "char" } else { "block" }).u64("rdev", m.rdev());
            } else if ft.is_fifo() {
                h.str("type", "fifo");
            } else {
                h.str("type", "socket");
            }
        }
        // A hardlink shares its inode's xattrs with the first of its group.
        for (i, e) in self.entries.iter().enumerate() {
            if let Some(j) = c.hashed[c.link_to[i].unwrap_or(i)] {
                let _ = e.capability.set(digests[j].capability.clone());
            }
        }
        let key = h.finish();
        self.key = Some(key);
        key
    }
}
