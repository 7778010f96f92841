//! Connecting to the Docker Engine: `DOCKER_HOST` or the default socket,
//! the API version negotiated down to what the engine speaks (Docker 20.10
//! speaks 1.41; bollard 0.21 would otherwise ask for 1.53 and be refused).
//!
//! The [`Engine`] owns a small tokio runtime and offers blocking methods,
//! so the synchronous parts of quarry (builds, the CLI) can call it.

use super::{describe, EngineError};
use bollard::Docker;
use std::time::Duration;

const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";
/// bollard's timeout covers a request until the response headers arrive;
/// the engine answers `/images/load` or `/wait` only when done, which may
/// take far longer than bollard's 120 s default. Long operations are
/// bounded by the user (Ctrl-C), not by a timer.
const LONG_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long the first ping may take before the engine counts as unreachable.
const PING_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Engine {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) docker: Docker,
    /// The address used, for messages.
    pub host: String,
    /// The engine's version (`20.10.24`...).
    pub version: String,
    /// The API version both sides use after negotiation (`1.41`...).
    pub api_version: String,
    /// SIGINT and SIGTERM listeners, made by the first guarded operation.
    pub(crate) signals: std::cell::RefCell<Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>>,
}

/// The engine address quarry uses: `DOCKER_HOST`, else the default socket.
pub fn engine_host() -> String {
    std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| DEFAULT_HOST.to_string())
}

impl Engine {
    /// Connect and negotiate the API version; fails with a clear message
    /// when nothing answers.
    pub fn connect() -> Result<Engine, EngineError> {
        let host = engine_host();
        let unreachable = |detail: String| EngineError::Unreachable { host: host.clone(), detail };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| unreachable(format!("cannot start the I/O runtime: {e}")))?;
        // A bare path is accepted too, as the docker CLI does with `unix://`.
        let url = if host.starts_with('/') { format!("unix://{host}") } else { host.clone() };
        let docker = Docker::connect_with_host(&url).map_err(|e| unreachable(describe(&e)))?.with_timeout(LONG_TIMEOUT);
        let (docker, version) = rt.block_on(async {
            let negotiated = tokio::time::timeout(PING_TIMEOUT, docker.negotiate_version())
                .await
                .map_err(|_| unreachable(format!("no answer within {} s", PING_TIMEOUT.as_secs())))?
                .map_err(|e| unreachable(describe(&e)))?;
            let v = negotiated.version().await.map_err(|e| unreachable(describe(&e)))?;
            Ok::<_, EngineError>((negotiated, v))
        })?;
        let api_version = docker.client_version().to_string();
        Ok(Engine {
            rt,
            docker,
            host,
            version: version.version.unwrap_or_else(|| "unknown".into()),
            api_version,
            signals: Default::default(),
        })
    }

    /// The negotiated API version as (major, minor).
    pub fn api(&self) -> (u64, u64) {
        let mut it = self.api_version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
        (it.next().unwrap_or(1), it.next().unwrap_or(0))
    }

    /// Docker 23 (API 1.42) was the first to read zstd layers.
    pub fn reads_zstd(&self) -> bool {
        self.api() >= (1, 42)
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
}
