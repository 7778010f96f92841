//! Debian's `docker-registry` (distribution 2.8) on a free 127.0.0.1 port,
//! with its own config and storage, killed when dropped (even on failure).

use super::{have_tool, in_ci};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

pub fn have_registry() -> bool {
    let ok = Path::new(REGISTRY_BIN).exists();
    if !ok {
        assert!(!in_ci(), "CI is set but {REGISTRY_BIN} is missing: scripts/setup must install docker-registry");
        eprintln!("skipping: {REGISTRY_BIN} is not installed");
    }
    ok && have_tool("skopeo")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `docker-registry` with its own config and storage.
pub struct Registry {
    pub child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Registry {
    /// `auth` is YAML put under `auth:` (indented by the caller), or empty.
    pub fn start(auth: &str) -> Registry {
        let dir = tempfile::Builder::new().prefix("quarry-test-registry-").tempdir().unwrap();
        let port = free_port();
        let auth = if auth.is_empty() { String::new() } else { format!("auth:\n{auth}") };
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: quarry-test-secret\n{auth}",
            dir.path().join("storage").display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let mut r = Registry { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = r.child.try_wait() {
                panic!("docker-registry exited with {st}:\n{}", r.log());
            }
            assert!(Instant::now() < deadline, "docker-registry did not listen within 20 s:\n{}", r.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Requests that touched blob uploads, from the registry's log.
    pub fn upload_requests(&self) -> usize {
        self.log().lines().filter(|l| l.contains("response completed") && l.contains("/blobs/uploads/")).count()
    }

    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage/docker/registry/v2")
    }

    /// The file the registry serves a blob from.
    pub fn blob_data(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage().join("blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
