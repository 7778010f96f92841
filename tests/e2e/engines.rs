//! The engines GPU labs run, end to end with the real binary: the same
//! subset (a build with a step layer, load, run with simulated GPUs and
//! host gids, a wheel build and a kernel build with hipcc in the Debian 13
//! ROCm builder, gc, doctor) on the local Docker Engine, on Podman 4.3
//! (Debian's, a service on its own socket), over TCP with TLS (stunnel, and
//! socat's `OPENSSL-LISTEN`, with openssl-made certificates: tls.rs) and
//! over ssh (Debian's sshd, a key made here); the TLS and ssh endpoints
//! front the local Docker Engine, whose images are already there. Step
//! layers and wheels come out the same on Docker and Podman, and Podman's
//! refused limits are lowered. In engines/: choosing endpoints (docker
//! contexts, `--engine`) and bad ones (endpoints.rs), TLS terminators and
//! what a failed handshake says (tls.rs), CDI on Podman against Docker's
//! fallback (cdi.rs), and rootless Podman (rootless.rs).

#[path = "engines/cdi.rs"]
mod cdi;
use crate::common;
#[path = "engines/endpoints.rs"]
mod endpoints;
#[path = "engines/rootless.rs"]
mod rootless;
#[path = "engines/tls.rs"]
mod tls;

use common::engines::{have_podman, Endpoint, Podman};
use common::remote::{have_endpoint_tools, SshEndpoint};
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// quarry on `ep`, with no simulated GPU or target settings from outside,
/// and a cache under target/ unless a call names another.
fn q(ep: &Endpoint) -> Command {
    let mut c = quarry();
    for k in ["QUARRY_DEV_ROOT", "QUARRY_SYSFS_ROOT", "PYTORCH_ROCM_ARCH", "GPU_ARCHS"] {
        c.env_remove(k);
    }
    c.env("QUARRY_CACHE", fixtures_dir().join("engines-cache"));
    ep.apply(&mut c);
    c
}

/// A layer cache holding the Debian base layer (built once, shared), copied
/// by hardlinks so each endpoint's step runs in its own engine.
fn fresh_cache(into: &Path) -> PathBuf {
    let shared = fixtures_dir().join("engines-cache");
    with_lock("engines-cache", || {
        if !shared.join("layers").is_dir() {
            let dir = tempfile::tempdir().unwrap();
            let def = dir.path().join("base.toml");
            write(
                &def,
                &format!("name = \"engines-base\"\nbase = {{ rootfs = \"{}\" }}\n", debian_rootfs("").display()),
            );
            run_expect(
                quarry()
                    .env("QUARRY_CACHE", &shared)
                    .arg("build")
                    .arg(&def)
                    .arg("-o")
                    .arg(dir.path().join("o"))
                    .arg("--quiet"),
                0,
            );
        }
    });
    let cache = into.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let st = Command::new("cp")
        .arg("-al")
        .arg(shared.join("blobs"))
        .arg(shared.join("layers"))
        .arg(&cache)
        .status()
        .unwrap();
    assert!(st.success());
    cache
}

/// An image on the Debian base with a step: it writes a file and deletes one.
fn step_definition(dir: &Path, name: &str) -> PathBuf {
    let def = dir.join(format!("{name}.toml"));
    write(
        &def,
        &format!(
            "name = \"{name}\"\nbase = {{ rootfs = \"{}\" }}\n[[layer]]\nname = \"stepped\"\n[layer.run]\nscript = \"echo built in a step > /etc/stepped && rm -rf /usr/share/doc/apt && ls /sys/class/net > /etc/step-net\"\n",
            debian_rootfs("").display()
        ),
    );
    def
}

/// Build `def` with `cache`; the step layer's digest (it must have run).
fn build_step(ep: &Endpoint, def: &Path, cache: &Path, out: &Path) -> String {
    let j = stdout_json(&run_expect(
        q(ep).env("QUARRY_CACHE", cache).arg("build").arg(def).arg("-o").arg(out).arg("--json"),
        0,
    ));
    let step = j["layers"].as_array().unwrap().iter().find(|l| l["name"] == "stepped").cloned().unwrap();
    assert_eq!(step["cached"], false, "the step must run on {}: {j:#}", ep.name);
    step["digest"].as_str().unwrap().to_string()
}

/// A dev root with simulated nodes: kfd and renderD128 owned by gid 4242,
/// renderD129 by 4243 (gids no image knows), readable by their group only.
fn simulated_dev_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("dri")).unwrap();
    for (node, gid) in [("kfd", 4242u32), ("dri/renderD128", 4242), ("dri/renderD129", 4243)] {
        let p = d.path().join(node);
        let st = Command::new("mknod").arg(&p).args(["-m", "0660", "c", "1", "3"]).status().unwrap();
        assert!(st.success(), "mknod is needed for the GPU tests (root)");
        std::os::unix::fs::chown(&p, None, Some(gid)).unwrap();
    }
    d
}

