//! Engines beyond the local Docker for the end-to-end tests, each stopped
//! when its guard drops (also when a test fails):
//! - a Podman 4.3 service (Debian's `podman`) on its own socket, rootful
//!   with a store under target/ shared by the tests and kept between runs
//!   (so large images are loaded once), or rootless as a test user;
//! - a TLS endpoint: stunnel with a CA, server and client certificates
//!   made by openssl, requiring the client certificate, in front of the
//!   local Docker Engine (whose images are already there);
//! - an ssh endpoint: Debian's sshd on 127.0.0.1 with host and user keys
//!   made here, for `docker system dial-stdio` to the local Docker Engine.
//!
//! An endpoint is a set of environment variables for `quarry` and the
//! command line of the engine's own CLI for the same endpoint (to make
//! leftovers and look for leaks).

use super::registry::free_port;
use super::{have_tool, in_ci, repo};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// A background process in its own process group, killed with its group on drop.
pub struct Daemon {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl Daemon {
    fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Daemon {
        let out = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Daemon { child, name, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until `ready` says so; fail with the log when the daemon exits or takes too long.
    fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("{} exited with {st} before {what}:\n{}", self.name, self.log());
            }
            assert!(Instant::now() < deadline, "{}: no {what} within 30 s:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// How tests reach one engine: quarry's environment, and the engine's own CLI.
pub struct Endpoint {
    pub name: String,
    pub env: Vec<(String, String)>,
    /// The engine's CLI for this endpoint (`docker -H ...`, `podman --url ...`), program first.
    pub cli: Vec<String>,
    /// Why quarry should say it chose this endpoint (`doctor`'s `chosen_by`).
    pub chosen_by: String,
    pub kind: &'static str,
    pub remote: bool,
}

impl Endpoint {
    /// The local Docker Engine.
    pub fn local_docker() -> Endpoint {
        Endpoint {
            name: "docker".into(),
            env: vec![("DOCKER_HOST".into(), format!("unix://{DOCKER_SOCKET}"))],
            cli: vec!["docker".into(), "-H".into(), format!("unix://{DOCKER_SOCKET}")],
            chosen_by: "DOCKER_HOST".into(),
            kind: "docker",
            remote: false,
        }
    }

    /// `quarry` with this endpoint's environment (DOCKER_* of the caller removed first).
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for k in ["DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "QUARRY_ENGINE"] {
            cmd.env_remove(k);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// The engine's CLI with `args`.
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.cli[0]);
        self.apply(&mut c);
        c.args(&self.cli[1..]).args(args);
        c
    }

    /// Run the engine's CLI; its stdout, failing the test when it fails.
    pub fn cli_out(&self, args: &[&str]) -> String {
        let out = self.cli(args).output().unwrap();
        assert!(out.status.success(), "{:?} {args:?}: {}", self.cli, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// quarry-managed containers of processes that are gone: leaks.
    pub fn leaked_containers(&self) -> Vec<String> {
        let ids = self.cli_out(&["ps", "-aq", "--filter", "label=io.quarry.managed=true"]);
        ids.lines()
            .filter(|id| {
                let out = self.cli(&["inspect", "--format", "{{index .Config.Labels \"io.quarry.pid\"}}", id]).output();
                let pid = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
                // Gone already (removed meanwhile) is no leak.
                !pid.is_empty() && !Path::new("/proc").join(&pid).exists()
            })
            .map(String::from)
            .collect()
    }

    /// Containers of the quarry process `pid` still in this engine.
    pub fn containers_of(&self, pid: u32) -> Vec<String> {
        self.cli_out(&["ps", "-aq", "--filter", &format!("label=io.quarry.pid={pid}")])
            .lines()
            .map(String::from)
            .collect()
    }
}

/// True when `podman` (and the tools the endpoints need) are here; in CI a
/// missing one is a failure.
pub fn have_podman() -> bool {
    have_tool("podman")
}

/// A Podman service on its own socket.
pub struct Podman {
    daemon: Option<Daemon>,
    dir: tempfile::TempDir,
    pub socket: PathBuf,
    /// The rootless service's runtime directory (its pause process lives there).
    rootless_runtime: Option<PathBuf>,
    pub endpoint: Endpoint,
}

impl Podman {
    /// A rootful service on a socket of its own, with the tests' store.
    pub fn rootful() -> Podman {
        let dir = tempfile::Builder::new().prefix("quarry-test-podman-").tempdir().unwrap();
        let socket = dir.path().join("podman.sock");
        let store = repo().join("target/podman-store");
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", containers_conf(dir.path()));
        cmd.arg("--root").arg(store.join("root")).arg("--runroot").arg(store.join("runroot"));
        cmd.args(["--log-level", "error", "system", "service", "--time=0"]).arg(format!("unix://{}", socket.display()));
        let daemon = Daemon::spawn("podman system service", &mut cmd, dir.path().join("service.log"));
        Podman::ready(daemon, dir, socket, None)
    }

    /// A rootless service run by `user` (made by scripts/setup), with that
    /// user's store. Its runtime directory is the usual `/run/user/UID`
    /// (Podman records the first one it used in its database and keeps
    /// using it); the socket is in a directory of this test.
    pub fn rootless(user: &str) -> Podman {
        let dir = tempfile::Builder::new().prefix("quarry-test-podman-rootless-").tempdir().unwrap();
        let uid = String::from_utf8(Command::new("id").args(["-u", user]).output().unwrap().stdout).unwrap();
        let runtime = PathBuf::from(format!("/run/user/{}", uid.trim()));
        std::fs::create_dir_all(&runtime).unwrap();
        for d in [&runtime, &dir.path().to_path_buf()] {
            let chown = Command::new("chown").arg(user).arg(d).status().unwrap();
            assert!(chown.success());
        }
        std::fs::set_permissions(&runtime, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        // The user must reach the socket's directory.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let socket = dir.path().join("podman.sock");
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", user, "--", "env"]).arg(format!("XDG_RUNTIME_DIR={}", runtime.display()));
        cmd.arg(format!("CONTAINERS_CONF={}", containers_conf(dir.path()).display()));
        cmd.args(["podman", "--log-level", "error", "system", "service", "--time=0"]);
        cmd.arg(format!("unix://{}", socket.display())).current_dir(dir.path());
        let daemon = Daemon::spawn("rootless podman system service", &mut cmd, dir.path().join("service.log"));
        Podman::ready(daemon, dir, socket, Some(runtime))
    }

    fn ready(mut daemon: Daemon, dir: tempfile::TempDir, socket: PathBuf, rootless: Option<PathBuf>) -> Podman {
        let s = socket.clone();
        daemon.wait_until("its socket answers", || ping(&s));
        let url = format!("unix://{}", socket.display());
        let endpoint = Endpoint {
            name: if rootless.is_some() { "podman-rootless" } else { "podman" }.into(),
            env: vec![("DOCKER_HOST".into(), url.clone())],
            cli: vec!["podman".into(), "--url".into(), url],
            chosen_by: "DOCKER_HOST".into(),
            kind: "podman",
            remote: false,
        };
        Podman { daemon: Some(daemon), dir, socket, rootless_runtime: rootless, endpoint }
    }

    pub fn log(&self) -> String {
        self.daemon.as_ref().map(Daemon::log).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // The service first (it would start a new pause process), then the
        // pause process a rootless Podman keeps for its user namespace.
        drop(self.daemon.take());
        if let Some(rt) = &self.rootless_runtime {
            if let Ok(pid) = std::fs::read_to_string(rt.join("libpod/tmp/pause.pid")) {
                if let Ok(pid) = pid.trim().parse::<i32>() {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }
}

/// The service's configuration: Podman keeps each exec session's conmon
/// for `exit_command_delay` (300 s) after the command ends; the tests'
/// services let them go at once, so nothing of theirs outlives them.
fn containers_conf(dir: &Path) -> PathBuf {
    let f = dir.join("containers.conf");
    std::fs::write(&f, "[engine]\nexit_command_delay = 1\n").unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    f
}

/// `GET /_ping` on a unix socket answers OK.
fn ping(socket: &Path) -> bool {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n").is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.") && reply.contains(" 200 ")
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A TLS endpoint in front of a unix socket (stunnel, client certificate required).
pub struct TlsEndpoint {
    _daemon: Daemon,
    dir: tempfile::TempDir,
    pub port: u16,
    pub endpoint: Endpoint,
}

impl TlsEndpoint {
    pub fn start(target: &Path, name: &str) -> TlsEndpoint {
        let dir = tempfile::Builder::new().prefix("quarry-test-tls-").tempdir().unwrap();
        let d = dir.path();
        certificates(d, "quarry test CA");
        let port = free_port();
        let conf = format!(
            "foreground = yes\npid =\n[engine]\naccept = 127.0.0.1:{port}\nconnect = {}\ncert = {d}/server.pem\nkey = {d}/server-key.pem\nCAfile = {d}/ca.pem\nverifyChain = yes\nrequireCert = yes\n",
            target.display(),
            d = d.display()
        );
        std::fs::write(d.join("stunnel.conf"), conf).unwrap();
        let mut daemon =
            Daemon::spawn("stunnel", Command::new("stunnel").arg(d.join("stunnel.conf")), d.join("stunnel.log"));
        daemon.wait_until("its port listens", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        let client = d.join("client");
        let host = format!("tcp://127.0.0.1:{port}");
        let endpoint = Endpoint {
            name: format!("{name}-tls"),
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
        TlsEndpoint { _daemon: daemon, dir, port, endpoint }
    }

    /// The directory holding ca.pem, cert.pem and key.pem for clients.
    pub fn client_dir(&self) -> PathBuf {
        self.dir.path().join("client")
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
    dir: tempfile::TempDir,
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
        SshEndpoint { _daemon: daemon, dir, port, endpoint }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// True when the tools the TLS and ssh endpoints need are here.
pub fn have_endpoint_tools() -> bool {
    let ok = ["stunnel", "openssl", "ssh", "ssh-keygen"].iter().all(|t| which(t).is_some())
        && Path::new("/usr/sbin/sshd").exists();
    if !ok {
        assert!(!in_ci(), "CI is set but stunnel, openssl or openssh are missing: scripts/setup must install them");
        eprintln!("skipping: stunnel, openssl or openssh are missing");
    }
    ok
}
