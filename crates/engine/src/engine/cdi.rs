//! CDI (Container Device Interface) for AMD GPUs: the spec `quarry cdi
//! generate` writes, and `--gpu-devices amd.com/gpu=N` for `quarry run`.
//!
//! The spec has the shape `amd-ctk cdi generate` gives it (kind
//! `amd.com/gpu`; per GPU a device named by its index holding the GPU's
//! `card*` and `renderD*` nodes and `/dev/kfd`; a device `all`; each node
//! with its type, major, minor, mode, `rwm` and numeric owner), with these
//! differences: `cdiVersion` is the lowest version the spec needs (0.5.0,
//! for device names that start with a digit) where amd-ctk always writes
//! 0.6.0, which the CDI library of Podman 4.3 (Debian 12) refuses; each
//! GPU also has a device named by its stable KFD `unique_id`
//! (`0x<hex>`, as rocm-smi prints it); GPUs are numbered in render-node
//! order (amd-ctk: PCI order, the same on usual hosts); nodes under
//! `QUARRY_DEV_ROOT` carry `hostPath`; the owner uid is the node's own.
//!
//! An engine that resolves CDI names (Podman 4.1+, Docker 25+ with CDI
//! enabled) gets the names; for one that does not, quarry maps the same
//! nodes itself, so the container sees the same devices either way.

use super::gpu::{self, DeviceNode, GpuError, GpuMode, GpuPlan};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The CDI kind of AMD GPUs.
pub const KIND: &str = "amd.com/gpu";

#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error("no AMD GPU to describe: `{0}` does not exist (is the amdgpu driver loaded? QUARRY_DEV_ROOT points quarry at another device tree)")]
    NoKfd(String),
    #[error("no AMD GPU render node under `{0}`")]
    NoGpus(String),
    #[error("cannot read device node `{path}`: {err}")]
    Node { path: String, err: std::io::Error },
    #[error("--gpu-devices `{wanted}`: {why}")]
    Request { wanted: String, why: String },
    #[error("cannot write the CDI spec to `{path}`: {err}")]
    Write { path: String, err: std::io::Error },
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// A CDI spec (the subset AMD GPUs use), serialized as the spec names it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    #[serde(rename = "cdiVersion")]
    pub cdi_version: String,
    pub kind: String,
    pub devices: Vec<Device>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Device {
    pub name: String,
    #[serde(rename = "containerEdits")]
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContainerEdits {
    #[serde(rename = "deviceNodes")]
    pub device_nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    /// The path in the container.
    pub path: String,
    /// The path on the host, when it is not `path` (CDI 0.5.0).
    #[serde(rename = "hostPath", skip_serializing_if = "Option::is_none", default)]
    pub host_path: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub major: u64,
    pub minor: u64,
    /// Permission bits, as a number (JSON has no octal).
    #[serde(rename = "fileMode")]
    pub file_mode: u32,
    pub permissions: String,
    pub uid: u32,
    pub gid: u32,
}

/// One GPU: its render node, its card nodes and its stable id.
#[derive(Debug, Clone)]
struct Gpu {
    render: DeviceNode,
    cards: Vec<DeviceNode>,
    /// `0x<hex>` from the KFD topology's `unique_id`.
    stable_id: Option<String>,
}

/// The GPUs under the dev root, in render-node order, with the stable ids
/// the KFD topology gives them (by `drm_render_minor`).
fn gpus(nodes: &[DeviceNode]) -> Vec<Gpu> {
    let topology = gpu::detect().unwrap_or_default();
    nodes
        .iter()
        .filter(|n| n.container_path.starts_with("/dev/dri/renderD"))
        .map(|render| {
            let name = render.container_path.trim_start_matches("/dev/dri/");
            let stable_id = topology
                .iter()
                .find(|g| g.render_node.as_deref() == Some(name))
                .and_then(|g| g.unique_id.as_deref())
                .and_then(|u| u.parse::<u64>().ok())
                .filter(|u| *u != 0)
                .map(|u| format!("0x{u:x}"));
            Gpu { render: render.clone(), cards: gpu::cards_of(render, nodes), stable_id }
        })
        .collect()
}

fn spec_node(d: &DeviceNode) -> Result<Node, CdiError> {
    let meta = std::fs::metadata(&d.host_path)
        .map_err(|err| CdiError::Node { path: d.host_path.display().to_string(), err })?;
    let rdev = meta.rdev();
    let host = d.host_path.display().to_string();
    Ok(Node {
        host_path: (host != d.container_path).then_some(host),
        path: d.container_path.clone(),
        kind: "c".into(),
        major: rustix::fs::major(rdev) as u64,
        minor: rustix::fs::minor(rdev) as u64,
        file_mode: meta.mode() & 0o7777,
        permissions: "rwm".into(),
        uid: meta.uid(),
        gid: meta.gid(),
    })
}

/// The spec for the GPUs under the dev root (see the module docs).
pub fn generate() -> Result<Spec, CdiError> {
    let nodes = gpu::device_nodes();
    let Some(kfd) = nodes.iter().find(|n| n.container_path == "/dev/kfd") else {
        return Err(CdiError::NoKfd(gpu::dev_root().join("kfd").display().to_string()));
    };
    let kfd = spec_node(kfd)?;
    let gpus = gpus(&nodes);
    if gpus.is_empty() {
        return Err(CdiError::NoGpus(gpu::dev_root().join("dri").display().to_string()));
    }
    let mut devices = Vec::new();
    let mut by_id = Vec::new();
    let mut every = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let mut edits = Vec::new();
        for n in g.cards.iter().chain([&g.render]) {
            edits.push(spec_node(n)?);
        }
        every.extend(edits.iter().cloned());
        edits.push(kfd.clone());
        let container_edits = ContainerEdits { device_nodes: edits };
        if let Some(id) = &g.stable_id {
            by_id.push(Device { name: id.clone(), container_edits: container_edits.clone() });
        }
        devices.push(Device { name: i.to_string(), container_edits });
    }
    devices.extend(by_id);
    every.push(kfd);
    devices.push(Device { name: "all".into(), container_edits: ContainerEdits { device_nodes: every } });
    Ok(Spec { cdi_version: minimum_version(&devices).into(), kind: KIND.into(), devices })
}

