use crate::build::BuildOptions;
use crate::definition::{load_image, parse_sets};
use crate::progress::Progress;
use anyhow::{anyhow, Context};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The image definition (images/NAME.toml); the lock is written beside it as NAME.lock
    image: PathBuf,
    /// Set a parameter: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    sets: Vec<String>,
    // The cache holds the archive's indexes and the PyPI files pinned
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Move only these packages (and what their new versions need) to the
    /// archive's current versions; every other pin stays. Prints what moved
    #[arg(long, value_name = "PKG[,PKG...]", value_delimiter = ',')]
    update: Vec<String>,
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
    /// The base's release suite's InRelease digest (absent when the base is not `packages`).
    release: Option<String>,
    /// Each suite's InRelease digest, the base's then every layer's.
    releases: std::collections::BTreeMap<String, String>,
    /// Every package pinned, base and layers.
    packages: usize,
    /// Packages pinned per packages layer.
    layers: std::collections::BTreeMap<String, usize>,
    /// Files pinned from PyPI.
    pypi: usize,
    /// Layers that had to be built to resolve a packages layer over them.
    built_to_resolve: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(serde::Serialize)]
struct DryRun {
    #[serde(flatten)]
    sources: crate::distro::Sources,
    lock: PathBuf,
    locked: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let sets = parse_sets(&a.sets).map_err(|e| anyhow!(e))?;
    let loaded = load_image(&a.image, &sets)?;
    // An image built on another definition pins that one's packages,
    // unless it has packages layers or PyPI files of its own.
    let image = if loaded.has_own_pins() { &loaded } else { loaded.root_image() };
    let lock_path = crate::plan::lockfile::lock_path(&image.file);
    if a.dry_run {
        let set = image.first_package_set().ok_or_else(|| {
            anyhow!(
                "`{}` has no packages to resolve (no `[base.packages]` and no packages layer)",
                image.file.display()
            )
        })?;
        let sources = crate::distro::sources(set).with_context(|| format!("planning `{}`", image.file.display()))?;
        let plan = DryRun { sources, locked: lock_path.is_file(), lock: lock_path };
        if a.json {
            super::print_json(&plan)?;
        } else {
            for r in &plan.sources.releases {
                outln!("release  {r}");
            }
            for i in &plan.sources.indexes {
                outln!("index    {i}");
            }
            outln!("keyring  {}", plan.sources.keyring);
            outln!("lock     {}{}", plan.lock.display(), if plan.locked { " (exists)" } else { "" });
        }
        return Ok(0);
    }
    let opts = BuildOptions::defaults(sets, a.cache.open()?, Progress::new(a.json, false)).map_err(|e| anyhow!(e))?;
    if !a.update.is_empty() {
        return update(image, &opts, &a.update, a.json);
    }
    let locked =
        crate::build::lock_image(image, &opts).with_context(|| format!("locking `{}`", image.file.display()))?;
    let lock = &locked.lock;
    let out = Locked {
        lock: locked.path.clone(),
        release: lock.base.as_ref().and_then(|b| b.release.get(b.suite()).cloned()),
        releases: lock.base.iter().chain(lock.layer.values()).flat_map(|p| p.release.clone()).collect(),
        packages: lock.package_count(),
        layers: lock.layer.iter().map(|(n, l)| (n.clone(), l.packages.len())).collect(),
        pypi: lock.pypi.len(),
        built_to_resolve: locked.built_to_resolve.iter().cloned().collect(),
    };
    if a.json {
        super::print_json(&out)?;
    } else {
        let mut parts: Vec<String> = out.releases.iter().map(|(s, r)| format!("{s} {r}")).collect();
        parts.extend(out.layers.iter().map(|(n, c)| format!("layer {n}: {c}")));
        if out.pypi > 0 {
            parts.push(format!("{} PyPI file(s)", out.pypi));
        }
        outln!("{}: {} packages pinned ({})", out.lock.display(), out.packages, parts.join("; "));
        for (layer, built) in &out.built_to_resolve {
            outln!("built {} to resolve `{layer}` over", built.join(", "));
        }
    }
    Ok(0)
}

/// `--update`: the targeted re-lock, and its diff (as `quarry diff OLD NEW`).
fn update(image: &crate::definition::Image, opts: &BuildOptions, names: &[String], json: bool) -> anyhow::Result<i32> {
    let u = crate::build::update_image(image, opts, names)
        .with_context(|| format!("updating {} in the lock of `{}`", names.join(", "), image.file.display()))?;
    let report = crate::diff::Report::Locks(crate::diff::locks::diff(&u.old, &u.lock));
    if json {
        super::print_json(
            &serde_json::json!({ "lock": u.path, "moved": u.moved.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(), "diff": report }),
        )?;
    } else {
        if u.moved.is_empty() {
            outln!(
                "{}: {} already at the archive's current version(s); nothing moved",
                u.path.display(),
                names.join(", ")
            );
        }
        out!("{}", crate::diff::text(&report));
    }
    Ok(0)
}
