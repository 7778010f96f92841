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
    /// The distro release pinned (empty without a `packages` base).
    release: String,
    packages: usize,
    /// Files pinned from PyPI.
    pypi: usize,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let sets = parse_sets(&a.sets).map_err(|e| anyhow!(e))?;
    let image = load_image(&a.image, &sets)?;
    if a.dry_run {
        let spec = crate::distro::packages_of(&image)?;
        let plan =
            crate::distro::plan(spec, &image.file).with_context(|| format!("planning `{}`", a.image.display()))?;
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
    let pins = crate::pypi::lock_image(&image, &cache).with_context(|| format!("locking `{}`", a.image.display()))?;
    let npins = pins.len();
    let out = if matches!(image.base, crate::spec::Base::Packages(_)) || pins.is_empty() {
        let (path, lock) = crate::distro::lock_image(&image, &cache, pins)
            .with_context(|| format!("locking `{}`", a.image.display()))?;
        Locked { lock: path, release: lock.release.clone(), packages: lock.packages.len(), pypi: npins }
    } else {
        let path = crate::distro::lock::lock_path(&image.file);
        crate::lockfile::write_pypi_only(&path, pins)?;
        Locked { lock: path, release: String::new(), packages: 0, pypi: npins }
    };
    if a.json {
        super::print_json(&out)?;
    } else if out.release.is_empty() {
        println!("{}: {} PyPI file(s) pinned", out.lock.display(), out.pypi);
    } else {
        let pypi = if out.pypi > 0 { format!(" and {} PyPI file(s)", out.pypi) } else { String::new() };
        println!("{}: {} packages{pypi} pinned (release {})", out.lock.display(), out.packages, out.release);
    }
    Ok(0)
}
