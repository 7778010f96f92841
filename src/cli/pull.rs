use crate::progress::Progress;
use crate::registry::pull::{pull_image, PullOptions};
use crate::registry::save::write_layout;
use crate::registry::Reference;
use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// What to pull: HOST[:PORT]/REPO[:TAG][@sha256:...]
    #[arg(value_name = "REF")]
    reference: String,
    /// Output OCI layout directory
    #[arg(short, long, value_name = "OCI_DIR")]
    output: PathBuf,
    /// Speak plain HTTP instead of HTTPS (local registries such as 127.0.0.1:5000)
    #[arg(long)]
    plain_http: bool,
    /// Platform to pick from an image index, OS/ARCH[/VARIANT]
    #[arg(long, default_value = "linux/amd64")]
    platform: String,
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// Print nothing but errors
    #[arg(long, short)]
    quiet: bool,
}

#[derive(serde::Serialize)]
struct Pulled {
    #[serde(rename = "ref")]
    reference: String,
    digest: String,
    output: PathBuf,
    layers: Vec<crate::oci::LayerBlob>,
    /// The artifact types attached to the image in the layout (provenance, SBOM).
    attached: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, a.quiet);
    let reference = Reference::parse(&a.reference)?;
    let mut parts = a.platform.splitn(3, '/');
    let (os, arch, variant) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
    if os.is_empty() || arch.is_empty() {
        anyhow::bail!("--platform `{}`: give OS/ARCH[/VARIANT], e.g. linux/amd64", a.platform);
    }
    let cache = a.cache.open()?;
    let opts = PullOptions { plain_http: a.plain_http, progress: Progress::new(a.json, a.quiet), offline: false };
    let img = pull_image(&reference, (os, arch, variant), cache.registry_store(), &opts)
        .with_context(|| format!("pulling `{}`", a.reference))?;
    let tag = reference.tag.clone().unwrap_or_else(|| "latest".into());
    write_layout(&img, cache.blobs(), &a.output, &tag).with_context(|| format!("writing `{}`", a.output.display()))?;
    // What refers to the image (its provenance, its SBOM) comes along, so
    // the layout can be verified (`quarry verify`) as the registry's copy.
    let mut client = crate::registry::Client::new(&reference.registry, a.plain_http)?;
    client.add_scope(&reference.repository, "pull");
    let attached = crate::registry::attached::attach_referrers(
        &mut client,
        &reference.repository,
        &img.manifest_digest,
        &a.output,
    )
    .with_context(|| format!("fetching what refers to `{}`", a.reference))?;
    let r = Pulled {
        reference: img.reference.to_string(),
        digest: img.manifest_digest.to_string(),
        output: a.output.clone(),
        layers: img.layers.iter().map(|l| l.blob.clone()).collect(),
        attached: attached.iter().map(|d| d.artifact_type.clone()).collect(),
    };
    if a.json {
        super::print_json(&r)?;
    } else if !a.quiet {
        if reference.digest.is_none() {
            outln!(
                "{} is {} (pin it as {})",
                a.reference,
                img.requested_digest,
                reference.with_digest(&img.requested_digest.to_string())
            );
        }
        outln!("{} -> {}", r.reference, r.output.display());
        for d in &attached {
            outln!("attached {} ({})", d.artifact_type, d.manifest_digest);
        }
    }
    Ok(0)
}
