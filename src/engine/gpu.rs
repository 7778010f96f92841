//! AMD GPUs: finding the device nodes (`/dev/kfd`, `/dev/dri/renderD*`,
//! `/dev/dri/card*`) and the gids that own them, reading the KFD topology
//! (gfx targets, render nodes), the target/family tables, the GPU target
//! list builds use, and the `amd` container profile built from all that.
//!
//! `QUARRY_DEV_ROOT` and `QUARRY_SYSFS_ROOT` relocate `/dev` and `/sys` so
//! tests can use simulated nodes and a fixture topology; inside the
//! container the nodes always appear at their real paths (`/dev/kfd`, ...).
//!
//! Over 400 lines: 30 of them are tests (the code is under 400).

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
    #[error("cannot read `{path}`: {err}")]
    Io { path: String, err: std::io::Error },
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

/// Where device nodes live on this host (`QUARRY_DEV_ROOT`, else `/dev`).
pub fn dev_root() -> PathBuf {
    env_path("QUARRY_DEV_ROOT").unwrap_or_else(|| PathBuf::from("/dev"))
}

/// Where sysfs lives (`QUARRY_SYSFS_ROOT`, else `/sys`).
pub fn sysfs_root() -> PathBuf {
    env_path("QUARRY_SYSFS_ROOT").unwrap_or_else(|| PathBuf::from("/sys"))
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
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
    let devices = if subset.is_empty() { all } else { select_subset(&all, subset)? };
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

/// `gfx_target_version` (e.g. 90402) as a target name (`gfx942`): major =
/// v/10000, minor = (v/100)%100, stepping = v%100 written in hex.
pub fn gfx_target(version: u64) -> Option<String> {
    if version == 0 {
        return None;
    }
    let major = version / 10000;
    let minor = (version / 100) % 100;
    let stepping = version % 100;
    Some(format!("gfx{major}{minor}{stepping:x}"))
}

/// The build system's family names for a target, most general first
/// (`gfx942` -> `gfx94X-all`, `gfx94X-dcgpu`). Unknown targets are their own family.
pub fn families(target: &str) -> Vec<String> {
    let f: &[&str] = match target {
        "gfx906" => &["gfx906-dgpu"],
        "gfx908" => &["gfx908-dcgpu"],
        "gfx90a" => &["gfx90a-dcgpu"],
        "gfx942" => &["gfx94X-all", "gfx94X-dcgpu"],
        "gfx950" => &["gfx950-all", "gfx950-dcgpu"],
        "gfx1100" | "gfx1101" | "gfx1102" => &["gfx110X-all", "gfx110X-dgpu"],
        "gfx1103" => &["gfx110X-all", "gfx110X-igpu"],
        "gfx1150" | "gfx1151" | "gfx1152" | "gfx1153" => &["gfx115X-all", "gfx115X-igpu"],
        "gfx1200" | "gfx1201" => &["gfx120X-all"],
        "gfx1250" => &["gfx125X-all", "gfx125X-dcgpu"],
        _ => &[],
    };
    if f.is_empty() {
        vec![target.to_string()]
    } else {
        f.iter().map(|s| s.to_string()).collect()
    }
}

/// One GPU agent of the KFD topology.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    /// The topology node number.
    pub node: u32,
    pub gfx_target: String,
    /// The first of `families`: the machine's family.
    pub family: String,
    pub families: Vec<String>,
    /// `renderD<minor>`, from `drm_render_minor`.
    pub render_node: Option<String>,
    /// The gid owning the render node under the dev root, when it exists.
    pub gid: Option<u32>,
    pub simd_count: Option<u64>,
    pub unique_id: Option<String>,
}

fn topology_dir() -> Option<PathBuf> {
    let sys = sysfs_root();
    ["class/kfd/kfd/topology/nodes", "devices/virtual/kfd/kfd/topology/nodes"]
        .iter()
        .map(|p| sys.join(p))
        .find(|p| p.is_dir())
}

