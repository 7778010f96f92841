//! Pushing an OCI layout's image: each blob (layers, then the config) is
//! skipped when the repository has it (HEAD), mounted when the registry is
//! known to hold it in another repository, else uploaded; then the
//! manifest's exact bytes are put under the tag. Artifacts in the layout
//! that refer to the image (its SBOM) follow (`referrers`).

use crate::registry::client::{Call, Client, Payload};
use crate::registry::known::Known;
use crate::registry::reference::Reference;
use crate::registry::{DOCKER_MANIFEST, OCI_MANIFEST};
pub mod referrers;
pub mod signatures;

use crate::oci::layout;
use crate::oci::Digest;
use crate::progress::Progress;
use crate::registry::upload::{self, BlobToSend, Mount};
use crate::registry::RegistryError;
use ocidir::oci_spec::image::ImageManifest;
use referrers::PushedReferrer;
use std::path::{Path, PathBuf};
use ureq::http::Method;

pub struct PushOptions {
    pub plain_http: bool,
    /// Blobs larger than this go up in PATCH chunks of this size.
    pub chunk_size: u64,
    pub progress: Progress,
    /// Sign the image (and attest its provenance) as cosign does, with this key.
    pub sign: Option<std::sync::Arc<crate::signing::SigningKey>>,
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
    /// Every blob sent or not, in order: what it is (`layer 0`, `config`,
    /// a referrer's), its digest and size, and what was done.
    pub blobs: Vec<PushedBlob>,
    /// Artifacts of the layout that refer to the image (its SBOM), pushed after it.
    pub referrers: Vec<PushedReferrer>,
    /// The signature and attestation pushed with `sign`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<signatures::PushedSignature>,
}

/// One blob of a push and what became of it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PushedBlob {
    pub what: String,
    pub digest: String,
    pub size: u64,
    /// `pushed`, `skipped` (the repository had it) or `mounted` (from another repository).
    pub action: &'static str,
}

/// A blob of the layout to send.
pub(crate) struct LocalBlob {
    pub digest: String,
    pub size: u64,
    pub path: PathBuf,
    /// For messages: `layer 0 (sha256:...)`.
    pub what: String,
}

impl LocalBlob {
    /// The file must be there with the size its descriptor says.
    pub fn check(&self, oci_dir: &Path) -> Result<(), RegistryError> {
        let len = std::fs::metadata(&self.path).map(|m| m.len()).map_err(|err| RegistryError::Io {
            path: self.path.display().to_string(),
            what: format!("{} is missing from the layout", self.what),
            err,
        })?;
        if len != self.size {
            return Err(bad(
                oci_dir,
                format!("{} is {len} bytes on disk but the manifest says {}", self.what, self.size),
            ));
        }
        Ok(())
    }
}

/// The blobs of a manifest in the layout `oci_dir`, layers then config,
/// each once, checked to be there with their size. `label` starts their
/// names in messages.
pub(crate) fn manifest_blobs(
    oci_dir: &Path,
    manifest: &ImageManifest,
    label: &str,
) -> Result<Vec<LocalBlob>, RegistryError> {
    let mut blobs: Vec<LocalBlob> = Vec::new();
    let named = manifest.layers().iter().enumerate().map(|(i, d)| (format!("layer {i}"), d));
    for (name, d) in named.chain(std::iter::once(("config".to_string(), manifest.config()))) {
        let digest = d.digest().to_string();
        if blobs.iter().any(|b| b.digest == digest) {
            continue;
        }
        let b = LocalBlob {
            path: layout::blob_path_in(oci_dir, d.digest()),
            what: format!("{label}{name} ({digest})"),
            digest,
            size: d.size(),
        };
        b.check(oci_dir)?;
        blobs.push(b);
    }
    Ok(blobs)
}

/// A manifest's bytes from the layout, checked against its digest.
pub(crate) fn manifest_bytes(oci_dir: &Path, digest: &Digest) -> Result<Vec<u8>, RegistryError> {
    let path = oci_dir.join(crate::oci::BLOBS_DIR).join(digest.hex());
    let bytes = std::fs::read(&path).map_err(|err| RegistryError::Io {
        path: path.display().to_string(),
        what: "cannot read the manifest".into(),
        err,
    })?;
    let actual = Digest::of_bytes(&bytes);
    if actual != *digest {
        return Err(bad(oci_dir, format!("manifest blob {digest} does not match its digest (actual {actual})")));
    }
    Ok(bytes)
}

fn bad(dir: &Path, message: impl Into<String>) -> RegistryError {
    RegistryError::Image { reference: dir.display().to_string(), message: message.into() }
}

