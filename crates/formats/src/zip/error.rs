//! What can go wrong writing a zip: the engine's own errors, apart from any
//! product (a wheel, a ROCm package) written through it.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("`{path}` changed size while it was being archived ({expected} bytes, then {found})")]
    Changed { path: PathBuf, expected: u64, found: u64 },
    #[error("entry `{name}`: {source}")]
    Deflate { name: String, source: DeflateError },
    #[error("entry `{name}`: a compression thread stopped")]
    ThreadStopped { name: String },
}

/// Raw deflate of a piece failed (see `deflate`).
#[derive(Debug, thiserror::Error)]
pub enum DeflateError {
    #[error("deflate: {0:?}")]
    Compress(#[source] libdeflater::CompressionError),
    /// libdeflate's stream could not be walked to its final block: what
    /// the walk found wrong.
    #[error("{0}")]
    Stream(&'static str),
}
