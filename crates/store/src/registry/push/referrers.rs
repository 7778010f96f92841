//! Pushing an artifact that refers to an image (its SBOM), after the image:
//! its blobs, then its manifest by digest. A registry with the referrers API
//! (distribution spec 1.1) indexes it itself: it answers the manifest PUT
//! with `OCI-Subject`, or lists it at `GET /v2/<name>/referrers/<digest>`.
//! A registry without it (distribution 2.8, most mirrors) gets tags instead:
//! - `sha256-<hex>.sbom` on the SBOM artifact (the tag cosign and the
//!   tools that follow it look for), and
//! - the spec's referrers tag schema: an image index tagged `sha256-<hex>`
//!   listing every referrer of the image (what `oras discover` and other
//!   OCI 1.1 clients read when the API is missing), updated, not replaced.

use super::{manifest_blobs, manifest_bytes, send_blob, PushOptions, PushResult};
use crate::oci::referrer::Referrer;
use crate::oci::Digest;
use crate::registry::client::{read_limited, Call, Client, Payload};
use crate::registry::known::Known;
use crate::registry::RegistryError;
use crate::registry::{OCI_INDEX, OCI_MANIFEST};
use std::path::Path;
use ureq::http::Method;

/// Largest referrers list or index quarry reads.
const INDEX_LIMIT: u64 = 4 << 20;

/// How a pushed artifact can be found from its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FoundBy {
    /// The registry lists it at `/v2/<name>/referrers/<image digest>`.
    ReferrersApi,
    /// Under the tags in `tags` (the registry has no referrers API).
    Tags,
}

/// One artifact pushed along with an image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PushedReferrer {
    pub artifact_type: String,
    /// The artifact manifest's digest.
    pub digest: String,
    pub found_by: FoundBy,
    /// The fallback tags pushed (empty when the registry has the referrers API).
    pub tags: Vec<String>,
}

/// The tag cosign's scheme gives an image's SBOM: `sha256-<hex>.sbom`.
pub fn sbom_tag(image_digest: &str) -> String {
    format!("{}.sbom", schema_tag(image_digest))
}

/// The referrers tag schema's tag for an image: `sha256-<hex>`.
pub fn schema_tag(image_digest: &str) -> String {
    image_digest.replacen(':', "-", 1)
}

/// Push the artifact `r` (found in the layout `oci_dir`) to `repo`, after
/// the image it refers to (manifest digest `subject`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_referrer(
    client: &mut Client,
    known: &mut Known,
    repo: &str,
    oci_dir: &Path,
    r: &Referrer,
    subject: &Digest,
    opts: &PushOptions,
    result: &mut PushResult,
) -> Result<PushedReferrer, RegistryError> {
    // The distribution API speaks digests as `sha256:<hex>` strings.
    let subject = subject.to_string();
    let subject = subject.as_str();
    let digest = r.descriptor.digest().to_string();
    let artifact_type = r.artifact_type();
    let blobs = manifest_blobs(oci_dir, &r.manifest, &format!("{artifact_type} artifact "))?;
    let bytes = manifest_bytes(
        oci_dir,
        &Digest::try_from(r.descriptor.digest())
            .map_err(|e| RegistryError::Image { reference: oci_dir.display().to_string(), message: e.to_string() })?,
    )?;
    for b in &blobs {
        send_blob(client, known, repo, b, opts, result)?;
    }

    let what = format!("{artifact_type} artifact {digest} -> {}/{repo}", client.registry);
    let answered_subject = put_manifest(client, repo, &digest, OCI_MANIFEST, &bytes, &what)?;
    let indexed =
        answered_subject.as_deref() == Some(subject) || listed_by_referrers_api(client, repo, subject, &digest)?;
    if indexed {
        return Ok(PushedReferrer { artifact_type, digest, found_by: FoundBy::ReferrersApi, tags: Vec::new() });
    }

    log::info!(
        "{}/{repo} has no referrers API: the {artifact_type} artifact of {} is found by tags",
        client.registry,
        subject
    );
    let mut tags = Vec::new();
    if artifact_type == crate::oci::SPDX_JSON_MEDIA_TYPE {
        let tag = sbom_tag(subject);
        put_manifest(client, repo, &tag, OCI_MANIFEST, &bytes, &format!("{what} (tag {tag})"))?;
        tags.push(tag);
    }
    let entry = descriptor_entry(r, bytes.len() as u64, &artifact_type);
    if let Some(tag) = add_to_schema_index(client, repo, subject, &digest, entry, &what)? {
        tags.push(tag);
    }
    Ok(PushedReferrer { artifact_type, digest, found_by: FoundBy::Tags, tags })
}

