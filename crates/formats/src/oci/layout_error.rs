//! What can go wrong reading or writing an image layout or archive.

use std::io;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("`{path}`: {what}: {err}")]
    Io { path: String, what: String, err: io::Error },
    #[error("`{path}`: {message}")]
    Bad { path: String, message: String },
}

pub(super) fn io_err(path: &Path, what: impl Into<String>) -> impl FnOnce(io::Error) -> LayoutError {
    let path = path.display().to_string();
    let what = what.into();
    move |err| LayoutError::Io { path, what, err }
}

pub(super) fn bad(path: &Path, message: impl std::fmt::Display) -> LayoutError {
    LayoutError::Bad { path: path.display().to_string(), message: message.to_string() }
}
