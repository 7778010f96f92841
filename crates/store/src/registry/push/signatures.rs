//! Signing an image as it is pushed, the way `cosign sign --key` and
//! `cosign attest --key` store it (sigstore/cosign's signature and
//! attestation specs), so cosign, Podman and skopeo find and check them:
//! - `sha256-<hex>.sig`: an image manifest whose one layer is the simple
//!   signing payload (`application/vnd.dev.cosign.simplesigning.v1+json`)
//!   with its signature in the annotation `dev.cosignproject.cosign/signature`;
//! - `sha256-<hex>.att`: one layer, the image's provenance statement in a
//!   signed DSSE envelope (`application/vnd.dsse.envelope.v1+json`,
//!   annotation `predicateType`).
//!
//! The payload names the repository pushed to (a signature is for one
//! repository), so signing happens at push, not at build. Each tag is
//! written whole, replacing what was there (cosign appends a signature per
//! run; quarry's are deterministic, so a second push writes the same bytes).

use super::{send_blob, LocalBlob, PushOptions, PushResult};
use crate::oci::Digest;
use crate::registry::client::Client;
use crate::registry::known::Known;
use crate::registry::{RegistryError, OCI_MANIFEST};
use crate::signing::{dsse, simple_signing, SigningKey};
use base64::Engine;
use serde::Serialize;
use std::collections::BTreeMap;

const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// One signature manifest pushed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PushedSignature {
    /// `signature` (`.sig`) or `attestation` (`.att`).
    pub kind: &'static str,
    pub tag: String,
    /// The signature manifest's digest.
    pub digest: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest<'a> {
    schema_version: u32,
    media_type: &'a str,
    config: Descriptor<'a>,
    layers: Vec<Descriptor<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor<'a> {
    media_type: &'a str,
    size: u64,
    digest: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'a str, String>,
}

/// The tag cosign's scheme gives what signs the image `digest`: `sha256-<hex>.<suffix>`.
pub fn tag(digest: &Digest, suffix: &str) -> String {
    format!("sha256-{}.{suffix}", digest.hex())
}

/// Sign the image `subject` pushed to `repository` (`HOST/REPO`, the
/// identity the signature names), and attest `provenance` when the layout
/// carries one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_signatures(
    client: &mut Client,
    known: &mut Known,
    repo: &str,
    repository: &str,
    subject: &Digest,
    key: &SigningKey,
    provenance: Option<&[u8]>,
    opts: &PushOptions,
    result: &mut PushResult,
) -> Result<Vec<PushedSignature>, RegistryError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = simple_signing::payload(repository, &subject.to_string());
    let signature = b64.encode(key.sign(&payload));
    let mut layers = vec![(
        "signature",
        "sig",
        payload,
        simple_signing::MEDIA_TYPE,
        BTreeMap::from([(SIGNATURE_ANNOTATION, signature)]),
    )];
    if let Some(statement) = provenance {
        let envelope = dsse::sign(crate::oci::IN_TOTO_MEDIA_TYPE, statement, key).to_bytes();
        let annotations = BTreeMap::from([
            (SIGNATURE_ANNOTATION, String::new()),
            ("predicateType", crate::oci::SLSA_PROVENANCE_V1.to_string()),
        ]);
        layers.push(("attestation", "att", envelope, dsse::MEDIA_TYPE, annotations));
    }
    let scratch = tempfile::tempdir().map_err(|err| RegistryError::Io {
        path: std::env::temp_dir().display().to_string(),
        what: "cannot make a scratch directory in".into(),
        err,
    })?;
    let mut pushed = Vec::new();
    for (kind, suffix, content, media_type, annotations) in layers {
        let layer_digest = Digest::of_bytes(&content);
        // The config go-containerregistry gives an image made of one layer
        // (what cosign pushes): no time, the layer as its one diff_id.
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "",
            "config": {},
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}],
            "os": "",
            "rootfs": {"diff_ids": [layer_digest.to_string()], "type": "layers"},
        }))
        .expect("plain data");
        let config_digest = Digest::of_bytes(&config);
        for (bytes, digest, what) in [(&content, &layer_digest, "layer"), (&config, &config_digest, "config")] {
            let path = scratch.path().join(digest.hex());
            std::fs::write(&path, bytes).map_err(|err| RegistryError::Io {
                path: path.display().to_string(),
                what: "cannot read or write".into(),
                err,
            })?;
            let blob = LocalBlob {
                digest: digest.to_string(),
                size: bytes.len() as u64,
                path,
                what: format!("{kind} {what} ({digest})"),
            };
            send_blob(client, known, repo, &blob, opts, result)?;
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: OCI_MANIFEST,
            config: Descriptor {
                media_type: CONFIG_MEDIA_TYPE,
                size: config.len() as u64,
                digest: config_digest.to_string(),
                annotations: BTreeMap::new(),
            },
            layers: vec![Descriptor {
                media_type,
                size: content.len() as u64,
                digest: layer_digest.to_string(),
                annotations,
            }],
        };
        let bytes = serde_json::to_vec(&manifest).expect("plain data");
        let tag = tag(subject, suffix);
        let what = format!("{kind} of {subject} -> {}/{repo}:{tag}", client.registry);
        super::referrers::put_manifest(client, repo, &tag, OCI_MANIFEST, &bytes, &what)?;
        pushed.push(PushedSignature { kind, tag, digest: Digest::of_bytes(&bytes).to_string() });
    }
    Ok(pushed)
}
