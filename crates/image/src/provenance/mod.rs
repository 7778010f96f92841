//! Provenance: what a product was made from, as an in-toto Statement v1
//! with the SLSA Provenance v1 predicate (`statement`), for images read off
//! their executed plan (`image`), for files (wheels, packages) beside them
//! (`files`: `NAME.intoto.json`, signed as `NAME.intoto.jsonl`).
//!
//! The statement holds no clock, host name, user or path of the build
//! machine: files are named from the root of their checkout (`paths`),
//! times appear only from `SOURCE_DATE_EPOCH`. Two builds of the same
//! inputs on two machines give the same bytes. In an OCI layout it is an
//! OCI 1.1 referrer of the image manifest (artifact type
//! `application/vnd.in-toto+json`, [`attach`]), so the image digest is what
//! it was without it; `quarry push` pushes it along.

pub mod files;
pub mod image;
mod paths;
pub mod statement;

pub use image::{statement as image_statement, ImageBuildParams};
pub use paths::{checkout_root, image_argument, portable};
pub use statement::{ResourceDescriptor, Statement, SLSA_PROVENANCE_V1, STATEMENT_TYPE};

pub use crate::oci::IN_TOTO_MEDIA_TYPE;

/// The file name a tool (oras) gives an attached provenance when it pulls it.
const PROVENANCE_TITLE: &str = "provenance.intoto.json";

#[derive(Debug, thiserror::Error)]
pub enum ProvenanceError {
    #[error("provenance: cannot read {path}")]
    Read {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("provenance: cannot write {path}")]
    Write {
        path: String,
        #[source]
        err: std::io::Error,
    },
    /// An input no descriptor can name (a package name no purl can hold).
    #[error("provenance: {what}: {message}")]
    Input { what: String, message: String },
}

/// Attach the statement `bytes` to the image `image` of the layout at
/// `layout_dir` (replacing a provenance attached before); returns the
/// artifact's descriptor.
pub fn attach(
    layout_dir: &std::path::Path,
    image: &crate::oci::Digest,
    bytes: &[u8],
) -> Result<ocidir::oci_spec::image::Descriptor, crate::oci::layout::LayoutError> {
    let doc =
        crate::oci::referrer::Attachment { artifact_type: IN_TOTO_MEDIA_TYPE, title: PROVENANCE_TITLE, content: bytes };
    crate::oci::referrer::attach(layout_dir, image, &doc)
}
