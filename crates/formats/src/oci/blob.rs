//! Content stored by its digest, one way for everything that does it
//! (packed layers, pulled blobs, imported OCI blobs, .debs): a writer that
//! hashes every byte as it writes it to a temporary file, then names the
//! file by its own digest, or keeps it only when it is the content that was
//! expected. Nothing is ever stored under a digest that was not computed
//! from the stored bytes; a writer dropped before it is committed leaves
//! nothing behind.

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
    #[error("`{path}`: {what}: {err}")]
    Io { path: PathBuf, what: String, err: io::Error },
    /// The bytes written are not the content expected: nothing was stored.
    #[error("expected {expected} ({expected_size}), got {actual} ({actual_size} bytes)")]
    Mismatch { expected: Digest, expected_size: String, actual: Digest, actual_size: u64 },
}

fn io_err(path: &Path, what: impl Into<String>) -> impl FnOnce(io::Error) -> BlobError {
    let (path, what) = (path.to_path_buf(), what.into());
    move |err| BlobError::Io { path, what, err }
}

/// A directory of sha256 blobs (`<root>/blobs/sha256/<hex>`), as an OCI
/// layout keeps them, with a scratch directory on the same file system
/// where writers stage their files before the rename.
#[derive(Debug, Clone)]
pub struct BlobDir {
    dir: PathBuf,
    tmp: PathBuf,
}

impl BlobDir {
    /// The blobs of the layout or cache at `root`, staged in `tmp`; both
    /// directories are created when missing.
    pub fn open(root: &Path, tmp: &Path) -> Result<BlobDir, BlobError> {
        let dir = root.join(super::BLOBS_DIR);
        for d in [&dir, tmp] {
            std::fs::create_dir_all(d).map_err(io_err(d, "cannot create the directory"))?;
        }
        Ok(BlobDir { dir, tmp: tmp.to_path_buf() })
    }

    /// The `blobs/sha256` directory itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob with this digest lives (written only through a [`BlobWriter`]).
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    /// The blob is there with this size.
    pub fn has(&self, digest: &Digest, size: u64) -> bool {
        std::fs::metadata(self.path(digest)).map(|m| m.len() == size).unwrap_or(false)
    }

    /// A writer whose file becomes `blobs/sha256/<hex>`.
    pub fn writer(&self) -> Result<BlobWriter, BlobError> {
        BlobWriter::into_dir(&self.tmp, &self.dir)
    }

    /// Take a file that should hold `expected` into the directory: hashed
    /// first, then hardlinked in (same file system: no copy) or copied
    /// through a [`BlobWriter`]. A file with other content is refused and
    /// nothing stored.
    pub fn import_file(&self, src: &Path, expected: &Digest, size: u64) -> Result<Stored, BlobError> {
        let read_err = io_err(src, "cannot read");
        let (actual, actual_size) = super::digest::digest_file(src).map_err(read_err)?;
        if actual != *expected || actual_size != size {
            return Err(BlobError::Mismatch {
                expected: *expected,
                expected_size: format!("{size} bytes"),
                actual,
                actual_size,
            });
        }
        let dest = self.path(expected);
        // Linked under a temporary name, then renamed: the digest's name only
        // ever holds a whole, verified file.
        let staged = self.tmp.join(format!("import-{}-{}", std::process::id(), expected.hex()));
        let _ = std::fs::remove_file(&staged);
        if std::fs::hard_link(src, &staged).is_ok() {
            if std::fs::rename(&staged, &dest).is_ok() {
                return Ok(Stored { digest: actual, size, path: dest });
            }
            let _ = std::fs::remove_file(&staged);
        }
        let mut w = self.writer()?;
        let mut f = std::fs::File::open(src).map_err(io_err(src, "cannot open"))?;
        io::copy(&mut f, &mut w).map_err(io_err(src, "cannot copy"))?;
        w.commit_verified(expected, Some(size))
    }
}

