//! The local tier: one directory on this machine.
//!
//! ```text
//! blobs/sha256/<hex>        content by digest: layer blobs, pulled images (an OCI blob directory)
//! layers/<key>.json         a layer's record: the blob its key produced
//! kernels/<key>/            a kernel build's outputs   (files/, meta.json)
//! wheels/<key>/             a wheel build's wheels     (files/, meta.json)
//! ccache/<key>/             a compiler cache directory (files/)
//! tools/<sha256>/           a pinned tool              (files/)
//! pypi/<sha256>/            a file from a package index (files/<its name>)
//! debs/<sha256>, indexes/<sha256>   Debian packages and archive indexes
//! notes/<kind>/<name>       bookkeeping: stat memos, where registry blobs were seen
//! leases/, prune.lock       see `lease`
//! layouts/<name>/           images built on the way to an engine (`quarry run IMAGE.toml`)
//! tmp/<lease>/              where a process stages everything before its rename (see `scratch`)
//! ```
//! This file is the only place that spells these paths.

use super::bucket::Bucket;
use super::commit::{self, Existing};
use super::key::Key;
use crate::oci::{BlobDir, BlobWriter, LayerBlob};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub(crate) struct Local {
    root: PathBuf,
    blobs: BlobDir,
    /// This process's scratch directory (`tmp/<lease>/`).
    tmp: PathBuf,
}

/// A name is a key or digest in hex (or `name-hex`): never a path.
fn checked(name: &str) -> io::Result<&str> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name.starts_with('.');
    if ok {
        Ok(name)
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("`{name}` is not a cache entry name")))
    }
}

/// Where every process's scratch directory is (see `scratch`).
pub(crate) fn scratch_root(root: &Path) -> PathBuf {
    root.join("tmp")
}

/// Where a definition built on the way to an engine is written as a layout.
pub fn layout_dir(root: &Path, image_name: &str) -> PathBuf {
    root.join("layouts").join(image_name)
}

/// The files of the committed entry `name` of `bucket` in the cache at
/// `root`, when it is there, looked up without opening the cache: nothing
/// is created, stamped or swept (for reports: `quarry doctor`).
pub fn peek_entry_files(root: &Path, bucket: Bucket, name: &str) -> Option<PathBuf> {
    let files = root.join(bucket.dir()).join(checked(name).ok()?).join("files");
    files.is_dir().then_some(files)
}

/// Every committed entry of `bucket` in the cache at `root` with its
/// `meta.json`, in name order, read as [`peek_entry_files`] looks: without
/// opening the cache. An entry without metadata is left out.
pub fn peek_entry_metas(root: &Path, bucket: Bucket) -> Vec<(String, Vec<u8>)> {
    let Ok(dir) = std::fs::read_dir(root.join(bucket.dir())) else { return Vec::new() };
    let mut out: Vec<(String, Vec<u8>)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            checked(&name).ok()?;
            Some((name, std::fs::read(e.path().join("meta.json")).ok()?))
        })
        .collect();
    out.sort();
    out
}

