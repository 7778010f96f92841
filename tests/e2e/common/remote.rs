//! Remote endpoints for the end-to-end tests, both in front of the local
//! Docker Engine (whose images are already there) and stopped when their
//! guards drop:
//! - TLS: stunnel or socat (`OPENSSL-LISTEN` with `verify=1`: OpenSSL
//!   with no session id context, so a client that resumes a session is
//!   refused), each with a CA, server and client certificates made by
//!   openssl, requiring the client certificate (as `dockerd --tlsverify`);
//! - ssh: Debian's sshd on 127.0.0.1 with host and user keys made here,
//!   for `docker system dial-stdio` on the "remote" side.

use super::engines::{Daemon, Endpoint};
use super::in_ci;
use super::registry::free_port;
use std::path::{Path, PathBuf};
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What terminates TLS in front of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminator {
    Stunnel,
    /// `socat OPENSSL-LISTEN:...,verify=1`.
    Socat,
}

/// A TLS endpoint in front of a unix socket (client certificate required).
pub struct TlsEndpoint {
    daemon: Daemon,
    dir: tempfile::TempDir,
    pub port: u16,
    pub endpoint: Endpoint,
}

impl TlsEndpoint {
    pub fn start(terminator: Terminator, target: &Path, name: &str) -> TlsEndpoint {
        TlsEndpoint::start_with(terminator, target, name, "")
    }

    /// With `options` added to socat's listening address (`,opt=value...`).
    pub fn start_with(terminator: Terminator, target: &Path, name: &str, options: &str) -> TlsEndpoint {
        let dir = tempfile::Builder::new().prefix("quarry-test-tls-").tempdir().unwrap();
        let d = dir.path();
        certificates(d, "quarry test CA");
        let port = free_port();
        let (mut daemon, suffix) = match terminator {
            Terminator::Stunnel => {
                let conf = format!(
                    "foreground = yes\npid =\n[engine]\naccept = 127.0.0.1:{port}\nconnect = {}\ncert = {d}/server.pem\nkey = {d}/server-key.pem\nCAfile = {d}/ca.pem\nverifyChain = yes\nrequireCert = yes\n",
                    target.display(),
                    d = d.display()
                );
                std::fs::write(d.join("stunnel.conf"), conf).unwrap();
                let cmd = &mut Command::new("stunnel");
                (Daemon::spawn("stunnel", cmd.arg(d.join("stunnel.conf")), d.join("stunnel.log")), "tls")
            }
            Terminator::Socat => {
                let listen = format!(
                    "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={d}/server.pem,key={d}/server-key.pem,cafile={d}/ca.pem,verify=1{options}",
                    d = d.display()
                );
                let cmd = &mut Command::new("socat");
                cmd.arg(listen).arg(format!("UNIX-CONNECT:{}", target.display()));
                (Daemon::spawn("socat", cmd, d.join("socat.log")), "socat-tls")
            }
        };
        daemon.wait_until("its port listens", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        let client = d.join("client");
        let host = format!("tcp://127.0.0.1:{port}");
        let endpoint = Endpoint {
            name: format!("{name}-{suffix}"),
            env: vec![
                ("DOCKER_HOST".into(), host.clone()),
                ("DOCKER_TLS_VERIFY".into(), "1".into()),
                ("DOCKER_CERT_PATH".into(), client.display().to_string()),
            ],
            cli: vec!["docker".into(), "-H".into(), host],
            chosen_by: "DOCKER_HOST".into(),
            kind: "docker",
            remote: true,
        };
        TlsEndpoint { daemon, dir, port, endpoint }
    }

    /// The directory holding ca.pem, cert.pem and key.pem for clients.
    pub fn client_dir(&self) -> PathBuf {
        self.dir.path().join("client")
    }

    /// What the terminator logged.
    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

/// Certificates in `d` as `dockerd --tlsverify` setups have them: a CA
/// (`ca.pem`), a server certificate for 127.0.0.1 signed by it, and a
/// client certificate with the CA in `d/client` (ca.pem, cert.pem,
/// key.pem: what DOCKER_CERT_PATH names).
pub fn certificates(d: &Path, ca_name: &str) {
    let client = d.join("client");
    std::fs::create_dir_all(&client).unwrap();
    let subj = format!("/CN={ca_name}");
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca.pem",
            "-subj",
            &subj,
        ],
    );
    std::fs::write(d.join("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        .unwrap();
    std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, ext, cn) in [("server", "server.ext", "127.0.0.1"), ("client/cert", "client.ext", "quarry-test-client")]
    {
        let key = if name == "server" { "server-key.pem".to_string() } else { "client/key.pem".to_string() };
        let csr = format!("{}.csr", name.replace('/', "-"));
        openssl(
            d,
            &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &format!("/CN={cn}")],
        );
        let pem = format!("{name}.pem");
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &pem,
                "-extfile",
                ext,
            ],
        );
    }
    std::fs::copy(d.join("ca.pem"), client.join("ca.pem")).unwrap();
}

