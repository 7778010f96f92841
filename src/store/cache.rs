//! The layer cache: blobs by digest, and records mapping a cache key to the
//! blob it produced. Every write goes to a temporary name in the cache's
//! own `tmp/` and is renamed into place, so a killed build never leaves a
//! half entry that a later build would trust.

use super::digest::Digest;
use super::key::Key;
use super::LayerBlob;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("layer cache `{dir}`: {what}: {err}")]
pub struct CacheError {
    pub dir: String,
    pub what: String,
    pub err: io::Error,
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// The cache directory: `--cache-dir`, else `QUARRY_CACHE`, else the user's cache dir.
pub fn default_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("QUARRY_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("quarry")
}

impl Cache {
    pub fn open(root: &Path) -> Result<Cache, CacheError> {
        let c = Cache { root: root.to_path_buf() };
        for sub in ["blobs/sha256", "layers", "tmp"] {
            std::fs::create_dir_all(root.join(sub)).map_err(|err| c.err(format!("cannot create `{sub}`"), err))?;
        }
        c.sweep_tmp();
        Ok(c)
    }

    /// Remove what killed builds left in `tmp/` (older than a day, so a
    /// build running right now in the same cache keeps its files).
    fn sweep_tmp(&self) {
        let Ok(entries) = std::fs::read_dir(self.tmp_dir()) else {
            return;
        };
        let day = std::time::Duration::from_secs(24 * 3600);
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if old {
                let p = e.path();
                let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
            }
        }
    }

    fn err(&self, what: impl Into<String>, err: io::Error) -> CacheError {
        CacheError { dir: self.root.display().to_string(), what: what.into(), err }
    }

    pub(crate) fn io_error(&self, what: impl Into<String>, err: io::Error) -> CacheError {
        self.err(what, err)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Where the blob with this digest lives (written only through `BlobWriter`).
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    pub fn has_blob(&self, digest: &Digest, size: u64) -> bool {
        std::fs::metadata(self.blob_path(digest)).map(|m| m.len() == size).unwrap_or(false)
    }

    /// A temporary file in the cache (removed when dropped); content that
    /// stays goes through `BlobWriter`.
    pub fn temp_file(&self) -> Result<tempfile::NamedTempFile, CacheError> {
        tempfile::Builder::new()
            .prefix("blob-")
            .tempfile_in(self.tmp_dir())
            .map_err(|e| self.err("cannot create a temporary file", e))
    }

    /// A content-addressed file of another kind (`debs/<sha256>`, `indexes/<sha256>`).
    pub fn named_path(&self, kind: &str, name: &str) -> PathBuf {
        self.root.join(kind).join(name)
    }

    /// The directory of a kind of content-addressed files, created when missing.
    pub fn named_dir(&self, kind: &str) -> Result<PathBuf, CacheError> {
        let dir = self.root.join(kind);
        std::fs::create_dir_all(&dir).map_err(|e| self.err(format!("cannot create `{kind}`"), e))?;
        Ok(dir)
    }

    fn record_path(&self, key: &Key) -> PathBuf {
        self.root.join("layers").join(format!("{key}.json"))
    }

    /// The layer a key produced before, if its record and blob are both intact.
    pub fn lookup(&self, key: &Key) -> Option<LayerBlob> {
        let text = std::fs::read(self.record_path(key)).ok()?;
        let rec: LayerBlob = serde_json::from_slice(&text).ok()?;
        self.has_blob(&rec.digest, rec.size).then_some(rec)
    }

    pub fn record(&self, key: &Key, blob: &LayerBlob) -> Result<(), CacheError> {
        let mut tmp = tempfile::Builder::new()
            .prefix("record-")
            .tempfile_in(self.tmp_dir())
            .map_err(|e| self.err("cannot create a temporary file", e))?;
        serde_json::to_writer(&mut tmp, blob).map_err(|e| self.err("cannot write a record", e.into()))?;
        tmp.flush().map_err(|e| self.err("cannot write a record", e))?;
        tmp.persist(self.record_path(key)).map_err(|e| self.err("cannot store a record", e.error))?;
        Ok(())
    }

    /// Small JSON documents stored by key (memoized scans and the like).
    pub fn read_note(&self, kind: &str, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.root.join(kind).join(key)).ok()
    }

    pub fn write_note(&self, kind: &str, key: &str, data: &[u8]) -> Result<(), CacheError> {
        let dir = self.root.join(kind);
        std::fs::create_dir_all(&dir).map_err(|e| self.err(format!("cannot create `{kind}`"), e))?;
        let mut tmp = tempfile::Builder::new()
            .prefix("note-")
            .tempfile_in(self.tmp_dir())
            .map_err(|e| self.err("cannot create a temporary file", e))?;
        tmp.write_all(data).map_err(|e| self.err("cannot write", e))?;
        tmp.persist(dir.join(key)).map_err(|e| self.err("cannot store", e.error))?;
        Ok(())
    }
}
