//! CDI on Podman: `quarry cdi generate` writes a spec Podman 4.3 accepts as
//! written (checked field by field), a container started through CDI sees
//! exactly the requested render node with its gid, and Docker 20.10 (no
//! CDI) gets the same devices through quarry's own mapping.

use super::common::engines::{have_podman, Endpoint, Podman, DOCKER_SOCKET};
use super::common::remote::{have_endpoint_tools, Terminator, TlsEndpoint};
use super::common::*;
use super::{fails_clearly, fresh_cache, q, simulated_dev_root, Tag, PROBE};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A KFD topology: a CPU node, a gfx942 at renderD128 with a stable id, a
/// gfx1100 at renderD129 without one.
fn fixture_topology() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let nodes = d.path().join("class/kfd/kfd/topology/nodes");
    write(&nodes.join("0/properties"), "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n");
    write(
        &nodes.join("1/properties"),
        "simd_count 1216\ngfx_target_version 90402\ndrm_render_minor 128\nunique_id 1796466385521082639\n",
    );
    write(
        &nodes.join("2/properties"),
        "simd_count 192\ngfx_target_version 110000\ndrm_render_minor 129\nunique_id 0\n",
    );
    d
}

/// A CDI spec in a directory Podman 4.3 reads (it has no setting for
/// others), removed when dropped; stale ones of killed test runs go first.
struct SpecFile(PathBuf);

