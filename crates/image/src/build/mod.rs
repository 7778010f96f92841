//! `quarry build`: a plan executed. Each layer of the plan is taken from the
//! cache when its key is there, else made (`files`, `packages`, `step`) or
//! imported (`import`: OCI layout and registry bases), then the image
//! config is composed (`config`) and an OCI layout written. `lock` is
//! `quarry lock`, which makes a plan with fresh pins and builds only what
//! resolving a packages layer over the layers below needs.

mod config;
mod execute;
mod files;
mod import;
mod lock;
mod packages;
mod step;

pub use execute::Executor;
pub use lock::{lock_image, update_image, Locked, Updated};

use crate::cache::{Cache, CacheError};
use crate::definition::{DefinitionError, Image};
use crate::layer::compress::LayerCodec;
use crate::oci::layout::{self, LayoutError};
use crate::oci::{Digest, LayerBlob};
use crate::plan::{KeyHashing, PinMode, Plan, PlanError, PlanOptions};
use crate::progress::Progress;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// Boxed: the plan's errors are the largest, and every build result carries the size.
    #[error(transparent)]
    Plan(Box<PlanError>),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("layer `{layer}`: {err}")]
    Pack { layer: String, err: crate::layer::pack::PackError },
    #[error(transparent)]
    Step(#[from] crate::engine::step::StepError),
    #[error("layer `{layer}`: {err}")]
    Engine { layer: String, err: crate::engine::EngineError },
    #[error(transparent)]
    Sbom(#[from] crate::sbom::SbomError),
    #[error(transparent)]
    Provenance(#[from] crate::provenance::ProvenanceError),
}

impl BuildError {
    /// What to do about it, printed after the error (see `cli::exit`).
    pub fn hint(&self) -> Option<String> {
        match self {
            BuildError::Plan(e) => e.hint(),
            _ => None,
        }
    }
}

impl From<PlanError> for BuildError {
    fn from(e: PlanError) -> BuildError {
        BuildError::Plan(Box::new(e))
    }
}

impl From<crate::source::SourceError> for BuildError {
    fn from(e: crate::source::SourceError) -> BuildError {
        BuildError::Plan(Box::new(e.into()))
    }
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub sets: BTreeMap<String, String>,
    pub output: Option<PathBuf>,
    pub compression: LayerCodec,
    /// The open cache every lookup and commit goes through.
    pub cache: Cache,
    pub no_cache: bool,
    /// Rehash every input file instead of trusting the stat memo.
    pub verify: bool,
    pub threads: usize,
    pub source_date_epoch: u64,
    pub progress: Progress,
    /// Attach an SPDX SBOM to the image in its layout.
    pub sbom: bool,
}

impl BuildOptions {
    /// Default options for building a definition on the way to something
    /// else (`load`, `run`): gzip, all cores, SOURCE_DATE_EPOCH from the env.
    pub fn defaults(
        sets: BTreeMap<String, String>,
        cache: Cache,
        progress: Progress,
    ) -> Result<BuildOptions, crate::epoch::BadEpoch> {
        Ok(BuildOptions {
            sets,
            output: None,
            compression: LayerCodec::default(),
            cache,
            no_cache: false,
            verify: false,
            threads: crate::layer::compress::default_threads(),
            source_date_epoch: source_date_epoch_from_env()?,
            progress,
            sbom: false,
        })
    }

    /// How a plan for these options is made.
    pub fn plan_options(&self, pins: PinMode) -> PlanOptions {
        PlanOptions {
            cache: self.cache.clone(),
            codec: self.compression,
            source_date_epoch: self.source_date_epoch,
            verify: self.verify,
            pins,
            key_hashing: KeyHashing::Upfront,
        }
    }

    /// How a plan that is built right away is made: a source new to the
    /// cache is hashed while its layer is packed (every file then; any
    /// file the memo lacks with `--no-cache`, which looks nothing up).
    /// With a registry tier every key is known first: a layer another
    /// machine built is then fetched instead of packed.
    pub fn build_plan_options(&self, pins: PinMode) -> PlanOptions {
        let key_hashing = match (self.no_cache, self.cache.has_shared_tier()) {
            (true, _) => KeyHashing::WhilePacking,
            (false, true) => KeyHashing::Upfront,
            (false, false) => KeyHashing::WhilePackingNewSources,
        };
        PlanOptions { key_hashing, ..self.plan_options(pins) }
    }

    /// Where the layout of `image` goes: `--output`, else `out/NAME`.
    pub fn output_for(&self, name: &str) -> PathBuf {
        self.output.clone().unwrap_or_else(|| PathBuf::from("out").join(name))
    }
}

/// SOURCE_DATE_EPOCH from the environment, default 0 (see `crate::epoch`).
pub fn source_date_epoch_from_env() -> Result<u64, crate::epoch::BadEpoch> {
    crate::epoch::from_env_or_zero()
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuiltLayer {
    pub name: String,
    pub digest: Digest,
    pub diff_id: Digest,
    pub size: u64,
    pub media_type: String,
    pub cached: bool,
    /// Which cache tier had it (`local`, or `remote`: the shared registry); null when built.
    pub tier: Option<crate::cache::Tier>,
    /// Input files read and hashed to compute the layer's cache key (those
    /// whose stat changed since the last build, or all with `--verify`).
    pub files_hashed: u64,
}

impl BuiltLayer {
    pub fn blob(&self) -> LayerBlob {
        LayerBlob { digest: self.digest, diff_id: self.diff_id, size: self.size, media_type: self.media_type.clone() }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildResult {
    pub name: String,
    pub tag: String,
    pub output: PathBuf,
    pub manifest_digest: Digest,
    pub config_digest: Digest,
    pub layers: Vec<BuiltLayer>,
    /// The SBOM artifact's manifest digest, with `--sbom`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sbom: Option<Digest>,
    /// The provenance artifact's manifest digest (an in-toto statement
    /// referring to the image).
    pub provenance: Digest,
    /// What the registry tier did (with --cache-registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_registry: Option<crate::cache::RemoteReport>,
}

/// Build an image definition into an OCI layout.
pub fn build(image_file: &Path, opts: &BuildOptions) -> Result<BuildResult, BuildError> {
    let image = crate::definition::load_image(image_file, &opts.sets)?;
    build_image(&image, opts)
}

pub fn build_image(image: &Image, opts: &BuildOptions) -> Result<BuildResult, BuildError> {
    let mut plan = crate::plan::make(image, &opts.build_plan_options(PinMode::Locked))?;
    build_plan(&mut plan, opts, &opts.cache)
}

/// Execute a plan and write its layout.
pub fn build_plan(plan: &mut Plan, opts: &BuildOptions, cache: &Cache) -> Result<BuildResult, BuildError> {
    let mut exec = Executor::new(opts, cache, false)?;
    let n = plan.layers.len();
    exec.run(plan, n)?;
    let output = opts.output_for(&plan.name);
    let staged = stage_layout(plan, &mut exec, cache, &output)?;
    let image = staged.written.manifest_digest;
    let artifact = |desc: ocidir::oci_spec::image::Descriptor| {
        Digest::try_from(desc.digest())
            .map_err(|e| LayoutError::Bad { path: output.display().to_string(), message: e.to_string() })
    };
    // Provenance (and the SBOM) go into the staged layout: the image and
    // what describes it appear in one rename.
    let params = crate::provenance::ImageBuildParams { sets: &opts.sets, source_date_epoch: opts.source_date_epoch };
    let provenance = crate::trace::time("provenance", || -> Result<Digest, BuildError> {
        let statement = crate::provenance::image_statement(plan, &image, &params)?;
        Ok(artifact(crate::provenance::attach(staged.path(), &image, &statement.to_bytes())?)?)
    })?;
    let sbom = if opts.sbom {
        let inv = crate::sbom::inventory(plan, Some(&image), opts.source_date_epoch)?;
        let doc = crate::sbom::spdx_json(&inv)?;
        Some(artifact(crate::sbom::attach(staged.path(), &image, &doc)?)?)
    } else {
        None
    };
    let written = staged.commit()?;
    Ok(BuildResult {
        name: plan.name.clone(),
        tag: plan.tag.clone(),
        output,
        manifest_digest: written.manifest_digest,
        config_digest: written.config_digest,
        layers: exec.layers,
        sbom,
        provenance,
        cache_registry: cache.remote_report(),
    })
}

/// The manifest digest a build of `plan` would write, when every layer is
/// in the cache (composed in a scratch layout; nothing is built).
pub fn manifest_if_cached(plan: &mut Plan, opts: &BuildOptions, cache: &Cache) -> Result<Option<Digest>, BuildError> {
    if !plan.all_cached() {
        return Ok(None);
    }
    let mut exec = Executor::new(opts, cache, true)?;
    let n = plan.layers.len();
    if !exec.run(plan, n)? {
        return Ok(None);
    }
    let scratch = exec.spool().join("compose");
    Ok(Some(stage_layout(plan, &mut exec, cache, &scratch)?.written.manifest_digest))
}

/// The image the executor made, as an OCI layout at `out`.
fn stage_layout(
    plan: &Plan,
    exec: &mut Executor,
    cache: &Cache,
    out: &Path,
) -> Result<layout::StagedImage, BuildError> {
    let config = exec.final_config(plan);
    let blobs: Vec<LayerBlob> = exec.layers.iter().map(BuiltLayer::blob).collect();
    Ok(layout::stage_image(out, cache.blobs(), &blobs, &config, (&plan.name, &plan.tag), plan.platform.to_oci())?)
}
