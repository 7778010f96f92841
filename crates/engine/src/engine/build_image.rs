//! The image a build runs in (`kernel build`, `wheel build`): an OCI layout
//! (a definition is built into one first) or an image the engine has. Its
//! config digest keys the build's cache entries; a layout is loaded into
//! the engine only when a build truly runs, so a cache hit needs no engine.

use super::{Engine, EngineError};
use crate::oci::Digest;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub enum BuildImage {
    /// An OCI layout, loaded as `tag` when needed.
    Layout { dir: PathBuf, tag: String },
    /// An image the engine has (a name or id).
    Reference(String),
}

/// The engine, connected on first use.
pub fn connect(engine: &mut Option<Engine>) -> Result<&Engine, EngineError> {
    if engine.is_none() {
        *engine = Some(Engine::connect()?);
    }
    Ok(engine.as_ref().expect("connected above"))
}

/// The engine's id (config digest) of an image it has.
pub fn image_id(engine: &Engine, reference: &str) -> Result<String, EngineError> {
    engine.rt.block_on(async {
        match engine.docker.inspect_image(reference).await {
            Ok(i) => i.id.ok_or_else(|| EngineError::Invalid(format!("the engine gave no id for image `{reference}`"))),
            Err(e) if super::is_not_found(&e) => Err(EngineError::NoSuchImage(reference.to_string())),
            Err(e) => Err(EngineError::api(format!("inspecting image `{reference}`"), e)),
        }
    })
}

impl BuildImage {
    /// The image's config digest: read from the layout, or asked of the engine.
    pub fn digest(&self, engine: &mut Option<Engine>) -> Result<Digest, EngineError> {
        let id = match self {
            BuildImage::Layout { dir, .. } => return Ok(crate::oci::layout::open_image(dir, None, None)?.config_digest),
            BuildImage::Reference(r) => image_id(connect(engine)?, r)?,
        };
        Digest::parse(&id).map_err(|e| EngineError::Invalid(format!("the engine's id of the image: {e}")))
    }

    /// [`BuildImage::in_engine`], its digest read here.
    pub fn loaded(&self, engine: &Engine, scratch: &Path) -> Result<String, EngineError> {
        let digest = match self {
            BuildImage::Layout { dir, .. } => crate::oci::layout::open_image(dir, None, None)?.config_digest,
            BuildImage::Reference(r) => return Ok(r.clone()),
        };
        self.in_engine(engine, &digest, scratch)
    }

    /// The reference to run: a layout is loaded first unless the engine has
    /// it under its tag with this `digest` already. `scratch` is on the
    /// layout's file system (the cache's).
    pub fn in_engine(&self, engine: &Engine, digest: &Digest, scratch: &Path) -> Result<String, EngineError> {
        match self {
            BuildImage::Layout { dir, tag } => {
                let have = image_id(engine, tag).ok();
                if have.as_deref() != Some(digest.to_string().as_str()) {
                    engine.load_layout(dir, tag, scratch)?;
                }
                Ok(tag.clone())
            }
            BuildImage::Reference(r) => Ok(r.clone()),
        }
    }
}
