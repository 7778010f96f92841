//! Pushing an OCI layout's image: each blob (layers, then the config) is
//! skipped when the repository has it (HEAD), mounted when the registry is
//! known to hold it in another repository, else uploaded; then the
//! manifest's exact bytes are put under the tag.

use super::client::{Call, Client, Payload};
use super::known::Known;
use super::pull::{DOCKER_MANIFEST, OCI_MANIFEST};
use super::reference::Reference;
use super::upload::{self, BlobToSend, Mount};
use super::RegistryError;
use crate::progress::Progress;
use crate::store::cache::Cache;
use crate::store::layout;
use std::path::{Path, PathBuf};
use ureq::http::Method;

pub struct PushOptions {
    pub plain_http: bool,
    /// Blobs larger than this go up in PATCH chunks of this size.
    pub chunk_size: u64,
    pub progress: Progress,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PushResult {
    /// `HOST/REPO:TAG@sha256:...`
    #[serde(rename = "ref")]
    pub reference: String,
    /// The manifest digest.
    pub digest: String,
    pub blobs_pushed: usize,
    /// Blobs the repository already had.
    pub blobs_skipped: usize,
    /// Blobs mounted from another repository of the same registry.
    pub blobs_mounted: usize,
    pub bytes_pushed: u64,
}

struct LocalBlob {
    digest: String,
    size: u64,
    path: PathBuf,
    what: String,
}

fn bad(dir: &Path, message: impl Into<String>) -> RegistryError {
    RegistryError::Image { reference: dir.display().to_string(), message: message.into() }
}

/// Push the image in the OCI layout `oci_dir` to `reference` (HOST/REPO[:TAG];
/// the tag defaults to the layout's tag, else `latest`).
pub fn push_image(
    oci_dir: &Path,
    reference: &Reference,
    cache: &Cache,
    opts: &PushOptions,
) -> Result<PushResult, RegistryError> {
    if reference.digest.is_some() {
        return Err(RegistryError::Image {
            reference: reference.to_string(),
            message: "push to a tag (HOST/REPO:TAG), not a digest; the digest is the manifest's own".into(),
        });
    }
    if !oci_dir.is_dir() {
        return Err(bad(
            oci_dir,
            "is not a directory; `quarry push` takes an OCI layout directory (as written by `quarry build`)",
        ));
    }
    let img = layout::open_image(oci_dir, None, None)?;
    let blob_file = |digest: &str| img.source.blob_file(digest).expect("a layout directory");
    let manifest_path = blob_file(&img.manifest_digest);
    let manifest_bytes = std::fs::read(&manifest_path).map_err(|err| RegistryError::Io {
        path: manifest_path.display().to_string(),
        what: "cannot read the manifest".into(),
        err,
    })?;
    let actual = format!("sha256:{}", crate::digest::sha256_hex(&manifest_bytes));
    if actual != img.manifest_digest {
        return Err(bad(
            oci_dir,
            format!("manifest blob {} does not match its digest (actual {actual})", img.manifest_digest),
        ));
    }
    let media_type =
        img.manifest.media_type().as_ref().map(|m| m.to_string()).unwrap_or_else(|| OCI_MANIFEST.to_string());
    if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
        return Err(bad(oci_dir, format!("the manifest has media type `{media_type}`; quarry pushes image manifests")));
    }

    let mut blobs: Vec<LocalBlob> = Vec::new();
    let cfg = img.manifest.config();
    for (i, d) in img.manifest.layers().iter().enumerate() {
        let digest = d.digest().to_string();
        if blobs.iter().any(|b| b.digest == digest) {
            continue;
        }
        blobs.push(LocalBlob {
            path: blob_file(&digest),
            what: format!("layer {i} ({digest})"),
            digest,
            size: d.size(),
        });
    }
    let cdigest = cfg.digest().to_string();
    blobs.push(LocalBlob {
        path: blob_file(&cdigest),
        what: format!("config ({cdigest})"),
        digest: cdigest,
        size: cfg.size(),
    });
    for b in &blobs {
        let len = std::fs::metadata(&b.path).map(|m| m.len()).map_err(|err| RegistryError::Io {
            path: b.path.display().to_string(),
            what: format!("{} is missing from the layout", b.what),
            err,
        })?;
        if len != b.size {
            return Err(bad(oci_dir, format!("{} is {len} bytes on disk but the manifest says {}", b.what, b.size)));
        }
    }

