//! Writing a pulled image as an OCI layout, byte for byte: the manifest and
//! config are the registry's own bytes (so digests stay the registry's),
//! blobs are hardlinked (else copied) from the blob directory they were
//! pulled into (the cache's). Built in a
//! staging directory beside the output and renamed into place.

use super::pull::PulledImage;
use super::RegistryError;
use crate::oci::{layout, BlobDir};
use ocidir::oci_spec::image::{DescriptorBuilder, ImageIndexBuilder, MediaType, SCHEMA_VERSION};
use std::collections::HashMap;
use std::path::Path;

fn io(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> RegistryError {
    let path = path.display().to_string();
    let what = what.to_string();
    move |err| RegistryError::Io { path, what, err }
}

fn bad(out: &Path, message: impl std::fmt::Display) -> RegistryError {
    RegistryError::Image { reference: out.display().to_string(), message: message.to_string() }
}

/// Write `image` (its blobs in `from`) as an OCI layout at `out`, tagged `tag`.
pub fn write_layout(image: &PulledImage, from: &BlobDir, out: &Path, tag: &str) -> Result<(), RegistryError> {
    let staging = layout::stage_output(out, ".quarry-pull-").map_err(|e| bad(out, e))?;
    let blobs = staging.path().join(crate::oci::BLOBS_DIR);
    std::fs::create_dir_all(&blobs).map_err(io(&blobs, "cannot create"))?;
    let mut digests = vec![image.manifest_digest, image.config_digest];
    digests.extend(image.layers.iter().map(|l| l.blob.digest));
    for d in &digests {
        let (src, to) = (from.path(d), blobs.join(d.hex()));
        layout::link_or_copy(&src, &to).map_err(io(&src, "cannot copy a blob from the cache"))?;
    }
    let (os, arch) = (image.config.os().to_string(), image.config.architecture().to_string());
    let mut platform = ocidir::oci_spec::image::Platform::default();
    platform.set_os(os.as_str().into());
    platform.set_architecture(arch.as_str().into());
    let desc = DescriptorBuilder::default()
        .media_type(MediaType::from(image.manifest_media_type.as_str()))
        .digest(oci_spec::image::Digest::from(image.manifest_digest))
        .size(image.manifest_size)
        .platform(platform)
        .annotations(HashMap::from([("org.opencontainers.image.ref.name".to_string(), tag.to_string())]))
        .build()
        .map_err(|e| bad(out, e))?;
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![desc])
        .build()
        .map_err(|e| bad(out, e))?;
    let index_json = serde_json::to_vec(&index).map_err(|e| bad(out, e))?;
    std::fs::write(staging.path().join("index.json"), index_json)
        .map_err(io(staging.path(), "cannot write index.json"))?;
    std::fs::write(staging.path().join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)
        .map_err(io(staging.path(), "cannot write oci-layout"))?;

    layout::replace_output(staging, out).map_err(|e| bad(out, e))
}
