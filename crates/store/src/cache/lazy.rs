//! The user's cache, chosen by the command line and opened on first use:
//! a command that may end before it needs the cache (`quarry verify`
//! refusing a provenance, `quarry diff` of two layouts) leaves no cache
//! directory behind, and one that needs it opens it once however many
//! times it asks.

use super::{Cache, CacheConfig, CacheError};
use std::sync::Mutex;

pub struct LazyCache {
    config: CacheConfig,
    opened: Mutex<Option<Cache>>,
}

impl LazyCache {
    pub fn new(config: CacheConfig) -> LazyCache {
        LazyCache { config, opened: Mutex::new(None) }
    }

    /// A cache of one's own at `dir` (see [`Cache::private`]), opened on
    /// first use.
    pub fn private(dir: &std::path::Path) -> LazyCache {
        LazyCache::new(CacheConfig::local(dir))
    }

    /// The cache, opened (and created when missing) the first time.
    pub fn get(&self) -> Result<Cache, CacheError> {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = opened.as_ref() {
            return Ok(c.clone());
        }
        let c = Cache::open_with(&self.config)?;
        *opened = Some(c.clone());
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_created_until_asked_and_it_is_opened_once() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("cache");
        let lazy = LazyCache::new(CacheConfig::local(dir.clone()));
        assert!(!dir.exists());
        let (a, b) = (lazy.get().unwrap(), lazy.get().unwrap());
        assert!(dir.is_dir());
        assert!(std::ptr::eq(a.blobs(), b.blobs()), "opened twice");
    }
}