/// An sshd on 127.0.0.1 that lets root in with a key made here; `ssh`
/// reaches it through a wrapper on PATH that adds `-F` with a config naming
/// that key and the host key (ssh reads ~/.ssh from the passwd entry, not
/// $HOME, so a config cannot be slipped in otherwise).
pub struct SshEndpoint {
    _daemon: Daemon,
    /// Holds the keys and sshd's configuration while it runs.
    _dir: tempfile::TempDir,
    pub port: u16,
    pub endpoint: Endpoint,
}

impl SshEndpoint {
    pub fn start() -> SshEndpoint {
        let dir = tempfile::Builder::new().prefix("quarry-test-ssh-").tempdir().unwrap();
        let d = dir.path().to_path_buf();
        for key in ["host_key", "client_key"] {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(key))
                .status()
                .unwrap();
            assert!(st.success(), "ssh-keygen failed");
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        let port = free_port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPidFile {d}/sshd.pid\nStrictModes no\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        // Privilege separation wants this directory (the package's service would make it).
        std::fs::create_dir_all("/run/sshd").unwrap();
        let mut daemon = Daemon::spawn(
            "sshd",
            Command::new("/usr/sbin/sshd").args(["-D", "-e", "-f"]).arg(d.join("sshd_config")),
            d.join("sshd.log"),
        );
        daemon.wait_until("its port listens", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        let host_key = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        std::fs::write(d.join("known_hosts"), format!("[127.0.0.1]:{port} {host_key}")).unwrap();
        std::fs::write(
            d.join("ssh_config"),
            format!(
                "Host *\n  IdentityFile {d}/client_key\n  IdentitiesOnly yes\n  UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n",
                d = d.display()
            ),
        )
        .unwrap();
        std::fs::create_dir_all(d.join("bin")).unwrap();
        let ssh = which("ssh").expect("ssh");
        std::fs::write(
            d.join("bin/ssh"),
            format!("#!/bin/sh\nexec {} -F {} \"$@\"\n", ssh.display(), d.join("ssh_config").display()),
        )
        .unwrap();
        std::fs::set_permissions(d.join("bin/ssh"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", d.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let host = format!("ssh://root@127.0.0.1:{port}");
        let endpoint = Endpoint {
            name: "docker-ssh".into(),
            env: vec![("DOCKER_HOST".into(), host.clone()), ("PATH".into(), path)],
            cli: vec!["docker".into(), "-H".into(), host],
            chosen_by: "DOCKER_HOST".into(),
            kind: "docker",
            remote: true,
        };
        SshEndpoint { _daemon: daemon, _dir: dir, port, endpoint }
    }
}

pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// True when the tools the TLS and ssh endpoints need are here.
pub fn have_endpoint_tools() -> bool {
    let ok = ["stunnel", "socat", "openssl", "ssh", "ssh-keygen"].iter().all(|t| which(t).is_some())
        && Path::new("/usr/sbin/sshd").exists();
    if !ok {
        assert!(
            !in_ci(),
            "CI is set but stunnel, socat, openssl or openssh are missing: scripts/setup must install them"
        );
        eprintln!("skipping: stunnel, socat, openssl or openssh are missing");
    }
    ok
}