/// Push the image in the OCI layout `oci_dir` to `reference` (HOST/REPO[:TAG];
/// the tag defaults to the layout's tag, else `latest`).
pub fn push_image(
    oci_dir: &Path,
    reference: &Reference,
    notes: Option<&Path>,
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
    let manifest_bytes = manifest_bytes(oci_dir, &img.manifest_digest)?;
    let media_type =
        img.manifest.media_type().as_ref().map(|m| m.to_string()).unwrap_or_else(|| OCI_MANIFEST.to_string());
    if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
        return Err(bad(oci_dir, format!("the manifest has media type `{media_type}`; quarry pushes image manifests")));
    }

    let blobs = manifest_blobs(oci_dir, &img.manifest, "")?;

    let tag = reference.tag.clone().or(img.tag.clone()).unwrap_or_else(|| "latest".into());
    let repo = reference.repository.as_str();
    let mut client = Client::new(&reference.registry, opts.plain_http)?;
    client.add_scope(repo, "pull,push");
    let mut known = Known::load(notes, &reference.registry);
    let mut result = PushResult {
        reference: String::new(),
        digest: img.manifest_digest.to_string(),
        blobs_pushed: 0,
        blobs_skipped: 0,
        blobs_mounted: 0,
        blobs: Vec::new(),
        bytes_pushed: 0,
        referrers: Vec::new(),
        signatures: Vec::new(),
    };
    for b in &blobs {
        send_blob(&mut client, &mut known, repo, b, opts, &mut result)?;
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
        if d != img.manifest_digest.to_string() {
            return Err(RegistryError::DigestMismatch {
                what,
                expected: img.manifest_digest.to_string(),
                actual: d.to_string(),
            });
        }
    }
    known.save();
    result.reference = format!("{}/{}:{}@{}", reference.registry, repo, tag, img.manifest_digest);

    for r in crate::oci::referrer::referrers(oci_dir, &img.manifest_digest)? {
        let pushed = referrers::push_referrer(
            &mut client,
            &mut known,
            repo,
            oci_dir,
            &r,
            &img.manifest_digest,
            opts,
            &mut result,
        )?;
        result.referrers.push(pushed);
    }
    if let Some(key) = &opts.sign {
        let provenance = provenance_of(oci_dir, &img.manifest_digest)?;
        let repository = format!("{}/{}", reference.registry, repo);
        let subject = img.manifest_digest;
        result.signatures = signatures::push_signatures(
            &mut client,
            &mut known,
            repo,
            &repository,
            &subject,
            key,
            provenance.as_deref(),
            opts,
            &mut result,
        )?;
    }
    known.save();
    Ok(result)
}

/// The provenance statement the layout attaches to the image, if any.
fn provenance_of(oci_dir: &Path, image: &Digest) -> Result<Option<Vec<u8>>, RegistryError> {
    let found = crate::oci::referrer::referrers(oci_dir, image)?
        .into_iter()
        .find(|r| r.artifact_type() == crate::oci::IN_TOTO_MEDIA_TYPE);
    let Some(r) = found else { return Ok(None) };
    let Some(layer) = r.manifest.layers().first() else { return Ok(None) };
    let path = layout::blob_path_in(oci_dir, layer.digest());
    let bytes = std::fs::read(&path).map_err(|err| RegistryError::Io {
        path: path.display().to_string(),
        what: "cannot read or write".into(),
        err,
    })?;
    let expected = Digest::try_from(layer.digest()).map_err(|e| bad(oci_dir, e.to_string()))?;
    if Digest::of_bytes(&bytes) != expected {
        return Err(bad(oci_dir, format!("the provenance blob {expected} is damaged; build the image again")));
    }
    Ok(Some(bytes))
}

/// Send one blob unless the repository has it: mounted from another
/// repository of the registry when one is known to hold it, else uploaded.
pub(crate) fn send_blob(
    client: &mut Client,
    known: &mut Known,
    repo: &str,
    b: &LocalBlob,
    opts: &PushOptions,
    result: &mut PushResult,
) -> Result<(), RegistryError> {
    let what = format!("{} -> {}/{}", b.what, client.registry, repo);
    let shown = b.what.strip_suffix(&format!(" ({})", b.digest)).unwrap_or(&b.what).to_string();
    let mut record =
        |action| result.blobs.push(PushedBlob { what: shown.clone(), digest: b.digest.clone(), size: b.size, action });
    if exists(client, repo, &b.digest, &what)? {
        record("skipped");
        result.blobs_skipped += 1;
        known.add(&b.digest, repo);
        return Ok(());
    }
    // Mount from another repository of this registry when one is known
    // to hold the blob; a refused mount falls back to uploading (in the
    // session the registry opened instead, when it did).
    let mut session = None;
    let mut mounted = false;
    for from in known.repos_with(&b.digest, repo).into_iter().take(3) {
        match upload::mount(client, repo, &b.digest, &from, &what) {
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
        record("mounted");
        result.blobs_mounted += 1;
    } else {
        let bar = opts.progress.bytes(b.size, format!("push {}", &b.digest[7..19]));
        let send = BlobToSend { path: &b.path, digest: &b.digest, size: b.size, what: &what };
        upload::upload_blob(client, repo, &send, opts.chunk_size, session, &bar)?;
        bar.finish_and_clear();
        record("pushed");
        result.blobs_pushed += 1;
        result.bytes_pushed += b.size;
    }
    known.add(&b.digest, repo);
    known.save();
    Ok(())
}

/// HEAD the blob in the repository.
pub(crate) fn exists(client: &mut Client, repo: &str, digest: &str, what: &str) -> Result<bool, RegistryError> {
    let url = client.url(&format!("{repo}/blobs/{digest}"));
    let resp = client.send(&Call::new(Method::HEAD, url, what))?;
    match resp.status().as_u16() {
        200 => Ok(true),
        404 => Ok(false),
        _ => Err(client.status_error(what, resp)),
    }
}
