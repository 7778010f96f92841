//! Connecting to the engine the endpoint rules choose (see `endpoint`):
//! a unix socket, TCP, TCP with TLS (the docker CLI's client certificate
//! and CA, see `tls`) or ssh (see `ssh`); the API version negotiated down
//! to what the engine speaks (Docker 20.10 and Podman 4 speak 1.41;
//! bollard 0.21 would otherwise ask for 1.53 and be refused); and what kind
//! of engine answered, Docker or Podman (whose service speaks the same API
//! with the differences quarry copes with: see `podman`).
//!
//! The [`Engine`] owns a small tokio runtime and offers blocking methods,
//! so the synchronous parts of quarry (builds, the CLI) can call it.

use super::endpoint::{self, Endpoint, Transport};
use super::limits::LimitFallbacks;
use super::ssh::SshStderr;
use super::tls::Failure;
use super::{describe, EngineError, EngineKind};
use bollard::Docker;
use std::time::Duration;

/// bollard's timeout covers a request until the response headers arrive;
/// the engine answers `/images/load` or `/wait` only when done, which may
/// take far longer than bollard's 120 s default. Long operations are
/// bounded by the user (Ctrl-C), not by a timer.
const LONG_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long the first ping may take before the engine counts as unreachable
/// (an ssh endpoint's first connection includes the ssh handshake).
const PING_TIMEOUT: Duration = Duration::from_secs(40);

pub struct Engine {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) docker: Docker,
    /// The endpoint and why it was chosen.
    pub endpoint: Endpoint,
    /// The address used, for messages.
    pub host: String,
    pub kind: EngineKind,
    /// The engine's version (`20.10.24`, Podman's `4.3.1`...).
    pub version: String,
    /// The API version both sides use after negotiation (`1.41`...).
    pub api_version: String,
    /// SIGINT and SIGTERM listeners, made by the first guarded operation.
    pub signals: std::cell::RefCell<Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>>,
    /// Container limits the engine refused, and what replaced them.
    pub limits: LimitFallbacks,
    /// A local engine process's limits (read through its socket's peer).
    pub process_limits: Option<super::limits::EngineProcessLimits>,
    /// Whether the engine resolves CDI names (asked once, when needed).
    pub cdi: std::cell::OnceCell<super::devices::CdiSupport>,
    /// Whether the engine runs rootless (asked once, when needed).
    pub rootless: std::cell::OnceCell<bool>,
}

/// The engine address quarry uses, for messages when it cannot connect.
pub fn engine_host() -> String {
    endpoint::resolve().map(|e| e.url).unwrap_or_else(|e| e.to_string())
}

/// `failure` says what went wrong at a TLS endpoint (other transports have one hint each).
fn unreachable(e: &Endpoint, detail: String, failure: Failure) -> EngineError {
    let hint = match &e.transport {
        Transport::Unix(_) | Transport::Tcp(_) => "is dockerd running? (or a Podman service: `podman system service`); set DOCKER_HOST, a docker context or --engine to reach another engine".to_string(),
        Transport::Tls { certs, .. } => failure.hint(&e.url, certs),
        Transport::Ssh(_) => "quarry runs `ssh HOST docker system dial-stdio` as the docker CLI does: check the host, port and user, your ssh config and agent, and that `docker` is installed there".to_string(),
    };
    EngineError::Unreachable(Box::new(super::Unreachable {
        host: e.url.clone(),
        reason: e.reason.clone(),
        detail,
        hint,
    }))
}

