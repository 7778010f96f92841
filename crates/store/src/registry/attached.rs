//! What a registry holds beside an image, read back: the artifacts that
//! refer to it (its provenance, its SBOM), from the referrers API or, on a
//! registry without it, the referrers tag schema's index (`sha256-<hex>`),
//! the two places `push` writes them; and cosign's signature and
//! attestation manifests (`sha256-<hex>.sig`, `.att`). Every manifest and
//! blob is checked against the digest it was asked by; each document is
//! small and read into memory.

use super::client::{read_limited, Call, Client};
use super::push::referrers::schema_tag;
use super::push::signatures::tag as cosign_tag;
use super::{RegistryError, OCI_INDEX, OCI_MANIFEST};
use crate::oci::Digest;
use ureq::http::Method;

/// Largest attached document (a provenance, an SBOM, an envelope) read.
const DOCUMENT_LIMIT: u64 = 64 << 20;
const MANIFEST_LIMIT: u64 = 4 << 20;
const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// An artifact referring to an image: its type and its one document.
#[derive(Debug, Clone)]
pub struct AttachedDocument {
    pub artifact_type: String,
    /// The artifact manifest's digest in the registry.
    pub manifest_digest: String,
    /// The file name its layer carries (`org.opencontainers.image.title`), if any.
    pub title: Option<String>,
    pub content: Vec<u8>,
}

