use crate::spec::{load_image, parse_sets};
use crate::store::cache::Cache;
use anyhow::{anyhow, Context};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The image definition (images/NAME.toml); the lock is written beside it as NAME.lock
    image: PathBuf,
    /// Set a parameter: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    sets: Vec<String>,
    /// Cache directory for indexes [default: $QUARRY_CACHE, else ~/.cache/quarry]
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print what would be read (Release and index URLs, keyring, lock path) without network access
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Locked {
    lock: PathBuf,
    release: String,
    packages: usize,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let sets = parse_sets(&a.sets).map_err(|e| anyhow!(e))?;
    let loaded = load_image(&a.image, &sets)?;
    // An image built on another definition pins that one's packages.
    let image = loaded.root_image();
    if a.dry_run {
        let spec = crate::distro::packages_of(image)?;
        let plan =
            crate::distro::plan(spec, &image.file).with_context(|| format!("planning `{}`", image.file.display()))?;
        if a.json {
            super::print_json(&plan)?;
        } else {
            println!("release  {}", plan.release);
            for i in &plan.indexes {
                println!("index    {i}");
            }
            println!("keyring  {}", plan.keyring.display());
            println!("lock     {}{}", plan.lock.display(), if plan.locked { " (exists)" } else { "" });
        }
        return Ok(0);
    }
    let cache_dir = a.cache_dir.unwrap_or_else(crate::store::cache::default_dir);
    let cache = Cache::open(&cache_dir)?;
    let (path, lock) =
        crate::distro::lock_image(image, &cache).with_context(|| format!("locking `{}`", image.file.display()))?;
    let out = Locked { lock: path, release: lock.release.clone(), packages: lock.packages.len() };
    if a.json {
        super::print_json(&out)?;
    } else {
        println!("{}: {} packages pinned (release {})", out.lock.display(), out.packages, out.release);
    }
    Ok(0)
}
