use super::split::{CompressionArg, FamiliesArg, VariantArgs};
use crate::wheel::merge::{merge, MergeOptions, Shard};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Wheels of one project and version, each built for its own GPU targets
    #[arg(required = true, value_name = "SHARD_WHEEL")]
    shards: Vec<PathBuf>,
    /// Where the host and device wheels go
    #[arg(short = 'o', long = "out-dir", value_name = "DIR")]
    out_dir: PathBuf,
    /// Device wheels are named NAME-<target> [default: <project>-device]
    #[arg(long = "device-prefix", value_name = "NAME")]
    device_prefix: Option<String>,
    /// auto: rocm-bootstrap's packaging chain (sub-family and family wheels);
    /// none: one wheel per processor
    #[arg(long, value_enum, default_value = "auto")]
    families: FamiliesArg,
    /// How kernels are stored in the .kpack archives
    #[arg(long, value_enum, default_value = "zstd")]
    compression: CompressionArg,
    /// Another `Requires-Dist` of each device wheel (repeatable); `@GFXARCH@`
    /// becomes its target, and a requirement naming it goes to target wheels only
    #[arg(long = "device-requires-dist", value_name = "REQUIREMENT")]
    device_requires_dist: Vec<String>,
    #[command(flatten)]
    variants: VariantArgs,
    // The cache whose wheel builds name each shard's build key
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    #[command(flatten)]
    sign: crate::cli::sign_args::SignArgs,
    /// Print the report as JSON on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::super::set_output_mode(a.json, false);
    let cache_root = a.cache.dir();
    let mut shards = Vec::new();
    for wheel in &a.shards {
        // Which build made it, for the report and for a refusal's message.
        let build_key = crate::oci::digest::sha256_file(wheel)
            .ok()
            .and_then(|sha| crate::wheel::build::built_by(&cache_root, &sha));
        shards.push(Shard { wheel: wheel.clone(), build_key });
    }
    let mut parameters = serde_json::json!({
        "devicePrefix": a.device_prefix,
        "families": match a.families { FamiliesArg::Auto => "auto", FamiliesArg::None => "none" },
        "compression": match a.compression { CompressionArg::Zstd => "zstd", CompressionArg::None => "none" },
    });
    if !a.device_requires_dist.is_empty() {
        parameters["deviceRequiresDist"] = serde_json::json!(a.device_requires_dist);
    }
    a.variants.record(&mut parameters);
    let options = MergeOptions {
        device_prefix: a.device_prefix,
        families: a.families.into(),
        scheme: a.compression.into(),
        device_requires: a.device_requires_dist,
        variants: a.variants.schema(),
    };
    let key = a.sign.load()?;
    let report = match merge(&shards, &a.out_dir, &options) {
        Ok(r) => r,
        Err(e) => {
            // --json readers get the failure as the document too.
            if a.json {
                super::super::print_json(&serde_json::json!({ "error": e.to_string() }))?;
            }
            return Err(e.into());
        }
    };
    provenance(&report, &a.shards, parameters, key.as_ref())?;
    if a.json {
        super::super::print_json(&report)?;
        return Ok(0);
    }
    for s in &report.shards {
        let key = s.build_key.as_deref().unwrap_or("unknown");
        outln!("{}: {} (build key {key})", s.wheel.display(), s.targets.join(", "));
    }
    outln!("-> {}", report.host.display());
    for d in &report.device {
        outln!("   {} ({:?} {}): {}", d.wheel.display(), d.level, d.key, d.kpacks.len() + d.databases.len());
    }
    for v in report.variants.iter().chain(&report.variants_json) {
        outln!("   {} (variant)", v.display());
    }
    Ok(0)
}

/// `NAME.intoto.json` beside each wheel a merge wrote (signed with a key):
/// the shards are its inputs.
fn provenance(
    r: &crate::wheel::merge::MergeReport,
    shards: &[std::path::PathBuf],
    parameters: serde_json::Value,
    key: Option<&crate::signing::SigningKey>,
) -> Result<Vec<crate::provenance::files::Written>, crate::provenance::ProvenanceError> {
    use crate::provenance::files::{input_file, write_beside, FileBuild};
    let build = FileBuild {
        build_type: crate::provenance::files::MERGE_BUILD_TYPE.into(),
        parameters,
        inputs: shards.iter().map(|s| input_file(s)).collect::<Result<_, _>>()?,
    };
    let mut products = vec![r.host.clone()];
    products.extend(r.device.iter().map(|d| d.wheel.clone()));
    products.extend(r.variants.iter().chain(&r.variants_json).cloned());
    write_beside(&products, &build, key)
}
