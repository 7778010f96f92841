//! What an image's provenance claims, read from its layout and checked
//! against the image before anything is rebuilt: the statement is an
//! in-toto Statement v1 with the SLSA Provenance v1 predicate of an image
//! build, and its subject is this image's manifest.

use super::VerifyError;
use crate::layer::compress::LayerCodec;
use crate::oci::layout::open_image;
use crate::oci::Digest;
use crate::provenance::image::IMAGE_BUILD_TYPE;
use crate::provenance::{ResourceDescriptor, Statement, IN_TOTO_MEDIA_TYPE, SLSA_PROVENANCE_V1, STATEMENT_TYPE};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Largest provenance statement read.
const STATEMENT_LIMIT: u64 = 64 << 20;

/// The image of a layout and what its provenance says it was built from.
#[derive(Debug, Clone)]
pub struct Claim {
    pub image_name: String,
    pub manifest_digest: Digest,
    pub statement: Statement,
    pub bytes: Vec<u8>,
    /// The image definition to rebuild, by its path in the checkout.
    pub definition: String,
    /// Every definition, layer and lock file, by path in the checkout.
    pub files: Vec<ResourceDescriptor>,
    pub sets: BTreeMap<String, String>,
    pub source_date_epoch: u64,
    pub codec: LayerCodec,
}

fn bad(layout: &Path, message: impl Into<String>) -> VerifyError {
    VerifyError::Provenance { target: layout.display().to_string(), message: message.into() }
}

/// The provenance document attached to the image `image` of the layout.
pub fn provenance_bytes(layout: &Path, image: &Digest) -> Result<Vec<u8>, VerifyError> {
    let source = crate::oci::layout::ImageSource::open(layout)?;
    let found: Vec<_> = crate::oci::referrer::referrers(layout, image)?
        .into_iter()
        .filter(|r| r.artifact_type() == IN_TOTO_MEDIA_TYPE)
        .collect();
    let r = match found.as_slice() {
        [] => return Err(VerifyError::NoProvenance { target: layout.display().to_string() }),
        [one] => one,
        _ => return Err(bad(layout, format!("{} provenance documents refer to image {image}; keep one", found.len()))),
    };
    let layer = r
        .manifest
        .layers()
        .first()
        .ok_or_else(|| bad(layout, format!("the provenance artifact {} has no layer", r.descriptor.digest())))?;
    if layer.size() > STATEMENT_LIMIT {
        return Err(bad(layout, format!("the provenance is {} bytes, more than quarry reads", layer.size())));
    }
    let mut bytes = Vec::new();
    source.blob_reader(layer)?.take(STATEMENT_LIMIT).read_to_end(&mut bytes).map_err(|err| VerifyError::Io {
        path: layout.display().to_string(),
        what: format!("cannot read the provenance blob {}", layer.digest()),
        err,
    })?;
    // The layout's blob is its digest's bytes: a changed byte is a damaged layout.
    if layer.digest().to_string() != Digest::of_bytes(&bytes).to_string() {
        return Err(bad(layout, format!("the provenance blob does not have its digest {}", layer.digest())));
    }
    Ok(bytes)
}

/// Read and check the claim of the image in `layout`.
pub fn read(layout: &Path) -> Result<Claim, VerifyError> {
    let img = open_image(layout, None, None)?;
    let bytes = provenance_bytes(layout, &img.manifest_digest)?;
    let statement: Statement = serde_json::from_slice(&bytes)
        .map_err(|e| bad(layout, format!("the provenance is not an in-toto statement: {e}")))?;
    if statement.type_ != STATEMENT_TYPE || statement.predicate_type != SLSA_PROVENANCE_V1 {
        return Err(bad(
            layout,
            format!(
                "the provenance is a `{}` statement with predicate `{}`; quarry verifies SLSA Provenance v1 ({SLSA_PROVENANCE_V1})",
                statement.type_, statement.predicate_type
            ),
        ));
    }
    let subject = statement.subject.iter().find_map(|s| s.sha256_hex()).unwrap_or("");
    if subject != img.manifest_digest.hex() {
        return Err(VerifyError::SubjectMismatch {
            kind: "image",
            target: layout.display().to_string(),
            subject: format!("sha256:{subject}"),
            image: img.manifest_digest.to_string(),
        });
    }
    let def = &statement.predicate.build_definition;
    if def.build_type != IMAGE_BUILD_TYPE {
        return Err(bad(
            layout,
            format!("its build type is `{}`; this quarry rebuilds `{IMAGE_BUILD_TYPE}`", def.build_type),
        ));
    }
    let p = &def.external_parameters;
    let field =
        |name: &str| bad(layout, format!("externalParameters.{name} is missing or not what an image build writes"));
    let definition = p["image"].as_str().ok_or_else(|| field("image"))?.to_string();
    let files: Vec<ResourceDescriptor> =
        serde_json::from_value(p["definitions"].clone()).map_err(|_| field("definitions"))?;
    let sets: BTreeMap<String, String> = serde_json::from_value(p["sets"].clone()).map_err(|_| field("sets"))?;
    let source_date_epoch = p["sourceDateEpoch"].as_u64().ok_or_else(|| field("sourceDateEpoch"))?;
    let format = p["layerFormat"].as_str().ok_or_else(|| field("layerFormat"))?;
    let codec = LayerCodec::from_format_id(format)
        .ok_or_else(|| bad(layout, format!("its layer format `{format}` is none this quarry writes")))?;
    Ok(Claim {
        image_name: img.name.clone().unwrap_or_else(|| statement.subject[0].name.clone().unwrap_or_default()),
        manifest_digest: img.manifest_digest,
        statement,
        bytes,
        definition,
        files,
        sets,
        source_date_epoch,
        codec,
    })
}
