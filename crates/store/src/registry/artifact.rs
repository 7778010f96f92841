//! OCI artifacts by tag (what the cache's registry tier keeps), and the
//! verified blob download that pulling images uses too. An artifact is
//! pushed blobs first and its manifest last, under its tag, so an
//! interrupted push leaves no tag; a blob is fetched into a [`BlobWriter`]
//! and kept only when its bytes match the digest and size asked for.

use super::client::{read_limited, Call, Client};
use super::upload::{self, BlobToSend};
use super::RegistryError;
use super::OCI_MANIFEST;
use crate::oci::blob::{BlobError, BlobWriter, Stored};
use crate::oci::Digest;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use ureq::http::Method;

/// Largest artifact manifest accepted.
const MANIFEST_LIMIT: u64 = 4 << 20;
/// Blobs larger than this go up in chunks.
const CHUNK: u64 = 64 << 20;

/// A blob writer's failure as the registry's error about `what`.
pub fn blob_err(e: BlobError, what: &str) -> RegistryError {
    match e {
        BlobError::Io { path, what, err } => RegistryError::Io { path: path.display().to_string(), what, err },
        BlobError::Mismatch { expected, actual, .. } => RegistryError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        },
    }
}

/// One try at a blob download.
pub(crate) enum Transfer {
    /// The connection broke: worth another attempt.
    Interrupted(String),
    Failed(RegistryError),
}

/// GET `digest` from `repo` into `w`, checking size and digest; nothing is
/// stored unless both match.
pub(crate) fn download_once(
    client: &mut Client,
    repo: &str,
    mut w: BlobWriter,
    digest: &Digest,
    size: u64,
    what: &str,
    bar: &indicatif::ProgressBar,
) -> Result<Stored, Transfer> {
    let url = client.url(&format!("{repo}/blobs/{digest}"));
    let resp = client.send(&Call::new(Method::GET, url, what)).map_err(Transfer::Failed)?;
    if resp.status().as_u16() != 200 {
        return Err(Transfer::Failed(client.status_error(what, resp)));
    }
    let mut r = resp.into_body().into_reader();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Transfer::Interrupted(e.to_string())),
        };
        if w.bytes() + n as u64 > size {
            let actual = w.bytes() + n as u64;
            return Err(Transfer::Failed(RegistryError::SizeMismatch {
                what: what.to_string(),
                expected: size,
                actual,
            }));
        }
        w.write_all(&buf[..n]).map_err(|err| {
            Transfer::Failed(RegistryError::Io { path: String::new(), what: "cannot write a blob".into(), err })
        })?;
        bar.inc(n as u64);
    }
    if w.bytes() != size {
        let actual = w.bytes();
        return Err(Transfer::Failed(RegistryError::SizeMismatch { what: what.to_string(), expected: size, actual }));
    }
    w.commit_verified(digest, Some(size)).map_err(|e| Transfer::Failed(blob_err(e, what)))
}

/// [`download_once`] with retries when the connection breaks; `writer`
/// makes a fresh destination for each attempt.
pub fn download(
    client: &mut Client,
    repo: &str,
    digest: &Digest,
    size: u64,
    what: &str,
    writer: &dyn Fn() -> Result<BlobWriter, RegistryError>,
    bar: &indicatif::ProgressBar,
) -> Result<Stored, RegistryError> {
    let max = super::client::max_attempts();
    let mut attempt = 0;
    loop {
        attempt += 1;
        bar.set_position(0);
        match download_once(client, repo, writer()?, digest, size, what, bar) {
            Ok(s) => return Ok(s),
            Err(Transfer::Interrupted(_)) if attempt < max => {
                std::thread::sleep(std::time::Duration::from_millis(250 << attempt));
            }
            Err(Transfer::Interrupted(e)) => {
                return Err(RegistryError::Connect {
                    registry: client.registry.clone(),
                    message: format!("{what}: the download broke off: {e}"),
                    hint: String::new(),
                })
            }
            Err(Transfer::Failed(e)) => return Err(e),
        }
    }
}

/// The manifest tagged `tag` in `repo`: its bytes and their digest, or None
/// when there is no such tag.
pub fn manifest(client: &mut Client, repo: &str, tag: &str) -> Result<Option<(Vec<u8>, Digest)>, RegistryError> {
    let what = format!("manifest `{}/{repo}:{tag}`", client.registry);
    let url = client.url(&format!("{repo}/manifests/{tag}"));
    let resp = client.send(&Call::new(Method::GET, url, what.clone()).header("accept", OCI_MANIFEST))?;
    match resp.status().as_u16() {
        200 => {}
        404 => return Ok(None),
        _ => return Err(client.status_error(&what, resp)),
    }
    let bytes = read_limited(resp, MANIFEST_LIMIT + 1).map_err(|e| client.protocol(&what, format!("reading: {e}")))?;
    if bytes.len() as u64 > MANIFEST_LIMIT {
        return Err(client.protocol(&what, format!("larger than {MANIFEST_LIMIT} bytes")));
    }
    let digest = Digest::of_bytes(&bytes);
    Ok(Some((bytes, digest)))
}

/// Whether `repo` has the tag `tag` (HEAD; nothing is downloaded).
pub fn has_manifest(client: &mut Client, repo: &str, tag: &str) -> Result<bool, RegistryError> {
    let what = format!("manifest `{}/{repo}:{tag}`", client.registry);
    let url = client.url(&format!("{repo}/manifests/{tag}"));
    let resp = client.send(&Call::new(Method::HEAD, url, what.clone()).header("accept", OCI_MANIFEST))?;
    match resp.status().as_u16() {
        200 => Ok(true),
        404 => Ok(false),
        _ => Err(client.status_error(&what, resp)),
    }
}

