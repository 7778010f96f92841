//! Checking an image's cosign signature and attestation with a public key,
//! as `cosign verify --key` and `cosign verify-attestation --key` do
//! without a transparency log: some layer of `sha256-<hex>.sig` is a
//! simple-signing payload for this image's digest whose signature verifies
//! with the key; some DSSE envelope in `sha256-<hex>.att` verifies with the
//! key and carries this image's provenance.

use super::VerifyError;
use crate::oci::Digest;
use crate::registry::attached::cosign_layers;
use crate::registry::{Client, Reference};
use crate::signing::{dsse, PublicKey};
use base64::Engine;

const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// What the key verified.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SignatureCheck {
    pub key: String,
    /// The signature tag whose payload verified.
    pub signature: String,
    /// The attestation tag whose envelope verified and holds the provenance.
    pub attestation: String,
}

fn refused(reference: &Reference, key: &PublicKey, message: impl Into<String>) -> VerifyError {
    VerifyError::Signature { image: reference.to_string(), key: key.describe(), message: message.into() }
}

pub fn check(
    client: &mut Client,
    reference: &Reference,
    image: &Digest,
    key: &PublicKey,
    provenance: &[u8],
) -> Result<SignatureCheck, VerifyError> {
    let repo = &reference.repository;
    let b64 = base64::engine::general_purpose::STANDARD;
    let sig_tag = crate::registry::push::signatures::tag(image, "sig");
    let layers = cosign_layers(client, repo, image, "sig")?;
    if layers.is_empty() {
        return Err(refused(
            reference,
            key,
            format!("the registry has no signature ({sig_tag}); push it with --sign-key"),
        ));
    }
    let mut signed_other = None;
    let mut signed = false;
    for l in &layers {
        let Some(sig) = l.annotations.get(SIGNATURE_ANNOTATION).and_then(|s| b64.decode(s).ok()) else { continue };
        if !key.verify(&l.content, &sig) {
            continue;
        }
        let payload: serde_json::Value = serde_json::from_slice(&l.content).unwrap_or_default();
        let digest = payload["critical"]["image"]["docker-manifest-digest"].as_str().unwrap_or("");
        if digest == image.to_string() {
            signed = true;
            break;
        }
        signed_other = Some(digest.to_string());
    }
    if !signed {
        return Err(refused(
            reference,
            key,
            match signed_other {
                Some(d) => {
                    format!("the signature in {sig_tag} verifies, but it signs another image ({d}), not {image}")
                }
                None => format!("no signature in {sig_tag} verifies with this key"),
            },
        ));
    }
    let att_tag = crate::registry::push::signatures::tag(image, "att");
    let mut attested = false;
    for l in cosign_layers(client, repo, image, "att")? {
        let what = format!("{}/{repo}:{att_tag}", reference.registry);
        let Ok(envelope) = dsse::Envelope::parse(&l.content, &what) else { continue };
        let Ok(payload) = envelope.verified_payload(key, &what) else { continue };
        let same = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).ok();
        if same(&payload).is_some() && same(&payload) == same(provenance) {
            attested = true;
            break;
        }
    }
    if !attested {
        return Err(refused(
            reference,
            key,
            format!("no attestation in {att_tag} verifies with this key and holds the image's provenance"),
        ));
    }
    Ok(SignatureCheck { key: key.describe(), signature: sig_tag, attestation: att_tag })
}
