//! Pulling: a reference's manifest (an index resolved to a platform), its
//! config and layer blobs into a blob directory (the cache's), each
//! verified (sha256 and size) while streamed to a temporary file that is
//! renamed only when it matches. Blobs already there are not fetched again,
//! so an image pulled once by digest rebuilds offline.
//!
//! Over 400 lines: one pull, manifest to verified blobs, with its media-type
//! and platform rules; each piece reads the others' state (`Puller`).

use super::client::{read_limited, Call, Client};
use super::known::Known;
use super::reference::Reference;
use super::{RegistryError, Store};
use crate::oci::blob::BlobDir;
use crate::oci::{Digest, LayerBlob};
use crate::progress::Progress;
use ocidir::oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest};
use std::io::Write;
use ureq::http::Method;

pub use super::{DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST};

/// Largest manifest or index accepted (the distribution spec suggests 4 MiB).
const MANIFEST_LIMIT: u64 = 4 << 20;
/// Largest image config accepted.
const CONFIG_LIMIT: u64 = 64 << 20;

pub struct PullOptions {
    pub plain_http: bool,
    pub progress: Progress,
    /// Use only what the cache holds; anything missing is an error, and
    /// the registry is never contacted.
    pub offline: bool,
}

#[derive(Debug, Clone)]
pub struct PulledLayer {
    pub blob: LayerBlob,
    /// True when the blob was already in the cache.
    pub cached: bool,
}

pub struct PulledImage {
    /// The reference with the platform manifest's digest.
    pub reference: Reference,
    /// Digest of what was asked for (an index or the manifest itself).
    pub requested_digest: Digest,
    pub manifest_digest: Digest,
    pub manifest_media_type: String,
    pub manifest_size: u64,
    pub manifest: ImageManifest,
    pub config: ImageConfiguration,
    pub config_digest: Digest,
    pub config_size: u64,
    pub config_media_type: String,
    pub layers: Vec<PulledLayer>,
}

/// Plain HTTP for loopback registries (as Docker's default insecure list)
/// and for those listed in `QUARRY_PLAIN_HTTP_REGISTRIES` (comma-separated HOST[:PORT]).
pub fn plain_http_default(r: &Reference) -> bool {
    r.is_loopback()
        || std::env::var("QUARRY_PLAIN_HTTP_REGISTRIES")
            .map(|v| v.split(',').any(|h| h.trim() == r.registry))
            .unwrap_or(false)
}

/// Layer media types as an OCI manifest names them: Docker's names for the
/// same bytes are mapped, the bytes (and digests) stay as they are.
fn oci_layer_media_type(mt: &str, what: &str, reference: &Reference) -> Result<String, RegistryError> {
    Ok(match mt {
        "application/vnd.docker.image.rootfs.diff.tar.gzip" => "application/vnd.oci.image.layer.v1.tar+gzip".into(),
        "application/vnd.docker.image.rootfs.diff.tar" => "application/vnd.oci.image.layer.v1.tar".into(),
        "application/vnd.docker.image.rootfs.diff.tar.zstd" => "application/vnd.oci.image.layer.v1.tar+zstd".into(),
        m if m.starts_with("application/vnd.oci.image.layer.") => m.to_string(),
        other => {
            return Err(RegistryError::Image {
                reference: reference.to_string(),
                message: format!("{what} has media type `{other}`, which is not an image layer quarry can reuse"),
            })
        }
    })
}

/// A reference for a `registry` base: it must be pinned by digest.
/// A tag alone is refused (bases are reproducible); the error names the
/// digest the tag points at now, when the registry can tell.
pub fn base_reference(s: &str) -> Result<Reference, RegistryError> {
    let r = Reference::parse(s)?;
    if r.digest.is_some() {
        return Ok(r);
    }
    // A missing tag is reported as such; an existing one is named with its digest.
    let digest = resolve_tag(&r, plain_http_default(&r))?;
    Err(RegistryError::Image {
        reference: s.to_string(),
        message: format!(
            "a registry base must be pinned by digest so builds are reproducible; the tag points at {digest} now: write `{}`",
            r.with_digest(&digest.to_string())
        ),
    })
}

