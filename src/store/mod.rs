//! Where bytes live: the content-addressed layer cache, OCI image layouts
//! (written with `ocidir`, read from directories or archives), and the
//! artifacts (SBOMs) that refer to an image in a layout.

pub mod blob;
pub mod cache;
pub mod digest;
pub mod key;

pub use blob::{BlobError, BlobWriter};
pub use digest::Digest;
pub mod layout;
pub mod referrer;

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