    let tag = reference.tag.clone().or(img.tag.clone()).unwrap_or_else(|| "latest".into());
    let repo = reference.repository.as_str();
    let mut client = Client::new(&reference.registry, opts.plain_http)?;
    client.add_scope(repo, "pull,push");
    let mut known = Known::load(cache, &reference.registry);
    let mut result = PushResult {
        reference: String::new(),
        digest: img.manifest_digest.clone(),
        blobs_pushed: 0,
        blobs_skipped: 0,
        blobs_mounted: 0,
        bytes_pushed: 0,
    };
    for b in &blobs {
        let what = format!("{} -> {}/{}", b.what, reference.registry, repo);
        if exists(&mut client, repo, &b.digest, &what)? {
            result.blobs_skipped += 1;
            known.add(&b.digest, repo);
            continue;
        }
        // Mount from another repository of this registry when one is known
        // to hold the blob; a refused mount falls back to uploading (in the
        // session the registry opened instead, when it did).
        let mut session = None;
        let mut mounted = false;
        for from in known.repos_with(&b.digest, repo).into_iter().take(3) {
            match upload::mount(&mut client, repo, &b.digest, &from, &what) {
                Ok(Mount::Mounted) => {
                    mounted = true;
                    break;
                }
                Ok(Mount::Session(s)) => {
                    known.forget(&b.digest, &from);
                    session = Some(s);
                }
                Err(RegistryError::Connect { .. }) | Err(RegistryError::Unauthorized { .. }) => {}
                Err(_) => known.forget(&b.digest, &from),
            }
        }
        if mounted {
            result.blobs_mounted += 1;
        } else {
            let bar = opts.progress.bytes(b.size, format!("push {}", &b.digest[7..19]));
            let send = BlobToSend { path: &b.path, digest: &b.digest, size: b.size, what: &what };
            upload::upload_blob(&mut client, repo, &send, opts.chunk_size, session, &bar)?;
            bar.finish_and_clear();
            result.blobs_pushed += 1;
            result.bytes_pushed += b.size;
        }
        known.add(&b.digest, repo);
        known.save();
    }

    let what = format!("manifest -> {}/{}:{tag}", reference.registry, repo);
    let url = client.url(&format!("{repo}/manifests/{tag}"));
    let call = Call::new(Method::PUT, url, what.clone())
        .header("content-type", media_type)
        .body(Payload::Bytes(&manifest_bytes));
    let resp = client.send(&call)?;
    if resp.status().as_u16() != 201 {
        return Err(client.status_error(&what, resp));
    }
    if let Some(d) = resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()) {
        if d != img.manifest_digest {
            return Err(RegistryError::DigestMismatch {
                what,
                expected: img.manifest_digest.clone(),
                actual: d.to_string(),
            });
        }
    }
    known.save();
    result.reference = format!("{}/{}:{}@{}", reference.registry, repo, tag, img.manifest_digest);
    Ok(result)
}

/// HEAD the blob in the repository.
fn exists(client: &mut Client, repo: &str, digest: &str, what: &str) -> Result<bool, RegistryError> {
    let url = client.url(&format!("{repo}/blobs/{digest}"));
    let resp = client.send(&Call::new(Method::HEAD, url, what))?;
    match resp.status().as_u16() {
        200 => Ok(true),
        404 => Ok(false),
        _ => Err(client.status_error(what, resp)),
    }
}
