//! cosign's encrypted private keys (`cosign generate-key-pair`): a PEM block
//! labelled `ENCRYPTED SIGSTORE PRIVATE KEY` (older cosign: `ENCRYPTED COSIGN
//! PRIVATE KEY`) whose content is JSON: the scrypt parameters and salt, the
//! NaCl secretbox nonce, and the ciphertext of the PKCS#8 DER key
//! (`{"kdf": {"name": "scrypt", "params": {"N", "r", "p"}, "salt"},
//! "cipher": {"name": "nacl/secretbox", "nonce"}, "ciphertext"}`, byte
//! strings in standard base64, as Go writes them).

use base64::Engine;
use crypto_secretbox::aead::{Aead, KeyInit};
use serde::Deserialize;

/// The PEM labels of cosign's encrypted keys.
pub const LABELS: [&str; 2] = ["ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY"];

#[derive(Deserialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct KdfParams {
    N: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

/// Why an encrypted key did not open.
pub enum Failure {
    Malformed(String),
    WrongPassword,
}

/// The PKCS#8 DER key inside the encrypted key's JSON `content`.
pub fn decrypt(content: &[u8], password: &[u8]) -> Result<Vec<u8>, Failure> {
    let bad = |m: &str| Failure::Malformed(m.to_string());
    let e: Encrypted = serde_json::from_slice(content)
        .map_err(|e| Failure::Malformed(format!("is not cosign's encrypted key JSON: {e}")))?;
    if e.kdf.name != "scrypt" || e.cipher.name != "nacl/secretbox" {
        return Err(Failure::Malformed(format!(
            "uses {} and {}; cosign's keys use scrypt and nacl/secretbox",
            e.kdf.name, e.cipher.name
        )));
    }
    let b64 = |s: &str, what: &str| {
        base64::engine::general_purpose::STANDARD.decode(s).map_err(|_| Failure::Malformed(format!("has a bad {what}")))
    };
    let (salt, nonce, ciphertext) =
        (b64(&e.kdf.salt, "salt")?, b64(&e.cipher.nonce, "nonce")?, b64(&e.ciphertext, "ciphertext")?);
    let n = e.kdf.params.N;
    if !n.is_power_of_two() || n < 2 {
        return Err(bad("has an scrypt N that is not a power of two"));
    }
    let params = scrypt::Params::new(n.trailing_zeros() as u8, e.kdf.params.r, e.kdf.params.p)
        .map_err(|e| Failure::Malformed(format!("has scrypt parameters out of range: {e}")))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(password, &salt, &params, &mut key).map_err(|_| bad("cannot derive its key"))?;
    if nonce.len() != 24 {
        return Err(bad("has a secretbox nonce that is not 24 bytes"));
    }
    let cipher = crypto_secretbox::XSalsa20Poly1305::new(crypto_secretbox::Key::from_slice(&key));
    cipher
        .decrypt(crypto_secretbox::Nonce::from_slice(&nonce), ciphertext.as_slice())
        .map_err(|_| Failure::WrongPassword)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encrypt as cosign does (the test's own inverse; cosign's real files
    /// are read in the end-to-end tests).
    fn encrypt(der: &[u8], password: &[u8]) -> Vec<u8> {
        let salt = [7u8; 32];
        let nonce = [9u8; 24];
        let params = scrypt::Params::new(10, 8, 1).unwrap();
        let mut key = [0u8; 32];
        scrypt::scrypt(password, &salt, &params, &mut key).unwrap();
        let cipher = crypto_secretbox::XSalsa20Poly1305::new(crypto_secretbox::Key::from_slice(&key));
        let ct = cipher.encrypt(crypto_secretbox::Nonce::from_slice(&nonce), der).unwrap();
        let b = |x: &[u8]| base64::engine::general_purpose::STANDARD.encode(x);
        serde_json::to_vec(&serde_json::json!({
            "kdf": {"name": "scrypt", "params": {"N": 1024, "r": 8, "p": 1}, "salt": b(&salt)},
            "cipher": {"name": "nacl/secretbox", "nonce": b(&nonce)},
            "ciphertext": b(&ct),
        }))
        .unwrap()
    }

    #[test]
    fn opens_with_its_password_and_not_another() {
        let json = encrypt(b"der bytes", b"s3cret");
        assert_eq!(decrypt(&json, b"s3cret").ok().unwrap(), b"der bytes");
        assert!(matches!(decrypt(&json, b"wrong"), Err(Failure::WrongPassword)));
        assert!(matches!(decrypt(b"{}", b"x"), Err(Failure::Malformed(_))));
    }
}
