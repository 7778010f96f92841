//! The KFD topology: the GPU agents the amdgpu driver lists under
//! `/sys/class/kfd/kfd/topology/nodes` (relocated by `QUARRY_SYSFS_ROOT`),
//! their gfx targets and render nodes, and the target/family table; and
//! where the driver's files are on this host (relocated for tests).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KfdError {
    #[error("cannot read `{path}`: {err}")]
    Io { path: String, err: std::io::Error },
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
pub fn detect() -> Result<Vec<GpuInfo>, KfdError> {
    let Some(dir) = topology_dir() else {
        return Ok(Vec::new());
    };
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |err| KfdError::Io { path, err }
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
    fn properties() {
        let p = parse_properties("cpu_cores_count 0\ngfx_target_version 90402\ndrm_render_minor 128\n");
        assert_eq!(p["gfx_target_version"], "90402");
    }
}
