//! Choosing and reaching endpoints: docker contexts made by the docker CLI
//! itself, `--engine`, `DOCKER_HOST`; the user's own ssh; bad endpoints
//! (a wrong certificate, an unreachable ssh host, an unknown context)
//! give one-line errors naming the endpoint and what to do.

use super::common::engines::{Endpoint, DOCKER_SOCKET};
use super::common::remote::{have_endpoint_tools, SshEndpoint, Terminator, TlsEndpoint};
use super::common::*;
use super::{fails_clearly, q};
use std::path::Path;
use std::process::Command;

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
    // Behind socat, which refuses a resumed TLS session as the docker CLI never offers one.
    let tls = TlsEndpoint::start(Terminator::Socat, Path::new(DOCKER_SOCKET), "docker");
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

#[test]
fn bad_endpoints_give_one_line_errors() {
    if !have_docker() || !have_endpoint_tools() {
        return;
    }
    let docker = Endpoint::local_docker();
    let tls = TlsEndpoint::start(Terminator::Stunnel, Path::new(DOCKER_SOCKET), "docker");
    // A client certificate from another CA: the engine refuses it.
    let other = tempfile::tempdir().unwrap();
    super::common::remote::certificates(other.path(), "another CA");
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
    let closed = super::common::registry::free_port();
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
