use super::split::{CompressionArg, FamiliesArg};
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
    /// The cache whose wheel builds name each shard's build key (default: quarry's cache)
    #[arg(long = "cache-dir", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Print the report as JSON on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::super::set_output_mode(a.json, false);
    let cache_root = a.cache_dir.clone().unwrap_or_else(crate::cache::default_dir);
    let mut shards = Vec::new();
    for wheel in &a.shards {
        // Which build made it, for the report and for a refusal's message.
        let build_key = crate::oci::digest::sha256_file(wheel)
            .ok()
            .and_then(|sha| crate::wheel::build::built_by(&cache_root, &sha));
        shards.push(Shard { wheel: wheel.clone(), build_key });
    }
    let options =
        MergeOptions { device_prefix: a.device_prefix, families: a.families.into(), scheme: a.compression.into() };
    let report = match merge(&shards, &a.out_dir, &options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("quarry: error: {e}");
            if a.json {
                super::super::print_json(&serde_json::json!({ "error": e.to_string() }))?;
            }
            return Ok(1);
        }
    };
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
    Ok(0)
}
