//! What an IMAGE argument of `run`/`load`/`wheel` names: an OCI layout
//! directory, an image definition (built first, into the cache), or a
//! reference to an image the engine already has. The command line builds a
//! definition first, then hands the engine a layout: the engine never
//! builds.

use crate::build::{build, BuildOptions, BuildResult};
use crate::cache::Cache;
use crate::engine::{Engine, EngineError};
use crate::oci::layout::open_image;
use crate::progress::Progress;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub enum ImageArg {
    /// An OCI image layout directory.
    Layout(PathBuf),
    /// An image definition (`.toml`).
    Definition(PathBuf),
    /// An engine image reference (`debian:12`, an id...).
    Reference(String),
}

/// Tell what `arg` names. A path that exists must be a layout or a `.toml`.
pub fn classify(arg: &str) -> Result<ImageArg, EngineError> {
    let p = Path::new(arg);
    if p.is_dir() {
        if p.join("index.json").is_file() {
            return Ok(ImageArg::Layout(p.to_path_buf()));
        }
        return Err(EngineError::Invalid(format!(
            "`{arg}` is a directory but not an OCI image layout (no index.json); give a layout written by `quarry build`, an image definition or an engine image"
        )));
    }
    if p.is_file() {
        if arg.ends_with(".toml") {
            return Ok(ImageArg::Definition(p.to_path_buf()));
        }
        return Err(EngineError::Invalid(format!(
            "`{arg}` is a file but not an image definition (.toml); give a layout directory, an image definition or an engine image"
        )));
    }
    if arg.ends_with(".toml") {
        return Err(EngineError::Invalid(format!("image definition `{arg}` does not exist")));
    }
    if let Some(why) = looks_like_a_path(arg) {
        return Err(EngineError::Invalid(format!(
            "`{arg}` does not exist ({why}); give an OCI layout written by `quarry build` (default out/NAME), an image definition (.toml), or an engine image by its full name (docker.io/{arg})"
        )));
    }
    Ok(ImageArg::Reference(arg.to_string()))
}

/// Why an argument that exists nowhere reads as a path rather than an engine
/// image: it starts like one (`/`, `./`, `../`, `~`), or its first component
/// is a directory here (`out/no_such_dir` where `out/` exists). An engine
/// image of such a name can still be given in full (`docker.io/out/x`).
fn looks_like_a_path(arg: &str) -> Option<String> {
    if ["/", "./", "../", "~"].iter().any(|p| arg.starts_with(p)) || arg == "." || arg == ".." {
        return Some("it is a path".into());
    }
    let (first, _) = arg.split_once('/')?;
    // A registry host (`localhost:5000/x`, `ghcr.io/x`) is not a directory name here.
    let host_like = first.contains(['.', ':']) || first == "localhost";
    (!host_like && Path::new(first).is_dir())
        .then(|| format!("the directory `{first}` exists, but has no `{}`", &arg[first.len() + 1..]))
}

/// The engine name for a layout: the image's name and tag as its index
/// records them (`no_rocm_image_debian12:latest`, wherever the layout is:
/// two images written to two `out` directories are two names). A layout
/// another tool wrote, without the name, is named by its directory.
pub fn layout_tag(dir: &Path) -> Result<String, EngineError> {
    let img = open_image(dir, None, None)?;
    let name = img.name.clone().unwrap_or_else(|| {
        dir.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_lowercase()))
            .unwrap_or_else(|| "quarry-image".into())
    });
    Ok(format!("{}:{}", name, img.tag.unwrap_or_else(|| "latest".into())))
}

/// The engine name for a built definition: `name:tag`, lower-cased.
pub fn definition_tag(r: &BuildResult) -> String {
    format!("{}:{}", r.name.to_lowercase(), r.tag)
}

/// Build a definition into the cache's layouts (`cache::layout_dir`); returns the layout.
pub fn build_definition(file: &Path, opts: &BuildOptions) -> Result<BuildResult, crate::build::BuildError> {
    let mut opts = opts.clone();
    if opts.output.is_none() {
        let img = crate::definition::load_image(file, &opts.sets)?;
        opts.output = Some(crate::cache::layout_dir(opts.cache.root(), &img.name));
    }
    build(file, &opts)
}

