//! Keys: private keys to sign with, public keys to check with.
//!
//! Private keys come from cosign's encrypted key files (the password from
//! `COSIGN_PASSWORD`) or from unencrypted PKCS#8 PEM (`PRIVATE KEY`), ECDSA
//! P-256 or Ed25519; public keys from PKIX PEM (`PUBLIC KEY`, what
//! `cosign.pub` holds). ECDSA signatures are ASN.1 DER over SHA-256 with
//! RFC 6979 nonces (as cosign makes and checks them); Ed25519 signatures
//! are the 64 raw bytes. Both are deterministic.

use super::cosign_key;
use super::SignError;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use std::path::Path;

pub enum SigningKey {
    P256(p256::ecdsa::SigningKey),
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

#[derive(Debug, Clone)]
pub enum PublicKey {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

fn bad(path: &Path, message: impl Into<String>) -> SignError {
    SignError::BadKey { path: path.display().to_string(), message: message.into() }
}

fn read_pem(path: &Path) -> Result<(String, Vec<u8>), SignError> {
    let text = std::fs::read(path).map_err(|err| SignError::Read { path: path.display().to_string(), err })?;
    let (label, der) = pem_rfc7468::decode_vec(&text)
        .map_err(|e| bad(path, format!("is not a PEM file ({e}); give cosign.key, or a PKCS#8 PEM key")))?;
    Ok((label.to_string(), der))
}

impl SigningKey {
    /// The key in `path`; `password` opens an encrypted cosign key.
    pub fn from_file(path: &Path, password: Option<&[u8]>) -> Result<SigningKey, SignError> {
        let (label, content) = read_pem(path)?;
        let der = if cosign_key::LABELS.contains(&label.as_str()) {
            let password = password
                .ok_or_else(|| bad(path, format!("is encrypted: set ${} to its password", super::PASSWORD_ENV)))?;
            match cosign_key::decrypt(&content, password) {
                Ok(der) => der,
                Err(cosign_key::Failure::WrongPassword) => {
                    return Err(SignError::WrongPassword { path: path.display().to_string() })
                }
                Err(cosign_key::Failure::Malformed(m)) => return Err(bad(path, m)),
            }
        } else if label == "PRIVATE KEY" {
            content
        } else {
            return Err(bad(
                path,
                format!("holds a `{label}`; quarry signs with cosign's key files or a PKCS#8 `PRIVATE KEY` (ECDSA P-256 or Ed25519)"),
            ));
        };
        if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_der(&der) {
            return Ok(SigningKey::P256(k));
        }
        if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_der(&der) {
            return Ok(SigningKey::Ed25519(Box::new(k)));
        }
        Err(bad(path, "is neither an ECDSA P-256 nor an Ed25519 key; those are the keys cosign and quarry sign with"))
    }

    /// The signature of `message` (DER for ECDSA, raw for Ed25519).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        use p256::ecdsa::signature::Signer;
        match self {
            SigningKey::P256(k) => {
                let sig: p256::ecdsa::Signature = k.sign(message);
                sig.to_der().as_bytes().to_vec()
            }
            SigningKey::Ed25519(k) => k.sign(message).to_bytes().to_vec(),
        }
    }

    pub fn public(&self) -> PublicKey {
        match self {
            SigningKey::P256(k) => PublicKey::P256(*k.verifying_key()),
            SigningKey::Ed25519(k) => PublicKey::Ed25519(k.verifying_key()),
        }
    }
}

impl PublicKey {
    /// The public key in a PKIX PEM file (`cosign.pub`).
    pub fn from_file(path: &Path) -> Result<PublicKey, SignError> {
        let (label, der) = read_pem(path)?;
        if label != "PUBLIC KEY" {
            return Err(bad(path, format!("holds a `{label}`, not a `PUBLIC KEY` (give cosign.pub)")));
        }
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_der(&der) {
            return Ok(PublicKey::P256(k));
        }
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(&der) {
            return Ok(PublicKey::Ed25519(k));
        }
        Err(bad(path, "is neither an ECDSA P-256 nor an Ed25519 public key"))
    }

    /// True when `sig` is a signature of `message` by this key.
    pub fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        use p256::ecdsa::signature::Verifier;
        match self {
            PublicKey::P256(k) => p256::ecdsa::DerSignature::try_from(sig).is_ok_and(|s| k.verify(message, &s).is_ok()),
            PublicKey::Ed25519(k) => {
                ed25519_dalek::Signature::from_slice(sig).is_ok_and(|s| k.verify_strict(message, &s).is_ok())
            }
        }
    }

    /// The key as PKIX PEM (what `cosign.pub` holds).
    pub fn to_pem(&self) -> String {
        let lf = p256::pkcs8::LineEnding::LF;
        match self {
            PublicKey::P256(k) => k.to_public_key_pem(lf),
            PublicKey::Ed25519(k) => k.to_public_key_pem(lf),
        }
        .expect("a valid key encodes")
    }

    /// For messages: the algorithm and the key's first bytes.
    pub fn describe(&self) -> String {
        let der = match self {
            PublicKey::P256(k) => k.to_public_key_der().map(|d| d.as_bytes().to_vec()),
            PublicKey::Ed25519(k) => k.to_public_key_der().map(|d| d.as_bytes().to_vec()),
        }
        .unwrap_or_default();
        let alg = if matches!(self, PublicKey::P256(_)) { "ECDSA P-256" } else { "Ed25519" };
        format!("{alg} sha256:{}", &crate::oci::digest::sha256_hex(&der)[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p256_pem(t: &Path) -> std::path::PathBuf {
        use p256::pkcs8::EncodePrivateKey;
        let k = p256::ecdsa::SigningKey::from_slice(&[0x42; 32]).unwrap();
        let pem = k.to_pkcs8_pem(p256::pkcs8::LineEnding::LF).unwrap();
        let f = t.join("k.pem");
        std::fs::write(&f, pem.as_bytes()).unwrap();
        f
    }

    #[test]
    fn signatures_are_deterministic_and_verify_with_the_public_key_only() {
        let t = tempfile::tempdir().unwrap();
        let k = SigningKey::from_file(&p256_pem(t.path()), None).unwrap();
        let (a, b) = (k.sign(b"payload"), k.sign(b"payload"));
        assert_eq!(a, b, "RFC 6979: the same bytes twice");
        let public = t.path().join("k.pub");
        std::fs::write(&public, k.public().to_pem()).unwrap();
        let p = PublicKey::from_file(&public).unwrap();
        assert!(p.verify(b"payload", &a));
        assert!(!p.verify(b"payloaD", &a));
        let other = SigningKey::P256(p256::ecdsa::SigningKey::from_slice(&[0x43; 32]).unwrap());
        assert!(!other.public().verify(b"payload", &a), "another key refuses it");
    }

    #[test]
    fn a_key_of_another_kind_is_named() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("rsa.pem");
        std::fs::write(&f, "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n").unwrap();
        let e = SigningKey::from_file(&f, None).err().unwrap().to_string();
        assert!(e.contains("rsa.pem") && e.contains("RSA PRIVATE KEY"), "{e}");
    }
}
