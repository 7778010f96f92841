//! How a cache is opened and what its lookups say: the directory and the
//! shared tier it has (`CacheConfig`), which tier found an entry (`Hit`,
//! `Tier`), and whether what was made may be shared (`Sharing`).

use super::remote::RegistryTierConfig;
use std::path::PathBuf;

/// The cache directory: `--cache-dir`, else `QUARRY_CACHE`, else the user's cache dir.
pub fn default_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("QUARRY_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("quarry")
}

/// Which tiers a cache has.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub dir: PathBuf,
    pub registry: Option<RegistryTierConfig>,
}

impl CacheConfig {
    /// The local directory only.
    pub fn local(dir: impl Into<PathBuf>) -> CacheConfig {
        CacheConfig { dir: dir.into(), registry: None }
    }
}

/// Where a lookup found an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Local,
    Remote,
}

/// Something found, and where.
#[derive(Debug, Clone)]
pub struct Hit<T> {
    pub value: T,
    pub tier: Tier,
}

/// Whether what was just made may go to a shared tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    Shared,
    /// Kept on this machine only, for the reason given (shown to the user).
    Local {
        why: String,
    },
}

impl Sharing {
    /// What a build with the network on makes is never shared.
    pub fn unless_networked(network: bool) -> Sharing {
        if network {
            Sharing::Local { why: "built with the network on: its key cannot capture what it downloaded".into() }
        } else {
            Sharing::Shared
        }
    }
}
