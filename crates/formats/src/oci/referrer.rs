//! OCI 1.1 referrers in an image layout: an artifact (an SBOM, a
//! signature, any document) stored beside the image it describes. The
//! artifact is an image manifest with `artifactType`, the empty config
//! (`{}`), its content as the one layer,
//! and `subject` = the image manifest's descriptor. Its descriptor joins the
//! layout's `index.json` untagged and carrying `artifactType` (as
//! `oras attach --oci-layout` and the `ocidir` crate write it), so
//! referrer-aware tools find it by walking the index, while quarry's own
//! readers (`layout::open_image`) skip it and keep finding the image.

use super::digest::Digest;
use super::layout::{is_artifact, ImageSource, LayoutError};
use ocidir::cap_std::{ambient_authority, fs::Dir};
use ocidir::oci_spec::image::{Descriptor, ImageIndex, ImageManifest, MediaType};
use ocidir::{OciDir, OciRead};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// A document to attach to an image.
pub struct Attachment<'a> {
    /// The artifact type, also the media type of its one layer (`application/spdx+json`).
    pub artifact_type: &'a str,
    /// The file name a tool (oras) gives the content when it pulls the artifact.
    pub title: &'a str,
    pub content: &'a [u8],
}

fn bad(path: &Path, message: impl std::fmt::Display) -> LayoutError {
    LayoutError::Bad { path: path.display().to_string(), message: message.to_string() }
}

/// An artifact in a layout that refers to an image.
#[derive(Debug, Clone)]
pub struct Referrer {
    /// The artifact manifest's descriptor, as `index.json` lists it.
    pub descriptor: Descriptor,
    pub manifest: ImageManifest,
}

impl Referrer {
    /// The artifact type: the manifest's `artifactType`, else its config's media type (the spec's rule).
    pub fn artifact_type(&self) -> String {
        self.manifest.artifact_type().as_ref().unwrap_or(self.manifest.config().media_type()).to_string()
    }
}

fn open(layout_dir: &Path) -> Result<OciDir, LayoutError> {
    if !layout_dir.join("index.json").is_file() {
        return Err(bad(
            layout_dir,
            "is not an OCI image layout (no index.json); give the directory `quarry build` wrote",
        ));
    }
    let dir = Dir::open_ambient_dir(layout_dir, ambient_authority()).map_err(|err| LayoutError::Io {
        path: layout_dir.display().to_string(),
        what: "cannot open".into(),
        err,
    })?;
    OciDir::open(dir).map_err(|e| bad(layout_dir, format!("not an OCI layout: {e}")))
}

fn read_index(oci: &OciDir, layout_dir: &Path) -> Result<ImageIndex, LayoutError> {
    oci.read_index().map_err(|e| bad(layout_dir, format!("cannot read index.json: {e}")))
}

/// Every artifact in the layout (directory or OCI archive) at `path` whose
/// `subject` is the manifest `subject_digest`.
pub fn referrers(path: &Path, subject: &Digest) -> Result<Vec<Referrer>, LayoutError> {
    let subject_digest = subject.to_string();
    let source = ImageSource::open(path)?;
    let index = source.read_index()?;
    let mut out = Vec::new();
    for d in index.manifests() {
        if *d.media_type() != MediaType::ImageManifest || d.digest().to_string() == subject_digest {
            continue;
        }
        let manifest: ImageManifest = source.read_json(d)?;
        let refers = manifest.subject().as_ref().is_some_and(|s| s.digest().to_string() == subject_digest);
        if refers && !out.iter().any(|r: &Referrer| r.descriptor.digest() == d.digest()) {
            out.push(Referrer { descriptor: d.clone(), manifest });
        }
    }
    Ok(out)
}

/// Store a document in the layout as an artifact referring to the image
/// whose manifest is `image` (listed in `index.json`), replacing an
/// artifact of the same type attached to it before. Returns the artifact
/// manifest's descriptor. The same document gives the same artifact digest:
/// its manifest is canonical JSON without time stamps.
pub fn attach(layout_dir: &Path, image: &Digest, doc: &Attachment) -> Result<Descriptor, LayoutError> {
    let image_manifest_digest = image.to_string();
    let oci = open(layout_dir)?;
    let mut index = read_index(&oci, layout_dir)?;
    let entry = index
        .manifests()
        .iter()
        .find(|d| d.digest().to_string() == image_manifest_digest && !is_artifact(d))
        .ok_or_else(|| {
            bad(layout_dir, format!("index.json lists no image with manifest {image_manifest_digest}; attach the document to the image the layout holds"))
        })?;
    // The subject is a plain descriptor: no platform, no tag annotation.
    let subject = Descriptor::new(entry.media_type().clone(), entry.size(), entry.digest().clone());

    // A document of the same type attached before to this image gives way
    // (its blobs stay unreferenced until the layout is written again).
    let stale: Vec<String> = referrers(layout_dir, image)?
        .into_iter()
        .filter(|r| r.artifact_type() == doc.artifact_type)
        .map(|r| r.descriptor.digest().to_string())
        .collect();
    if !stale.is_empty() {
        let kept: Vec<Descriptor> =
            index.manifests().iter().filter(|d| !stale.contains(&d.digest().to_string())).cloned().collect();
        index.set_manifests(kept);
        write_index(layout_dir, &index)?;
    }

    let write_err = |e: std::io::Error| bad(layout_dir, format!("cannot write the {} blob: {e}", doc.artifact_type));
    let mut w = oci.create_blob().map_err(|e| write_err(std::io::Error::other(e)))?;
    w.write_all(doc.content).map_err(write_err)?;
    let blob = w.complete().map_err(|e| write_err(std::io::Error::other(e)))?;
    let layer: Descriptor = blob
        .descriptor()
        .media_type(MediaType::Other(doc.artifact_type.into()))
        .annotations(HashMap::from([(TITLE_ANNOTATION.to_string(), doc.title.to_string())]))
        .build()
        .map_err(|e| bad(layout_dir, e))?;
    oci.insert_artifact_manifest(subject, MediaType::Other(doc.artifact_type.into()), vec![layer], None)
        .map_err(|e| bad(layout_dir, format!("cannot add the {} artifact: {e}", doc.artifact_type)))
}

