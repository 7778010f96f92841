//! DSSE envelopes (secure-systems-lab/dsse v1): a payload, its type, and
//! signatures over the pre-authentication encoding
//! `"DSSEv1" SP len(type) SP type SP len(body) SP body`. cosign stores
//! attestations in them (`.att`), and `cosign verify-blob-attestation`
//! reads them as files.

use super::{PublicKey, SignError, SigningKey};
use base64::Engine;
use serde::{Deserialize, Serialize};

/// The media type of an envelope as a layer of a `.att` manifest.
pub const MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub payload_type: String,
    /// Standard base64 of the payload.
    pub payload: String,
    pub signatures: Vec<Signature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// cosign leaves it empty for keys.
    #[serde(default)]
    pub keyid: String,
    /// Standard base64 of the signature.
    pub sig: String,
}

/// The bytes a DSSE signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// `payload` signed with `key` in an envelope.
pub fn sign(payload_type: &str, payload: &[u8], key: &SigningKey) -> Envelope {
    let b64 = base64::engine::general_purpose::STANDARD;
    let sig = key.sign(&pae(payload_type, payload));
    Envelope {
        payload_type: payload_type.to_string(),
        payload: b64.encode(payload),
        signatures: vec![Signature { keyid: String::new(), sig: b64.encode(sig) }],
    }
}

impl Envelope {
    /// The envelope as stored: compact JSON, as cosign writes it.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain data")
    }

    /// Read an envelope; `what` names it in errors.
    pub fn parse(bytes: &[u8], what: &str) -> Result<Envelope, SignError> {
        serde_json::from_slice(bytes).map_err(|e| SignError::BadEnvelope {
            what: what.to_string(),
            message: format!("is not a DSSE envelope: {e}"),
        })
    }

    /// The payload, once one signature verifies with `key`.
    pub fn verified_payload(&self, key: &PublicKey, what: &str) -> Result<Vec<u8>, SignError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let bad = |m: &str| SignError::BadEnvelope { what: what.to_string(), message: m.to_string() };
        let payload = b64.decode(&self.payload).map_err(|_| bad("its payload is not base64"))?;
        let signed = pae(&self.payload_type, &payload);
        for s in &self.signatures {
            let sig = b64.decode(&s.sig).map_err(|_| bad("a signature is not base64"))?;
            if key.verify(&signed, &sig) {
                return Ok(payload);
            }
        }
        Err(SignError::BadSignature { what: what.to_string(), key: key.describe() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_the_specs() {
        // The DSSE specification's own example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }
}
