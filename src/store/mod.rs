//! Where bytes live: the content-addressed layer cache, and OCI image
//! layouts (written with `ocidir`, read from directories or archives).

pub mod cache;
pub mod layout;

/// A layer blob as the manifest and config see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerBlob {
    /// `sha256:<hex>` of the compressed bytes.
    pub digest: String,
    /// `sha256:<hex>` of the uncompressed tar.
    pub diff_id: String,
    pub size: u64,
    pub media_type: String,
}

impl LayerBlob {
    pub fn hex(&self) -> &str {
        self.digest.trim_start_matches("sha256:")
    }
}