/// Replace `index.json` atomically (a temporary file beside it, renamed).
fn write_index(layout_dir: &Path, index: &ImageIndex) -> Result<(), LayoutError> {
    let io = |err| LayoutError::Io {
        path: layout_dir.join("index.json").display().to_string(),
        what: "cannot write".into(),
        err,
    };
    let mut tmp = tempfile::Builder::new().prefix(".index.json-").tempfile_in(layout_dir).map_err(io)?;
    serde_json::to_writer(&mut tmp, index).map_err(|e| io(e.into()))?;
    tmp.persist(layout_dir.join("index.json")).map_err(|e| io(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::layout::{open_image, write_image};

    fn attach_sbom(out: &Path, image: &Digest, content: &[u8]) -> Result<Descriptor, LayoutError> {
        attach(out, image, &Attachment { artifact_type: "application/spdx+json", title: "sbom.spdx.json", content })
    }
    use ocidir::oci_spec::image::{ConfigBuilder, ImageConfigurationBuilder, RootFsBuilder};

    /// A layout holding an image without layers.
    fn layout(dir: &Path) -> Digest {
        let config = ImageConfigurationBuilder::default()
            .architecture("amd64")
            .os("linux")
            .config(ConfigBuilder::default().build().unwrap())
            .rootfs(RootFsBuilder::default().typ("layers").diff_ids(Vec::<String>::new()).build().unwrap())
            .build()
            .unwrap();
        let t = tempfile::tempdir().unwrap();
        let blobs = crate::oci::BlobDir::open(t.path(), &t.path().join("tmp")).unwrap();
        write_image(dir, &blobs, &[], &config, ("test", "v1"), {
            let mut p = oci_spec::image::Platform::default();
            p.set_os("linux".into());
            p.set_architecture("amd64".into());
            p
        })
        .unwrap()
        .manifest_digest
    }

    #[test]
    fn attached_sbom_is_a_referrer_and_the_image_stays_the_image() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("img");
        let image = layout(&out);
        let sbom = br#"{"spdxVersion":"SPDX-2.3"}"#;
        let a = attach_sbom(&out, &image, sbom).unwrap();
        assert_eq!(a.artifact_type().as_ref().unwrap().to_string(), "application/spdx+json");

        let refs = referrers(&out, &image).unwrap();
        assert_eq!(refs.len(), 1);
        let m = &refs[0].manifest;
        assert_eq!(m.subject().as_ref().unwrap().digest().to_string(), image.to_string());
        assert_eq!(m.config().media_type().to_string(), "application/vnd.oci.empty.v1+json");
        let blob =
            out.join(crate::oci::BLOBS_DIR).join(m.layers()[0].digest().to_string().trim_start_matches("sha256:"));
        assert_eq!(std::fs::read(blob).unwrap(), sbom);
        assert_eq!(
            std::fs::read(
                out.join(crate::oci::BLOBS_DIR).join(m.config().digest().to_string().trim_start_matches("sha256:"))
            )
            .unwrap(),
            b"{}"
        );

        // The layout now lists two manifests; quarry still opens the image, by tag or alone.
        let img = open_image(&out, None, None).unwrap();
        assert_eq!(img.manifest_digest, image);
        assert_eq!(open_image(&out, Some("v1"), None).unwrap().manifest_digest, image);
        let e = open_image(&out, Some(a.digest().as_ref()), None).err().unwrap().to_string();
        assert!(e.contains("artifact"), "{e}");

        // Same SBOM again: same artifact, listed once; another SBOM replaces it.
        assert_eq!(attach_sbom(&out, &image, sbom).unwrap().digest(), a.digest());
        assert_eq!(referrers(&out, &image).unwrap().len(), 1);
        let b = attach_sbom(&out, &image, b"{}\n").unwrap();
        let refs = referrers(&out, &image).unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].descriptor.digest(), b.digest());
        let index: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
        assert_eq!(index["manifests"].as_array().unwrap().len(), 2, "{index}");
    }

    #[test]
    fn attaching_to_a_missing_image_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("img");
        layout(&out);
        let missing = Digest::from_hex(&"0".repeat(64)).unwrap();
        let e = attach_sbom(&out, &missing, b"{}").unwrap_err().to_string();
        assert!(e.contains("no image with manifest"), "{e}");
        let e = attach_sbom(t.path(), &missing, b"{}").unwrap_err().to_string();
        assert!(e.contains("no index.json"), "{e}");
    }
}
