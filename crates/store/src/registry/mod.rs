//! Registries, natively over the OCI distribution API: pull bases by digest
//! into the layer cache, push OCI layouts.
//!
//! - `reference`: parse `HOST[:PORT]/REPO[:TAG][@sha256:...]`
//! - `auth`: docker config credentials, `WWW-Authenticate` challenges
//! - `client`: one registry's HTTP session: auth (anonymous, basic, bearer), retries
//! - `pull`: manifests (an index resolved to a platform) and verified blobs into the cache
//! - `upload`: one blob's upload (monolithic or chunked)
//! - `push`: an OCI layout's image to a repository
//! - `referrers`: the artifacts referring to it (its SBOM): referrers API or fallback tags
//! - `known`: where blobs were seen, for cross-repository mounts
//! - `save`: a pulled image as an OCI layout, byte for byte
//! - `attached`: what the registry holds beside an image, read back (referrers, cosign's `.sig`/`.att`)
//! - `artifact`: small artifacts by tag (the cache's registry tier), verified blob downloads

pub mod artifact;
pub mod attached;
pub mod auth;
pub mod client;
mod known;
pub mod pull;
pub mod push;
pub mod reference;
pub mod save;
mod upload;

pub use client::Client;
pub use reference::{Reference, ReferenceError};

use crate::oci::layout::LayoutError;
use crate::oci::BlobDir;
use std::path::Path;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// Where pulled content goes (a blob directory: the cache's) and where a
/// session keeps notes on which repositories hold which blobs (None: nowhere).
#[derive(Clone, Copy)]
pub struct Store<'a> {
    pub blobs: &'a BlobDir,
    pub notes: Option<&'a Path>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("docker config `{path}`: {message}")]
    Config { path: String, message: String },
    #[error("docker config `{path}`: {source}")]
    Helper { path: String, source: auth::HelperError },
    #[error("registry {registry}: cannot connect: {message}; check that it is running and reachable{hint}")]
    Connect { registry: String, message: String, hint: String },
    #[error("registry {registry}: {what}: authentication required or refused ({message}); log in with `docker login {registry}` (quarry reads {config})")]
    Unauthorized { registry: String, what: String, message: String, config: String },
    #[error("registry {registry}: {what}: access denied (403: {message}); check that your account may access this repository")]
    Denied { registry: String, what: String, message: String },
    #[error("registry {registry}: {what}: not found ({message})")]
    NotFound { registry: String, what: String, message: String },
    #[error("registry {registry}: {what}: the registry answered {status} ({message})")]
    Status { registry: String, what: String, status: u16, message: String },
    #[error(
        "{what}: the registry served bytes with digest {actual}, not the {expected} asked for; nothing was stored"
    )]
    DigestMismatch { what: String, expected: String, actual: String },
    #[error("{what}: the registry served {actual} bytes where the descriptor says {expected}; nothing was stored")]
    SizeMismatch { what: String, expected: u64, actual: u64 },
    #[error("registry {registry}: {what}: {message}")]
    Protocol { registry: String, what: String, message: String },
    #[error("`{reference}`: {message}")]
    Image { reference: String, message: String },
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("`{path}`: {what}: {err}")]
    Io { path: String, what: String, err: std::io::Error },
}
