//! `quarry verify TARGET`: check an image against what its provenance
//! claims by building it again. The image (an OCI layout, or a registry
//! reference pulled into a private directory with what refers to it) must
//! carry a provenance whose subject is its manifest (`claim`); the
//! checkout must hold the definitions the provenance names with their
//! sha256; the rebuild runs in a private cache that starts empty
//! (`rebuild`), so every input is fetched and checked again. Same manifest
//! digest: `reproduced`. Else the first differing layer, each differing
//! path in it and what differs, down to the ELF section, zip member or
//! text line (`compare`, `explain`), and the inputs whose digests moved.
//! With a key, the registry's cosign signature and attestation are checked
//! first (`signatures`). Wheels from `wheel split` and `wheel merge` are
//! verified the same way from the provenance beside them (`files`).

mod claim;
pub mod compare;
pub mod files;
mod inputs;
mod rebuild;
mod rerun;
pub mod signatures;
mod wheel_build;

use crate::progress::Progress;
use crate::registry::{Reference, RegistryError};
use crate::signing::PublicKey;
use std::path::{Path, PathBuf};

pub use claim::Claim;

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Layout(#[from] crate::oci::layout::LayoutError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Diff(#[from] crate::diff::DiffError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error("{target}: the image carries no provenance (no in-toto statement refers to it); build it with quarry, or pull it with `quarry pull` or `quarry verify REF`, which bring what refers to it")]
    NoProvenance { target: String },
    #[error("{target}: provenance: {message}")]
    Provenance { target: String, message: String },
    #[error("{target}: the provenance is about {subject}, not this {kind} ({image}): it was made for another {kind}, or the {kind} was changed after it; nothing was rebuilt")]
    SubjectMismatch { target: String, kind: &'static str, subject: String, image: String },
    #[error("{path}: the provenance records {recorded}, the checkout has {found}; check out the commit the image was built from (or name that checkout with --source DIR)")]
    Checkout { path: String, recorded: String, found: String },
    #[error("rebuilding `{image}` from its provenance failed")]
    Rebuild {
        image: String,
        #[source]
        source: Box<crate::build::BuildError>,
    },
    #[error("`{image}` cannot be rebuilt: its input {input} ({sha256}) can no longer be fetched; the provenance says it came from {uri}, {answer}: the archive has dropped that version. A cache that still holds the file (`--cache-dir`, e.g. the one the image was built with) lets the rebuild use it, checked by its sha256")]
    InputGone { image: String, input: String, uri: String, sha256: String, answer: String },
    #[error("{image}: the signature check with {key} failed: {message}")]
    Signature { image: String, key: String, message: String },
    #[error("{path}: {what}")]
    Io {
        path: String,
        what: String,
        #[source]
        err: std::io::Error,
    },
}

pub struct VerifyOptions {
    /// The checkout holding the definitions (the provenance names them from its root).
    pub source: PathBuf,
    /// The rebuild's cache (local only), opened when the rebuild starts:
    /// None for a fresh one, removed afterwards.
    pub cache: Option<crate::cache::LazyCache>,
    /// Check the registry's cosign signature and attestation with this key.
    pub key: Option<PublicKey>,
    pub plain_http: Option<bool>,
    pub progress: Progress,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Verification {
    pub target: String,
    pub image: String,
    /// The image definition rebuilt, by its path in the checkout.
    pub definition: String,
    pub reproduced: bool,
    pub given: String,
    pub rebuilt: String,
    /// Who built the given image, as its provenance says (`pkg:cargo/quarry@V`).
    pub builder: String,
    /// Whether the rebuild's provenance is the given one, byte for byte.
    pub provenance_reproduced: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signatures: Option<signatures::SignatureCheck>,
    pub config: Vec<crate::diff::image::ConfigChange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<compare::LayerDifference>,
    pub inputs: Vec<compare::InputDifference>,
}

/// The checkout holding the working directory: its git root, else the directory itself.
pub fn default_source() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    crate::provenance::checkout_root(&cwd.join("-")).map(Path::to_path_buf).unwrap_or(cwd)
}

/// The provenance of `path` says something this quarry cannot use.
fn bad(path: &Path, message: impl Into<String>) -> VerifyError {
    VerifyError::Provenance { target: path.display().to_string(), message: message.into() }
}

fn io(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> VerifyError {
    let (path, what) = (path.display().to_string(), what.to_string());
    move |err| VerifyError::Io { path, what, err }
}

/// Verify `target`: an OCI layout directory, else a registry reference.
pub fn verify(target: &str, opts: &VerifyOptions) -> Result<Verification, VerifyError> {
    let work = tempfile::Builder::new()
        .prefix("quarry-verify-")
        .tempdir()
        .map_err(io(&std::env::temp_dir(), "cannot make a directory"))?;
    let private = work.path().join("cache");
    let cache = match &opts.cache {
        Some(c) => c,
        None => &crate::cache::LazyCache::private(&private),
    };
    let as_path = Path::new(target);
    if as_path.join("index.json").is_file() {
        if let Some(k) = &opts.key {
            return Err(VerifyError::Signature {
                image: target.to_string(),
                key: k.describe(),
                message: "cosign keeps signatures in the registry, not in a layout: give the registry reference".into(),
            });
        }
        return verify_layout(target, as_path, None, cache, work.path(), opts);
    }
    if as_path.exists() {
        // A path, but no layout: say so rather than reading it as a reference.
        crate::oci::layout::open_image(as_path, None, None)?;
    }
    let reference = Reference::parse(target).map_err(RegistryError::from)?;
    let plain_http = opts.plain_http.unwrap_or_else(|| crate::registry::pull::plain_http_default(&reference));
    let pull = crate::registry::pull::PullOptions { plain_http, progress: opts.progress, offline: false };
    let opened = cache.get()?;
    let img = crate::registry::pull::pull_image(&reference, ("linux", "amd64", None), opened.registry_store(), &pull)?;
    let given = work.path().join("given");
    crate::registry::save::write_layout(&img, opened.blobs(), &given, reference.tag.as_deref().unwrap_or("latest"))?;
    let mut client = crate::registry::Client::new(&reference.registry, plain_http)?;
    client.add_scope(&reference.repository, "pull");
    crate::registry::attached::attach_referrers(&mut client, &reference.repository, &img.manifest_digest, &given)?;
    let check = match &opts.key {
        Some(key) => {
            let bytes = claim::provenance_bytes(&given, &img.manifest_digest)?;
            Some(signatures::check(&mut client, &reference, &img.manifest_digest, key, &bytes)?)
        }
        None => None,
    };
    let mut v = verify_layout(target, &given, check, cache, work.path(), opts)?;
    v.target = target.to_string();
    Ok(v)
}

fn verify_layout(
    target: &str,
    layout: &Path,
    signatures: Option<signatures::SignatureCheck>,
    cache: &crate::cache::LazyCache,
    work: &Path,
    opts: &VerifyOptions,
) -> Result<Verification, VerifyError> {
    let claim = claim::read(layout)?;
    rebuild::check_checkout(&claim, &opts.source)?;
    let out = work.join("rebuilt");
    let built = rebuild::rebuild(&claim, &opts.source, &cache.get()?, &out, opts.progress)?;
    let rebuilt_bytes = claim::provenance_bytes(&out, &built.manifest_digest)?;
    let rebuilt_statement: crate::provenance::Statement = serde_json::from_slice(&rebuilt_bytes)
        .map_err(|e| VerifyError::Provenance { target: out.display().to_string(), message: e.to_string() })?;
    let reproduced = built.manifest_digest == claim.manifest_digest;
    let (config, layer) = if reproduced {
        (Vec::new(), None)
    } else {
        let d = compare::images(layout, &out)?;
        (d.config, d.layer)
    };
    Ok(Verification {
        target: target.to_string(),
        image: claim.image_name.clone(),
        definition: claim.definition.clone(),
        reproduced,
        given: claim.manifest_digest.to_string(),
        rebuilt: built.manifest_digest.to_string(),
        builder: claim.statement.predicate.run_details.builder.id.clone(),
        provenance_reproduced: rebuilt_bytes == claim.bytes,
        signatures,
        config,
        layer,
        inputs: compare::inputs(&claim.statement, &rebuilt_statement),
    })
}
