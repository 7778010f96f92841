use crate::build::BuildOptions;
use crate::progress::Progress;
use crate::spec::{load_image, parse_sets};
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
    /// The base's Release digest (absent when the base is not `packages`).
    release: Option<String>,
    /// Every package pinned, base and layers.
    packages: usize,
    /// Packages pinned per packages layer.
    layers: std::collections::BTreeMap<String, usize>,
    /// Files pinned from PyPI.
    pypi: usize,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let sets = parse_sets(&a.sets).map_err(|e| anyhow!(e))?;
    let loaded = load_image(&a.image, &sets)?;
    // An image built on another definition pins that one's packages,
    // unless it has packages layers or PyPI files of its own.
    let own_pins =
        !crate::distro::packages_layers(&loaded).is_empty() || !crate::pypi::image_requests(&loaded).is_empty();
    let image = if own_pins { &loaded } else { loaded.root_image() };
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
    let opts = BuildOptions::defaults(sets, cache_dir, Progress::new(a.json, false)).map_err(|e| anyhow!(e))?;
    let (path, lock) =
        crate::build::lock_image(image, &opts).with_context(|| format!("locking `{}`", image.file.display()))?;
    let out = Locked {
        lock: path,
        release: lock.base.as_ref().map(|b| b.release.clone()),
        packages: lock.package_count(),
        layers: lock.layer.iter().map(|(n, l)| (n.clone(), l.packages.len())).collect(),
        pypi: lock.pypi.len(),
    };
    if a.json {
        super::print_json(&out)?;
    } else {
        let mut parts: Vec<String> = out.release.iter().map(|r| format!("release {r}")).collect();
        parts.extend(out.layers.iter().map(|(n, c)| format!("layer {n}: {c}")));
        if out.pypi > 0 {
            parts.push(format!("{} PyPI file(s)", out.pypi));
        }
        println!("{}: {} packages pinned ({})", out.lock.display(), out.packages, parts.join("; "));
    }
    Ok(0)
}
