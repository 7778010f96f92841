//! AMD GPUs: finding the device nodes (`/dev/kfd`, `/dev/dri/renderD*`,
//! `/dev/dri/card*`) and the gids that own them, the GPU target list builds
//! use, and the `amd` container profile built from all that (restricted to
//! the GPUs a scheduler gave, `allocation`). The KFD topology (gfx targets,
//! render nodes) is read in `kfd`.
//!
//! `QUARRY_DEV_ROOT` and `QUARRY_SYSFS_ROOT` relocate `/dev` and `/sys` so
//! tests can use simulated nodes and a fixture topology; inside the
//! container the nodes always appear at their real paths (`/dev/kfd`, ...).

pub use super::kfd::{detect, dev_root, families, gfx_target, sysfs_root, GpuInfo};
use crate::code_objects::target_list::{TargetList, TargetListError};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Targets built when nothing is set and no GPU is found: common data
/// center and consumer parts.
pub const DEFAULT_TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"];

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("--gpu amd: `{0}` does not exist, so this host exposes no AMD GPU (is the amdgpu driver loaded?); use `--gpu none` to run without GPUs")]
    NoKfd(String),
    #[error("--gpu-devices `{wanted}`: no such GPU; available render nodes: {available}")]
    UnknownDevice { wanted: String, available: String },
    #[error(
        "--gpu-devices was given but the GPU profile is `none`; use `--gpu amd` (or `auto` on a host with /dev/kfd)"
    )]
    SubsetWithoutGpu,
    #[error(transparent)]
    Kfd(#[from] super::kfd::KfdError),
    #[error(transparent)]
    Allocation(#[from] super::allocation::AllocationError),
}

/// `--gpu auto|amd|none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    #[default]
    Auto,
    Amd,
    None,
}

/// One device node to pass into a container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceNode {
    /// The node on the host (under the dev root).
    pub host_path: PathBuf,
    /// Where it appears in the container: `/dev/kfd`, `/dev/dri/renderD128`...
    pub container_path: String,
    /// The gid that owns the node on the host.
    pub gid: u32,
    pub is_char_device: bool,
}

fn node(dev: &Path, rel: &str) -> Option<DeviceNode> {
    let host_path = dev.join(rel);
    let meta = std::fs::metadata(&host_path).ok()?;
    Some(DeviceNode {
        host_path,
        container_path: format!("/dev/{rel}"),
        gid: meta.gid(),
        is_char_device: meta.file_type().is_char_device(),
    })
}

/// Every AMD GPU node under the dev root: `kfd`, then `dri/card*` and
/// `dri/renderD*` in name order.
pub fn device_nodes() -> Vec<DeviceNode> {
    let dev = dev_root();
    let mut out: Vec<DeviceNode> = node(&dev, "kfd").into_iter().collect();
    out.extend(dri_names(&dev).iter().filter_map(|n| node(&dev, &format!("dri/{n}"))));
    out
}

/// `card*` and `renderD*` names under `<dev>/dri`, in numeric order.
fn dri_names(dev: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dev.join("dri"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("renderD") || n.starts_with("card"))
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| {
        let digits: String = n.chars().filter(|c| c.is_ascii_digit()).collect();
        (n.starts_with("renderD"), digits.parse::<u64>().unwrap_or(u64::MAX), n.clone())
    });
    names
}

/// What a container gets for GPU access.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct GpuPlan {
    /// `amd` or `none`.
    pub profile: String,
    pub devices: Vec<DeviceNode>,
    /// Numeric gids owning the nodes (numbers work whatever the image's /etc/group says).
    pub group_add: Vec<u32>,
    /// `ROCR_VISIBLE_DEVICES` / `HIP_VISIBLE_DEVICES` from quarry's environment.
    pub env: Vec<String>,
    pub ipc_host: bool,
    pub seccomp_unconfined: bool,
    pub cap_add: Vec<String>,
    /// Ask for `memlock=-1:-1` (the engine may refuse; see `limits`).
    pub memlock_unlimited: bool,
    /// CDI device names (`amd.com/gpu=0`) for engines that resolve them;
    /// `devices` then holds the same nodes for engines that do not.
    pub cdi: Vec<String>,
}

/// The GPU settings for `mode`, restricted to `subset` (render node names
/// like `renderD128`, paths like `/dev/dri/renderD129`, or GPU indexes
/// `0`, `1` in render-node order) when it is not empty.
pub fn plan(mode: GpuMode, subset: &[String]) -> Result<GpuPlan, GpuError> {
    let dev = dev_root();
    let kfd = dev.join("kfd");
    let amd = match mode {
        GpuMode::None => false,
        GpuMode::Auto => kfd.exists(),
        GpuMode::Amd => {
            if !kfd.exists() {
                return Err(GpuError::NoKfd(kfd.display().to_string()));
            }
            true
        }
    };
    if !amd {
        if !subset.is_empty() {
            return Err(GpuError::SubsetWithoutGpu);
        }
        return Ok(GpuPlan { profile: "none".into(), ..Default::default() });
    }
    let all = device_nodes();
    let devices = if !subset.is_empty() {
        select_subset(&all, subset)?
    } else if let Some(given) = super::allocation::slurm_gpus()? {
        let chosen = select_subset(&all, &given.devices)?;
        let names: Vec<String> = chosen.iter().map(|d| d.host_path.display().to_string()).collect();
        log::info!("GPUs passed: {} ({}; --gpu-devices to choose others)", names.join(", "), given.why);
        chosen
    } else {
        all
    };
    Ok(amd_profile(devices))
}

