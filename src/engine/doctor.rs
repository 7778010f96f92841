//! `quarry doctor`: is everything quarry needs in place? The engine (and
//! its version and storage driver), the GPU nodes and the gids owning them,
//! the GPU targets builds will use, the cache directory's free space, and
//! the patchelf wheel repairs use (quarry's own is fetched here if needed).

use super::gpu::{self, DeviceNode, GpuInfo, TargetList};
use super::Engine;
use std::path::PathBuf;

#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineStatus {
    pub host: String,
    pub reachable: bool,
    pub version: Option<String>,
    pub api_version: Option<String>,
    pub storage_driver: Option<String>,
    pub reads_zstd: Option<bool>,
    /// Why the engine is not usable, when it is not.
    pub problem: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheStatus {
    pub dir: PathBuf,
    pub exists: bool,
    /// Free bytes for an unprivileged user on the cache's file system.
    pub free_bytes: Option<u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub engine: EngineStatus,
    pub dev_root: PathBuf,
    pub gpu_nodes: Vec<DeviceNode>,
    pub gpus: Vec<GpuInfo>,
    pub targets: TargetList,
    pub cache: CacheStatus,
    /// The patchelf repairs use: path, version, where it came from.
    pub patchelf: crate::elf::patchelf::Status,
}

impl Report {
    /// True when nothing blocks quarry's work (a host without GPUs is fine).
    pub fn healthy(&self) -> bool {
        self.engine.reachable && self.patchelf.problem.is_none()
    }
}

pub fn diagnose(cache_dir: PathBuf) -> Report {
    let engine = match Engine::connect() {
        Ok(e) => {
            let (driver, problem) = match e.storage_driver() {
                Ok(d) => (Some(d), None),
                Err(err) => (None, Some(err.to_string())),
            };
            EngineStatus {
                host: e.host.clone(),
                reachable: true,
                version: Some(e.version.clone()),
                api_version: Some(e.api_version.clone()),
                storage_driver: driver,
                reads_zstd: Some(e.reads_zstd()),
                problem,
            }
        }
        Err(err) => EngineStatus {
            host: super::connect::engine_host(),
            reachable: false,
            version: None,
            api_version: None,
            storage_driver: None,
            reads_zstd: None,
            problem: Some(err.to_string()),
        },
    };
    let gpus = gpu::detect().unwrap_or_default();
    // The nearest existing ancestor tells the free space of a cache not made yet.
    let probe = cache_dir.ancestors().find(|p| p.exists()).map(|p| p.to_path_buf());
    let free_bytes = probe.and_then(|p| rustix::fs::statvfs(&p).ok()).map(|s| s.f_bavail.saturating_mul(s.f_frsize));
    let patchelf = crate::elf::patchelf::status(&cache_dir);
    Report {
        patchelf,
        engine,
        dev_root: gpu::dev_root(),
        gpu_nodes: gpu::device_nodes(),
        targets: gpu::build_targets(&gpus),
        gpus,
        cache: CacheStatus { exists: cache_dir.is_dir(), dir: cache_dir, free_bytes },
    }
}
