//! The engines GPU labs run, end to end with the real binary: the same
//! subset (a build with a step layer, load, run with simulated GPUs and
//! host gids, a wheel build and a kernel build with hipcc in the Debian 13
//! ROCm builder, gc, doctor) on the local Docker Engine, on Podman 4.3
//! (Debian's, a service on its own socket), over TCP with TLS (stunnel with
//! openssl-made certificates) and over ssh (Debian's sshd, a key made
//! here); the TLS and ssh endpoints front the local Docker Engine, whose
//! images are already there. Step layers and wheels come out the same on
//! Docker and Podman. Docker contexts made by the docker CLI select
//! endpoints. Bad endpoints give one-line errors and leave nothing behind.
//! `quarry cdi generate` writes a spec Podman accepts as written, and a
//! container started through CDI sees what the device-mapping fallback
//! gives on Docker 20.10. Rootless Podman runs, and says what differs.

mod common;

use common::engines::{have_endpoint_tools, have_podman, Endpoint, Podman, SshEndpoint, TlsEndpoint, DOCKER_SOCKET};
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
    c.arg("--json").arg("--cache-dir").arg(repo().join("target/packages-cache"));
    let j = stdout_json(&run_expect(&mut c, 0));
    let wheels = j.as_array().cloned().unwrap_or_else(|| j["wheels"].as_array().cloned().unwrap());
    assert_eq!(wheels.len(), 1, "{}: {wheels:#?}", ep.name);
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
    assert!(ep.leaked_containers().is_empty(), "{}: leaked {:?}", ep.name, ep.leaked_containers());
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
fn subset_over_tls() {
    if !have_docker() || !have_endpoint_tools() || !have_tool("mmdebstrap") || !have_tool("gpgv") {
        return;
    }
    let tls = TlsEndpoint::start(Path::new(DOCKER_SOCKET), "docker");
    subset(&tls.endpoint);
    // No host path is handed to a remote engine.
    let out = run_expect(q(&tls.endpoint).args(["run", "debian:12", "--mount", "/tmp:/host-tmp", "--", "true"]), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mount bind-mounts a path of this machine")
            && err.contains(&format!("tcp://127.0.0.1:{}", tls.port)),
        "{err}"
    );
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

/// A docker config directory with contexts made by the docker CLI itself.
fn docker_cli_context(config: &Path, name: &str, docker_arg: &str) {
    let out = Command::new("docker")
        .env("DOCKER_CONFIG", config)
        .env_remove("DOCKER_HOST")
        .env_remove("DOCKER_CONTEXT")
        .args(["context", "create", name, "--docker", docker_arg])
        .output()
        .unwrap();
    assert!(out.status.success(), "docker context create: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn docker_contexts_choose_the_endpoint() {
    if !have_docker() || !have_endpoint_tools() {
        return;
    }
    let tls = TlsEndpoint::start(Path::new(DOCKER_SOCKET), "docker");
    let ssh = SshEndpoint::start();
    let config = tempfile::tempdir().unwrap();
    let c = tls.client_dir();
    docker_cli_context(
        config.path(),
        "lab-tls",
        &format!(
            "host=tcp://127.0.0.1:{},ca={},cert={},key={}",
            tls.port,
            c.join("ca.pem").display(),
            c.join("cert.pem").display(),
            c.join("key.pem").display()
        ),
    );
    docker_cli_context(config.path(), "lab-ssh", &format!("host=ssh://root@127.0.0.1:{}", ssh.port));
    let ssh_path = ssh.endpoint.env.iter().find(|(k, _)| k == "PATH").unwrap().1.clone();
    let doctor = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = quarry();
        cmd.env("QUARRY_CACHE", fixtures_dir().join("engines-cache"));
        for k in ["DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "QUARRY_ENGINE"] {
            cmd.env_remove(k);
        }
        cmd.env("DOCKER_CONFIG", config.path()).env("PATH", &ssh_path).envs(env.iter().copied());
        stdout_json(&run_expect(cmd.args(args).args(["doctor", "--json"]), 0))["engine"].clone()
    };
    // DOCKER_CONTEXT: the context's endpoint and TLS material.
    let e = doctor(&[("DOCKER_CONTEXT", "lab-tls")], &[]);
    assert_eq!(e["reachable"], true, "{e:#}");
    assert_eq!(e["host"], format!("tcp://127.0.0.1:{}", tls.port));
    assert_eq!(e["chosen_by"], "docker context `lab-tls` (DOCKER_CONTEXT)");
    // `docker context use` writes currentContext; quarry follows it.
    let st = Command::new("docker")
        .env("DOCKER_CONFIG", config.path())
        .args(["context", "use", "lab-ssh"])
        .output()
        .unwrap();
    assert!(st.status.success());
    let e = doctor(&[], &[]);
    assert_eq!(e["reachable"], true, "{e:#}");
    assert_eq!(e["host"], format!("ssh://root@127.0.0.1:{}", ssh.port));
    assert!(e["chosen_by"].as_str().unwrap().starts_with("docker context `lab-ssh` (currentContext in "), "{e:#}");
    // --engine wins over both, as a context name or an address; DOCKER_HOST over the current context.
    let e = doctor(&[("DOCKER_CONTEXT", "lab-ssh")], &["--engine", "lab-tls"]);
    assert_eq!(e["chosen_by"], "docker context `lab-tls` (--engine)", "{e:#}");
    let e = doctor(&[], &["--engine", &format!("unix://{DOCKER_SOCKET}")]);
    assert_eq!((e["chosen_by"].as_str(), e["remote"].as_bool()), (Some("--engine"), Some(false)), "{e:#}");
    let e = doctor(&[("DOCKER_HOST", &format!("unix://{DOCKER_SOCKET}"))], &[]);
    assert_eq!(e["chosen_by"], "DOCKER_HOST", "{e:#}");
    // The human report says the same.
    let mut cmd = quarry();
    cmd.env("QUARRY_CACHE", fixtures_dir().join("engines-cache"))
        .env("DOCKER_CONFIG", config.path())
        .env("PATH", &ssh_path)
        .env_remove("DOCKER_HOST")
        .env("DOCKER_CONTEXT", "lab-tls");
    let text = String::from_utf8_lossy(&run_expect(cmd.arg("doctor"), 0).stdout).into_owned();
    assert!(text.contains(&format!("endpoint    tcp://127.0.0.1:{} chosen by docker context `lab-tls` (DOCKER_CONTEXT) (remote: no host paths)", tls.port)), "{text}");
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

#[test]
fn bad_endpoints_give_one_line_errors() {
    if !have_docker() || !have_endpoint_tools() {
        return;
    }
    let docker = Endpoint::local_docker();
    let tls = TlsEndpoint::start(Path::new(DOCKER_SOCKET), "docker");
    // A client certificate from another CA: the engine refuses it.
    let other = tempfile::tempdir().unwrap();
    common::engines::certificates(other.path(), "another CA");
    let wrong_client = tempfile::tempdir().unwrap();
    std::fs::copy(tls.client_dir().join("ca.pem"), wrong_client.path().join("ca.pem")).unwrap();
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(other.path().join("client").join(f), wrong_client.path().join(f)).unwrap();
    }
    let addr = format!("tcp://127.0.0.1:{}", tls.port);
    let run = |cert_dir: &Path| {
        let mut c = quarry();
        c.env("DOCKER_HOST", &addr)
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", cert_dir)
            .env_remove("DOCKER_CONTEXT");
        c.args(["run", "debian:12", "--gpu", "none", "--", "true"]);
        c
    };
    fails_clearly(&docker, &mut run(wrong_client.path()), &[&addr, "DOCKER_HOST", "cert.pem"]);
    // A CA that did not sign the engine's certificate.
    fails_clearly(&docker, &mut run(&other.path().join("client")), &[&addr, "UnknownIssuer", "ca.pem"]);
    // Missing material names the file.
    let empty = tempfile::tempdir().unwrap();
    fails_clearly(
        &docker,
        &mut run(empty.path()),
        &[&addr, &format!("{}/ca.pem` does not exist", empty.path().display())],
    );

    // An ssh host that does not answer: ssh's own words and the endpoint.
    let ssh = SshEndpoint::start();
    let closed = common::registry::free_port();
    let mut c = q(&ssh.endpoint);
    c.env("DOCKER_HOST", format!("ssh://root@127.0.0.1:{closed}")).args([
        "run",
        "debian:12",
        "--gpu",
        "none",
        "--",
        "true",
    ]);
    fails_clearly(&docker, &mut c, &[&format!("ssh://root@127.0.0.1:{closed}"), "Connection refused", "ssh config"]);

    // An unknown context.
    let config = tempfile::tempdir().unwrap();
    let mut c = quarry();
    c.env("DOCKER_CONFIG", config.path()).env("DOCKER_CONTEXT", "no-such-lab").env_remove("DOCKER_HOST");
    c.args(["run", "debian:12", "--gpu", "none", "--", "true"]);
    fails_clearly(
        &docker,
        &mut c,
        &["docker context `no-such-lab` (DOCKER_CONTEXT) does not exist", "docker context ls"],
    );
    let mut c = quarry();
    c.env("DOCKER_CONFIG", config.path()).env_remove("DOCKER_HOST").env_remove("DOCKER_CONTEXT");
    c.args(["--engine", "nope", "gc"]);
    fails_clearly(&docker, &mut c, &["docker context `nope` (--engine) does not exist"]);
    let mut c = quarry();
    c.env_remove("DOCKER_CONTEXT").env("DOCKER_HOST", "ftp://127.0.0.1").arg("gc");
    fails_clearly(&docker, &mut c, &["DOCKER_HOST `ftp://127.0.0.1`", "unix:///PATH"]);
}

#[test]
fn the_ssh_transport_runs_the_users_ssh() {
    // No engine needed: a failing `ssh` on PATH shows that quarry runs the
    // user's ssh (so its config, keys and agent apply) and reports what it said.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ssh"), "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\necho 'ssh: fake: Permission denied (publickey).' >&2\nexit 255\n").unwrap();
    std::fs::set_permissions(dir.path().join("ssh"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
    let out = run_expect(
        quarry().env("PATH", path).env("DOCKER_HOST", "ssh://ci@gpu-box:2222").env_remove("DOCKER_CONTEXT").arg("gc"),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ssh://ci@gpu-box:2222") && err.contains("Permission denied (publickey)"), "{err}");
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert_eq!(args.trim(), "-o ConnectTimeout=30 -T -l ci -p 2222 -- gpu-box docker system dial-stdio");
}

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
        let tls = TlsEndpoint::start(Path::new(DOCKER_SOCKET), "docker");
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

/// The unprivileged user scripts/setup makes for rootless Podman.
const ROOTLESS_USER: &str = "quarry-rootless";

#[test]
fn rootless_podman_runs_and_says_what_differs() {
    if !have_podman() || !have_tool("mmdebstrap") {
        return;
    }
    let known = Command::new("id").arg(ROOTLESS_USER).output().unwrap().status.success();
    if !known {
        assert!(!in_ci(), "CI is set but the user {ROOTLESS_USER} is missing: scripts/setup makes it");
        eprintln!("skipping: no user {ROOTLESS_USER} for rootless Podman");
        return;
    }
    let podman = Podman::rootless(ROOTLESS_USER);
    let ep = &podman.endpoint;
    let doc = stdout_json(&run_expect(q(ep).args(["doctor", "--json"]), 0));
    assert_eq!(doc["engine"]["rootless"], true, "{doc:#}");
    assert!(doc["engine"]["differences"].to_string().contains("rootless: host gids are not mapped"), "{doc:#}");

    let work = tempfile::tempdir().unwrap();
    let def = work.path().join("rootless.toml");
    let tag = Tag(ep, format!("{}:1", unique("rootless")));
    write(
        &def,
        &format!("name = \"{}\"\nbase = {{ rootfs = \"{}\" }}\n", unique("rootless"), debian_rootfs("").display()),
    );
    run_expect(q(ep).arg("load").arg(&def).args(["--tag", &tag.1, "--cache-dir"]).arg(fresh_cache(work.path())), 0);
    let input = work.path().join("in");
    write(&input.join("data.txt"), "payload\n");
    let back = work.path().join("back");
    let out = run_expect(
        q(ep)
            .args(["run", &tag.1, "--gpu", "none"])
            .arg("--copy-in")
            .arg(format!("{}:/in", input.display()))
            .arg("--copy-out")
            .arg(format!("/in:{}", back.display()))
            .args(["--", "sh", "-c", "cat /in/data.txt; echo more > /in/more.txt; exit 4"]),
        4,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "payload\n");
    assert_eq!(std::fs::read_to_string(back.join("more.txt")).unwrap(), "more\n");

    // GPU nodes: passed, but their host gids mean nothing in the user
    // namespace, and quarry says so instead of failing later in silence.
    let dev = simulated_dev_root();
    std::fs::set_permissions(dev.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run_expect(
        q(ep).env("QUARRY_DEV_ROOT", dev.path()).args([
            "run",
            &tag.1,
            "--gpu",
            "amd",
            "--user",
            "1000:1000",
            "--",
            "sh",
            "-c",
            PROBE,
        ]),
        // The probe's last command, reading /dev/kfd, fails: exit status 1.
        1,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("char /dev/kfd 65534") && !text.contains("kfd-readable"), "{text}");
    assert!(err.contains("rootless Podman maps no host gid into its containers"), "{err}");
    assert!(ep.leaked_containers().is_empty());
}