/// A temporary file that hashes what is written to it and becomes
/// `<dir>/<hex of its digest>` when committed.
pub struct BlobWriter {
    dir: PathBuf,
    out: HashingWriter<BufWriter<std::fs::File>>,
    /// Deleted on drop unless persisted by a commit.
    tmp: tempfile::TempPath,
}

impl BlobWriter {
    /// A writer staged in `tmp` whose file becomes `dir/<hex>` (`dir` is
    /// created when missing; `tmp` must be on the same file system).
    pub fn into_dir(tmp: &Path, dir: &Path) -> Result<BlobWriter, BlobError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir, "cannot create the directory"))?;
        let (file, tmp) = tempfile::Builder::new()
            .prefix("blob-")
            .tempfile_in(tmp)
            .map_err(io_err(tmp, "cannot create a temporary file"))?
            .into_parts();
        Ok(BlobWriter { dir: dir.to_path_buf(), out: HashingWriter::new(BufWriter::with_capacity(1 << 20, file)), tmp })
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
        let BlobWriter { dir, out, tmp } = self;
        let (buffered, digest, size) = out.finish();
        let file = buffered.into_inner().map_err(|e| io_err(&tmp, "cannot write a temporary file")(e.into_error()))?;
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
        let path = dir.join(digest.hex());
        // Blobs are content, not secrets: readable like any other file.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644));
        tmp.persist(&path).map_err(|e| io_err(&path, format!("cannot store {digest}"))(e.error))?;
        Ok(Stored { digest, size, path })
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
        let blobs = BlobDir::open(d.path(), &d.path().join("tmp")).unwrap();
        let mut w = blobs.writer().unwrap();
        w.write_all(b"hello").unwrap();
        let stored = w.commit().unwrap();
        assert_eq!(stored.digest, Digest::of_bytes(b"hello"));
        assert_eq!(stored.size, 5);
        assert_eq!(std::fs::read(blobs.path(&stored.digest)).unwrap(), b"hello");
        assert!(blobs.has(&stored.digest, 5) && !blobs.has(&stored.digest, 4));

        let debs = d.path().join("debs");
        let mut w = BlobWriter::into_dir(&d.path().join("tmp"), &debs).unwrap();
        w.write_all(b"other bytes").unwrap();
        let e = w.commit_verified(&stored.digest, Some(5)).unwrap_err();
        assert!(matches!(e, BlobError::Mismatch { .. }), "{e}");
        assert!(!debs.join(Digest::of_bytes(b"other bytes").hex()).exists());
        assert_eq!(std::fs::read_dir(d.path().join("tmp")).unwrap().count(), 0, "the temporary file is gone");

        let mut w = BlobWriter::into_dir(&d.path().join("tmp"), &debs).unwrap();
        w.write_all(b"hello").unwrap();
        assert!(w.commit_verified(&stored.digest, Some(4)).is_err(), "the size counts too");
        let mut w = BlobWriter::into_dir(&d.path().join("tmp"), &debs).unwrap();
        w.write_all(b"hello").unwrap();
        let s = w.commit_verified(&stored.digest, Some(5)).unwrap();
        assert_eq!(s.path, debs.join(stored.digest.hex()));
    }

    #[test]
    fn imports_only_the_expected_content() {
        let d = tempfile::tempdir().unwrap();
        let blobs = BlobDir::open(&d.path().join("store"), &d.path().join("tmp")).unwrap();
        let src = d.path().join("f");
        std::fs::write(&src, b"content").unwrap();
        let want = Digest::of_bytes(b"content");
        assert!(blobs.import_file(&src, &Digest::of_bytes(b"else"), 7).is_err());
        assert!(!blobs.has(&want, 7));
        let s = blobs.import_file(&src, &want, 7).unwrap();
        assert_eq!(std::fs::read(s.path).unwrap(), b"content");
    }
}
