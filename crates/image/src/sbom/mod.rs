//! Software bills of materials: an image's [`Inventory`] (its base, Debian
//! packages, PyPI files and local sources) as an SPDX 2.3 JSON document.
//!
//! - `inventory`: the input, plain data (what `quarry plan --json` carries)
//! - `spdx`: the document: one SPDX package per input, the image described
//!   by the document, containing each input, descending from its base
//!
//! The output is deterministic: the same inventory gives the same bytes
//! (inputs sorted, `created` from the inventory's epoch, the namespace
//! derived from the document's own content). Storing it beside the image in
//! an OCI layout is [`attach`] (through `oci::referrer`); pushing it,
//! `registry::push::referrers`.

mod from_plan;
pub mod inventory;
mod spdx;

pub use from_plan::{distro_of, inventory};

pub use inventory::{BaseImage, BaseKind, DebPackage, Distro, Inventory, LocalKind, LocalSource, PypiFile};

/// The media type of an SPDX JSON document (IANA registered), used as the
/// OCI artifact type and layer media type.
pub use crate::oci::SPDX_JSON_MEDIA_TYPE;

#[derive(Debug, thiserror::Error)]
pub enum SbomError {
    /// An inventory entry that cannot be described (a malformed digest, a
    /// name no package URL can hold).
    #[error("SBOM: {what}: {message}")]
    Input { what: String, message: String },
}

/// The SPDX 2.3 JSON document describing `inv`, pretty-printed, ending in a newline.
pub fn spdx_json(inv: &Inventory) -> Result<Vec<u8>, SbomError> {
    spdx::document_bytes(inv)
}

/// The file name an SBOM gets when a tool (oras) pulls it.
const SBOM_TITLE: &str = "sbom.spdx.json";

/// Attach an SPDX JSON document to the image `image` of the layout at
/// `layout_dir` (replacing an SBOM attached before); returns the
/// artifact's descriptor.
pub fn attach(
    layout_dir: &std::path::Path,
    image: &crate::oci::Digest,
    spdx_json: &[u8],
) -> Result<ocidir::oci_spec::image::Descriptor, crate::oci::layout::LayoutError> {
    let doc =
        crate::oci::referrer::Attachment { artifact_type: SPDX_JSON_MEDIA_TYPE, title: SBOM_TITLE, content: spdx_json };
    crate::oci::referrer::attach(layout_dir, image, &doc)
}