impl Engine {
    /// Connect to the chosen endpoint and negotiate the API version; fails
    /// with a clear message, naming the endpoint, when nothing answers.
    pub fn connect() -> Result<Engine, EngineError> {
        let endpoint = endpoint::resolve().map_err(|e| EngineError::Invalid(e.to_string()))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| unreachable(&endpoint, format!("cannot start the I/O runtime: {e}"), Failure::Connection))?;
        let secs = LONG_TIMEOUT.as_secs();
        let v = bollard::API_DEFAULT_VERSION;
        let mut ssh_stderr: Option<SshStderr> = None;
        // bollard's custom transports (ssh, TLS) spawn on the runtime: enter it.
        let guard = rt.enter();
        let docker = match &endpoint.transport {
            Transport::Unix(path) => Docker::connect_with_unix(&path.display().to_string(), secs, v),
            Transport::Tcp(addr) => Docker::connect_with_http(addr, secs, v),
            Transport::Tls { addr, certs } => {
                for f in [&certs.ca, &certs.cert, &certs.key] {
                    if !f.is_file() {
                        let detail = format!("`{}` does not exist", f.display());
                        return Err(unreachable(&endpoint, detail, Failure::Certificate));
                    }
                }
                let setup = super::tls::connect(addr, certs, secs);
                Ok(setup.map_err(|e| unreachable(&endpoint, e.to_string(), e.failure()))?)
            }
            Transport::Ssh(target) => super::ssh::connect(target, secs).map(|(d, err)| {
                ssh_stderr = Some(err);
                d
            }),
        }
        .map_err(|e| unreachable(&endpoint, describe(&e), Failure::of(&e)))?
        .with_timeout(LONG_TIMEOUT);
        drop(guard);
        let said = |detail: String| match ssh_stderr.as_ref().map(SshStderr::text).filter(|t| !t.is_empty()) {
            Some(ssh) => format!("ssh said: {ssh}"),
            None => detail,
        };
        let (docker, version) = rt.block_on(async {
            let asked = async {
                let negotiated = docker.negotiate_version().await?;
                let version = negotiated.version().await?;
                Ok::<_, bollard::errors::Error>((negotiated, version))
            };
            match tokio::time::timeout(PING_TIMEOUT, asked).await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => {
                    // What ssh said arrives on its own pipe, maybe just after the failure.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Err(unreachable(&endpoint, said(describe(&e)), Failure::of(&e)))
                }
                Err(_) => {
                    let detail = said(format!("no answer within {} s", PING_TIMEOUT.as_secs()));
                    Err(unreachable(&endpoint, detail, Failure::Connection))
                }
            }
        })?;
        let podman = version.components.iter().flatten().any(|c| c.name.contains("Podman"));
        let api_version = docker.client_version().to_string();
        let process_limits = match &endpoint.transport {
            Transport::Unix(socket) => super::limits::engine_process(socket),
            _ => None,
        };
        Ok(Engine {
            rt,
            docker,
            host: endpoint.url.clone(),
            endpoint,
            kind: if podman { EngineKind::Podman } else { EngineKind::Docker },
            version: version.version.unwrap_or_else(|| "unknown".into()),
            api_version,
            signals: Default::default(),
            limits: LimitFallbacks::new(process_limits.as_ref()),
            process_limits,
            cdi: Default::default(),
            rootless: Default::default(),
        })
    }

    /// `Docker` or `Podman`, for messages.
    pub fn product(&self) -> &'static str {
        match self.kind {
            EngineKind::Docker => "Docker",
            EngineKind::Podman => "Podman",
        }
    }

    /// The negotiated API version as (major, minor).
    pub fn api(&self) -> (u64, u64) {
        let mut it = self.api_version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
        (it.next().unwrap_or(1), it.next().unwrap_or(0))
    }

    /// Docker 23 (API 1.42) was the first Docker to read zstd layers;
    /// Podman's storage reads them whatever API version it speaks.
    pub fn reads_zstd(&self) -> bool {
        self.kind == EngineKind::Podman || self.api() >= (1, 42)
    }

    /// The engine's storage driver (`overlay2`, `fuse-overlayfs`...).
    pub fn storage_driver(&self) -> Result<String, EngineError> {
        let info =
            self.rt.block_on(self.docker.info()).map_err(|e| EngineError::api("reading the engine's info", e))?;
        Ok(info.driver.unwrap_or_else(|| "unknown".into()))
    }

    /// Whether the engine has an image by this reference.
    pub fn has_image(&self, reference: &str) -> Result<bool, EngineError> {
        match self.rt.block_on(self.docker.inspect_image(reference)) {
            Ok(_) => Ok(true),
            Err(e) if super::is_not_found(&e) => Ok(false),
            Err(e) => Err(EngineError::api(format!("inspecting image `{reference}`"), e)),
        }
    }

    /// Refuse a host path on an engine that may not share this machine's
    /// file system.
    pub fn check_host_paths(&self, what: &str) -> Result<(), EngineError> {
        if self.endpoint.is_remote() {
            return Err(EngineError::Invalid(format!(
                "{what} bind-mounts a path of this machine, but the engine at {} ({}) may be on another host; use --copy-in/--copy-out, which go through the engine's API",
                self.endpoint.url, self.endpoint.reason
            )));
        }
        Ok(())
    }
}
