//! Which engine quarry talks to, and why: the docker CLI's rules, so a user
//! who drives an engine with `docker` reaches the same one with quarry.
//!
//! In order: `--engine` (or `QUARRY_ENGINE`: a context name or an address),
//! `DOCKER_HOST` (with `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` for TLS),
//! `DOCKER_CONTEXT`, `currentContext` of the docker config, then the default
//! socket `/var/run/docker.sock`; when that socket does not exist and a
//! Podman service socket does (rootful `/run/podman/podman.sock`, rootless
//! `$XDG_RUNTIME_DIR/podman/podman.sock`), Podman's.
//!
//! Addresses: `unix:///path` (or a bare path), `tcp://host[:port]` (2375,
//! or 2376 with TLS), `ssh://[user@]host[:port][/socket]`.

use super::context::{self, ContextEndpoint, ContextError, DEFAULT_CONTEXT};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";
pub const PODMAN_ROOTFUL_SOCKET: &str = "/run/podman/podman.sock";

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(transparent)]
    Context(#[from] ContextError),
    #[error("{origin} `{value}`: {problem}")]
    Invalid { origin: String, value: String, problem: String },
    #[error("{origin} `{value}`: {source}")]
    Ssh { origin: String, value: String, source: SshAddressError },
}

/// What is wrong with an `ssh://` address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshAddressError {
    #[error("`{port}` is not a port number")]
    Port { port: String, source: std::num::ParseIntError },
    #[error("expected ssh://[USER@]HOST[:PORT]")]
    NoHost,
}

/// How quarry reaches the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A unix socket on this machine.
    Unix(PathBuf),
    /// Plain HTTP over TCP (`host:port`).
    Tcp(String),
    /// HTTPS over TCP with a client certificate (`host:port`).
    Tls { addr: String, certs: TlsFiles },
    /// `ssh ... docker system dial-stdio` on another host.
    Ssh(SshTarget),
}

/// The docker CLI's TLS material: a CA and a client certificate and key.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    /// Where they came from (`DOCKER_CERT_PATH`, a context's TLS directory).
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    fn in_dir(dir: &Path) -> TlsFiles {
        TlsFiles { dir: dir.into(), ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") }
    }
}

/// `ssh://[user@]host[:port][/socket]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SshTarget {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// The engine's socket on that host, when not the remote CLI's default.
    pub socket: Option<String>,
}

/// The endpoint chosen, with the reason it was chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// The address as a user would write it (`unix:///var/run/docker.sock`, `ssh://ci@gpu1`...).
    pub url: String,
    pub transport: Transport,
    /// Why this one: `--engine`, `DOCKER_HOST`, a context and where its name came from...
    pub reason: String,
}

impl Endpoint {
    /// True when the engine may not share this machine's file system
    /// (TCP, ssh): no host path may be handed to it.
    pub fn is_remote(&self) -> bool {
        !matches!(self.transport, Transport::Unix(_))
    }
}

static SELECTION: OnceLock<Option<String>> = OnceLock::new();