/// The digest a tag points at now: that of the bytes served (not the
/// registry's `Docker-Content-Digest` header, which is only a claim).
pub fn resolve_tag(r: &Reference, plain_http: bool) -> Result<Digest, RegistryError> {
    let mut client = Client::new(&r.registry, plain_http)?;
    client.add_scope(&r.repository, "pull");
    let (bytes, _) = get_manifest(&mut client, r, r.object())?;
    Ok(Digest::of_bytes(&bytes))
}

/// GET a manifest by tag or digest: (bytes, Content-Type).
fn get_manifest(client: &mut Client, r: &Reference, object: &str) -> Result<(Vec<u8>, String), RegistryError> {
    let what = format!("manifest `{}/{}:{}`", r.registry, r.repository, object).replace(":sha256:", "@sha256:");
    let url = client.url(&format!("{}/manifests/{}", r.repository, object));
    let call = Call::new(Method::GET, url, what.clone())
        .header("accept", [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST].join(", "));
    let resp = client.send(&call)?;
    if resp.status().as_u16() != 200 {
        let e = client.status_error(&what, resp);
        return Err(match e {
            RegistryError::NotFound { registry, message, .. } => RegistryError::NotFound {
                registry,
                what: if object.starts_with("sha256:") {
                    format!("manifest `{object}` of `{}/{}`", r.registry, r.repository)
                } else {
                    format!("tag `{object}` of `{}/{}`", r.registry, r.repository)
                },
                message,
            },
            e => e,
        });
    }
    let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = read_limited(resp, MANIFEST_LIMIT + 1).map_err(|e| client.protocol(&what, format!("reading: {e}")))?;
    if bytes.len() as u64 > MANIFEST_LIMIT {
        return Err(client.protocol(&what, format!("larger than {MANIFEST_LIMIT} bytes")));
    }
    Ok((bytes, ctype))
}

/// The media type a manifest document declares, else guessed from its shape.
fn document_media_type(bytes: &[u8], header: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "mediaType")]
        media_type: Option<String>,
        manifests: Option<serde_json::Value>,
    }
    let p: Option<Probe> = serde_json::from_slice(bytes).ok();
    if let Some(mt) = p.as_ref().and_then(|p| p.media_type.clone()) {
        return mt;
    }
    let header = header.split(';').next().unwrap_or("").trim();
    if !header.is_empty() && header != "application/json" && header != "application/octet-stream" {
        return header.to_string();
    }
    if p.and_then(|p| p.manifests).is_some() {
        OCI_INDEX.into()
    } else {
        OCI_MANIFEST.into()
    }
}

struct Puller<'a> {
    reference: Reference,
    blobs: &'a BlobDir,
    opts: &'a PullOptions,
    client: Option<Client>,
    known: Known,
}

