//! The Docker Engine API (`bollard`), as Docker and Podman serve it:
//! choosing the endpoint (`DOCKER_HOST`, docker contexts, `--engine`) and
//! connecting over a unix socket, TCP, TLS (`tls`: as the docker CLI, no
//! session resumption) or ssh (any engine from Docker 20.10 / Podman 4 /
//! API 1.41 on), loading images while skipping the layers the engine has,
//! running containers with AMD GPUs passed through, step layers (a script
//! run in a container, its diff turned into a layer),
//! cleaning up after killed runs, and the facts `quarry doctor` reports
//! (the `doctor` module gathers them).
//!
//! Every container and temporary image quarry creates carries the label
//! [`LABEL_MANAGED`], the creating process id ([`LABEL_PID`]) and the host
//! it runs on ([`LABEL_HOST`]: a remote engine serves many); they are
//! removed on success, failure and SIGINT/SIGTERM, and `quarry gc` removes
//! what a killed process left.

pub mod allocation;
pub mod build_image;
pub mod cdi;
pub mod compiler_cache;
pub mod connect;
pub mod context;
pub mod copy;
mod devices;
pub mod endpoint;
pub mod exec;
pub mod gc;
pub mod gpu;
pub mod kfd;
pub mod limits;
pub mod load;
mod podman;
pub mod run;
pub mod session;
mod ssh;
mod stats;
pub mod step;
mod stream;
mod tls;

pub use connect::Engine;
pub use devices::CdiSupport;

/// Which engine answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Docker,
    Podman,
}

/// Label on every container and temporary image quarry creates.
pub const LABEL_MANAGED: &str = "io.quarry.managed";
/// The pid of the quarry process that created the object.
pub const LABEL_PID: &str = "io.quarry.pid";
/// The host name of the machine the quarry process runs on.
pub const LABEL_HOST: &str = "io.quarry.host";

/// This machine's name, for [`LABEL_HOST`].
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot reach the Docker Engine at {} (chosen by {}): {}; {}", .0.host, .0.reason, .0.detail, .0.hint)]
    Unreachable(Box<Unreachable>),
    #[error("{what}: {detail}")]
    Api { what: String, detail: String },
    #[error("image `{0}` is not in the Docker Engine; load it first (`quarry load DIR --tag {0}`), or give an OCI directory or an image definition")]
    NoSuchImage(String),
    #[error("{what} `{path}`: {err}")]
    Io { what: String, path: String, err: std::io::Error },
    #[error(transparent)]
    Export(#[from] crate::export::ExportError),
    #[error(transparent)]
    Layout(#[from] crate::oci::layout::LayoutError),
    #[error(transparent)]
    Gpu(#[from] gpu::GpuError),
    #[error("{0}")]
    Invalid(String),
    #[error("interrupted by {0}; the container was stopped and removed")]
    Interrupted(&'static str),
}

/// An endpoint that did not answer: where, why it was chosen, what went
/// wrong and what to check.
#[derive(Debug)]
pub struct Unreachable {
    pub host: String,
    pub reason: String,
    pub detail: String,
    pub hint: String,
}

impl EngineError {
    pub fn api(what: impl Into<String>, err: bollard::errors::Error) -> EngineError {
        EngineError::Api { what: what.into(), detail: describe(&err) }
    }

    pub fn io(what: impl Into<String>, path: impl AsRef<std::path::Path>, err: std::io::Error) -> EngineError {
        EngineError::Io { what: what.into(), path: path.as_ref().display().to_string(), err }
    }

    /// The exit status a CLI should use: 130/143 after a signal; as a shell
    /// and `docker run` do, 127 when the command is not in the image and 126
    /// when it cannot be executed; else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            EngineError::Interrupted("SIGINT") => 130,
            EngineError::Interrupted(_) => 143,
            EngineError::Api { detail, .. } if command_not_found(detail) => 127,
            EngineError::Api { detail, .. } if detail.contains("permission denied") && detail.contains("exec") => 126,
            _ => 1,
        }
    }
}

/// The runtime's words for a command the image does not have (runc/crun
/// through Docker or Podman).
fn command_not_found(detail: &str) -> bool {
    [
        "executable file not found",
        "no such file or directory: OCI runtime attempted to invoke a command that was not found",
    ]
    .iter()
    .any(|m| detail.contains(m))
        || (detail.contains("exec:") && detail.contains("no such file or directory"))
}

/// The engine's own message when there is one, without bollard's debug dump.
pub fn describe(err: &bollard::errors::Error) -> String {
    use bollard::errors::Error as E;
    match err {
        E::DockerResponseServerError { status_code, message } => format!("{} (HTTP {status_code})", message.trim()),
        E::DockerStreamError { error } => error.trim().to_string(),
        E::DockerContainerWaitError { error, code } => format!("exit code {code} {error}"),
        E::RequestTimeoutError => "the engine did not answer in time".to_string(),
        // Connection errors hide their cause (TLS, refused, ssh exited) a
        // few levels down, under wrappers that say only "client error".
        other => {
            let mut parts: Vec<String> = Vec::new();
            let mut cause: Option<&dyn std::error::Error> = Some(other);
            while let Some(c) = cause {
                let text = c.to_string();
                let wrapper =
                    text.starts_with("Error in the hyper legacy client") || text.starts_with("client error (");
                if !wrapper && !parts.iter().any(|p| p.contains(&text)) {
                    parts.push(text);
                }
                cause = c.source();
            }
            if parts.is_empty() {
                other.to_string()
            } else {
                parts.join(": ")
            }
        }
    }
}

pub fn is_not_found(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}
