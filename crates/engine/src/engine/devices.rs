//! How GPU devices reach the engine: CDI names for an engine that
//! resolves them (Podman 4.1+; Docker 25+ with CDI enabled, API 1.44+),
//! else the same nodes as plain device mappings; a word when the groups
//! that give access to them cannot work (rootless Podman); and engine
//! errors about devices, said plainly.

use super::cdi::KIND;
use super::{Engine, EngineError, EngineKind};
use bollard::models::ContainerCreateBody;

/// Whether the engine resolves CDI names, and why quarry thinks so.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CdiSupport {
    pub supported: bool,
    pub why: String,
}

fn cdi_names(body: &ContainerCreateBody) -> Vec<String> {
    let requests = body.host_config.as_ref().and_then(|h| h.device_requests.as_ref());
    requests
        .into_iter()
        .flatten()
        .filter(|r| r.driver.as_deref() == Some("cdi"))
        .flat_map(|r| r.device_ids.clone().unwrap_or_default())
        .collect()
}

fn version_at_least(version: &str, want: (u64, u64)) -> bool {
    let mut it = version.split(['.', '-', '+', '~']).map(|p| p.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= want
}

/// The devices of the engine's "unresolvable CDI devices NAME,..." error.
fn unresolvable_devices(message: &str) -> Option<&str> {
    let at = message.find("unresolvable CDI devices")?;
    let rest = message[at + "unresolvable CDI devices".len()..].trim_start();
    Some(rest.split(" (").next().unwrap_or(rest).trim())
}

impl Engine {
    /// Whether this engine resolves CDI names (asks Docker's info once).
    pub async fn cdi_support_async(&self) -> CdiSupport {
        if let Some(c) = self.cdi.get() {
            return c.clone();
        }
        let found = match self.kind {
            EngineKind::Podman if version_at_least(&self.version, (4, 1)) => CdiSupport {
                supported: true,
                why: format!("Podman {} resolves CDI names from its host's /etc/cdi and /var/run/cdi", self.version),
            },
            EngineKind::Podman => {
                CdiSupport { supported: false, why: format!("Podman {} predates CDI support (4.1)", self.version) }
            }
            EngineKind::Docker if self.api() < (1, 44) => CdiSupport {
                supported: false,
                why: format!(
                    "Docker {} (API {}) predates CDI support (Docker 25, API 1.44)",
                    self.version, self.api_version
                ),
            },
            EngineKind::Docker => {
                let dirs = self.docker.info().await.ok().and_then(|i| i.cdi_spec_dirs).unwrap_or_default();
                if dirs.is_empty() {
                    CdiSupport {
                        supported: false,
                        why: format!("Docker {} has CDI turned off (dockerd's `cdi` feature)", self.version),
                    }
                } else {
                    CdiSupport {
                        supported: true,
                        why: format!("Docker {} resolves CDI names from {}", self.version, dirs.join(", ")),
                    }
                }
            }
        };
        let _ = self.cdi.set(found.clone());
        found
    }

    /// [`Engine::cdi_support_async`] for synchronous callers.
    pub fn cdi_support(&self) -> CdiSupport {
        self.rt.block_on(self.cdi_support_async())
    }

    /// [`Engine::rootless_async`] for synchronous callers.
    pub fn rootless(&self) -> bool {
        self.rt.block_on(self.rootless_async())
    }

    /// Whether the engine runs rootless (asked once, when needed).
    pub async fn rootless_async(&self) -> bool {
        if let Some(r) = self.rootless.get() {
            return *r;
        }
        // A local engine's user says it; Docker's info says it too, Podman's Docker-compatible info does not.
        let r = match &self.process_limits {
            Some(p) => p.uid != 0,
            None => {
                let info = self.docker.info().await.ok();
                info.and_then(|i| i.security_options).unwrap_or_default().iter().any(|o| o.contains("rootless"))
            }
        };
        let _ = self.rootless.set(r);
        r
    }

    /// Keep either the CDI names or their device-node fallback in `body`,
    /// as the engine can take them.
    pub async fn adapt_gpu_devices(&self, body: &mut ContainerCreateBody) -> Result<(), EngineError> {
        let groups = body.host_config.as_ref().and_then(|h| h.group_add.clone()).unwrap_or_default();
        if self.kind == EngineKind::Podman && !groups.is_empty() && self.rootless_async().await {
            log::warn!(
                "rootless Podman maps no host gid into its containers: the GPU nodes' groups ({}) will not give access there; Podman's answer, keeping the service user's own groups (`podman run --group-add keep-groups`, crun only), cannot be asked for through its API: use a rootful Podman service (or Docker) for GPU work",
                groups.join(", ")
            );
        }
        let names = cdi_names(body);
        let mapped = body.host_config.as_ref().and_then(|h| h.devices.as_ref()).is_some_and(|d| !d.is_empty());
        if names.is_empty() {
            if mapped && self.endpoint.is_remote() {
                log::info!(
                    "the engine at {} is remote: the GPU nodes passed and their gids were read on this machine; if its host differs, name its GPUs by CDI (--gpu-devices amd.com/gpu=all) or use --gpu none",
                    self.endpoint.url
                );
            }
            return Ok(());
        }
        let support = self.cdi_support_async().await;
        let host = body.host_config.get_or_insert_with(Default::default);
        if support.supported {
            // The names alone: the engine adds the nodes their spec lists.
            host.devices = None;
            return Ok(());
        }
        host.device_requests = None;
        if host.devices.as_ref().is_none_or(|d| d.is_empty()) {
            return Err(EngineError::Invalid(format!(
                "--gpu-devices {}: the engine at {} cannot resolve CDI names ({}) and quarry found no such device on this machine to pass itself; use a CDI-capable engine or render nodes (--gpu-devices renderD128)",
                names.join(","),
                self.endpoint.url,
                support.why
            )));
        }
        log::info!("{}: passing the same device nodes directly ({})", names.join(","), support.why);
        Ok(())
    }

    /// Podman takes CDI names only through its own endpoint (see `podman`).
    pub fn creates_through_libpod(&self, body: &ContainerCreateBody) -> bool {
        self.kind == EngineKind::Podman && !cdi_names(body).is_empty()
    }

    /// An error creating or starting a container, with what to do when the
    /// engine's message says what went wrong.
    pub fn explain_start_error(&self, what: &str, message: String) -> EngineError {
        if let Some(devices) = unresolvable_devices(&message) {
            return EngineError::Invalid(format!(
                "CDI device {devices} does not exist on the engine at {}: no CDI spec in its host's /etc/cdi or /var/run/cdi names it (or two specs name it, and the engine drops both); write one there with `quarry cdi generate -o /etc/cdi/amd.json` (or `amd-ctk cdi generate`), or ask for a device it lists ({KIND}=0, {KIND}=all)",
                self.endpoint.url
            ));
        }
        EngineError::Api { what: what.to_string(), detail: message }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unresolvable_devices_from_engine_messages() {
        let podman = "preparing container 08f9 for attach: setting up CDI devices: unresolvable CDI devices amd.com/gpu=1 (HTTP 409)";
        assert_eq!(super::unresolvable_devices(podman), Some("amd.com/gpu=1"));
        assert_eq!(super::unresolvable_devices("no such image"), None);
    }

    #[test]
    fn versions() {
        assert!(super::version_at_least("4.3.1", (4, 1)));
        assert!(!super::version_at_least("4.0.3", (4, 1)));
        assert!(super::version_at_least("25.0.0", (4, 1)));
    }
}