impl Puller<'_> {
    fn client(&mut self) -> Result<&mut Client, RegistryError> {
        if self.opts.offline {
            return Err(RegistryError::Image {
                reference: self.reference.to_string(),
                message: "not in the cache (and the registry is not asked offline)".into(),
            });
        }
        if self.client.is_none() {
            let mut c = Client::new(&self.reference.registry, self.opts.plain_http)?;
            c.add_scope(&self.reference.repository, "pull");
            self.client = Some(c);
        }
        Ok(self.client.as_mut().expect("set above"))
    }

    /// A manifest or index by digest: from the cache, else fetched and verified.
    fn document(&mut self, digest: &Digest) -> Result<(Vec<u8>, String), RegistryError> {
        if let Ok(bytes) = std::fs::read(self.blobs.path(digest)) {
            let media_type = document_media_type(&bytes, "");
            return Ok((bytes, media_type));
        }
        let r = self.reference.clone();
        let (bytes, ctype) = get_manifest(self.client()?, &r, &digest.to_string())?;
        self.store_small(&bytes, digest, &format!("manifest `{}`", r.with_digest(&digest.to_string())))?;
        let media_type = document_media_type(&bytes, &ctype);
        Ok((bytes, media_type))
    }

    /// A document into the blob store, verified against the digest asked for.
    fn store_small(&self, bytes: &[u8], digest: &Digest, what: &str) -> Result<(), RegistryError> {
        let mut w = self.blobs.writer().map_err(|e| blob_err(e, what))?;
        w.write_all(bytes).map_err(|err| io_err(self.blobs, err))?;
        w.commit_verified(digest, None).map_err(|e| blob_err(e, what))?;
        Ok(())
    }

    /// A blob into the cache, streamed and verified; returns true if it was cached already.
    fn blob(&mut self, digest: &Digest, size: u64, what: &str) -> Result<bool, RegistryError> {
        if self.blobs.has(digest, size) {
            return Ok(true);
        }
        let repo = self.reference.repository.clone();
        let bar = self.opts.progress.bytes(size, format!("pull {}", &digest.hex()[..12]));
        let max = super::client::max_attempts();
        let mut attempt = 0;
        loop {
            attempt += 1;
            bar.set_position(0);
            match self.download(&repo, digest, size, what, &bar) {
                Err(Transfer::Interrupted(_)) if attempt < max => {
                    std::thread::sleep(std::time::Duration::from_millis(250 << attempt));
                }
                Err(Transfer::Interrupted(e)) => {
                    return Err(RegistryError::Connect {
                        registry: self.reference.registry.clone(),
                        message: format!("{what}: the download broke off: {e}"),
                        hint: String::new(),
                    })
                }
                Err(Transfer::Failed(e)) => return Err(e),
                Ok(()) => break,
            }
        }
        bar.finish_and_clear();
        self.known.add(&digest.to_string(), &repo);
        Ok(false)
    }

    fn download(
        &mut self,
        repo: &str,
        digest: &Digest,
        size: u64,
        what: &str,
        bar: &indicatif::ProgressBar,
    ) -> Result<(), Transfer> {
        let w = self.blobs.writer().map_err(|e| Transfer::Failed(blob_err(e, what)))?;
        let client = self.client().map_err(Transfer::Failed)?;
        super::artifact::download_once(client, repo, w, digest, size, what, bar).map(|_| ())
    }

    fn pick_platform(
        &self,
        index: &ImageIndex,
        platform: (&str, &str, Option<&str>),
    ) -> Result<Descriptor, RegistryError> {
        let (os, arch, variant) = platform;
        let matches = |d: &&Descriptor| {
            d.platform()
                .as_ref()
                .map(|p| p.os().to_string() == os && p.architecture().to_string() == arch)
                .unwrap_or(false)
        };
        let candidates: Vec<&Descriptor> = index.manifests().iter().filter(matches).collect();
        let variant_of = |d: &Descriptor| d.platform().as_ref().and_then(|p| p.variant().clone());
        let chosen = match variant {
            Some(v) => candidates.iter().find(|d| variant_of(d).as_deref() == Some(v)),
            None => candidates.iter().find(|d| variant_of(d).is_none()).or(candidates.first()),
        };
        match chosen {
            Some(d) => Ok((*d).clone()),
            None => {
                let have: Vec<String> = index
                    .manifests()
                    .iter()
                    .filter_map(|d| d.platform().as_ref())
                    .map(|p| match p.variant() {
                        Some(v) => format!("{}/{}/{v}", p.os(), p.architecture()),
                        None => format!("{}/{}", p.os(), p.architecture()),
                    })
                    .collect();
                let want = match variant {
                    Some(v) => format!("{os}/{arch}/{v}"),
                    None => format!("{os}/{arch}"),
                };
                Err(RegistryError::Image {
                    reference: self.reference.to_string(),
                    message: format!(
                        "the image index has no manifest for {want} (it has: {}); set `platform` in the image's [config]",
                        if have.is_empty() { "none".to_string() } else { have.join(", ") }
                    ),
                })
            }
        }
    }
}

pub(crate) use super::artifact::{blob_err, Transfer};

/// A descriptor's digest, which quarry can only check when it is a sha256.
fn sha256_of(d: &Descriptor, what: &str, reference: &Reference) -> Result<Digest, RegistryError> {
    Digest::try_from(d.digest()).map_err(|_| RegistryError::Image {
        reference: reference.to_string(),
        message: format!("{what} has digest `{}`; only sha256 digests are supported", d.digest()),
    })
}

fn io_err(blobs: &BlobDir, err: std::io::Error) -> RegistryError {
    RegistryError::Io { path: blobs.dir().display().to_string(), what: "cannot write a blob".into(), err }
}