/// One layer of a cosign signature or attestation manifest: the payload
/// and the layer's annotations.
#[derive(Debug, Clone)]
pub struct CosignLayer {
    pub media_type: String,
    pub content: Vec<u8>,
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// GET a manifest (or index) by tag or digest; None when there is none.
/// Asked by digest, the bytes must have it.
fn document(client: &mut Client, repo: &str, reference: &str, accept: &str) -> Result<Option<Vec<u8>>, RegistryError> {
    let what = format!("manifest `{}/{repo}:{reference}`", client.registry).replace(":sha256:", "@sha256:");
    let url = client.url(&format!("{repo}/manifests/{reference}"));
    let resp = client.send(&Call::new(Method::GET, url, what.clone()).header("accept", accept))?;
    match resp.status().as_u16() {
        200 => {}
        404 => return Ok(None),
        _ => return Err(client.status_error(&what, resp)),
    }
    let bytes = read_limited(resp, MANIFEST_LIMIT + 1).map_err(|e| client.protocol(&what, format!("reading: {e}")))?;
    if bytes.len() as u64 > MANIFEST_LIMIT {
        return Err(client.protocol(&what, format!("larger than {MANIFEST_LIMIT} bytes")));
    }
    if let Ok(d) = Digest::parse(reference) {
        check(&bytes, &d, &what)?;
    }
    Ok(Some(bytes))
}

fn check(bytes: &[u8], expected: &Digest, what: &str) -> Result<(), RegistryError> {
    let actual = Digest::of_bytes(bytes);
    if &actual != expected {
        return Err(RegistryError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

/// A small blob, into memory, checked against its digest.
fn blob(client: &mut Client, repo: &str, digest: &str, size: u64) -> Result<Vec<u8>, RegistryError> {
    let what = format!("blob `{}/{repo}@{digest}`", client.registry);
    let expected =
        Digest::parse(digest).map_err(|e| RegistryError::Image { reference: what.clone(), message: e.to_string() })?;
    if size > DOCUMENT_LIMIT {
        return Err(
            client.protocol(&what, format!("{size} bytes: larger than the {DOCUMENT_LIMIT} read for a document"))
        );
    }
    let url = client.url(&format!("{repo}/blobs/{digest}"));
    let resp = client.send(&Call::new(Method::GET, url, what.clone()))?;
    if resp.status().as_u16() != 200 {
        return Err(client.status_error(&what, resp));
    }
    let bytes = read_limited(resp, size + 1).map_err(|e| client.protocol(&what, format!("reading: {e}")))?;
    if bytes.len() as u64 != size {
        return Err(RegistryError::SizeMismatch { what, expected: size, actual: bytes.len() as u64 });
    }
    check(&bytes, &expected, &what)?;
    Ok(bytes)
}

fn parse(bytes: &[u8], what: &str) -> Result<serde_json::Value, RegistryError> {
    serde_json::from_slice(bytes)
        .map_err(|e| RegistryError::Image { reference: what.to_string(), message: format!("is not JSON: {e}") })
}

/// The descriptors listing the referrers of `subject`: the API's list, else
/// the schema tag's index, else none.
fn referrer_list(client: &mut Client, repo: &str, subject: &Digest) -> Result<Vec<serde_json::Value>, RegistryError> {
    let what = format!("referrers of {subject} on {}/{repo}", client.registry);
    let url = client.url(&format!("{repo}/referrers/{subject}"));
    let resp = client.send(&Call::new(Method::GET, url, what.clone()).header("accept", OCI_INDEX))?;
    if resp.status().as_u16() == 200 {
        let body = read_limited(resp, MANIFEST_LIMIT).map_err(|e| client.protocol(&what, e.to_string()))?;
        if let Some(m) = parse(&body, &what)?["manifests"].as_array() {
            return Ok(m.clone());
        }
    }
    let tag = schema_tag(&subject.to_string());
    let Some(bytes) = document(client, repo, &tag, OCI_INDEX)? else { return Ok(Vec::new()) };
    let index = parse(&bytes, &format!("{what} (tag {tag})"))?;
    Ok(index["manifests"].as_array().cloned().unwrap_or_default())
}

/// Every artifact referring to the image `subject` in `repo` whose type is
/// one of `types`, with its document (the artifact's first layer).
pub fn referrers(
    client: &mut Client,
    repo: &str,
    subject: &Digest,
    types: &[&str],
) -> Result<Vec<AttachedDocument>, RegistryError> {
    let mut out: Vec<AttachedDocument> = Vec::new();
    for d in referrer_list(client, repo, subject)? {
        let (Some(digest), Some(kind)) = (d["digest"].as_str(), d["artifactType"].as_str()) else { continue };
        if !types.contains(&kind) || out.iter().any(|a| a.manifest_digest == digest) {
            continue;
        }
        let what = format!("artifact {digest} of {subject}");
        let Some(bytes) = document(client, repo, digest, OCI_MANIFEST)? else { continue };
        let manifest = parse(&bytes, &what)?;
        // The list is only an index: the manifest itself must name the image.
        if manifest["subject"]["digest"].as_str() != Some(subject.to_string().as_str()) {
            continue;
        }
        let Some(layer) = manifest["layers"].as_array().and_then(|l| l.first()) else { continue };
        let (Some(ld), Some(size)) = (layer["digest"].as_str(), layer["size"].as_u64()) else { continue };
        let content = blob(client, repo, ld, size)?;
        let title = layer["annotations"][TITLE_ANNOTATION].as_str().map(str::to_string);
        out.push(AttachedDocument {
            artifact_type: kind.to_string(),
            manifest_digest: digest.to_string(),
            title,
            content,
        });
    }
    Ok(out)
}

/// The layers of cosign's manifest `sha256-<hex>.<suffix>` for the image
/// `subject` (`sig` or `att`); empty when there is none.
pub fn cosign_layers(
    client: &mut Client,
    repo: &str,
    subject: &Digest,
    suffix: &str,
) -> Result<Vec<CosignLayer>, RegistryError> {
    let tag = cosign_tag(subject, suffix);
    let Some(bytes) = document(client, repo, &tag, OCI_MANIFEST)? else { return Ok(Vec::new()) };
    let manifest = parse(&bytes, &format!("{}/{repo}:{tag}", client.registry))?;
    let mut out = Vec::new();
    for layer in manifest["layers"].as_array().cloned().unwrap_or_default() {
        let (Some(ld), Some(size)) = (layer["digest"].as_str(), layer["size"].as_u64()) else { continue };
        let content = blob(client, repo, ld, size)?;
        let annotations = layer["annotations"]
            .as_object()
            .map(|a| a.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default();
        out.push(CosignLayer {
            media_type: layer["mediaType"].as_str().unwrap_or("").to_string(),
            content,
            annotations,
        });
    }
    Ok(out)
}

/// Fetch the provenance and SBOM referring to the image `subject` and
/// attach them to it in the layout `layout` (where `write_layout` put the
/// image); returns what was attached. The layout's artifact manifests are
/// written by quarry: for an artifact quarry pushed they are the pushed
/// manifests byte for byte; another tool's artifact keeps its document
/// but gets quarry's manifest around it.
pub fn attach_referrers(
    client: &mut Client,
    repo: &str,
    subject: &Digest,
    layout: &std::path::Path,
) -> Result<Vec<AttachedDocument>, RegistryError> {
    let types = [crate::oci::IN_TOTO_MEDIA_TYPE, crate::oci::SPDX_JSON_MEDIA_TYPE];
    let docs = referrers(client, repo, subject, &types)?;
    for d in &docs {
        let default_title =
            if d.artifact_type == crate::oci::IN_TOTO_MEDIA_TYPE { "provenance.intoto.json" } else { "sbom.spdx.json" };
        let doc = crate::oci::referrer::Attachment {
            artifact_type: &d.artifact_type,
            title: d.title.as_deref().unwrap_or(default_title),
            content: &d.content,
        };
        crate::oci::referrer::attach(layout, subject, &doc)?;
    }
    Ok(docs)
}
