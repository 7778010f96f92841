//! `quarry diff A B`. Each side is what `crate::diff` compares (an OCI
//! layout, a wheel, a lock file) or becomes one first: an image definition
//! is built (from the cache, as `quarry build` would) and a registry
//! reference is pulled, each into a private directory removed afterwards.

use crate::cache::{Cache, LazyCache};
use crate::diff::{diff, markdown, text};
use crate::progress::Progress;
use anyhow::Context;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
}

#[derive(clap::Args)]
pub struct Args {
    /// An OCI layout directory, an image definition (images/NAME.toml), a
    /// registry reference HOST[:PORT]/REPO[:TAG][@sha256:...], a wheel, or an IMAGE.lock
    a: String,
    /// The same kind as A (a definition, a layout and a reference are all images)
    b: String,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// text for a terminal, markdown for a pull request comment
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Set a parameter of the image definitions given: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    sets: Vec<String>,
    /// Speak plain HTTP to the registry (default for 127.0.0.1 and localhost)
    #[arg(long)]
    plain_http: bool,
    #[command(flatten)]
    cache: super::cache_args::CacheArgs,
}

/// Exit 0 whatever differs (the report says); 1 on an error.
pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let scratch = tempfile::tempdir().context("creating a scratch directory for `quarry diff`")?;
    // Opened when a side needs it (a definition or a reference), once.
    let cache = a.cache.lazy();
    let pa = side(&a, &cache, &a.a, &scratch.path().join("a"))?;
    let pb = side(&a, &cache, &a.b, &scratch.path().join("b"))?;
    let r = diff(&pa, &pb)?;
    if a.json {
        super::print_json(&r)?;
    } else {
        match a.format {
            Format::Text => out!("{}", text(&r)),
            Format::Markdown => out!("{}", markdown(&r)),
        }
    }
    Ok(0)
}

/// The path `crate::diff` reads for one argument: the argument itself, or
/// the layout it was built or pulled into under `dir`.
fn side(a: &Args, cache: &LazyCache, arg: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let path = PathBuf::from(arg);
    if path.exists() {
        if is_definition(&path) {
            return build_into(a, &cache.get()?, &path, dir);
        }
        return Ok(path);
    }
    match crate::registry::Reference::parse(arg) {
        Ok(reference) if arg.contains('/') => pull_into(a, &cache.get()?, &reference, arg, dir),
        _ => anyhow::bail!(
            "`{arg}`: no such file or directory, and not a registry reference (HOST[:PORT]/REPO[:TAG][@sha256:...])"
        ),
    }
}

/// An image definition: a `.toml` file naming an image (lock files end
/// in `.lock`).
fn is_definition(path: &Path) -> bool {
    path.is_file()
        && path.extension().is_some_and(|e| e == "toml")
        && std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
            .is_some_and(|t| t.contains_key("name"))
}

fn build_into(a: &Args, cache: &Cache, definition: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let opts = crate::build::BuildOptions {
        sets: crate::definition::parse_sets(&a.sets)?,
        output: Some(dir.to_path_buf()),
        compression: crate::layer::compress::LayerCodec::new(crate::layer::compress::Compression::Gzip, None)?,
        cache: cache.clone(),
        no_cache: false,
        verify: false,
        threads: crate::layer::compress::default_threads(),
        source_date_epoch: crate::build::source_date_epoch_from_env()?,
        progress: Progress::new(true, true),
        sbom: false,
    };
    crate::build::build(definition, &opts)
        .with_context(|| format!("building `{}` to compare it", definition.display()))?;
    Ok(dir.to_path_buf())
}

fn pull_into(
    a: &Args,
    cache: &Cache,
    reference: &crate::registry::Reference,
    arg: &str,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    use crate::registry::pull::{pull_image, PullOptions};
    let opts = PullOptions {
        plain_http: a.plain_http || crate::registry::pull::plain_http_default(reference),
        progress: Progress::new(true, true),
        offline: false,
    };
    let img = pull_image(reference, ("linux", "amd64", None), cache.registry_store(), &opts)
        .with_context(|| format!("pulling `{arg}` to compare it"))?;
    let tag = reference.tag.clone().unwrap_or_else(|| "latest".into());
    crate::registry::save::write_layout(&img, cache.blobs(), dir, &tag)
        .with_context(|| format!("writing `{arg}` to {}", dir.display()))?;
    Ok(dir.to_path_buf())
}
