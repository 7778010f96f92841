use crate::build::{build, source_date_epoch_from_env, BuildOptions};
use crate::layer::compress::{Compression, LayerCodec};
use crate::progress::Progress;
use std::path::PathBuf;

/// What decides an image's layers and where it is written: shared by
/// `build` and `plan`, so a plan's keys are the ones the build uses.
#[derive(clap::Args)]
pub struct ImageArgs {
    /// The image definition (images/NAME.toml)
    pub image: PathBuf,
    /// Set a parameter: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    pub sets: Vec<String>,
    /// Output OCI layout directory [default: out/NAME]
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Layer compression
    #[arg(long, value_parser = super::values::compression(), default_value = "gzip")]
    pub compression: Compression,
    /// Compression level [default: gzip 4 (libdeflate, 1-12), zstd 2 (1-19)];
    /// lower is faster and larger
    #[arg(long)]
    pub compression_level: Option<i32>,
    #[command(flatten)]
    pub cache: super::cache_args::CacheArgs,
    /// Rehash every input file instead of trusting the stat memo (which skips
    /// files whose size, times, inode and mode are unchanged), and every
    /// cached blob used instead of trusting its seal
    #[arg(long)]
    pub verify: bool,
}

impl ImageArgs {
    pub fn options(&self, progress: Progress) -> anyhow::Result<BuildOptions> {
        let cache = self.cache.open()?;
        cache.rehash_blobs(self.verify);
        Ok(BuildOptions {
            sets: crate::definition::parse_sets(&self.sets)?,
            output: self.output.clone(),
            compression: LayerCodec::new(self.compression, self.compression_level)?,
            cache,
            no_cache: false,
            verify: self.verify,
            threads: crate::layer::compress::default_threads(),
            source_date_epoch: source_date_epoch_from_env()?,
            progress,
            sbom: false,
        })
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Rebuild every layer (the cache is still written)
    #[arg(long)]
    no_cache: bool,
    /// Compression threads [default: all cores]; output is identical for any count
    #[arg(long)]
    threads: Option<usize>,
    /// Attach an SPDX 2.3 SBOM of the image to the layout (an OCI 1.1
    /// referrer; `quarry push` pushes it along)
    #[arg(long)]
    sbom: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// Print nothing but errors
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, a.quiet);
    let mut opts = a.image.options(Progress::new(a.json, a.quiet))?;
    opts.no_cache = a.no_cache;
    opts.sbom = a.sbom;
    if let Some(t) = a.threads {
        opts.threads = t.max(1);
    }
    // A `[family]` definition gives one image per value, unless `--set` picks one.
    let loaded = crate::definition::load_image(&a.image.image, &opts.sets)?;
    if let Some(family) = loaded.family.filter(|f| !opts.sets.contains_key(&f.param)) {
        let stem = a.image.image.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let dir = a.image.output.clone().unwrap_or_else(|| PathBuf::from("out").join(stem));
        let mut images = Vec::new();
        for value in &family.values {
            let mut member = opts.clone();
            member.sets.insert(family.param.clone(), value.clone());
            member.output = Some(dir.join(value));
            let r = crate::trace::time("build (total)", || build(&a.image.image, &member))?;
            if !a.json && !a.quiet {
                print_result(&r);
            }
            images.push(r);
        }
        if a.json {
            super::print_json(&serde_json::json!({ "family": family.param, "images": images }))?;
        }
        return Ok(0);
    }
    let r = crate::trace::time("build (total)", || build(&a.image.image, &opts))?;
    for line in crate::trace::summary() {
        eprintln!("quarry trace: {line}");
    }
    if a.json {
        super::print_json(&r)?;
    } else if !a.quiet {
        print_result(&r);
    }
    Ok(0)
}

fn print_result(r: &crate::build::BuildResult) {
    {
        for l in &r.layers {
            // The layer's digest (what `inspect` lists), labelled: `plan`
            // prints a different id, the cache key, as `key ...`.
            outln!(
                "{:<24} digest {}  {:>10}  {}",
                l.name,
                super::short_digest(l.digest),
                super::human_size(l.size),
                match l.tier {
                    Some(crate::cache::Tier::Remote) => "from the cache registry",
                    Some(crate::cache::Tier::Local) => "cached",
                    None => "built",
                }
            );
        }
        outln!("{}:{} -> {} ({})", r.name, r.tag, r.output.display(), r.manifest_digest);
        if let Some(s) = &r.sbom {
            outln!("sbom     {s}");
        }
        outln!("provenance {}", r.provenance);
    }
}
