//! Engines beyond the local Docker for the end-to-end tests: a Podman 4.3
//! service (Debian's `podman`) on its own socket, rootful with a store
//! under target/ shared by the tests and kept between runs (so large
//! images are loaded once), or rootless as a test user; stopped when its
//! guard drops (also when a test fails). An endpoint is a set of
//! environment variables for `quarry` and the command line of the engine's
//! own CLI for the same endpoint (to make leftovers and look for leaks).
//! The TLS and ssh endpoints are in `remote`.

use super::{have_tool, repo};
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
    pub fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Daemon {
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
    pub fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
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
        let _no_leftovers_now = GC_LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner());
        self.leaked_containers_locked()
    }

    /// [`Endpoint::leaked_containers`], for a caller holding [`GC_LEFTOVERS`].
    pub fn leaked_containers_locked(&self) -> Vec<String> {
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

/// Held while a test has made containers that look left by a killed quarry
/// (for `gc` to find): the endpoints of one test binary share one engine, so
/// another test's leak check, or its `gc`, must not run meanwhile.
pub static GC_LEFTOVERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// True when `podman` (and the tools the endpoints need) are here; in CI a
/// missing one is a failure.
pub fn have_podman() -> bool {
    have_tool("podman")
}

/// A Podman service on its own socket.
pub struct Podman {
    daemon: Option<Daemon>,
    /// Holds the socket and the service's state while it runs.
    _dir: tempfile::TempDir,
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
        Podman { daemon: Some(daemon), _dir: dir, rootless_runtime: rootless, endpoint }
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
