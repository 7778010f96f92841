//! Where blobs were last seen on a registry (repository names per digest),
//! kept as one small file per registry in a directory the caller gives (the
//! cache's notes). `push` uses it to mount a blob from another repository
//! instead of uploading it again. Only a hint: a stale entry costs one
//! refused mount, so failures to save it are not errors.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

pub(crate) struct Known {
    /// None: nothing is remembered (no place to keep it).
    file: Option<PathBuf>,
    map: BTreeMap<String, BTreeSet<String>>,
    dirty: bool,
}

impl Known {
    /// What `dir` remembers of `registry`.
    pub fn load(dir: Option<&Path>, registry: &str) -> Known {
        let file = dir.map(|d| d.join(crate::oci::digest::sha256_hex(registry.as_bytes())));
        let map = file
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Known { file, map, dirty: false }
    }

    /// Repositories other than `except` known to hold `digest`.
    pub fn repos_with(&self, digest: &str, except: &str) -> Vec<String> {
        self.map.get(digest).map(|s| s.iter().filter(|r| *r != except).cloned().collect()).unwrap_or_default()
    }

    pub fn add(&mut self, digest: &str, repo: &str) {
        if self.map.entry(digest.to_string()).or_default().insert(repo.to_string()) {
            self.dirty = true;
        }
    }

    pub fn forget(&mut self, digest: &str, repo: &str) {
        if let Some(s) = self.map.get_mut(digest) {
            if s.remove(repo) {
                self.dirty = true;
            }
        }
    }

    pub fn save(&mut self) {
        let (true, Some(file)) = (self.dirty, &self.file) else { return };
        let Some(dir) = file.parent() else { return };
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let mut tmp = tempfile::Builder::new().prefix(".known-").tempfile_in(dir)?;
            tmp.write_all(&serde_json::to_vec(&self.map).map_err(std::io::Error::other)?)?;
            tmp.persist(file).map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            self.dirty = false;
        }
    }
}
