//! Engines behind TLS terminators, in front of the local Docker Engine:
//! stunnel, and socat's `OPENSSL-LISTEN` with `verify=1`, whose OpenSSL
//! sets no session id context and so aborts a resumed session with an
//! internal_error alert (the docker CLI never resumes; neither may quarry,
//! whose every request opens a connection). The subset runs on both; a
//! refused client certificate blames the certificates, an alert that is not
//! about them names the alert and the endpoint's log.

use super::common::engines::{Endpoint, DOCKER_SOCKET};
use super::common::remote::{certificates, have_endpoint_tools, Terminator, TlsEndpoint};
use super::common::*;
use super::{fails_clearly, q, subset};
use std::path::Path;
use std::process::Command;

fn subset_over(terminator: Terminator) {
    if !have_docker() || !have_endpoint_tools() || !have_tool("mmdebstrap") || !have_tool("gpgv") {
        return;
    }
    let tls = TlsEndpoint::start(terminator, Path::new(DOCKER_SOCKET), "docker");
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
fn subset_over_tls_stunnel() {
    subset_over(Terminator::Stunnel);
}

#[test]
fn subset_over_tls_socat() {
    subset_over(Terminator::Socat);
}

/// quarry with the endpoint at `port` and the material in `cert_dir`.
fn run_at(port: u16, cert_dir: &Path) -> Command {
    let mut c = quarry();
    c.env("DOCKER_HOST", format!("tcp://127.0.0.1:{port}"))
        .env("DOCKER_TLS_VERIFY", "1")
        .env("DOCKER_CERT_PATH", cert_dir)
        .env_remove("DOCKER_CONTEXT");
    c.args(["run", "debian:12", "--gpu", "none", "--", "true"]);
    c
}

#[test]
fn tls_failures_say_whether_certificates_are_to_blame() {
    if !have_docker() || !have_endpoint_tools() {
        return;
    }
    let docker = Endpoint::local_docker();
    // Many connections through socat, each a full handshake: the docker
    // CLI's and quarry's (doctor, gc).
    let socat = TlsEndpoint::start(Terminator::Socat, Path::new(DOCKER_SOCKET), "docker");
    let out = socat.endpoint.cli(&["version", "--format", "{{.Server.Version}}"]).output().unwrap();
    assert!(out.status.success(), "the docker CLI through socat: {}", String::from_utf8_lossy(&out.stderr));
    run_expect(q(&socat.endpoint).args(["doctor", "--json"]), 0);
    run_expect(q(&socat.endpoint).args(["gc", "--json"]), 0);
    assert!(!socat.log().contains("session id context"), "{}", socat.log());

    // A client certificate from another CA: socat refuses it with a
    // certificate alert, and the message is about the certificates.
    let other = tempfile::tempdir().unwrap();
    certificates(other.path(), "another CA");
    let wrong_client = tempfile::tempdir().unwrap();
    std::fs::copy(socat.client_dir().join("ca.pem"), wrong_client.path().join("ca.pem")).unwrap();
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(other.path().join("client").join(f), wrong_client.path().join(f)).unwrap();
    }
    let addr = format!("tcp://127.0.0.1:{}", socat.port);
    fails_clearly(&docker, &mut run_at(socat.port, wrong_client.path()), &[&addr, "cert.pem", "ca.pem"]);

    // An endpoint that speaks no TLS version quarry does: it aborts the
    // handshake with an alert that is not about certificates.
    let old = TlsEndpoint::start_with(
        Terminator::Socat,
        Path::new(DOCKER_SOCKET),
        "docker-old",
        ",openssl-max-proto-version=TLS1.1",
    );
    let mut c = run_at(old.port, &old.client_dir());
    let out = run_expect(&mut c, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("aborted the TLS handshake with alert") && err.contains("own log"), "{err}");
    assert!(!err.contains("cert.pem") && !err.contains("ca.pem"), "blames the certificates: {err}");
}