const PROBE: &str = "for n in /dev/kfd /dev/dri/renderD128 /dev/dri/renderD129; do [ -c $n ] && echo char $n $(stat -c %g $n); done; echo groups $(id -G); head -c1 /dev/kfd >/dev/null && echo kfd-readable";

/// An engine tag removed with the engine's CLI when the test ends.
struct Tag<'e>(&'e Endpoint, String);

impl Drop for Tag<'_> {
    fn drop(&mut self) {
        let _ = self.0.cli(&["rmi", &self.1]).output();
    }
}

/// `wheel build` of tests/fixtures/hip/pyext (hipcc, one target) in the
/// builder, repaired with the image's libraries (as `wheel repair --image`
/// does, in a container); the wheel's sha256.
fn build_wheel(ep: &Endpoint, builder: &Path, out: &Path) -> String {
    let mut c = q(ep);
    c.args(["wheel", "build"])
        .arg(repo().join("tests/fixtures/hip/pyext"))
        .arg("--image")
        .arg(builder)
        .arg("-o")
        .arg(out);
    c.args(["--axis", "PYTORCH_ROCM_ARCH=gfx90a", "--gpu", "none", "--repair", "--exclude", "libamdhip64.so*"]);
    // Built on this engine every time: a wheel an earlier endpoint cached
    // would make the comparison between engines say nothing.
    c.arg("--no-cache");
    c.arg("--json").arg("--cache-dir").arg(repo().join("target/packages-cache"));
    let j = stdout_json(&run_expect(&mut c, 0));
    let wheels = j.as_array().cloned().unwrap_or_else(|| j["wheels"].as_array().cloned().unwrap());
    assert_eq!(wheels.len(), 1, "{}: {wheels:#?}", ep.name);
    assert_eq!(wheels[0]["cached"], false, "{}: {wheels:#?}", ep.name);
    assert_eq!(wheels[0]["repaired"], true, "{}: {wheels:#?}", ep.name);
    wheels[0]["sha256"].as_str().unwrap().to_string()
}

struct Results {
    step_digest: String,
    wheel_sha256: String,
}

