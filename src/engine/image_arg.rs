//! What an IMAGE argument of `run`/`load` names: an OCI layout directory,
//! an image definition (built first, into the cache), or a reference to an
//! image the engine already has. Layouts and definitions are loaded into
//! the engine (skipping the layers it has) before they are used.

use super::load::LoadReport;
use super::{Engine, EngineError};
use crate::build::{build, BuildOptions, BuildResult};
use crate::store::layout::open_image;
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
    Ok(ImageArg::Reference(arg.to_string()))
}

/// The engine name for a layout: its directory name (lower-cased) and the
/// tag recorded in the layout.
pub fn layout_tag(dir: &Path) -> Result<String, EngineError> {
    let img = open_image(dir, None, None)?;
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_lowercase()))
        .unwrap_or_else(|| "quarry-image".into());
    Ok(format!("{}:{}", name, img.tag.unwrap_or_else(|| "latest".into())))
}

/// The engine name for a built definition: `name:tag`, lower-cased.
pub fn definition_tag(r: &BuildResult) -> String {
    format!("{}:{}", r.name.to_lowercase(), r.tag)
}

/// Build a definition into `<cache>/images/<name>`; returns the layout.
pub fn build_definition(file: &Path, opts: &BuildOptions) -> Result<BuildResult, crate::build::BuildError> {
    let mut opts = opts.clone();
    if opts.output.is_none() {
        let img = crate::spec::load_image(file, &opts.sets)?;
        opts.output = Some(opts.cache_dir.join("images").join(&img.name));
    }
    build(file, &opts)
}

impl Engine {
    /// Load a layout (as `tag`), with the cache's tmp dir as scratch space.
    pub fn load_layout(&self, dir: &Path, tag: &str, cache_dir: &Path) -> Result<LoadReport, EngineError> {
        self.load(dir, None, tag, &cache_dir.join("tmp"))
    }
}