/// The spec as JSON, as engines read it.
pub fn to_json(spec: &Spec) -> String {
    let mut text = serde_json::to_string_pretty(spec).expect("a spec is plain data");
    text.push('\n');
    text
}

/// Write `spec` to `path` (a temporary file renamed into place, so an
/// engine never reads half a spec); the directory is made when missing.
pub fn write(spec: &Spec, path: &Path) -> Result<(), CdiError> {
    let err = |err| CdiError::Write { path: path.display().to_string(), err };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    std::io::Write::write_all(&mut tmp, to_json(spec).as_bytes()).map_err(err)?;
    // Readable by the engine whatever this process's umask.
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// The lowest CDI version whose rules the devices follow: 0.5.0 allowed
/// names starting with a digit and `hostPath`; 0.3.0 is the oldest engines read.
fn minimum_version(devices: &[Device]) -> &'static str {
    let v050 = devices.iter().any(|d| {
        d.name.starts_with(|c: char| c.is_ascii_digit())
            || d.container_edits.device_nodes.iter().any(|n| n.host_path.is_some())
    });
    if v050 {
        "0.5.0"
    } else {
        "0.3.0"
    }
}

/// Whether `--gpu-devices` entries are CDI names (`vendor.com/class=name`).
fn is_cdi_name(s: &str) -> bool {
    s.split_once('=').is_some_and(|(kind, _)| kind.contains('/'))
}

/// The GPU settings for `quarry run`: with CDI names in `wanted`, the
/// `amd` profile carrying those names and, for engines without CDI, the
/// nodes of the same devices; otherwise as `gpu::plan`. `local` says the
/// engine runs on this machine, so a name this machine lacks is an error
/// here (a remote engine's host may have it).
pub fn plan(mode: GpuMode, wanted: &[String], local: bool) -> Result<GpuPlan, CdiError> {
    let names: Vec<&str> = wanted.iter().flat_map(|w| w.split(',')).map(str::trim).filter(|w| !w.is_empty()).collect();
    if !names.iter().any(|n| is_cdi_name(n)) {
        return Ok(gpu::plan(mode, wanted)?);
    }
    if mode == GpuMode::None {
        return Err(GpuError::SubsetWithoutGpu.into());
    }
    let request = |wanted: &str, why: String| CdiError::Request { wanted: wanted.into(), why };
    if let Some(other) = names.iter().find(|n| !is_cdi_name(n)) {
        return Err(request(other, "CDI names and render nodes cannot be mixed; give CDI names only (amd.com/gpu=0,amd.com/gpu=1) or nodes only (renderD128,renderD129)".into()));
    }
    let spec = if gpu::dev_root().join("kfd").exists() { generate().ok() } else { None };
    let mut fallback: Vec<DeviceNode> = Vec::new();
    let all_nodes = gpu::device_nodes();
    for name in &names {
        let (kind, device) = name.split_once('=').expect("a CDI name has `=`");
        if kind != KIND {
            return Err(request(name, format!("quarry passes AMD GPUs only; the kind must be `{KIND}`")));
        }
        let found = spec.as_ref().and_then(|s| s.devices.iter().find(|d| d.name == device));
        match found {
            Some(d) => {
                for n in &d.container_edits.device_nodes {
                    let host = Path::new(n.host_path.as_deref().unwrap_or(&n.path));
                    if let Some(node) = all_nodes.iter().find(|a| a.host_path == host) {
                        if !fallback.contains(node) {
                            fallback.push(node.clone());
                        }
                    }
                }
            }
            None if local => {
                let have = spec
                    .as_ref()
                    .map(|s| s.devices.iter().map(|d| format!("{KIND}={}", d.name)).collect::<Vec<_>>().join(", "))
                    .unwrap_or_else(|| "none".into());
                return Err(request(
                    name,
                    format!("no such device on this machine (available: {have}); `quarry cdi generate` lists them"),
                ));
            }
            None => {}
        }
    }
    let mut plan = gpu::amd_profile(fallback);
    plan.cdi = names.iter().map(|n| n.to_string()).collect();
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert!(is_cdi_name("amd.com/gpu=0") && is_cdi_name("amd.com/gpu=all"));
        assert!(!is_cdi_name("renderD128") && !is_cdi_name("0") && !is_cdi_name("/dev/dri/renderD128"));
        let node = |host: Option<&str>| Node {
            path: "/dev/dri/renderD128".into(),
            host_path: host.map(String::from),
            kind: "c".into(),
            major: 226,
            minor: 128,
            file_mode: 0o660,
            permissions: "rwm".into(),
            uid: 0,
            gid: 110,
        };
        let dev = |name: &str, host| Device {
            name: name.into(),
            container_edits: ContainerEdits { device_nodes: vec![node(host)] },
        };
        assert_eq!(minimum_version(&[dev("all", None)]), "0.3.0");
        assert_eq!(minimum_version(&[dev("0", None)]), "0.5.0");
        assert_eq!(minimum_version(&[dev("all", Some("/tmp/dev/dri/renderD128"))]), "0.5.0");
        let json = serde_json::to_value(node(None)).unwrap();
        assert_eq!(json["fileMode"], 432);
        assert!(json.get("hostPath").is_none(), "{json}");
    }
}
