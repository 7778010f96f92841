//! Downloads over HTTP(S) with `ureq` (rustls). Proxies come from the
//! environment (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`), as
//! for apt and curl. Every download is streamed to a temporary file in the
//! cache, hashed on the way, checked, then renamed into place.

use super::pins::{PackagePins, PinnedPackage};
use super::{mirror_for, DistroError};
use crate::cache::{Bucket, Cache};
use crate::definition::PackageSet;
use crate::oci::blob::BlobError;
use crate::oci::Digest;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::DefaultConnector;

pub struct Fetcher {
    agent: ureq::Agent,
}

/// ureq resolves the host before every request, even one that then reuses a
/// pooled connection: a build's few hundred .debs meant a few hundred DNS
/// lookups, and a resolver that drops one query in a hundred stalls that
/// download for glibc's 5 s retry (measured: 35 s of a 60 s cold build spent
/// so). apt resolves a host once per run; so does a `Fetcher`: the first
/// answer for each scheme and authority is kept for its lifetime (one build).
#[derive(Debug, Default)]
struct ResolveOnce<R = DefaultResolver> {
    resolver: R,
    known: Mutex<HashMap<String, ResolvedSocketAddrs>>,
}

impl<R: Resolver> Resolver for ResolveOnce<R> {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let key = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        if let Some(addrs) = self.known.lock().expect("not poisoned").get(&key) {
            return Ok(addrs.clone());
        }
        let addrs = self.resolver.resolve(uri, config, timeout)?;
        self.known.lock().expect("not poisoned").insert(key, addrs.clone());
        Ok(addrs)
    }
}

impl Default for Fetcher {
    fn default() -> Self {
        Self::new()
    }
}

impl Fetcher {
    pub fn new() -> Fetcher {
        Fetcher::with_resolver(DefaultResolver::default())
    }

    fn with_resolver(resolver: impl Resolver) -> Fetcher {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_body(Some(Duration::from_secs(300)))
            .http_status_as_error(false)
            .build();
        let agent = ureq::Agent::with_parts(
            config,
            DefaultConnector::default(),
            ResolveOnce { resolver, known: Mutex::default() },
        );
        Fetcher { agent }
    }

    /// GET with a few retries on network errors (resolver hiccups, resets);
    /// a definite answer (404, a wrong status) is not retried.
    fn open(&self, url: &str) -> Result<ureq::Body, DistroError> {
        let mut delay = Duration::from_millis(500);
        for _ in 0..3 {
            match self.open_once(url) {
                Err(DistroError::Network { .. }) => {
                    std::thread::sleep(delay);
                    delay *= 3;
                }
                other => return other,
            }
        }
        self.open_once(url)
    }

    fn open_once(&self, url: &str) -> Result<ureq::Body, DistroError> {
        let resp = self
            .agent
            .get(url)
            .call()
            .map_err(|e| DistroError::Network { url: url.to_string(), message: e.to_string() })?;
        let status = resp.status().as_u16();
        if status == 404 || status == 410 {
            return Err(DistroError::NotServed { url: url.to_string(), status });
        }
        if status != 200 {
            return Err(DistroError::Network { url: url.to_string(), message: format!("HTTP status {status}") });
        }
        Ok(resp.into_body())
    }

    /// A small document (InRelease) in memory.
    pub fn get_bytes(&self, url: &str) -> Result<Vec<u8>, DistroError> {
        let mut body = self.open(url)?;
        body.with_config()
            .limit(64 << 20)
            .read_to_vec()
            .map_err(|e| DistroError::Network { url: url.to_string(), message: e.to_string() })
    }

    /// Download `url` into the cache's `bucket`, named by its sha256, checking the
    /// expected sha256 and size. Returns the stored path.
    pub fn fetch_pinned(
        &self,
        cache: &Cache,
        bucket: Bucket,
        url: &str,
        sha256: &str,
        size: Option<u64>,
    ) -> Result<PathBuf, DistroError> {
        // A connection lost mid-body is retried once from the start.
        match self.fetch_pinned_once(cache, bucket, url, sha256, size) {
            Err(DistroError::Network { .. }) => self.fetch_pinned_once(cache, bucket, url, sha256, size),
            other => other,
        }
    }

    fn fetch_pinned_once(
        &self,
        cache: &Cache,
        bucket: Bucket,
        url: &str,
        sha256: &str,
        size: Option<u64>,
    ) -> Result<PathBuf, DistroError> {
        let mut body = self.open(url)?;
        let expected = Digest::from_hex(sha256)
            .map_err(|e| DistroError::Index { url: url.to_string(), message: e.to_string() })?;
        let net = |e: std::io::Error| DistroError::Network { url: url.to_string(), message: e.to_string() };
        let mut w = cache.file_writer(bucket)?;
        let mut r = body.with_config().limit(u64::MAX).reader();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r.read(&mut buf).map_err(net)?;
            if n == 0 {
                break;
            }
            w.write_all(&buf[..n]).map_err(|e| DistroError::io(&cache.tmp_dir(), e))?;
        }
        match w.commit_verified(&expected, size) {
            Ok(stored) => Ok(stored.path),
            Err(e @ BlobError::Io { .. }) => Err(DistroError::io(&cache.tmp_dir(), std::io::Error::other(e.to_string()))),
            Err(BlobError::Mismatch { actual, actual_size, .. }) => Err(DistroError::Mismatch {
                what: url.to_string(),
                expected: sha256.to_string(),
                actual: format!("{} ({actual_size} bytes)", actual.hex()),
                hint: "these are not the bytes the pin names: if the lock (IMAGE.lock) was edited, run `quarry lock` on the image again; if not, the mirror serves other bytes than its signed index promised: try again later or use another mirror".into(),
            }),
        }
    }
}

