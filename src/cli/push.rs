use crate::progress::Progress;
use crate::registry::push::{push_image, PushOptions};
use crate::registry::Reference;
use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The OCI layout directory written by `quarry build`
    oci_dir: PathBuf,
    /// Where to push: HOST[:PORT]/REPO[:TAG] (tag: the layout's tag, else `latest`)
    #[arg(value_name = "REF")]
    reference: String,
    /// Speak plain HTTP instead of HTTPS (local registries such as 127.0.0.1:5000)
    #[arg(long)]
    plain_http: bool,
    /// Blobs larger than this many MiB are sent in chunks of this size
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    chunk_size: u64,
    // The cache remembers where blobs live, for cross-repository mounts
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Sign the image and attest its provenance as `cosign sign --key` and
    /// `cosign attest --key` do (tags sha256-<hex>.sig and .att): a cosign
    /// key file (password from $COSIGN_PASSWORD) or a PKCS#8 PEM key (ECDSA P-256, Ed25519)
    #[arg(long, value_name = "FILE", env = "QUARRY_SIGN_KEY")]
    sign_key: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// Print nothing but errors
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, a.quiet);
    let reference = Reference::parse(&a.reference)?;
    if a.chunk_size == 0 {
        anyhow::bail!("--chunk-size must be at least 1 (MiB)");
    }
    let sign = match &a.sign_key {
        Some(path) => {
            let password = std::env::var(crate::signing::PASSWORD_ENV).ok();
            Some(std::sync::Arc::new(crate::signing::SigningKey::from_file(
                path,
                password.as_deref().map(str::as_bytes),
            )?))
        }
        None => None,
    };
    let cache = a.cache.open()?;
    let opts = PushOptions {
        plain_http: a.plain_http,
        chunk_size: a.chunk_size << 20,
        progress: Progress::new(a.json, a.quiet),
        sign,
    };
    let r = push_image(&a.oci_dir, &reference, cache.registry_store().notes, &opts)
        .with_context(|| format!("pushing `{}` to `{}`", a.oci_dir.display(), a.reference))?;
    if a.json {
        super::print_json(&r)?;
    } else if !a.quiet {
        outln!(
            "{}: {} blob(s) pushed ({}), {} already there, {} mounted",
            r.reference,
            r.blobs_pushed,
            super::human_size(r.bytes_pushed),
            r.blobs_skipped,
            r.blobs_mounted
        );
        for a in &r.referrers {
            match a.found_by {
                crate::registry::push::referrers::FoundBy::ReferrersApi => {
                    outln!("  {} {}: listed by the registry's referrers API", a.artifact_type, a.digest)
                }
                crate::registry::push::referrers::FoundBy::Tags => {
                    outln!("  {} {}: tagged {}", a.artifact_type, a.digest, a.tags.join(", "))
                }
            }
        }
        for s in &r.signatures {
            outln!("  {} {}: tagged {}", s.kind, s.digest, s.tag);
        }
    }
    Ok(0)
}
