//! The cache options, parsed here and nowhere else: [`CacheDir`]
//! (`--cache-dir`), flattened into every command that uses the cache, and
//! [`CacheArgs`], which adds the shared registry tier (`--cache-registry`)
//! for the commands that build. A command opens the cache once, with
//! `open`, and passes the open `Cache` down; one that may end before it
//! needs the cache passes `lazy()`, opened on first use.

use crate::cache::{Cache, CacheConfig, CacheError, LazyCache, RegistryMode, RegistryTierConfig};
use std::path::PathBuf;

/// `--cache-dir`: the local cache.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct CacheDir {
    /// Cache directory [default: $QUARRY_CACHE, else ~/.cache/quarry]
    #[arg(id = "cache_dir", long = "cache-dir", value_name = "DIR")]
    pub path: Option<PathBuf>,
}

impl CacheDir {
    /// The directory: the one given, else the default.
    pub fn dir(&self) -> PathBuf {
        self.path.clone().unwrap_or_else(crate::cache::default_dir)
    }

    /// The local cache, opened (created when missing).
    pub fn open(&self) -> Result<Cache, CacheError> {
        Cache::open(&self.dir())
    }

    /// The local cache, to be opened when first needed.
    pub fn lazy(&self) -> LazyCache {
        LazyCache::new(CacheConfig::local(self.dir()))
    }
}

/// The local cache and the registry tier many machines share.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct CacheArgs {
    #[command(flatten)]
    pub local: CacheDir,
    /// A registry repository shared by many machines as a cache tier
    /// (HOST[:PORT]/REPO): entries missing here are pulled and verified from
    /// it, entries built here are pushed to it
    #[arg(long, value_name = "REF", env = "QUARRY_CACHE_REGISTRY")]
    pub cache_registry: Option<String>,
    /// `rw` reads and writes the cache registry; `ro` only reads it (pull-request jobs)
    #[arg(long, value_parser = registry_mode(), value_name = "MODE", default_value = "rw", env = "QUARRY_CACHE_REGISTRY_MODE")]
    pub cache_registry_mode: RegistryMode,
    /// Fail when the cache registry cannot be reached (default: warn once and build locally)
    #[arg(long)]
    pub cache_registry_required: bool,
}

impl CacheArgs {
    pub fn dir(&self) -> PathBuf {
        self.local.dir()
    }

    /// The cache with its registry tier when one is named, opened.
    pub fn open(&self) -> Result<Cache, CacheError> {
        Cache::open_with(&self.config())
    }

    /// The same, to be opened when first needed.
    pub fn lazy(&self) -> LazyCache {
        LazyCache::new(self.config())
    }

    pub fn config(&self) -> CacheConfig {
        let registry = self.cache_registry.as_ref().filter(|r| !r.trim().is_empty()).map(|r| RegistryTierConfig {
            reference: r.trim().to_string(),
            mode: self.cache_registry_mode,
            required: self.cache_registry_required,
        });
        CacheConfig { dir: self.dir(), registry }
    }
}

/// `--cache-registry-mode rw|ro`: a parser rather than `ValueEnum`, which
/// cannot be implemented here for a type of `quarry-store`.
fn registry_mode() -> impl clap::builder::TypedValueParser<Value = RegistryMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["rw", "ro"]).map(|word| match word.as_str() {
        "ro" => RegistryMode::Ro,
        _ => RegistryMode::Rw,
    })
}
