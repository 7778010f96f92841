//! Signatures the way cosign makes them with a key, deterministic: the same
//! key and payload give the same bytes (ECDSA P-256 with RFC 6979 nonces,
//! or Ed25519).
//!
//! - `keys`: private keys from cosign's key files (`cosign
//!   generate-key-pair`: encrypted, `cosign_key`) or PKCS#8 PEM, public
//!   keys from PKIX PEM; sign and verify;
//! - `dsse`: DSSE envelopes (what cosign stores attestations in);
//! - `simple_signing`: the payload cosign signs for an image.
//!
//! The primitives are RustCrypto's (`p256`, `ed25519-dalek`, `scrypt`,
//! `crypto_secretbox`); nothing here is hand-written crypto. No
//! transparency log is written or read: signatures are checked against a
//! key the user holds (cosign's `--insecure-ignore-tlog`).

mod cosign_key;
pub mod dsse;
mod keys;
pub mod simple_signing;

pub use keys::{PublicKey, SigningKey};

/// The environment variable that holds the password of an encrypted key
/// (cosign's own name for it).
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("cannot read the key {path}")]
    Read {
        path: String,
        #[source]
        err: std::io::Error,
    },
    /// Not a key quarry reads, or damaged.
    #[error("the key {path} {message}")]
    BadKey { path: String, message: String },
    /// The password does not open the encrypted key.
    #[error("the key {path} does not open with the password given (${PASSWORD_ENV}): is it the password `cosign generate-key-pair` was given?")]
    WrongPassword { path: String },
    /// A DSSE envelope that cannot be read.
    #[error("{what}: {message}")]
    BadEnvelope { what: String, message: String },
    /// A signature that does not verify with the key.
    #[error("{what}: the signature does not verify with the key {key}")]
    BadSignature { what: String, key: String },
}
