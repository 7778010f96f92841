//! End-to-end tests of the engine integration: `run`, `load`, GPU
//! passthrough with simulated device nodes, `gpus` on a fixture topology,
//! step layers, `gc`, `doctor` and bad input, on the real Docker Engine
//! with Debian rootfs fixtures made by mmdebstrap.

use crate::common;

use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A layer cache shared by these tests (base layers are built once).
fn cache() -> PathBuf {
    fixtures_dir().join("engine-cache")
}

fn q() -> Command {
    let mut c = quarry();
    c.env("QUARRY_CACHE", cache())
        .env_remove("QUARRY_DEV_ROOT")
        .env_remove("QUARRY_SYSFS_ROOT")
        .env_remove("PYTORCH_ROCM_ARCH")
        .env_remove("GPU_ARCHS")
        .env_remove("ROCR_VISIBLE_DEVICES")
        .env_remove("HIP_VISIBLE_DEVICES");
    c
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("run docker");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An engine tag removed when the test ends.
struct Tag(String);

impl Drop for Tag {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", &self.0]).output();
    }
}

/// Containers of the quarry process `pid` still in the engine.
fn containers_of(pid: u32) -> Vec<String> {
    docker(&["ps", "-aq", "--filter", &format!("label=io.quarry.pid={pid}")]).lines().map(String::from).collect()
}

/// An image definition on the Debian base, with an optional inline layer
/// holding a file `/quarry-test/<name>.txt` (so the image is unique).
fn debian_definition(dir: &Path, name: &str, rootfs: &Path, extra: &str) -> PathBuf {
    let mut text = format!("name = \"{name}\"\nbase = {{ rootfs = \"{}\" }}\n", rootfs.display());
    if !extra.is_empty() {
        write(&dir.join(format!("{name}.txt")), extra);
        text.push_str(&format!(
            "[[layer]]\nname = \"marker\"\n[[layer.source]]\nfile = \"{name}.txt\"\ndest = \"/quarry-test/{name}.txt\"\n"
        ));
    }
    let f = dir.join(format!("{name}.toml"));
    write(&f, &text);
    f
}

/// The Debian base loaded into the engine under a unique tag.
fn loaded_debian(test: &str) -> Tag {
    let dir = tempfile::tempdir().unwrap();
    let def = debian_definition(dir.path(), "debian-min", &debian_rootfs(""), "");
    let layout = dir.path().join("oci");
    run_expect(q().arg("build").arg(&def).arg("-o").arg(&layout).arg("--quiet"), 0);
    let tag = format!("{}:1", unique(test));
    run_expect(q().arg("load").arg(&layout).args(["--tag", &tag]), 0);
    Tag(tag)
}