/// The end-to-end subset on one endpoint.
fn subset(ep: &Endpoint) -> Results {
    // Each phase's time, in the test's output (for the suite's time budget).
    let started = std::time::Instant::now();
    let mut last = started;
    let mut phase = |what: &str| {
        eprintln!("{}: {what} {:.1} s", ep.name, last.elapsed().as_secs_f64());
        last = std::time::Instant::now();
    };
    let work = tempfile::tempdir().unwrap();
    let name = unique(&format!("{}-step", ep.name));

    // doctor: this endpoint, chosen for the right reason, the right engine.
    let doc = stdout_json(&run_expect(q(ep).args(["doctor", "--json"]), 0));
    let e = &doc["engine"];
    assert_eq!(e["reachable"], true, "{}: {doc:#}", ep.name);
    assert_eq!(e["kind"], ep.kind, "{doc:#}");
    assert_eq!(e["remote"], ep.remote, "{doc:#}");
    assert!(e["chosen_by"].as_str().unwrap().contains(&ep.chosen_by), "{doc:#}");

    phase("doctor");
    // A build with a step layer: the step runs in this engine.
    let def = step_definition(work.path(), &name);
    let layout = work.path().join("oci");
    let step_digest = build_step(ep, &def, &fresh_cache(work.path()), &layout);

    phase("build with a step layer");
    // Load, twice: the second time every layer is in the engine already.
    let tag = Tag(ep, format!("{name}:1"));
    let first = stdout_json(&run_expect(q(ep).arg("load").arg(&layout).args(["--tag", &tag.1, "--json"]), 0));
    let again = stdout_json(&run_expect(q(ep).arg("load").arg(&layout).args(["--tag", &tag.1, "--json"]), 0));
    assert_eq!(again["layers_sent"], 0, "{}: {again:#}", ep.name);
    assert_eq!(again["image_id"], first["image_id"]);

    phase("load twice");
    // Run with simulated GPUs: the nodes, the host gids, access through them;
    // a subset; the exit code; copies through the API both ways.
    let dev = simulated_dev_root();
    let run = |extra: &[&str], script: &str, code: i32| {
        let mut c = q(ep);
        c.env("QUARRY_DEV_ROOT", dev.path())
            .args(["run", &tag.1, "--gpu", "amd"])
            .args(extra)
            .args(["--", "sh", "-c", script]);
        String::from_utf8_lossy(&run_expect(&mut c, code).stdout).into_owned()
    };
    // A user other than root: only the added gids give access to the nodes.
    let all = run(&["--user", "1000:1000"], PROBE, 0);
    for n in ["/dev/kfd 4242", "/dev/dri/renderD128 4242", "/dev/dri/renderD129 4243"] {
        assert!(all.contains(&format!("char {n}\n")), "{}: {n} missing:\n{all}", ep.name);
    }
    let groups: Vec<&str> = all.lines().find_map(|l| l.strip_prefix("groups ")).unwrap().split(' ').collect();
    assert!(groups.contains(&"4242") && groups.contains(&"4243"), "{}: {all}", ep.name);
    assert!(all.contains("kfd-readable"), "{}: the host gid gives no access:\n{all}", ep.name);
    let one = run(&["--user", "1000:1000", "--gpu-devices", "renderD129"], PROBE, 0);
    assert!(one.contains("char /dev/dri/renderD129 4243") && !one.contains("renderD128"), "{}: {one}", ep.name);
    let input = work.path().join("in");
    write(&input.join("data.txt"), "payload\n");
    let out_dir = work.path().join("out");
    let copied = run(
        &[
            "--copy-in",
            &format!("{}:/work/in", input.display()),
            "--copy-out",
            &format!("/work/in:{}", out_dir.display()),
        ],
        "cat /work/in/data.txt /etc/stepped /etc/step-net; echo up > /work/in/up.txt; exit 3",
        3,
    );
    assert_eq!(copied, "payload\nbuilt in a step\nlo\n", "{}", ep.name);
    assert_eq!(std::fs::read_to_string(out_dir.join("up.txt")).unwrap(), "up\n");

    phase("three runs (GPUs, subset, copies)");
    // A kernel build and a wheel build with hipcc in the Debian 13 builder
    // (the layout is loaded into the engine on first use).
    let (_, builder) = debian13_rocm_images();
    let src = work.path().join("ksrc");
    std::fs::create_dir_all(&src).unwrap();
    for f in ["vops.hip", "Makefile"] {
        std::fs::copy(repo().join("tests/fixtures/hip/lib").join(f), src.join(f)).unwrap();
    }
    let kernel = stdout_json(&run_expect(
        q(ep)
            .args(["kernel", "build"])
            .arg(&src)
            .arg("--image")
            .arg(&builder)
            .arg("-o")
            .arg(work.path().join("kout"))
            .arg("--cache-dir")
            .arg(work.path().join("kcache"))
            .args(["--targets", "gfx90a", "--gpu", "none", "--json", "--", "make"]),
        0,
    ));
    assert_eq!(kernel["cached"], false, "{kernel:#}");
    let lib =
        kernel["outputs"].as_array().unwrap().iter().find(|o| o["file"] == "libvops.so").cloned().expect("libvops.so");
    assert_eq!(lib["targets"], serde_json::json!(["gfx90a"]), "{}: {kernel:#}", ep.name);
    phase("kernel build");
    let wheel_sha256 = build_wheel(ep, &builder, &work.path().join("wheels"));
    phase("wheel build and repair");

    // gc: a container as a killed quarry leaves it goes; one that quarry on
    // another machine made stays (its process cannot be seen from here).
    // No other test of this binary may gc or check for leaks until these are gone.
    let leftovers_made = common::engines::GC_LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner());
    let dead = "2147483600";
    let leftover = |host: &str| {
        let labels =
            ["io.quarry.managed=true".to_string(), format!("io.quarry.pid={dead}"), format!("io.quarry.host={host}")];
        let mut args = vec!["create"];
        for l in &labels {
            args.extend(["--label", l.as_str()]);
        }
        args.extend([tag.1.as_str(), "true"]);
        ep.cli_out(&args).trim().to_string()
    };
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let (left, elsewhere) = (leftover(&here), leftover("another-machine"));
    let gc = stdout_json(&run_expect(q(ep).args(["gc", "--json"]), 0));
    let removed: Vec<&str> = gc["containers_removed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let same = |a: &str, b: &str| a.starts_with(b) || b.starts_with(a);
    assert!(removed.iter().any(|r| same(r, &left)), "{}: {gc:#}", ep.name);
    assert!(!removed.iter().any(|r| same(r, &elsewhere)), "{}: {gc:#}", ep.name);
    assert!(gc["kept_other_hosts"].as_u64().unwrap() >= 1, "{gc:#}");
    ep.cli_out(&["rm", &elsewhere]);
    let leaked = ep.leaked_containers_locked();
    drop(leftovers_made);
    assert!(leaked.is_empty(), "{}: leaked {leaked:?}", ep.name);
    phase("gc");
    eprintln!("{}: the subset took {:.1} s", ep.name, started.elapsed().as_secs_f64());
    Results { step_digest, wheel_sha256 }
}