/// Pull `reference` (by digest, or by tag) for `platform` (os, arch, variant)
/// into `store`.
pub fn pull_image(
    reference: &Reference,
    platform: (&str, &str, Option<&str>),
    store: Store,
    opts: &PullOptions,
) -> Result<PulledImage, RegistryError> {
    let blobs = store.blobs;
    let mut p = Puller {
        reference: reference.clone(),
        blobs,
        opts,
        client: None,
        known: Known::load(store.notes, &reference.registry),
    };
    let requested = match &reference.digest {
        Some(d) => Digest::parse(d)
            .map_err(|e| RegistryError::Image { reference: reference.to_string(), message: e.to_string() })?,
        None => resolve_tag(reference, opts.plain_http)?,
    };
    let (mut bytes, mut media_type) = p.document(&requested)?;
    let mut manifest_digest = requested;
    if media_type == OCI_INDEX || media_type == DOCKER_LIST {
        let index: ImageIndex = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Image {
            reference: reference.to_string(),
            message: format!("the image index is not valid: {e}"),
        })?;
        let d = p.pick_platform(&index, platform)?;
        manifest_digest = sha256_of(&d, "the platform's manifest", reference)?;
        (bytes, media_type) = p.document(&manifest_digest)?;
    }
    if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
        return Err(RegistryError::Image {
            reference: reference.to_string(),
            message: format!("manifest {manifest_digest} has media type `{media_type}`; quarry reads OCI and Docker schema 2 image manifests"),
        });
    }
    let manifest: ImageManifest = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Image {
        reference: reference.to_string(),
        message: format!("manifest {manifest_digest} is not valid: {e}"),
    })?;
    let cdesc = manifest.config();
    let config_digest = sha256_of(cdesc, "the config", reference)?;
    p.blob(&config_digest, cdesc.size(), &format!("config {config_digest}"))?;
    if cdesc.size() > CONFIG_LIMIT {
        return Err(p.client()?.protocol("config", format!("larger than {CONFIG_LIMIT} bytes")));
    }
    let config_bytes = std::fs::read(blobs.path(&config_digest)).map_err(|err| RegistryError::Io {
        path: blobs.path(&config_digest).display().to_string(),
        what: "cannot read the config".into(),
        err,
    })?;
    let config: ImageConfiguration = serde_json::from_slice(&config_bytes).map_err(|e| RegistryError::Image {
        reference: reference.to_string(),
        message: format!("config {config_digest} is not a valid image config: {e}"),
    })?;
    let diff_ids = config.rootfs().diff_ids().clone();
    if diff_ids.len() != manifest.layers().len() {
        return Err(RegistryError::Image {
            reference: reference.to_string(),
            message: format!(
                "manifest has {} layers but its config lists {} diff_ids",
                manifest.layers().len(),
                diff_ids.len()
            ),
        });
    }
    let mut layers = Vec::new();
    for (i, (d, diff_id)) in manifest.layers().iter().zip(diff_ids.iter()).enumerate() {
        let digest = sha256_of(d, &format!("layer {i}"), reference)?;
        let diff_id = Digest::parse(diff_id).map_err(|e| RegistryError::Image {
            reference: reference.to_string(),
            message: format!("diff_id {i} of the config: {e}"),
        })?;
        let what = format!("layer {i} ({digest}) of {}", reference.with_digest(&manifest_digest.to_string()));
        let media_type = oci_layer_media_type(d.media_type().as_ref(), &what, reference)?;
        let cached = p.blob(&digest, d.size(), &what)?;
        layers.push(PulledLayer { blob: LayerBlob { digest, diff_id, size: d.size(), media_type }, cached });
    }
    p.known.save();
    Ok(PulledImage {
        reference: reference.with_digest(&manifest_digest.to_string()),
        requested_digest: requested,
        manifest_media_type: media_type,
        manifest_size: bytes.len() as u64,
        manifest_digest,
        config_media_type: cdesc.media_type().to_string(),
        config_size: cdesc.size(),
        manifest,
        config,
        config_digest,
        layers,
    })
}

/// A registry base's layers when `blobs` holds all of it (manifest,
/// config and every layer), without contacting the registry.
pub fn cached_layers(reference: &str, platform: &crate::platform::Platform, blobs: &BlobDir) -> Option<PulledImage> {
    let r = base_reference_offline(reference)?;
    let opts = PullOptions { plain_http: false, progress: Progress::hidden(), offline: true };
    let store = Store { blobs, notes: None };
    pull_image(&r, (&platform.os, platform.arch.oci(), platform.variant.as_deref()), store, &opts).ok()
}

/// A pinned reference, parsed without asking any registry.
fn base_reference_offline(s: &str) -> Option<Reference> {
    let r = Reference::parse(s).ok()?;
    r.digest.is_some().then_some(r)
}