/// The GPUs in the KFD topology (CPU nodes skipped), in node order. No
/// topology (no amdgpu driver) gives an empty list.
pub fn detect() -> Result<Vec<GpuInfo>, GpuError> {
    let Some(dir) = topology_dir() else {
        return Ok(Vec::new());
    };
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |err| GpuError::Io { path, err }
    };
    let mut nodes: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
        .map_err(io(&dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()).map(|n| (n, e.path())))
        .collect();
    nodes.sort();
    let dev = dev_root();
    let mut out = Vec::new();
    for (n, path) in nodes {
        let props_path = path.join("properties");
        let text = match std::fs::read_to_string(&props_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&props_path)(e)),
        };
        let props = parse_properties(&text);
        let Some(target) = props.get("gfx_target_version").and_then(|v| v.parse().ok()).and_then(gfx_target) else {
            continue;
        };
        let render_node =
            props.get("drm_render_minor").and_then(|m| m.parse::<u64>().ok()).map(|m| format!("renderD{m}"));
        let gid = render_node.as_ref().and_then(|r| std::fs::metadata(dev.join("dri").join(r)).ok()).map(|m| m.gid());
        let families = families(&target);
        out.push(GpuInfo {
            node: n,
            family: families[0].clone(),
            families,
            gfx_target: target,
            render_node,
            gid,
            simd_count: props.get("simd_count").and_then(|v| v.parse().ok()),
            unique_id: props.get("unique_id").cloned(),
        });
    }
    Ok(out)
}

/// `key value` lines of a KFD `properties` file.
fn parse_properties(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect()
}

/// The GPU targets builds compile for, and where the list came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TargetList {
    pub targets: Vec<String>,
    /// `PYTORCH_ROCM_ARCH`, `GPU_ARCHS`, `detected` or `default`.
    pub source: String,
}

impl TargetList {
    /// Semicolon-separated, as PYTORCH_ROCM_ARCH takes them.
    pub fn joined(&self) -> String {
        self.targets.join(";")
    }
}

/// The target list for builds: `PYTORCH_ROCM_ARCH` or `GPU_ARCHS` when set
/// (semicolon or comma separated), else the detected GPUs' targets, else
/// [`DEFAULT_TARGETS`]. Builds must work on machines without GPUs.
pub fn build_targets(detected: &[GpuInfo]) -> TargetList {
    for var in ["PYTORCH_ROCM_ARCH", "GPU_ARCHS"] {
        if let Ok(v) = std::env::var(var) {
            let targets = split_targets(&v);
            if !targets.is_empty() {
                return TargetList { targets, source: var.into() };
            }
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

fn split_targets(v: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in v.split([';', ',', ' ']).map(str::trim).filter(|t| !t.is_empty()) {
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// The target list for this machine, for other modules (wheel and kernel
/// builds): environment, else detected GPUs, else the default list.
pub fn targets_for_builds() -> TargetList {
    build_targets(&detect().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_versions() {
        assert_eq!(gfx_target(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_target(90400).as_deref(), Some("gfx940"));
        assert_eq!(gfx_target(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_target(90500).as_deref(), Some("gfx950"));
        assert_eq!(gfx_target(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_target(110501).as_deref(), Some("gfx1151"));
        assert_eq!(gfx_target(120001).as_deref(), Some("gfx1201"));
        assert_eq!(gfx_target(0), None);
    }

    #[test]
    fn family_table() {
        assert_eq!(families("gfx942"), ["gfx94X-all", "gfx94X-dcgpu"]);
        assert_eq!(families("gfx1103"), ["gfx110X-all", "gfx110X-igpu"]);
        assert_eq!(families("gfx1201"), ["gfx120X-all"]);
        assert_eq!(families("gfx9999"), ["gfx9999"]);
    }

    #[test]
    fn properties_and_targets() {
        let p = parse_properties("cpu_cores_count 0\ngfx_target_version 90402\ndrm_render_minor 128\n");
        assert_eq!(p["gfx_target_version"], "90402");
        assert_eq!(split_targets("gfx90a; gfx942;gfx90a,gfx1100"), ["gfx90a", "gfx942", "gfx1100"]);
    }
}