#[test]
fn subset_on_the_local_docker_engine() {
    if !have_docker() || !have_tool("mmdebstrap") || !have_tool("gpgv") {
        return;
    }
    subset(&Endpoint::local_docker());
}

#[test]
fn subset_on_podman_matches_docker() {
    if !have_docker() || !have_podman() || !have_tool("mmdebstrap") || !have_tool("gpgv") {
        return;
    }
    let podman = Podman::rootful();
    let on_podman = subset(&podman.endpoint);

    // Podman's runtime cannot apply its own default limits here (no
    // CAP_SYS_RESOURCE): quarry lowered them, said so, and doctor says why.
    let doc = stdout_json(&run_expect(q(&podman.endpoint).args(["doctor", "--json"]), 0));
    let differences = doc["engine"]["differences"].to_string();
    assert!(differences.contains("libpod") && differences.contains("1048576"), "{doc:#}");
    assert_eq!(doc["engine"]["cdi"]["supported"], true, "{doc:#}");

    // The same step and the same wheel on Docker give the same bytes.
    let docker = Endpoint::local_docker();
    let work = tempfile::tempdir().unwrap();
    let def = step_definition(work.path(), &unique("docker-step"));
    let on_docker = build_step(&docker, &def, &fresh_cache(work.path()), &work.path().join("oci"));
    assert_eq!(on_podman.step_digest, on_docker, "a step's layer differs between Podman and Docker");
    let (_, builder) = debian13_rocm_images();
    let on_docker = build_wheel(&docker, &builder, &work.path().join("wheels"));
    assert_eq!(on_docker, on_podman.wheel_sha256, "the wheel differs between Podman and Docker");
}

#[test]
fn podman_reads_zstd_and_lowers_the_limits_it_cannot_apply() {
    if !have_podman() || !have_tool("mmdebstrap") {
        return;
    }
    let podman = Podman::rootful();
    let ep = &podman.endpoint;
    let work = tempfile::tempdir().unwrap();
    let name = unique("limits");
    let def = work.path().join("plain.toml");
    write(&def, &format!("name = \"{name}\"\nbase = {{ rootfs = \"{}\" }}\n", debian_rootfs("").display()));
    // zstd layers go to Podman as they are (it reports API 1.41, yet reads them).
    let layout = work.path().join("zstd");
    let cache = fresh_cache(work.path());
    run_expect(
        q(ep).env("QUARRY_CACHE", &cache).arg("build").arg(&def).arg("-o").arg(&layout).args([
            "--compression",
            "zstd",
            "--quiet",
        ]),
        0,
    );
    let tag = Tag(ep, format!("{name}:1"));
    let loaded = stdout_json(&run_expect(q(ep).arg("load").arg(&layout).args(["--tag", &tag.1, "--json"]), 0));
    assert_eq!(loaded["layers_recompressed"], 0, "{loaded:#}");
    let out = run_expect(q(ep).args(["run", &tag.1, "--gpu", "none", "--", "sh", "-c", "ulimit -n"]), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    let doc = stdout_json(&run_expect(q(ep).args(["doctor", "--json"]), 0));
    let limits = &doc["engine"]["process_limits"];
    if limits["can_raise"] == false && limits["hard"]["nofile"].as_i64().unwrap() < 1048576 {
        // This machine: runc's "error setting rlimit type 7", then type 6.
        assert!(err.contains("cannot apply its default nofile limit") && err.contains("rlimit type 7"), "{err}");
        let nofile = limits["hard"]["nofile"].as_i64().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), nofile.to_string(), "{err}");
        assert!(doc["engine"]["differences"].to_string().contains("cannot raise limits"), "{doc:#}");
    }
    assert!(ep.leaked_containers().is_empty());
}

#[test]
fn subset_over_ssh() {
    if !have_docker() || !have_endpoint_tools() || !have_tool("mmdebstrap") || !have_tool("gpgv") {
        return;
    }
    let ssh = SshEndpoint::start();
    subset(&ssh.endpoint);
    // quarry leaves no ssh process behind (they end when its pipes close).
    let pattern = format!("-p {} -- 127.0.0.1 docker", ssh.port);
    let left = || Command::new("pgrep").args(["-f", "--", &pattern]).output().unwrap().stdout;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !left().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(left().is_empty(), "ssh processes left: {}", String::from_utf8_lossy(&left()));
}

/// Run quarry; it must fail with exactly one error line containing every
/// one of `wants`, and leave no container in `ep`.
fn fails_clearly(ep: &Endpoint, cmd: &mut Command, wants: &[&str]) {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("quarry: error:")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    for w in wants {
        assert!(errors[0].contains(w), "`{w}` missing from: {}", errors[0]);
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(ep.containers_of(pid).is_empty(), "a container was left behind");
}