/// Record `--engine` (the command line calls this once, before any engine use).
pub fn select(engine: Option<String>) {
    let _ = SELECTION.set(engine.filter(|e| !e.trim().is_empty()));
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The endpoint the docker CLI's rules give (see the module docs).
pub fn resolve() -> Result<Endpoint, EndpointError> {
    if let Some(sel) = SELECTION.get().cloned().flatten() {
        return if is_address(&sel) { from_address(&sel, "--engine", None) } else { from_context(&sel, "--engine") };
    }
    if let Some(host) = env("DOCKER_HOST") {
        return from_address(&host, "DOCKER_HOST", None);
    }
    if let Some(name) = env("DOCKER_CONTEXT") {
        return from_context(&name, "DOCKER_CONTEXT");
    }
    if let Some((name, file)) = context::current_context() {
        return from_context(&name, &format!("currentContext in {}", file.display()));
    }
    Ok(default_socket())
}

fn is_address(s: &str) -> bool {
    s.contains("://") || s.starts_with('/')
}

/// The local default: Docker's socket, else a Podman service's.
fn default_socket() -> Endpoint {
    let unix = |path: &str, reason: String| Endpoint {
        url: format!("unix://{path}"),
        transport: Transport::Unix(path.into()),
        reason,
    };
    if Path::new(DOCKER_SOCKET).exists() {
        return unix(DOCKER_SOCKET, "the default socket".into());
    }
    let rootless = env("XDG_RUNTIME_DIR").map(|d| format!("{d}/podman/podman.sock"));
    for podman in rootless.iter().map(String::as_str).chain([PODMAN_ROOTFUL_SOCKET]) {
        if Path::new(podman).exists() {
            return unix(podman, format!("Podman's service socket (there is no {DOCKER_SOCKET})"));
        }
    }
    unix(DOCKER_SOCKET, "the default socket".into())
}

fn from_context(name: &str, origin: &str) -> Result<Endpoint, EndpointError> {
    if name == DEFAULT_CONTEXT {
        let mut e = match env("DOCKER_HOST") {
            Some(host) => from_address(&host, "DOCKER_HOST", None)?,
            None => default_socket(),
        };
        e.reason = format!("docker context `default` ({origin}): {}", e.reason);
        return Ok(e);
    }
    let ctx = context::load(name, origin)?;
    let why = format!("docker context `{name}` ({origin})");
    from_address(&ctx.host.clone(), &why, Some(&ctx))
}

/// Parse an address. TLS material comes from the context when there is
/// one, else from `DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH`.
fn from_address(value: &str, origin: &str, ctx: Option<&ContextEndpoint>) -> Result<Endpoint, EndpointError> {
    let bad = |problem: String| EndpointError::Invalid { origin: origin.into(), value: value.into(), problem };
    let reason = origin.to_string();
    if let Some(path) = value.strip_prefix("unix://").or_else(|| value.starts_with('/').then_some(value)) {
        if path.is_empty() {
            return Err(bad("no socket path; write unix:///path/to/engine.sock".into()));
        }
        return Ok(Endpoint { url: format!("unix://{path}"), transport: Transport::Unix(path.into()), reason });
    }
    if let Some(rest) = value.strip_prefix("tcp://").or_else(|| value.strip_prefix("http://")) {
        let tls = match ctx {
            Some(c) => {
                if c.tls_dir.is_some() && c.skip_tls_verify {
                    return Err(bad(format!("the context `{}` skips TLS verification, which quarry does not do; give it the engine's CA (`docker context update {} --docker ca=...`)", c.name, c.name)));
                }
                c.tls_dir.as_deref().map(TlsFiles::in_dir)
            }
            None => env_tls(value, origin)?,
        };
        let hostport = rest.trim_end_matches('/');
        if hostport.is_empty() || hostport.contains('/') {
            return Err(bad("expected tcp://HOST[:PORT]".into()));
        }
        let addr = if has_port(hostport) {
            hostport.to_string()
        } else {
            format!("{hostport}:{}", if tls.is_some() { 2376 } else { 2375 })
        };
        let url = format!("tcp://{addr}");
        let transport = match tls {
            Some(certs) => Transport::Tls { addr, certs },
            None => Transport::Tcp(addr),
        };
        return Ok(Endpoint { url, transport, reason });
    }
    if let Some(rest) = value.strip_prefix("ssh://") {
        let target = parse_ssh(rest).map_err(|source| EndpointError::Ssh {
            origin: origin.into(),
            value: value.into(),
            source,
        })?;
        return Ok(Endpoint { url: value.to_string(), transport: Transport::Ssh(target), reason });
    }
    Err(bad(
        "unsupported address; use unix:///PATH, tcp://HOST[:PORT], ssh://[USER@]HOST[:PORT] or a docker context name"
            .into(),
    ))
}

fn has_port(hostport: &str) -> bool {
    match hostport.rsplit_once(':') {
        // `[::1]` alone has colons but no port.
        Some((h, p)) => {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (!h.contains(':') || h.ends_with(']'))
        }
        None => false,
    }
}

/// `DOCKER_TLS_VERIFY` (any non-empty value, as the docker CLI reads it)
/// with the certificates in `DOCKER_CERT_PATH`, else the docker config dir.
fn env_tls(value: &str, origin: &str) -> Result<Option<TlsFiles>, EndpointError> {
    if env("DOCKER_TLS_VERIFY").is_none() {
        if env("DOCKER_TLS").is_some() {
            return Err(EndpointError::Invalid {
                origin: origin.into(),
                value: value.into(),
                problem: "DOCKER_TLS asks for TLS without verifying the engine, which quarry does not do; set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH to the directory with ca.pem, cert.pem and key.pem".into(),
            });
        }
        return Ok(None);
    }
    let dir = env("DOCKER_CERT_PATH").map(PathBuf::from).or_else(context::config_dir).unwrap_or_default();
    Ok(Some(TlsFiles::in_dir(&dir)))
}

/// `[user@]host[:port][/socket]`.
fn parse_ssh(rest: &str) -> Result<SshTarget, SshAddressError> {
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u.to_string()).filter(|u| !u.is_empty()), h),
        None => (None, authority),
    };
    let (host, port) = if has_port(hostport) {
        let (h, p) = hostport.rsplit_once(':').expect("has_port saw a colon");
        (h, Some(p.parse::<u16>().map_err(|source| SshAddressError::Port { port: p.to_string(), source })?))
    } else {
        (hostport, None)
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.starts_with('-') {
        return Err(SshAddressError::NoHost);
    }
    let socket = path.filter(|p| *p != "/").map(str::to_string);
    Ok(SshTarget { user, host: host.to_string(), port, socket })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let e = from_address("unix:///run/podman/podman.sock", "x", None).unwrap();
        assert_eq!(e.transport, Transport::Unix("/run/podman/podman.sock".into()));
        assert!(!e.is_remote());
        let e = from_address("/var/run/docker.sock", "x", None).unwrap();
        assert_eq!(e.url, "unix:///var/run/docker.sock");
        let ssh = parse_ssh("ci@gpu1:2222").unwrap();
        assert_eq!(ssh, SshTarget { user: Some("ci".into()), host: "gpu1".into(), port: Some(2222), socket: None });
        let ssh = parse_ssh("gpu1/run/user/1000/docker.sock").unwrap();
        assert_eq!(ssh.socket.as_deref(), Some("/run/user/1000/docker.sock"));
        assert_eq!(ssh.user, None);
        assert!(parse_ssh("ci@").is_err());
        assert!(parse_ssh("-oProxyCommand=x").is_err());
        assert!(from_address("ftp://x", "x", None).is_err());
        assert!(has_port("127.0.0.1:2376") && !has_port("gpu1") && !has_port("[::1]") && has_port("[::1]:22"));
    }

    #[test]
    fn context_tls_material_makes_tcp_tls() {
        let ctx = ContextEndpoint {
            name: "lab".into(),
            host: "tcp://gpu1".into(),
            tls_dir: Some("/ctx/tls".into()),
            skip_tls_verify: false,
        };
        let e = from_address("tcp://gpu1", "docker context `lab`", Some(&ctx)).unwrap();
        assert_eq!(e.url, "tcp://gpu1:2376");
        let Transport::Tls { certs, .. } = e.transport else { panic!("not TLS") };
        assert_eq!(certs.key, Path::new("/ctx/tls/key.pem"));
        let skip = ContextEndpoint { skip_tls_verify: true, ..ctx };
        assert!(from_address("tcp://gpu1", "c", Some(&skip)).is_err());
    }
}
