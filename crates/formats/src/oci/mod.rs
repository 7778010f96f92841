//! OCI content on disk: digests, blob directories (`blobs/sha256/<hex>`,
//! written by a writer that hashes while it writes), image layouts (written
//! with `ocidir`, read from directories or archives) and the artifacts that
//! refer to an image in a layout. Nothing here knows what a cache is: the
//! cache keeps its content in a [`BlobDir`] like any layout.

pub mod blob;
pub mod digest;
pub mod layout;
mod layout_error;
mod output;
pub mod referrer;

pub use blob::{BlobDir, BlobError, BlobWriter};
pub use digest::Digest;

/// Where an OCI layout (and quarry's cache) keeps sha256 blobs, relative to its root.
pub const BLOBS_DIR: &str = "blobs/sha256";

/// The media type of an SPDX document in JSON (IANA registered), used as an
/// artifact type and layer media type for SBOMs.
pub const SPDX_JSON_MEDIA_TYPE: &str = "application/spdx+json";

/// The media type of an in-toto statement, used as the artifact type and
/// layer media type of an image's provenance.
pub const IN_TOTO_MEDIA_TYPE: &str = "application/vnd.in-toto+json";

/// The `predicateType` of SLSA Provenance v1 (what an image's provenance
/// statement carries, and the annotation of its attestation layer).
pub const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";

/// A layer blob as the manifest and config see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerBlob {
    /// Of the compressed bytes.
    pub digest: Digest,
    /// Of the uncompressed tar.
    pub diff_id: Digest,
    pub size: u64,
    pub media_type: String,
}

impl LayerBlob {
    pub fn hex(&self) -> String {
        self.digest.hex()
    }
}
