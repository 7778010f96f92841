//! Debian's `docker-registry` (distribution 2.8) on a free 127.0.0.1 port,
//! with its own config and storage, killed when dropped (even on failure).

use super::{have_tool, in_ci};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
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

/// 200 MB of random bytes, made once in the fixtures (pushes big enough to
/// be killed half-way).
pub fn random_200m() -> PathBuf {
    let out = super::fixtures_dir().join("random-200M.bin");
    super::with_lock("random-200M", || {
        if !out.exists() {
            let mut tmp = tempfile::NamedTempFile::new_in(super::fixtures_dir()).unwrap();
            let n = std::io::copy(&mut std::fs::File::open("/dev/urandom").unwrap().take(200 << 20), &mut tmp).unwrap();
            assert_eq!(n, 200 << 20);
            tmp.flush().unwrap();
            tmp.persist_noclobber(&out).ok();
        }
    });
    out
}

/// The largest upload in progress in the registry's storage (bytes).
pub fn largest_upload(reg: &Registry) -> u64 {
    walkdir::WalkDir::new(reg.storage().join("repositories"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() == "data" && e.path().to_string_lossy().contains("/_uploads/"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .max()
        .unwrap_or(0)
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

/// A proxy to `upstream` that sends each request on its own upstream
/// connection (it adds `Connection: close`) and records request lines.
/// `answer` sees each request line and every line so far (this one last);
/// a response it returns is sent instead of passing the request on.
pub fn intercepting_proxy(
    upstream: u16,
    answer: impl Fn(&str, &[String]) -> Option<Vec<u8>> + Send + 'static,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && client.read(&mut byte).map(|n| n == 1).unwrap_or(false) {
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).to_string();
            let line = text.lines().next().unwrap_or("").to_string();
            let reply = {
                let mut s = seen2.lock().unwrap();
                s.push(line.clone());
                answer(&line, &s)
            };
            if let Some(reply) = reply {
                let _ = client.write_all(&reply);
                let _ = client.shutdown(std::net::Shutdown::Both);
                continue;
            }
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
            let head = text.replacen("\r\n", "\r\nConnection: close\r\n", 1);
            server.write_all(head.as_bytes()).unwrap();
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client, &mut server);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, seen)
}
