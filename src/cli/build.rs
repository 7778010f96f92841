use crate::build::{build, source_date_epoch_from_env, BuildOptions};
use crate::compress::{Compression, LayerCodec};
use crate::progress::Progress;
use anyhow::anyhow;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The image definition (images/NAME.toml)
    image: PathBuf,
    /// Set a parameter: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    sets: Vec<String>,
    /// Output OCI layout directory [default: out/NAME]
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Layer compression
    #[arg(long, value_enum, default_value_t = Compression::Gzip)]
    compression: Compression,
    /// Compression level [default: gzip 4 (libdeflate, 1-12), zstd 2 (1-19)];
    /// lower is faster and larger
    #[arg(long)]
    compression_level: Option<i32>,
    /// Layer cache directory [default: $QUARRY_CACHE, else ~/.cache/quarry]
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Rebuild every layer (the cache is still written)
    #[arg(long)]
    no_cache: bool,
    /// Rehash every input file instead of trusting the stat memo (which skips
    /// files whose size, times, inode and mode are unchanged)
    #[arg(long)]
    verify: bool,
    /// Compression threads [default: all cores]; output is identical for any count
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// Print nothing but errors
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let sets = crate::spec::parse_sets(&a.sets).map_err(|e| anyhow!(e))?;
    let opts = BuildOptions {
        sets,
        output: a.output,
        compression: LayerCodec::new(a.compression, a.compression_level).map_err(|e| anyhow!(e))?,
        cache_dir: a.cache_dir.unwrap_or_else(crate::store::cache::default_dir),
        no_cache: a.no_cache,
        verify: a.verify,
        threads: a.threads.unwrap_or_else(crate::compress::default_threads).max(1),
        source_date_epoch: source_date_epoch_from_env().map_err(|e| anyhow!(e))?,
        progress: Progress::new(a.json, a.quiet),
    };
    let r = build(&a.image, &opts)?;
    if a.json {
        super::print_json(&r)?;
    } else if !a.quiet {
        for l in &r.layers {
            println!(
                "{:<24} {}  {:>10}  {}",
                l.name,
                super::short_digest(&l.digest),
                super::human_size(l.size),
                if l.cached { "cached" } else { "built" }
            );
        }
        println!("{}:{} -> {} ({})", r.name, r.tag, r.output.display(), r.manifest_digest);
    }
    Ok(0)
}