/// A file of an artifact.
pub struct ArtifactFile {
    pub path: PathBuf,
    pub digest: Digest,
    pub size: u64,
    pub media_type: String,
    /// `org.opencontainers.image.title`, the name tools give it when they pull.
    pub title: Option<String>,
}

/// What [`push`] puts under a tag.
pub struct Artifact {
    pub artifact_type: String,
    pub config_media_type: String,
    /// The config's bytes (a small JSON document).
    pub config: Vec<u8>,
    pub files: Vec<ArtifactFile>,
    pub annotations: BTreeMap<String, String>,
}

/// What a push sent.
#[derive(Debug, Clone, Default)]
pub struct Pushed {
    pub manifest: Option<Digest>,
    pub blobs_uploaded: usize,
    pub bytes_uploaded: u64,
}

/// The artifact's manifest (canonical: keys sorted, no time stamps, so the
/// same artifact gives the same digest on every machine).
pub fn manifest_bytes(a: &Artifact) -> Vec<u8> {
    let descriptor = |media_type: &str, digest: &Digest, size: u64, title: Option<&str>| {
        let mut d = serde_json::json!({ "mediaType": media_type, "digest": digest.to_string(), "size": size });
        if let Some(t) = title {
            d["annotations"] = serde_json::json!({ "org.opencontainers.image.title": t });
        }
        d
    };
    let config = descriptor(&a.config_media_type, &Digest::of_bytes(&a.config), a.config.len() as u64, None);
    let layers: Vec<serde_json::Value> =
        a.files.iter().map(|f| descriptor(&f.media_type, &f.digest, f.size, f.title.as_deref())).collect();
    let mut m = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": a.artifact_type,
        "config": config,
        "layers": layers,
    });
    if !a.annotations.is_empty() {
        m["annotations"] = serde_json::to_value(&a.annotations).expect("strings serialize");
    }
    serde_json::to_vec(&m).expect("JSON values serialize")
}

/// Push `a` to `repo` under `tag`: each blob the repository lacks, then the
/// config, then the manifest (the tag) last.
pub fn push(
    client: &mut Client,
    repo: &str,
    tag: &str,
    a: &Artifact,
    scratch: &Path,
    bar: &indicatif::ProgressBar,
) -> Result<Pushed, RegistryError> {
    let mut pushed = Pushed::default();
    for f in &a.files {
        let what = format!("blob {} -> {}/{repo}", f.digest, client.registry);
        if send_if_missing(client, repo, &f.path, &f.digest, f.size, &what, bar)? {
            pushed.blobs_uploaded += 1;
            pushed.bytes_uploaded += f.size;
        }
    }
    let config_digest = Digest::of_bytes(&a.config);
    let mut cfg = tempfile::Builder::new().prefix("artifact-config-").tempfile_in(scratch).map_err(|err| {
        RegistryError::Io { path: scratch.display().to_string(), what: "cannot stage the config".into(), err }
    })?;
    cfg.write_all(&a.config).map_err(|err| RegistryError::Io {
        path: cfg.path().display().to_string(),
        what: "cannot stage the config".into(),
        err,
    })?;
    let what = format!("config {config_digest} -> {}/{repo}", client.registry);
    send_if_missing(client, repo, cfg.path(), &config_digest, a.config.len() as u64, &what, bar)?;

    let bytes = manifest_bytes(a);
    let digest = Digest::of_bytes(&bytes);
    let what = format!("manifest -> {}/{repo}:{tag}", client.registry);
    let url = client.url(&format!("{repo}/manifests/{tag}"));
    let call = Call::new(Method::PUT, url, what.clone())
        .header("content-type", OCI_MANIFEST)
        .body(super::client::Payload::Bytes(&bytes));
    let resp = client.send(&call)?;
    if resp.status().as_u16() != 201 {
        return Err(client.status_error(&what, resp));
    }
    pushed.manifest = Some(digest);
    Ok(pushed)
}

/// Upload a blob unless the repository has it; true when it was uploaded.
fn send_if_missing(
    client: &mut Client,
    repo: &str,
    path: &Path,
    digest: &Digest,
    size: u64,
    what: &str,
    bar: &indicatif::ProgressBar,
) -> Result<bool, RegistryError> {
    let d = digest.to_string();
    if super::push::exists(client, repo, &d, what)? {
        return Ok(false);
    }
    let send = BlobToSend { path, digest: &d, size, what };
    upload::upload_blob(client, repo, &send, CHUNK, None, bar)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_is_canonical_and_lists_config_and_files() {
        let a = Artifact {
            artifact_type: "application/vnd.quarry.cache.layers.v1".into(),
            config_media_type: "application/vnd.quarry.cache.entry.v1+json".into(),
            config: b"{}".to_vec(),
            files: vec![ArtifactFile {
                path: PathBuf::from("/nowhere"),
                digest: Digest::of_bytes(b"x"),
                size: 1,
                media_type: "application/octet-stream".into(),
                title: Some("x.tar".into()),
            }],
            annotations: BTreeMap::from([("b".to_string(), "2".to_string()), ("a".to_string(), "1".to_string())]),
        };
        let bytes = manifest_bytes(&a);
        assert_eq!(manifest_bytes(&a), bytes, "the same artifact, the same bytes");
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["config"]["digest"], Digest::of_bytes(b"{}").to_string());
        assert_eq!(v["layers"][0]["annotations"]["org.opencontainers.image.title"], "x.tar");
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.find("\"a\"").unwrap() < text.find("\"b\"").unwrap(), "annotations sorted: {text}");
    }
}
