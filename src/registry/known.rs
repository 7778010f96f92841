//! Where blobs were last seen on a registry (repository names per digest),
//! kept as a cache note per registry. `push` uses it to mount a blob from
//! another repository instead of uploading it again. Only a hint: a stale
//! entry costs one refused mount, so failures to save it are not errors.

use crate::store::cache::Cache;
use std::collections::{BTreeMap, BTreeSet};

const KIND: &str = "registry-blobs";

pub(crate) struct Known {
    cache: Cache,
    key: String,
    map: BTreeMap<String, BTreeSet<String>>,
    dirty: bool,
}

impl Known {
    pub fn load(cache: &Cache, registry: &str) -> Known {
        let key = crate::store::digest::sha256_hex(registry.as_bytes());
        let map = cache.read_note(KIND, &key).and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        Known { cache: cache.clone(), key, map, dirty: false }
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
        if self.dirty {
            if let Ok(data) = serde_json::to_vec(&self.map) {
                let _ = self.cache.write_note(KIND, &self.key, &data);
            }
            self.dirty = false;
        }
    }
}
