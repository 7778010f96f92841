//! `--sign-key`, shared by the commands that sign what they write.

use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SignArgs {
    /// Sign what this writes as cosign does with a key: a cosign key file
    /// (password from $COSIGN_PASSWORD) or a PKCS#8 PEM key (ECDSA P-256, Ed25519)
    #[arg(long, value_name = "FILE", env = "QUARRY_SIGN_KEY")]
    pub sign_key: Option<PathBuf>,
}

impl SignArgs {
    /// The key, opened (None without `--sign-key`).
    pub fn load(&self) -> anyhow::Result<Option<crate::signing::SigningKey>> {
        let Some(path) = &self.sign_key else { return Ok(None) };
        let password = std::env::var(crate::signing::PASSWORD_ENV).ok();
        Ok(Some(crate::signing::SigningKey::from_file(path, password.as_deref().map(str::as_bytes))?))
    }
}
