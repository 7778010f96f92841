//! The docker CLI's contexts, read the way the CLI reads them: the current
//! context is `DOCKER_CONTEXT`, else `currentContext` in the docker config
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`); a context's
//! endpoint is in `contexts/meta/<sha256 of its name>/meta.json` beside that
//! file, and its TLS material (`ca.pem`, `cert.pem`, `key.pem`) in
//! `contexts/tls/<sha256 of its name>/docker/`. The context `default` means
//! "no context": `DOCKER_HOST` or the default socket.

use std::path::{Path, PathBuf};

/// The name of the context that stands for the plain environment.
pub const DEFAULT_CONTEXT: &str = "default";

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("docker context `{name}` ({origin}) does not exist in {store}; `docker context ls` lists the contexts there, `docker context create` makes one")]
    Unknown { name: String, origin: String, store: String },
    #[error("docker context `{name}`: cannot read `{path}`: {detail}; recreate it with `docker context create`")]
    Unreadable { name: String, path: String, detail: String },
    #[error("docker context `{name}` has no docker endpoint in `{path}`; recreate it with `docker context create {name} --docker host=...`")]
    NoEndpoint { name: String, path: String },
}

/// A context's docker endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextEndpoint {
    pub name: String,
    /// `unix:///...`, `tcp://...`, `ssh://...`.
    pub host: String,
    /// The directory holding `ca.pem`, `cert.pem`, `key.pem`, when the context has TLS material.
    pub tls_dir: Option<PathBuf>,
    /// `SkipTLSVerify` of the context.
    pub skip_tls_verify: bool,
}

/// The docker CLI's configuration directory: `DOCKER_CONFIG`, else `~/.docker`.
pub fn config_dir() -> Option<PathBuf> {
    crate::registry::auth::docker_config_path().and_then(|p| p.parent().map(Path::to_path_buf))
}

/// `currentContext` of the docker config, when set (and not `default`), with the file it came from.
pub fn current_context() -> Option<(String, PathBuf)> {
    let path = config_dir()?.join("config.json");
    let text = std::fs::read(&path).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let name = value.get("currentContext")?.as_str()?.trim().to_string();
    (!name.is_empty()).then_some((name, path))
}

/// The endpoint of the context `name`; `origin` says where the name came
/// from, for the error when it does not exist.
pub fn load(name: &str, origin: &str) -> Result<ContextEndpoint, ContextError> {
    let dir = config_dir().unwrap_or_else(|| PathBuf::from(".docker"));
    let id = crate::oci::digest::sha256_hex(name.as_bytes());
    let meta = dir.join("contexts/meta").join(&id).join("meta.json");
    let text = match std::fs::read(&meta) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ContextError::Unknown {
                name: name.into(),
                origin: origin.into(),
                store: dir.join("contexts").display().to_string(),
            })
        }
        Err(e) => return Err(unreadable(name, &meta, e.to_string())),
    };
    let parsed: Meta = serde_json::from_slice(&text).map_err(|e| unreadable(name, &meta, e.to_string()))?;
    let docker = parsed
        .endpoints
        .docker
        .filter(|d| !d.host.is_empty())
        .ok_or_else(|| ContextError::NoEndpoint { name: name.into(), path: meta.display().to_string() })?;
    let tls = dir.join("contexts/tls").join(&id).join("docker");
    let has_tls = ["ca.pem", "cert.pem", "key.pem"].iter().any(|f| tls.join(f).is_file());
    Ok(ContextEndpoint {
        name: name.into(),
        host: docker.host,
        tls_dir: has_tls.then_some(tls),
        skip_tls_verify: docker.skip_tls_verify,
    })
}

fn unreadable(name: &str, path: &Path, detail: String) -> ContextError {
    ContextError::Unreadable { name: name.into(), path: path.display().to_string(), detail }
}

#[derive(serde::Deserialize)]
struct Meta {
    #[serde(rename = "Endpoints", default)]
    endpoints: Endpoints,
}

#[derive(serde::Deserialize, Default)]
struct Endpoints {
    docker: Option<DockerEndpoint>,
}

#[derive(serde::Deserialize)]
struct DockerEndpoint {
    #[serde(rename = "Host", default)]
    host: String,
    #[serde(rename = "SkipTLSVerify", default)]
    skip_tls_verify: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_json_as_the_docker_cli_writes_it() {
        let m: Meta = serde_json::from_str(
            r#"{"Name":"lab","Metadata":{"Description":"gpu box"},"Endpoints":{"docker":{"Host":"ssh://ci@gpu1","SkipTLSVerify":false}}}"#,
        )
        .unwrap();
        let d = m.endpoints.docker.unwrap();
        assert_eq!(d.host, "ssh://ci@gpu1");
        assert!(!d.skip_tls_verify);
    }
}