/// A file from the cache's `bucket` (by its sha256), verified, or downloaded.
/// A cached file whose bytes no longer match is removed and reported: the
/// cache was modified, and nothing it holds is trusted without its hash.
pub fn cached_or_fetch(
    fetcher: &Fetcher,
    cache: &Cache,
    bucket: Bucket,
    url: &dyn Fn() -> Result<String, DistroError>,
    sha256: &str,
    size: Option<u64>,
) -> Result<PathBuf, DistroError> {
    if let Some(path) = cache.file(bucket, sha256) {
        let actual = crate::oci::digest::sha256_file(&path).map_err(|e| DistroError::io(&path, e))?;
        if actual != sha256 {
            cache.forget_file(bucket, sha256);
            return Err(DistroError::Mismatch {
                what: path.display().to_string(),
                expected: sha256.to_string(),
                actual,
                hint:
                    "the cached file was modified or corrupted; it has been removed, run the build again to download it"
                        .into(),
            });
        }
        return Ok(path);
    }
    fetcher.fetch_pinned(cache, bucket, &url()?, sha256, size)
}

/// Download (or take from the cache) every pinned .deb, verified, each
/// from its suite's mirror. A pin the mirror no longer serves is named with
/// its suite (a pocket drops the versions a newer fix replaced).
pub fn fetch_debs(spec: &PackageSet, lock: &PackagePins, cache: &Cache) -> Result<Vec<PathBuf>, DistroError> {
    let _span = crate::trace::span("packages: download");
    let fetcher = Fetcher::new();
    let mirrors: Mutex<HashMap<String, String>> = Mutex::default();
    let url_of = |p: &PinnedPackage| -> Result<String, DistroError> {
        let suite = lock.suite_of(p);
        let known = mirrors.lock().expect("not poisoned").get(suite).cloned();
        let m = match known {
            Some(m) => m,
            None => {
                let m = mirror_for(spec, suite)?;
                mirrors.lock().expect("not poisoned").insert(suite.to_string(), m.clone());
                m
            }
        };
        Ok(format!("{m}/{}", p.file))
    };
    let fetch_one = |p: &PinnedPackage| {
        cached_or_fetch(&fetcher, cache, Bucket::Debs, &|| url_of(p), &p.sha256, Some(p.size)).map_err(|e| match e {
            DistroError::NotServed { url, status } => DistroError::PinGone {
                package: p.name.clone(),
                version: p.version.clone(),
                suite: lock.suite_of(p).to_string(),
                file: p.file.clone(),
                url,
                status,
            },
            e => e,
        })
    };
    let missing: Vec<&PinnedPackage> =
        lock.packages.iter().filter(|p| cache.file(Bucket::Debs, &p.sha256).is_none()).collect();
    let phase = crate::progress::phase_bytes(
        format!("downloading {} of {} packages", missing.len(), lock.packages.len()),
        missing.iter().map(|p| p.size).sum(),
    );
    // A few downloads at a time: latency, not bandwidth, dominates small files.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<PathBuf, DistroError>>>> =
        lock.packages.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = lock.packages.get(i) else { break };
                let cached = cache.file(Bucket::Debs, &p.sha256).is_some();
                let r = fetch_one(p);
                if !cached {
                    phase.inc(p.size);
                }
                let failed = r.is_err();
                *results[i].lock().expect("not poisoned") = Some(r);
                if failed {
                    next.store(usize::MAX / 2, std::sync::atomic::Ordering::Relaxed);
                    break;
                }
            });
        }
    });
    let mut out = Vec::new();
    for r in results {
        match r.into_inner().expect("not poisoned") {
            Some(Ok(p)) => out.push(p),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Answers every name with one local address and counts the lookups.
    #[derive(Debug)]
    struct Counting {
        addr: std::net::SocketAddr,
        lookups: Arc<AtomicUsize>,
    }

    impl Resolver for Counting {
        fn resolve(
            &self,
            _: &ureq::http::Uri,
            _: &ureq::config::Config,
            _: ureq::unversioned::transport::NextTimeout,
        ) -> Result<ResolvedSocketAddrs, ureq::Error> {
            self.lookups.fetch_add(1, Ordering::SeqCst);
            let mut addrs = self.empty();
            addrs.push(self.addr);
            Ok(addrs)
        }
    }

    /// A keep-alive HTTP/1.1 server answering every GET with "ok".
    fn serve() -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                        if line == "\r\n" {
                            let _ = writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                        }
                        line.clear();
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_host_is_resolved_once_for_many_downloads() {
        let lookups = Arc::new(AtomicUsize::new(0));
        let fetcher = Fetcher::with_resolver(Counting { addr: serve(), lookups: lookups.clone() });
        for i in 0..5 {
            let body = fetcher.get_bytes(&format!("http://mirror.invalid/pool/{i}.deb")).unwrap();
            assert_eq!(body, b"ok");
        }
        assert_eq!(lookups.load(Ordering::SeqCst), 1, "one lookup for five requests to one host");
        fetcher.get_bytes("http://other.invalid/x").unwrap();
        assert_eq!(lookups.load(Ordering::SeqCst), 2, "another host is looked up");
    }
}
