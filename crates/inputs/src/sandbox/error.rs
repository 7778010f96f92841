//! The sandbox's errors: the parent's ([`SandboxError`], what a build
//! reports) and the inside's ([`HelperError`], printed by the helper process
//! for the parent to read).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot make the sandbox that runs the packages' scripts: {reason}")]
    Unavailable { reason: String, hint: String },
    #[error("the sandbox failed: {0}")]
    Helper(String),
    #[error("`{path}`: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

impl SandboxError {
    /// What to do about it, printed after the error (see `cli::exit`).
    pub fn hint(&self) -> Option<&str> {
        match self {
            SandboxError::Unavailable { hint, .. } => Some(hint),
            _ => None,
        }
    }
}

/// Exit code of the helper when the namespaces could not be made (its
/// stderr says why).
pub const EXIT_UNAVAILABLE: i32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("{0}")]
    Unavailable(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("the job file: {0}")]
    Job(String),
}

impl HelperError {
    pub fn exit_code(&self) -> i32 {
        match self {
            HelperError::Unavailable(_) => EXIT_UNAVAILABLE,
            _ => 1,
        }
    }
}

pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HelperError {
    let what = what.into();
    move |err| HelperError::Io { what, err }
}