/// Build a definition (default options, into the cache) on the way to the
/// engine; returns the layout and the tag to load it as. `sets` are
/// `--set K=V` arguments.
pub fn build_for_engine(
    file: &Path,
    sets: &[String],
    cache: &Cache,
    progress: Progress,
) -> anyhow::Result<(PathBuf, String)> {
    let sets = crate::definition::parse_sets(sets).map_err(|e| anyhow::anyhow!(e))?;
    let opts = BuildOptions::defaults(sets, cache.clone(), progress)?;
    let r = build_definition(file, &opts)?;
    let tag = definition_tag(&r);
    Ok((r.output, tag))
}

/// The image a build runs in (`kernel build`, `wheel build`): a definition
/// is built into a layout first; a layout is loaded when a build runs.
pub fn build_image(
    arg: &str,
    sets: &[String],
    cache: &Cache,
    progress: Progress,
) -> anyhow::Result<crate::engine::build_image::BuildImage> {
    use crate::engine::build_image::BuildImage;
    Ok(match classify(arg)? {
        ImageArg::Layout(dir) => BuildImage::Layout { tag: layout_tag(&dir)?, dir },
        ImageArg::Definition(f) => {
            let (dir, tag) = build_for_engine(&f, sets, cache, progress)?;
            BuildImage::Layout { dir, tag }
        }
        ImageArg::Reference(r) => BuildImage::Reference(r),
    })
}

/// When `arg` is an image definition whose image the cache cannot compose
/// yet: the layers a build of it would make or fetch (nothing is built).
pub fn layers_to_build(arg: &str, sets: &[String], cache: &Cache) -> anyhow::Result<Option<Vec<String>>> {
    let ImageArg::Definition(f) = classify(arg)? else { return Ok(None) };
    let sets = crate::definition::parse_sets(sets).map_err(|e| anyhow::anyhow!(e))?;
    let opts = BuildOptions::defaults(sets, cache.clone(), Progress::hidden())?;
    let image = crate::definition::load_image(&f, &opts.sets)?;
    let mut plan = crate::plan::make(&image, &opts.plan_options(crate::plan::PinMode::Locked))?;
    if crate::build::manifest_if_cached(&mut plan, &opts, cache)?.is_some() {
        return Ok(None);
    }
    Ok(Some(plan.layers.iter().filter(|n| !n.cached).map(|n| n.name.clone()).collect()))
}

/// The engine reference of an IMAGE argument: a layout or a definition is
/// built if needed and loaded first.
pub fn image_in_engine(engine: &Engine, arg: &str, sets: &[String], cache: &Cache) -> anyhow::Result<String> {
    let scratch = cache.tmp_dir();
    Ok(match classify(arg)? {
        ImageArg::Layout(d) => {
            let tag = layout_tag(&d)?;
            engine.load_layout(&d, &tag, &scratch)?;
            tag
        }
        ImageArg::Definition(f) => {
            let (dir, tag) = build_for_engine(&f, sets, cache, Progress::new(false, false))?;
            engine.load_layout(&dir, &tag, &scratch)?;
            tag
        }
        ImageArg::Reference(r) => r,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_not_taken_for_an_engine_image() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("out")).unwrap();
        let missing = d.path().join("out/no_such_dir");
        let e = classify(missing.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("does not exist") && !e.contains("load it first"), "{e}");
        // Relative to the working directory, as a user types it.
        let here = std::env::current_dir().unwrap();
        let rel = format!("{}/no_such_dir", here.join("src").strip_prefix(&here).unwrap().display());
        let e = classify(&rel).unwrap_err().to_string();
        assert!(e.contains("the directory `src` exists"), "{e}");
        for r in ["debian:12", "localhost:5000/x/y:1", "ghcr.io/a/b", "library/debian", "quarry-test:1"] {
            assert_eq!(classify(r).unwrap(), ImageArg::Reference(r.into()), "{r}");
        }
    }
}