/// PUT a manifest under `reference` (a digest or a tag); returns the
/// `OCI-Subject` header, which registries with the referrers API send.
pub(crate) fn put_manifest(
    client: &mut Client,
    repo: &str,
    reference: &str,
    media_type: &str,
    bytes: &[u8],
    what: &str,
) -> Result<Option<String>, RegistryError> {
    let url = client.url(&format!("{repo}/manifests/{reference}"));
    let call = Call::new(Method::PUT, url, what).header("content-type", media_type).body(Payload::Bytes(bytes));
    let resp = client.send(&call)?;
    if resp.status().as_u16() != 201 {
        return Err(client.status_error(what, resp));
    }
    Ok(resp.headers().get("oci-subject").and_then(|v| v.to_str().ok()).map(str::to_string))
}

/// Ask the referrers API whether it lists `artifact` for `subject`. A
/// registry without the API answers 404 (or another error status): false.
fn listed_by_referrers_api(
    client: &mut Client,
    repo: &str,
    subject: &str,
    artifact: &str,
) -> Result<bool, RegistryError> {
    let what = format!("referrers of {subject} on {}/{repo}", client.registry);
    let url = client.url(&format!("{repo}/referrers/{subject}"));
    let resp = client.send(&Call::new(Method::GET, url, what.clone()).header("accept", OCI_INDEX))?;
    let status = resp.status().as_u16();
    if status != 200 {
        log::debug!("{what}: the registry answered {status}");
        return Ok(false);
    }
    let body = read_limited(resp, INDEX_LIMIT).map_err(|e| client.protocol(&what, e.to_string()))?;
    let Ok(index) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Ok(false);
    };
    Ok(index["manifests"].as_array().is_some_and(|m| m.iter().any(|d| d["digest"] == artifact)))
}

/// The artifact's entry in a referrers list: its descriptor with
/// `artifactType` and the manifest's annotations (the spec's rule).
fn descriptor_entry(r: &Referrer, size: u64, artifact_type: &str) -> serde_json::Value {
    let mut d = serde_json::json!({
        "mediaType": OCI_MANIFEST,
        "digest": r.descriptor.digest().to_string(),
        "size": size,
        "artifactType": artifact_type,
    });
    if let Some(a) = r.manifest.annotations().as_ref().filter(|a| !a.is_empty()) {
        let sorted: std::collections::BTreeMap<_, _> = a.iter().collect();
        d["annotations"] = serde_json::json!(sorted);
    }
    d
}

/// Add `entry` to the image index tagged `sha256-<hex>` (made when missing).
/// Returns the tag, or None when the tag holds something other than an
/// index (it is left alone: it is not quarry's to replace).
fn add_to_schema_index(
    client: &mut Client,
    repo: &str,
    subject: &str,
    artifact: &str,
    entry: serde_json::Value,
    what: &str,
) -> Result<Option<String>, RegistryError> {
    let tag = schema_tag(subject);
    let what = format!("{what} (referrers index {tag})");
    let url = client.url(&format!("{repo}/manifests/{tag}"));
    let resp = client.send(&Call::new(Method::GET, url, what.clone()).header("accept", OCI_INDEX))?;
    let mut index = match resp.status().as_u16() {
        404 => serde_json::json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [] }),
        200 => {
            let body = read_limited(resp, INDEX_LIMIT).map_err(|e| client.protocol(&what, e.to_string()))?;
            match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(v) if v["mediaType"] == OCI_INDEX && v["manifests"].is_array() => v,
                _ => {
                    log::warn!(
                        "{what}: the tag holds something other than an image index; left as it is (the SBOM is still tagged {})",
                        sbom_tag(subject)
                    );
                    return Ok(None);
                }
            }
        }
        _ => return Err(client.status_error(&what, resp)),
    };
    let manifests = index["manifests"].as_array_mut().expect("checked above");
    if manifests.iter().any(|d| d["digest"] == artifact) {
        return Ok(Some(tag));
    }
    manifests.push(entry);
    let bytes = serde_json::to_vec(&index).map_err(|e| client.protocol(&what, e.to_string()))?;
    put_manifest(client, repo, &tag, OCI_INDEX, &bytes, &what)?;
    Ok(Some(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_tags() {
        let d = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(sbom_tag(&d), format!("sha256-{}.sbom", "ab".repeat(32)));
        assert_eq!(schema_tag(&d), format!("sha256-{}", "ab".repeat(32)));
    }
}