/// The `amd` profile passing `devices`, with the numeric gids owning them.
pub fn amd_profile(devices: Vec<DeviceNode>) -> GpuPlan {
    let mut group_add: Vec<u32> = devices.iter().map(|d| d.gid).filter(|g| *g != 0).collect();
    group_add.sort_unstable();
    group_add.dedup();
    let env = ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
        .collect();
    GpuPlan {
        profile: "amd".into(),
        devices,
        group_add,
        env,
        ipc_host: true,
        seccomp_unconfined: true,
        cap_add: vec!["SYS_PTRACE".into()],
        memlock_unlimited: true,
        cdi: Vec::new(),
    }
}

/// `kfd`, the chosen render nodes, and the card nodes of the same GPUs
/// (matched through sysfs; left out when sysfs cannot tell).
fn select_subset(all: &[DeviceNode], subset: &[String]) -> Result<Vec<DeviceNode>, GpuError> {
    let renders: Vec<&DeviceNode> = all.iter().filter(|d| d.container_path.starts_with("/dev/dri/renderD")).collect();
    let name_of = |d: &DeviceNode| d.container_path.trim_start_matches("/dev/dri/").to_string();
    let mut chosen: Vec<DeviceNode> = all.iter().filter(|d| d.container_path == "/dev/kfd").cloned().collect();
    for want in subset.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        let base = want.rsplit('/').next().unwrap_or(want);
        let found = match base.parse::<usize>() {
            Ok(i) => renders.get(i).copied(),
            Err(_) => renders.iter().copied().find(|d| name_of(d) == base),
        };
        let Some(r) = found else {
            return Err(GpuError::UnknownDevice {
                wanted: want.to_string(),
                available: if renders.is_empty() {
                    "none".into()
                } else {
                    renders
                        .iter()
                        .enumerate()
                        .map(|(i, d)| format!("{i}={}", name_of(d)))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            });
        };
        if !chosen.contains(r) {
            chosen.push(r.clone());
        }
        for card in cards_of(r, all) {
            if !chosen.contains(&card) {
                chosen.push(card);
            }
        }
    }
    Ok(chosen)
}

/// The `card*` nodes of the GPU whose render node is `render` (matched
/// through sysfs; none when sysfs cannot tell).
pub fn cards_of(render: &DeviceNode, all: &[DeviceNode]) -> Vec<DeviceNode> {
    let sys = sysfs_root().join("class/drm");
    let name = |d: &DeviceNode| d.container_path.trim_start_matches("/dev/dri/").to_string();
    let Ok(gpu) = std::fs::canonicalize(sys.join(name(render)).join("device")) else {
        return Vec::new();
    };
    all.iter()
        .filter(|d| d.container_path.starts_with("/dev/dri/card"))
        .filter(|card| std::fs::canonicalize(sys.join(name(card)).join("device")).ok().as_ref() == Some(&gpu))
        .cloned()
        .collect()
}

/// The target list for builds: `PYTORCH_ROCM_ARCH` or `GPU_ARCHS` when set
/// (semicolon or comma separated), else the detected GPUs' targets, else
/// [`DEFAULT_TARGETS`]. Builds must work on machines without GPUs.
pub fn build_targets(detected: &[GpuInfo]) -> TargetList {
    for var in ["PYTORCH_ROCM_ARCH", "GPU_ARCHS"] {
        let Ok(v) = std::env::var(var) else { continue };
        match TargetList::parse(&v, var) {
            Ok(list) => return list,
            // Unset in effect (`PYTORCH_ROCM_ARCH=`), as before.
            Err(TargetListError::Empty) => {}
            Err(e) => log::warn!("{var}={v} is not used: {e}"),
        }
    }
    let mut targets: Vec<String> = Vec::new();
    for g in detected {
        if !targets.contains(&g.gfx_target) {
            targets.push(g.gfx_target.clone());
        }
    }
    if !targets.is_empty() {
        return TargetList { targets, source: "detected".into() };
    }
    TargetList { targets: DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect(), source: "default".into() }
}

/// The target list for this machine, for other modules (wheel and kernel
/// builds): environment, else detected GPUs, else the default list.
pub fn targets_for_builds() -> TargetList {
    build_targets(&detect().unwrap_or_default())
}