impl Local {
    /// The cache at `root`, staging in `tmp` (the caller's scratch directory).
    pub fn open(root: &Path, tmp: &Path) -> io::Result<Local> {
        let blobs = BlobDir::open(root, tmp).map_err(|e| io::Error::other(e.to_string()))?;
        std::fs::create_dir_all(root.join(Bucket::Layers.dir()))?;
        Ok(Local { root: root.to_path_buf(), blobs, tmp: tmp.to_path_buf() })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn tmp(&self) -> PathBuf {
        self.tmp.clone()
    }

    pub fn blobs(&self) -> &BlobDir {
        &self.blobs
    }

    pub fn bucket_dir(&self, bucket: Bucket) -> PathBuf {
        match bucket {
            Bucket::Images => self.blobs.dir().to_path_buf(),
            b => self.root.join(b.dir()),
        }
    }

    // Layers.

    pub fn record_path(&self, key: &Key) -> PathBuf {
        self.root.join(Bucket::Layers.dir()).join(format!("{key}.json"))
    }

    /// The layer a key produced before, if its record and blob are both intact.
    pub fn layer(&self, key: &Key) -> Option<LayerBlob> {
        let text = std::fs::read(self.record_path(key)).ok()?;
        let rec: LayerBlob = serde_json::from_slice(&text).ok()?;
        self.blobs.has(&rec.digest, rec.size).then_some(rec)
    }

    pub fn put_layer(&self, key: &Key, blob: &LayerBlob) -> io::Result<()> {
        let data = serde_json::to_vec(blob).map_err(io::Error::other)?;
        commit::commit_bytes(&data, &self.record_path(key), &self.tmp())
    }

    // Files named by their sha256 (debs, indexes).

    pub fn file_path(&self, bucket: Bucket, sha256: &str) -> io::Result<PathBuf> {
        Ok(self.root.join(bucket.dir()).join(checked(sha256)?))
    }

    pub fn file_writer(&self, bucket: Bucket) -> Result<BlobWriter, crate::oci::BlobError> {
        BlobWriter::into_dir(&self.tmp(), &self.root.join(bucket.dir()))
    }

    // Directory entries (kernels, wheels, ccache, tools, pypi).

    pub fn entry_dir(&self, bucket: Bucket, name: &str) -> io::Result<PathBuf> {
        Ok(self.root.join(bucket.dir()).join(checked(name)?))
    }

    /// The entry's directory when it is there (a committed entry is whole).
    pub fn entry(&self, bucket: Bucket, name: &str) -> Option<PathBuf> {
        let dir = self.entry_dir(bucket, name).ok()?;
        dir.join("files").is_dir().then_some(dir)
    }

    pub fn stage(&self) -> io::Result<tempfile::TempDir> {
        let d = tempfile::Builder::new().prefix("entry-").tempdir_in(self.tmp())?;
        std::fs::create_dir(d.path().join("files"))?;
        Ok(d)
    }

    pub fn commit(&self, bucket: Bucket, name: &str, staged: tempfile::TempDir) -> io::Result<PathBuf> {
        let dest = self.entry_dir(bucket, name)?;
        // What is there is kept unless entries of the bucket grow, or it is
        // no entry at all (an older quarry's layout under the same name).
        let whole = dest.join("files").is_dir();
        let existing = if bucket.mutable() || (dest.exists() && !whole) { Existing::Replace } else { Existing::Keep };
        commit::commit_dir(staged, &dest, existing, &self.tmp())?;
        Ok(dest)
    }

    // Notes.

    pub fn note_dir(&self, kind: &str) -> PathBuf {
        self.root.join(Bucket::Notes.dir()).join(kind)
    }

    pub fn note_path(&self, kind: &str, name: &str) -> io::Result<PathBuf> {
        Ok(self.root.join(Bucket::Notes.dir()).join(checked(kind)?).join(checked(name)?))
    }

    pub fn write_note(&self, kind: &str, name: &str, data: &[u8]) -> io::Result<()> {
        commit::commit_bytes(data, &self.note_path(kind, name)?, &self.tmp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::Digest;

    #[test]
    fn names_are_never_paths() {
        for bad in ["", "..", ".x", "a/b", "../x", "a b"] {
            assert!(checked(bad).is_err(), "{bad:?}");
        }
        for good in ["0123abcdef", "patchelf-0123", "x.y_z"] {
            assert!(checked(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_directory_that_is_no_entry_is_replaced() {
        // An older quarry kept `pypi/<sha256>/<file>` (no `files/`).
        let d = tempfile::tempdir().unwrap();
        let l = Local::open(d.path(), &d.path().join("tmp/own")).unwrap();
        std::fs::create_dir_all(d.path().join("pypi/abc")).unwrap();
        std::fs::write(d.path().join("pypi/abc/old.whl"), "old").unwrap();
        assert!(l.entry(Bucket::Pypi, "abc").is_none());
        let s = l.stage().unwrap();
        std::fs::write(s.path().join("files/new.whl"), "new").unwrap();
        l.commit(Bucket::Pypi, "abc", s).unwrap();
        let dir = l.entry(Bucket::Pypi, "abc").expect("committed over the old layout");
        assert_eq!(std::fs::read(dir.join("files/new.whl")).unwrap(), b"new");
    }

    #[test]
    fn entries_appear_whole_and_layers_need_their_blob() {
        let d = tempfile::tempdir().unwrap();
        let l = Local::open(d.path(), &d.path().join("tmp/own")).unwrap();
        assert!(l.entry(Bucket::Kernels, "k1").is_none());
        let s = l.stage().unwrap();
        std::fs::write(s.path().join("files/lib.so"), "elf").unwrap();
        let dir = l.commit(Bucket::Kernels, "k1", s).unwrap();
        assert_eq!(l.entry(Bucket::Kernels, "k1").unwrap(), dir);
        assert_eq!(std::fs::read(dir.join("files/lib.so")).unwrap(), b"elf");

        let mut e = crate::cache::KeyEncoder::new("test", 1);
        e.str("a", "b");
        let key = e.finish();
        let blob = LayerBlob {
            digest: Digest::of_bytes(b"layer"),
            diff_id: Digest::of_bytes(b"tar"),
            size: 5,
            media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
        };
        l.put_layer(&key, &blob).unwrap();
        assert!(l.layer(&key).is_none(), "a record without its blob is no hit");
        let mut w = l.blobs().writer().unwrap();
        std::io::Write::write_all(&mut w, b"layer").unwrap();
        w.commit().unwrap();
        assert_eq!(l.layer(&key), Some(blob));
    }
}
