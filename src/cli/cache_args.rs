//! The options every command that uses the cache shares: its directory and
//! the shared registry tier (`--cache-registry`).

use crate::cache::{CacheConfig, RegistryMode, RegistryTierConfig};
use clap::builder::PossibleValue;
use clap::ValueEnum;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct CacheArgs {
    /// Cache directory [default: $QUARRY_CACHE, else ~/.cache/quarry]
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// A registry repository shared by many machines as a cache tier
    /// (HOST[:PORT]/REPO): entries missing here are pulled and verified from
    /// it, entries built here are pushed to it
    #[arg(long, value_name = "REF", env = "QUARRY_CACHE_REGISTRY")]
    pub cache_registry: Option<String>,
    /// `rw` reads and writes the cache registry; `ro` only reads it (pull-request jobs)
    #[arg(long, value_enum, value_name = "MODE", default_value_t = RegistryMode::Rw, env = "QUARRY_CACHE_REGISTRY_MODE")]
    pub cache_registry_mode: RegistryMode,
    /// Fail when the cache registry cannot be reached (default: warn once and build locally)
    #[arg(long)]
    pub cache_registry_required: bool,
}

impl CacheArgs {
    pub fn dir(&self) -> PathBuf {
        self.cache_dir.clone().unwrap_or_else(crate::cache::default_dir)
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

impl ValueEnum for RegistryMode {
    fn value_variants<'a>() -> &'a [Self] {
        &[RegistryMode::Rw, RegistryMode::Ro]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            RegistryMode::Rw => "rw",
            RegistryMode::Ro => "ro",
        }))
    }
}