#[test]
fn run_propagates_exit_codes_and_leaves_no_container() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let img = loaded_debian("codes");
    for (script, code) in [("exit 0", 0), ("exit 1", 1), ("sh -c 'kill -9 $$'; exit $?", 137)] {
        let child = q()
            .args(["run", &img.0, "--gpu", "none", "--", "sh", "-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "`{script}`: {}", String::from_utf8_lossy(&out.stderr));
        assert!(containers_of(pid).is_empty(), "`{script}` left a container behind");
    }
}

#[test]
fn run_streams_output_live_and_sigint_removes_the_container() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let img = loaded_debian("stream");
    // Both streams arrive, each on its own side.
    let out = run_expect(q().args(["run", &img.0, "--", "sh", "-c", "echo to-out; echo to-err >&2"]), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to-out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to-err"));

    // The first line shows up while the container still runs; SIGINT then
    // stops quarry, which removes the container.
    let mut child = q()
        .args(["run", &img.0, "--", "sh", "-c", "echo started; sleep 120; echo never"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    assert!(child.try_wait().unwrap().is_none(), "quarry ended before the container did");
    assert_eq!(containers_of(pid).len(), 1, "the running container carries quarry's labels");
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(containers_of(pid).is_empty(), "SIGINT left a container behind");
}

#[test]
fn copy_in_and_out_round_trip() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let img = loaded_debian("copy");
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("in/sub/data.txt"), "payload\n");
    write(&dir.path().join("single.txt"), "single\n");
    std::fs::set_permissions(dir.path().join("single.txt"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let out_dir = dir.path().join("out");
    let out_file = dir.path().join("back.txt");
    let script = "cat /work/in/sub/data.txt /tmp/single.txt; tr a-z A-Z < /work/in/sub/data.txt > /work/in/upper.txt";
    let out = run_expect(
        q().args(["run", &img.0])
            .arg("--copy-in")
            .arg(format!("{}:/work/in", dir.path().join("in").display()))
            .arg("--copy-in")
            .arg(format!("{}:/tmp/", dir.path().join("single.txt").display()))
            .arg("--copy-out")
            .arg(format!("/work/in:{}", out_dir.display()))
            .arg("--copy-out")
            .arg(format!("/tmp/single.txt:{}", out_file.display()))
            .args(["--", "sh", "-c", script]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "payload\nsingle\n");
    assert_eq!(std::fs::read_to_string(out_dir.join("sub/data.txt")).unwrap(), "payload\n");
    assert_eq!(std::fs::read_to_string(out_dir.join("upper.txt")).unwrap(), "PAYLOAD\n");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "single\n");
    assert_eq!(std::fs::metadata(&out_file).unwrap().permissions().mode() & 0o777, 0o750);
}

/// A dev root with simulated nodes: kfd and renderD128 owned by gid 4242,
/// renderD129 by 4243 (gids no image knows). None when mknod is refused.
fn simulated_dev_root() -> Option<tempfile::TempDir> {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("dri")).unwrap();
    for (node, gid) in [("kfd", 4242u32), ("dri/renderD128", 4242), ("dri/renderD129", 4243)] {
        let p = d.path().join(node);
        let st = Command::new("mknod").arg(&p).args(["c", "1", "3"]).status().unwrap();
        if !st.success() {
            assert!(!in_ci(), "CI is set but mknod is not permitted: the GPU tests need root");
            eprintln!("skipping: mknod is not permitted here");
            return None;
        }
        std::os::unix::fs::chown(&p, None, Some(gid)).unwrap();
    }
    Some(d)
}

#[test]
fn gpu_profile_with_simulated_nodes() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let Some(dev) = simulated_dev_root() else {
        return;
    };
    let img = loaded_debian("gpu");
    let probe = "for n in /dev/kfd /dev/dri/renderD128 /dev/dri/renderD129; do [ -c $n ] && echo char $n; done; echo groups $(id -G)";
    let run = |extra: &[&str]| {
        let out = run_expect(
            q().env("QUARRY_DEV_ROOT", dev.path()).args(["run", &img.0]).args(extra).args(["--", "sh", "-c", probe]),
            0,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let groups = |s: &str| -> Vec<String> {
        s.lines().find_map(|l| l.strip_prefix("groups ")).unwrap_or("").split(' ').map(String::from).collect()
    };

    let all = run(&[]);
    for n in ["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"] {
        assert!(all.contains(&format!("char {n}\n")), "{n} missing in:\n{all}");
    }
    let g = groups(&all);
    assert!(g.contains(&"4242".into()) && g.contains(&"4243".into()), "id -G: {g:?}");

    let one = run(&["--gpu-devices", "renderD129"]);
    assert!(one.contains("char /dev/kfd\n") && one.contains("char /dev/dri/renderD129\n"), "{one}");
    assert!(!one.contains("renderD128"), "--gpu-devices renderD129 passed renderD128 too:\n{one}");

    let none = run(&["--gpu", "none"]);
    assert!(!none.contains("char "), "--gpu none passed devices:\n{none}");

    // --print-docker shows the same flags.
    let printed = |extra: &[&str]| {
        let out = run_expect(
            q().env("QUARRY_DEV_ROOT", dev.path())
                .args(["run", &img.0, "--print-docker"])
                .args(extra)
                .args(["--", "id", "-G"]),
            0,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let p = printed(&[]);
    let root = dev.path().display().to_string();
    for flag in [
        format!("--device {root}/kfd:/dev/kfd"),
        format!("--device {root}/dri/renderD128:/dev/dri/renderD128"),
        format!("--device {root}/dri/renderD129:/dev/dri/renderD129"),
        "--group-add 4242".into(),
        "--group-add 4243".into(),
        "--ipc host".into(),
        "--security-opt seccomp=unconfined".into(),
        "--cap-add SYS_PTRACE".into(),
        "--ulimit memlock=-1:-1".into(),
        "--network none".into(),
    ] {
        assert!(p.contains(&flag), "`{flag}` missing from:\n{p}");
    }
    assert!(p.trim_end().ends_with(&format!("{} id -G", img.0)), "{p}");
    // The line is the user's to run: no quarry label that `quarry gc` would act on.
    assert!(!p.contains("io.quarry"), "{p}");
    let p1 = printed(&["--gpu-devices", "renderD129"]);
    assert!(p1.contains("renderD129") && !p1.contains("renderD128"), "{p1}");
    let p0 = printed(&["--gpu", "none"]);
    assert!(!p0.contains("--device") && !p0.contains("--group-add"), "{p0}");
}

/// A KFD topology with a CPU node, a gfx942 and a gfx1100.
fn fixture_topology() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let nodes = d.path().join("class/kfd/kfd/topology/nodes");
    write(&nodes.join("0/properties"), "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\ndrm_render_minor 0\n");
    write(
        &nodes.join("1/properties"),
        "cpu_cores_count 0\nsimd_count 1216\ngfx_target_version 90402\ndrm_render_minor 128\n",
    );
    write(
        &nodes.join("2/properties"),
        "cpu_cores_count 0\nsimd_count 192\ngfx_target_version 110000\ndrm_render_minor 129\n",
    );
    d
}

#[test]
fn gpus_reports_fixture_topology_and_targets() {
    let sys = fixture_topology();
    let empty_dev = tempfile::tempdir().unwrap();
    let out = run_expect(
        q().env("QUARRY_SYSFS_ROOT", sys.path()).env("QUARRY_DEV_ROOT", empty_dev.path()).args(["gpus", "--json"]),
        0,
    );
    let j = stdout_json(&out);
    let gpus = j["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{j}");
    assert_eq!(gpus[0]["gfx_target"], "gfx942");
    assert_eq!(gpus[0]["family"], "gfx94X-all");
    assert_eq!(gpus[0]["families"], serde_json::json!(["gfx94X-all", "gfx94X-dcgpu"]));
    assert_eq!(gpus[0]["render_node"], "renderD128");
    assert_eq!(gpus[1]["gfx_target"], "gfx1100");
    assert_eq!(gpus[1]["family"], "gfx110X-all");
    assert_eq!(gpus[1]["render_node"], "renderD129");
    assert_eq!(j["targets"], serde_json::json!(["gfx942", "gfx1100"]));
    assert_eq!(j["targets_source"], "detected");

    // An explicit setting wins; no GPU and no setting gives the default list.
    let out = run_expect(
        q().env("QUARRY_SYSFS_ROOT", sys.path()).env("PYTORCH_ROCM_ARCH", "gfx90a;gfx950").args(["gpus", "--json"]),
        0,
    );
    assert_eq!(stdout_json(&out)["targets"], serde_json::json!(["gfx90a", "gfx950"]));
    let out = run_expect(q().env("QUARRY_SYSFS_ROOT", empty_dev.path()).args(["gpus", "--json"]), 0);
    let j = stdout_json(&out);
    assert_eq!(j["targets_source"], "default");
    assert_eq!(j["targets"], serde_json::json!(["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"]));
}

#[test]
fn load_twice_skips_every_layer_and_zstd_loads() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("load");
    let def = debian_definition(dir.path(), &name, &debian_rootfs(""), &format!("unique {name}\n"));
    let layout = dir.path().join("oci");
    run_expect(q().arg("build").arg(&def).arg("-o").arg(&layout).arg("--quiet"), 0);
    let tag = Tag(format!("{name}:1"));
    let first = stdout_json(&run_expect(q().arg("load").arg(&layout).args(["--tag", &tag.0, "--json"]), 0));
    assert_eq!(first["tag"], tag.0.as_str());
    assert!(first["layers_sent"].as_u64().unwrap() >= 1, "the unique layer must be sent: {first}");
    let second = stdout_json(&run_expect(q().arg("load").arg(&layout).args(["--tag", &tag.0, "--json"]), 0));
    assert_eq!(second["layers_sent"], 0, "{second}");
    assert_eq!(second["layers_skipped"], 2, "{second}");
    assert_eq!(second["image_id"], first["image_id"]);
    let id = docker(&["image", "inspect", "--format", "{{.Id}}", &tag.0]);
    assert_eq!(id.trim(), first["image_id"].as_str().unwrap());
    // A definition is built first (same layers, so nothing is sent).
    let from_def = stdout_json(&run_expect(q().arg("load").arg(&def).args(["--tag", &tag.0, "--json"]), 0));
    assert_eq!(from_def["layers_sent"], 0, "{from_def}");
    assert_eq!(from_def["image_id"], first["image_id"]);

    // zstd layers: recompressed for an engine that cannot read them (20.10), else sent as they are.
    let zlayout = dir.path().join("oci-zstd");
    run_expect(q().arg("build").arg(&def).arg("-o").arg(&zlayout).args(["--quiet", "--compression", "zstd"]), 0);
    let ztag = Tag(format!("{name}-zstd:1"));
    let z = stdout_json(&run_expect(q().arg("load").arg(&zlayout).args(["--tag", &ztag.0, "--json"]), 0));
    assert!(z["layers_sent"].as_u64().unwrap() + z["layers_skipped"].as_u64().unwrap() == 2, "{z}");
    let api = docker(&["version", "--format", "{{.Server.APIVersion}}"]);
    let (major, minor) =
        api.trim().split_once('.').map(|(a, b)| (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap())).unwrap();
    if (major, minor) < (1, 42) {
        assert_eq!(z["layers_recompressed"], z["layers_sent"], "an engine before Docker 23 needs gzip: {z}");
    }
    let out = run_expect(q().args(["run", &ztag.0, "--", "cat", &format!("/quarry-test/{name}.txt")]), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("unique {name}\n"));
}

#[test]
fn step_layer_compiles_c_and_is_reproducible() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let rootfs = debian_rootfs("gcc,libc6-dev");
    let dir = tempfile::tempdir().unwrap();
    let name = unique("step");
    write(
        &dir.path().join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello from a step\"); return 0; }\n",
    );
    let pin = quarry::oci::digest::sha256_file(&dir.path().join("hello.c")).unwrap();
    let def = dir.path().join("step.toml");
    write(
        &def,
        &format!(
            r#"name = "{name}"
base = {{ rootfs = "{rootfs}" }}
[[layer]]
name = "compile"
[[layer.input]]
file = "hello.c"
sha256 = "{pin}"
dest = "/tmp/src/"
[layer.run]
script = "gcc -O2 -o /usr/local/bin/hello /tmp/src/hello.c && rm -rf /tmp/src && ls /sys/class/net > /etc/step-net && rm -rf /usr/share/doc/gcc-12"
"#,
            rootfs = rootfs.display()
        ),
    );
    let build = |cache: &Path, out: &Path| {
        let o = run_expect(q().env("QUARRY_CACHE", cache).arg("build").arg(&def).arg("-o").arg(out).arg("--json"), 0);
        let j = stdout_json(&o);
        let step = j["layers"].as_array().unwrap().iter().find(|l| l["name"] == "compile").cloned().unwrap();
        step["digest"].as_str().unwrap().to_string()
    };
    // Build twice; the second cache is a copy of the first without the
    // step's record, so the base is reused and the step runs again.
    let c1 = tempfile::tempdir().unwrap();
    let d1 = build(c1.path(), &dir.path().join("out1"));
    let c2 = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-al")
        .arg(c1.path().join("blobs"))
        .arg(c1.path().join("layers"))
        .arg(c2.path())
        .status()
        .unwrap();
    assert!(st.success());
    for rec in std::fs::read_dir(c2.path().join("layers")).unwrap() {
        let rec = rec.unwrap().path();
        if std::fs::read_to_string(&rec).unwrap().contains(&d1) {
            std::fs::remove_file(&rec).unwrap();
        }
    }
    let d2 = build(c2.path(), &dir.path().join("out2"));
    assert_eq!(d1, d2, "two builds of the step gave different layers");

    // The program runs from the final image (the definition is built from
    // the cache and loaded); the step saw only loopback.
    let tag = Tag(format!("{name}:latest"));
    let out = run_expect(
        q().env("QUARRY_CACHE", c1.path()).arg("run").arg(&def).args(["--", "sh", "-c", "hello; cat /etc/step-net"]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from a step\nlo\n");
    drop(tag);

    // The diff keeps deletions as whiteouts and drops the removed input dir.
    let listing = Command::new("tar").arg("tzf").arg(layer_blob(&dir.path().join("out1"), &d1)).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("usr/local/bin/hello"), "{listing}");
    assert!(listing.contains("usr/share/doc/.wh.gcc-12"), "{listing}");
    assert!(!listing.contains("tmp/src/hello.c"), "{listing}");
}

fn layer_blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
}

#[test]
fn failing_step_shows_exit_code_and_leaves_nothing() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("fail.toml");
    write(
        &def,
        &format!(
            "name = \"{}\"\nbase = {{ rootfs = \"{}\" }}\n[[layer]]\nname = \"broken\"\n[layer.run]\nscript = \"echo about to fail; exit 7\"\n",
            unique("fail"),
            debian_rootfs("").display()
        ),
    );
    let child =
        q().arg("build").arg(&def).arg("-o").arg(dir.path().join("out")).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(err.contains("about to fail"), "the script's output is shown: {err}");
    assert!(err.contains("exit code 7") && err.contains("broken"), "{err}");
    assert!(containers_of(pid).is_empty(), "a failed step left a container");
    let leftovers =
        docker(&["images", "--format", "{{.Repository}}", "--filter", &format!("reference=quarry-step-{pid}-*")]);
    assert!(leftovers.trim().is_empty(), "temporary step images left: {leftovers}");
}

#[test]
fn bad_input_gives_clear_errors() {
    // An engine that does not answer.
    for host in ["unix:///nonexistent/quarry-test.sock", "tcp://127.0.0.1:1"] {
        let out = run_expect(q().env("DOCKER_HOST", host).args(["run", "debian:12", "--gpu", "none", "--", "true"]), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("cannot reach the Docker Engine at {host}")) && err.contains("is dockerd running?"),
            "{err}"
        );
    }
    if !have_docker() {
        return;
    }
    // A missing image.
    let missing = format!("{}:nope", unique("missing"));
    let child = q().args(["run", &missing, "--", "true"]).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("image `{missing}` is not in the Docker Engine")), "{err}");
    assert!(containers_of(pid).is_empty());
    // Bad options name themselves.
    let out = run_expect(q().args(["run", "x", "--mount", "/nonexistent/quarry:/data", "--", "true"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mount `/nonexistent/quarry:/data`"));
    let out = run_expect(q().args(["run", "x", "--copy-out", "relative:/x", "--", "true"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--copy-out `relative:/x`"));
}

#[test]
fn gc_removes_leftovers_of_dead_processes() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let img = loaded_debian("gc");
    // Other areas' leak checks run in this process: none may see this one.
    let _leftover_made = common::engines::GC_LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner());
    // A container as a killed quarry would leave it: labelled, with a pid that is not running.
    let dead_pid = "2147483600";
    let id = docker(&[
        "create",
        "--label",
        "io.quarry.managed=true",
        "--label",
        &format!("io.quarry.pid={dead_pid}"),
        &img.0,
        "true",
    ]);
    let id = id.trim().to_string();
    assert!(!id.is_empty());
    let j = stdout_json(&run_expect(q().args(["gc", "--json"]), 0));
    let removed: Vec<String> =
        j["containers_removed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert!(removed.contains(&id), "{j}");
    assert!(docker(&["ps", "-aq", "--filter", &format!("label=io.quarry.pid={dead_pid}")]).trim().is_empty());
}

#[test]
fn doctor_reports_engine_gpu_nodes_and_cache() {
    if !have_docker() {
        return;
    }
    let Some(dev) = simulated_dev_root() else {
        return;
    };
    let out = run_expect(q().env("QUARRY_DEV_ROOT", dev.path()).args(["doctor", "--json"]), 0);
    let j = stdout_json(&out);
    assert_eq!(j["engine"]["reachable"], true, "{j}");
    assert!(j["engine"]["version"].as_str().unwrap().contains('.'));
    assert!(!j["engine"]["storage_driver"].as_str().unwrap().is_empty());
    let gids: Vec<u64> = j["gpu_nodes"].as_array().unwrap().iter().map(|n| n["gid"].as_u64().unwrap()).collect();
    assert_eq!(gids, [4242, 4242, 4243], "{j}");
    assert!(j["cache"]["free_bytes"].as_u64().unwrap() > 0);
    let out = run_expect(q().env("DOCKER_HOST", "unix:///nonexistent/quarry.sock").arg("doctor"), 1);
    assert!(String::from_utf8_lossy(&out.stdout).contains("cannot reach the Docker Engine"));
}

/// A path that does not exist is not taken for an engine image: the error says it does not exist.
#[test]
fn a_missing_layout_path_says_it_does_not_exist() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("out")).unwrap();
    for arg in ["out/no_such_dir", "./no_such_dir"] {
        let o = run_expect(quarry().current_dir(d.path()).args(["run", arg, "--gpu", "none", "--", "true"]), 1);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(&format!("`{arg}` does not exist")), "{e}");
        assert!(!e.contains("load it first"), "{e}");
    }
}
