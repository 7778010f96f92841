//! Content into the cache, one way for everything that stores bytes by
//! their digest (packed layers, pulled blobs, imported OCI blobs, .debs):
//! a writer that hashes every byte as it writes it to a temporary file,
//! then names the file by its own digest, or keeps it only when it is the
//! content that was expected. Nothing is ever stored under a digest that
//! was not computed from the stored bytes; a writer dropped before it is
//! committed leaves nothing behind.

use super::cache::{Cache, CacheError};
use super::digest::{Digest, HashingWriter};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// What a finished writer stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub digest: Digest,
    pub size: u64,
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The bytes written are not the content expected: nothing was stored.
    #[error("expected {expected} ({expected_size}), got {actual} ({actual_size} bytes)")]
    Mismatch { expected: Digest, expected_size: String, actual: Digest, actual_size: u64 },
}

/// Where a committed file goes: the OCI blob store or a named kind (`debs`).
enum Shelf {
    Blobs,
    Kind(String),
}

/// A temporary file in the cache that hashes what is written to it.
pub struct BlobWriter {
    cache: Cache,
    shelf: Shelf,
    out: HashingWriter<BufWriter<std::fs::File>>,
    /// Deleted on drop unless persisted by a commit.
    tmp: tempfile::TempPath,
}

impl BlobWriter {
    /// A writer whose file becomes `blobs/sha256/<hex>`.
    pub fn blob(cache: &Cache) -> Result<BlobWriter, CacheError> {
        BlobWriter::new(cache, Shelf::Blobs)
    }

    /// A writer whose file becomes `<kind>/<hex>` (`debs`, `indexes`).
    pub fn named(cache: &Cache, kind: &str) -> Result<BlobWriter, CacheError> {
        BlobWriter::new(cache, Shelf::Kind(kind.to_string()))
    }

    fn new(cache: &Cache, shelf: Shelf) -> Result<BlobWriter, CacheError> {
        let (file, tmp) = cache.temp_file()?.into_parts();
        Ok(BlobWriter {
            cache: cache.clone(),
            shelf,
            out: HashingWriter::new(BufWriter::with_capacity(1 << 20, file)),
            tmp,
        })
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.out.bytes()
    }

    /// Store the content under its own digest.
    pub fn commit(self) -> Result<Stored, BlobError> {
        self.finish(None)
    }

    /// Store the content only if it is `expected` (and `size` bytes long,
    /// when given); otherwise nothing is stored and the mismatch returned.
    pub fn commit_verified(self, expected: &Digest, size: Option<u64>) -> Result<Stored, BlobError> {
        self.finish(Some((*expected, size)))
    }

    fn finish(self, expected: Option<(Digest, Option<u64>)>) -> Result<Stored, BlobError> {
        let BlobWriter { cache, shelf, out, tmp } = self;
        let (buffered, digest, size) = out.finish();
        let file =
            buffered.into_inner().map_err(|e| cache.io_error("cannot write a temporary file", e.into_error()))?;
        drop(file);
        if let Some((want, want_size)) = expected {
            if want != digest || want_size.is_some_and(|s| s != size) {
                return Err(BlobError::Mismatch {
                    expected: want,
                    expected_size: want_size.map(|s| format!("{s} bytes")).unwrap_or_else(|| "any size".into()),
                    actual: digest,
                    actual_size: size,
                });
            }
        }
        let path = match &shelf {
            Shelf::Blobs => cache.blob_path(&digest),
            Shelf::Kind(kind) => cache.named_dir(kind)?.join(digest.hex()),
        };
        // Blobs are content, not secrets: readable like any other file.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644));
        tmp.persist(&path).map_err(|e| cache.io_error(format!("cannot store {digest}"), e.error))?;
        Ok(Stored { digest, size, path })
    }
}

/// Take a file that should hold `expected` into the blob store: hashed
/// first, then hardlinked in (same filesystem: no copy) or copied through a
/// `BlobWriter`. A file with other content is refused and nothing stored.
pub fn import_file(cache: &Cache, src: &Path, expected: &Digest, size: u64) -> Result<Stored, ImportError> {
    let read_err = |err| ImportError::Read { path: src.to_path_buf(), err };
    let (actual, actual_size) = super::digest::digest_file(src).map_err(read_err)?;
    if actual != *expected || actual_size != size {
        return Err(ImportError::Blob(BlobError::Mismatch {
            expected: *expected,
            expected_size: format!("{size} bytes"),
            actual,
            actual_size,
        }));
    }
    let dest = cache.blob_path(expected);
    // Linked under a temporary name, then renamed: the digest's name only
    // ever holds a whole, verified file.
    let staged = cache.tmp_dir().join(format!("import-{}-{}", std::process::id(), expected.hex()));
    let _ = std::fs::remove_file(&staged);
    if std::fs::hard_link(src, &staged).is_ok() {
        if std::fs::rename(&staged, &dest).is_ok() {
            return Ok(Stored { digest: actual, size, path: dest });
        }
        let _ = std::fs::remove_file(&staged);
    }
    let mut w = BlobWriter::blob(cache)?;
    let mut f = std::fs::File::open(src).map_err(read_err)?;
    io::copy(&mut f, &mut w).map_err(read_err)?;
    Ok(w.commit_verified(expected, Some(size))?)
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read `{path}`: {err}")]
    Read { path: PathBuf, err: io::Error },
    #[error(transparent)]
    Blob(#[from] BlobError),
}

impl From<CacheError> for ImportError {
    fn from(e: CacheError) -> ImportError {
        ImportError::Blob(e.into())
    }
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_under_its_own_digest_or_only_when_expected() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::open(d.path()).unwrap();
        let mut w = BlobWriter::blob(&cache).unwrap();
        w.write_all(b"hello").unwrap();
        let stored = w.commit().unwrap();
        assert_eq!(stored.digest, Digest::of_bytes(b"hello"));
        assert_eq!(stored.size, 5);
        assert_eq!(std::fs::read(cache.blob_path(&stored.digest)).unwrap(), b"hello");

        let mut w = BlobWriter::named(&cache, "debs").unwrap();
        w.write_all(b"other bytes").unwrap();
        let e = w.commit_verified(&stored.digest, Some(5)).unwrap_err();
        assert!(matches!(e, BlobError::Mismatch { .. }), "{e}");
        assert!(!cache.root().join("debs").join(Digest::of_bytes(b"other bytes").hex()).exists());
        assert_eq!(std::fs::read_dir(cache.tmp_dir()).unwrap().count(), 0, "the temporary file is gone");

        let mut w = BlobWriter::named(&cache, "debs").unwrap();
        w.write_all(b"hello").unwrap();
        assert!(w.commit_verified(&stored.digest, Some(4)).is_err(), "the size counts too");
        let mut w = BlobWriter::named(&cache, "debs").unwrap();
        w.write_all(b"hello").unwrap();
        let s = w.commit_verified(&stored.digest, Some(5)).unwrap();
        assert_eq!(s.path, cache.root().join("debs").join(stored.digest.hex()));
    }
}