impl SpecFile {
    fn new() -> SpecFile {
        let dir = Path::new("/var/run/cdi");
        std::fs::create_dir_all(dir).unwrap();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("quarry-test-").and_then(|n| n.strip_suffix(".json")) {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        SpecFile(dir.join(format!("quarry-test-{}.json", std::process::id())))
    }
}

impl Drop for SpecFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn cdi_spec_is_accepted_by_podman_and_matches_the_fallback() {
    if !have_docker() || !have_podman() || !have_tool("mmdebstrap") {
        return;
    }
    let dev = simulated_dev_root();
    let sys = fixture_topology();
    let gpu_env = |c: &mut Command| {
        c.env("QUARRY_DEV_ROOT", dev.path()).env("QUARRY_SYSFS_ROOT", sys.path());
    };
    // The spec, field by field.
    let spec_file = SpecFile::new();
    let mut gen = quarry();
    gpu_env(&mut gen);
    let said = run_expect(gen.args(["cdi", "generate", "-o"]).arg(&spec_file.0), 0);
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(said.contains("amd.com/gpu=0, amd.com/gpu=1, amd.com/gpu=0x18ee54a8d7ea010f, amd.com/gpu=all"), "{said}");
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&spec_file.0).unwrap()).unwrap();
    assert_eq!(spec["cdiVersion"], "0.5.0", "the lowest version with digit names and hostPath: {spec:#}");
    assert_eq!(spec["kind"], "amd.com/gpu");
    let names: Vec<&str> = spec["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["0", "1", "0x18ee54a8d7ea010f", "all"]);
    let nodes = |i: usize| spec["devices"][i]["containerEdits"]["deviceNodes"].as_array().unwrap().clone();
    let paths = |i: usize| nodes(i).iter().map(|n| n["path"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(paths(1), ["/dev/dri/renderD129", "/dev/kfd"]);
    assert_eq!(paths(2), paths(0), "the stable id names GPU 0");
    assert_eq!(paths(3), ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/kfd"]);
    let render = &nodes(1)[0];
    assert_eq!(render["hostPath"], dev.path().join("dri/renderD129").display().to_string());
    assert_eq!(
        (render["type"].as_str(), render["major"].as_u64(), render["minor"].as_u64()),
        (Some("c"), Some(1), Some(3))
    );
    assert_eq!((render["fileMode"].as_u64(), render["permissions"].as_str()), (Some(0o660), Some("rwm")));
    assert_eq!((render["uid"].as_u64(), render["gid"].as_u64()), (Some(0), Some(4243)));
    assert_eq!(nodes(1)[1]["gid"], 4242);

    // One image on both engines.
    let podman = Podman::rootful();
    let docker = Endpoint::local_docker();
    let work = tempfile::tempdir().unwrap();
    let def = work.path().join("cdi.toml");
    let name = unique("cdi");
    write(&def, &format!("name = \"{name}\"\nbase = {{ rootfs = \"{}\" }}\n", debian_rootfs("").display()));
    let cache = fresh_cache(work.path());
    let mut tags = Vec::new();
    for ep in [&podman.endpoint, &docker] {
        run_expect(q(ep).arg("load").arg(&def).args(["--tag", &format!("{name}:1"), "--cache-dir"]).arg(&cache), 0);
        tags.push(Tag(ep, format!("{name}:1")));
    }
    let run = |ep: &Endpoint, device: &str| {
        let mut c = q(ep);
        gpu_env(&mut c);
        c.args(["run", &format!("{name}:1"), "--user", "1000:1000", "--gpu-devices", device, "--", "sh", "-c", PROBE]);
        let out = run_expect(&mut c, 0);
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // Through CDI on Podman: exactly the requested render node, with its gid.
    let (one, _) = run(&podman.endpoint, "amd.com/gpu=1");
    assert_eq!(one, "char /dev/kfd 4242\nchar /dev/dri/renderD129 4243\ngroups 1000 4242 4243\nkfd-readable\n");
    // Docker 20.10 has no CDI: the same nodes are mapped, the same result inside.
    let (fallback, said) = run(&docker, "amd.com/gpu=1");
    assert_eq!(fallback, one);
    assert!(said.contains("predates CDI support"), "{said}");
    for device in ["amd.com/gpu=all", "amd.com/gpu=0x18ee54a8d7ea010f"] {
        assert_eq!(run(&podman.endpoint, device).0, run(&docker, device).0, "{device}");
    }
    assert!(run(&podman.endpoint, "amd.com/gpu=all").0.contains("renderD128 4242\nchar /dev/dri/renderD129 4243"));

    // Without the spec, Podman itself refuses the name: it was Podman that resolved it.
    drop(spec_file);
    let mut c = q(&podman.endpoint);
    gpu_env(&mut c);
    c.args(["run", &format!("{name}:1"), "--gpu-devices", "amd.com/gpu=1", "--", "true"]);
    fails_clearly(
        &podman.endpoint,
        &mut c,
        &["CDI device amd.com/gpu=1 does not exist on the engine at unix://", "quarry cdi generate"],
    );
    // A device this machine does not have.
    let mut c = q(&podman.endpoint);
    gpu_env(&mut c);
    c.args(["run", &format!("{name}:1"), "--gpu-devices", "amd.com/gpu=7", "--", "true"]);
    fails_clearly(
        &podman.endpoint,
        &mut c,
        &["--gpu-devices `amd.com/gpu=7`", "available: amd.com/gpu=0, amd.com/gpu=1"],
    );
    // A remote engine without CDI cannot take a name quarry cannot map.
    if have_endpoint_tools() {
        let tls = TlsEndpoint::start(Terminator::Stunnel, Path::new(DOCKER_SOCKET), "docker");
        let mut c = q(&tls.endpoint);
        gpu_env(&mut c);
        c.args(["run", &format!("{name}:1"), "--gpu-devices", "amd.com/gpu=7", "--", "true"]);
        fails_clearly(
            &docker,
            &mut c,
            &["amd.com/gpu=7", "cannot resolve CDI names", &format!("tcp://127.0.0.1:{}", tls.port)],
        );
    }
    // No GPU: a clear error, nothing written.
    let empty = tempfile::tempdir().unwrap();
    let out = run_expect(quarry().env("QUARRY_DEV_ROOT", empty.path()).args(["cdi", "generate"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("`{}/kfd` does not exist", empty.path().display())));
    assert!(podman.endpoint.leaked_containers().is_empty() && docker.leaked_containers().is_empty());
}
