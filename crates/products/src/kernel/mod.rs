//! `quarry kernel build`: compile GPU kernels in a container of a given
//! image, for a known set of targets, and check the result holds code for
//! every one of them.
//!
//! The flow: resolve the targets ([`targets`]) and the image's digest; key
//! the build on the image, the source tree's content, the command, the
//! targets, the environment, the outputs and the network setting
//! ([`key`]); on a hit (the local cache, or a shared registry tier) copy
//! the cached outputs into the output directory. Otherwise copy the source
//! into a fresh container ([`container`]), with the project's compiler
//! cache when the image has ccache, run the command with the targets and
//! the job count ([`jobs`]) in its environment, copy the outputs out into
//! the cache and from there into the output directory. Either way every
//! output is inspected and each host ELF with GPU code must have code for
//! each target ([`check`]).

pub mod check;
pub mod container;
pub mod inputs;
pub mod jobs;
pub mod key;
pub mod provenance;
pub mod targets;

use crate::cache::{Bucket, Cache, RemoteReport, Sharing, Tier};
use crate::code_objects::target_list::TargetList;
use crate::engine::compiler_cache::{self, Stats, CCACHE_DIR};
use crate::engine::copy::CopyIn;
use crate::engine::gpu::GpuPlan;
use crate::engine::run::{Network, RunOptions};
use crate::engine::{Engine, EngineError};
use crate::oci::Digest;
use check::{Missing, OutputFile};
use container::{CompilerCacheJob, OutputPath, Ran, SRC_DIR};
pub use inputs::{cache_key, output_paths};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The image to build in (a layout is loaded on a cache miss only).
pub use crate::engine::build_image::BuildImage as KernelImage;

pub struct KernelOptions {
    pub source: PathBuf,
    pub image: KernelImage,
    pub output: PathBuf,
    pub cmd: Vec<String>,
    pub targets: TargetList,
    pub jobs: Option<u64>,
    pub gpu: GpuPlan,
    /// `K=V`, in order.
    pub env: Vec<String>,
    /// Paths relative to the source; empty: `build/` and `/out`.
    pub outputs: Vec<String>,
    pub network: bool,
    pub allow_missing_targets: bool,
    pub cache: Cache,
    pub compiler_cache: compiler_cache::Mode,
    /// Build even when the cache has the outputs (and start the compiler
    /// cache empty); what is built is still committed.
    pub no_cache: bool,
}

/// What a build did (the `--json` report).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub output_dir: PathBuf,
    /// The outputs came from the cache: the command did not run.
    pub cached: bool,
    /// Which cache tier had them (`local`, or `remote`: the shared registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// The whole command's time, cache lookup and checks included.
    pub seconds: f64,
    pub key: String,
    pub image: String,
    /// quarry's fingerprint of the source tree (what the key and the provenance name).
    pub source_tree: String,
    pub targets: Vec<String>,
    pub targets_source: String,
    /// The job count the command ran with (absent on a cache hit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<jobs::Resources>,
    /// CPU seconds the build container used: the compile work, which a busy
    /// machine does not inflate as it does `seconds` (absent on a cache hit,
    /// or when the engine does not report it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_cpu_seconds: Option<f64>,
    pub outputs: Vec<OutputFile>,
    /// Requested targets an output lacks (only with --allow-missing-targets).
    pub missing: Vec<Missing>,
    /// What the compiler cache did (absent when the command did not run or
    /// the image has no ccache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiler_cache: Option<CompilerCacheReport>,
    /// What the registry tier did (with --cache-registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_registry: Option<RemoteReport>,
    /// The outputs' provenance statement, once written ([`provenance`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<PathBuf>,
}

/// The compiler cache of one build.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CompilerCacheReport {
    /// Its entry's key (the image, targets, command, environment and outputs: the project).
    pub key: String,
    /// Where the directory came from (absent: the first build of the project).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<Tier>,
    #[serde(flatten)]
    pub stats: Stats,
}

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error("the kernel cache: {0}")]
    Staging(String),
    #[error("the build command exited with code {code} (its output is above); nothing was kept and the container was removed")]
    Failed { code: i32 },
    #[error("`{}`: {source}", path.display())]
    Output { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Inspect(#[from] crate::code_objects::InspectError),
    #[error(transparent)]
    Provenance(#[from] crate::provenance::ProvenanceError),
    #[error("--targets (`auto` or a target list)")]
    Targets(#[source] crate::code_objects::target_list::TargetListError),
    #[error("{}; the outputs are in `{}`. Compile for every target (the build sees them in PYTORCH_ROCM_ARCH, GPU_TARGETS, hipcc's HCC_AMDGPU_TARGET and CMake's CMAKE_HIP_ARCHITECTURES through CMAKE_TOOLCHAIN_FILE), ask for fewer with --targets, or pass --allow-missing-targets", describe_missing(missing), output.display())]
    MissingTargets { missing: Vec<Missing>, output: PathBuf },
}

impl KernelError {
    /// The failing command's own code; 130/143 after a signal; else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            KernelError::Failed { code } => *code,
            KernelError::Engine(e) => e.exit_code(),
            _ => 1,
        }
    }
}

fn describe_missing(missing: &[Missing]) -> String {
    missing.iter().map(Missing::to_string).collect::<Vec<_>>().join("; ")
}

/// Build (or take from the cache), copy the outputs to `o.output`, check them.
pub fn build(o: &KernelOptions) -> Result<Report, KernelError> {
    let started = Instant::now();
    if !o.source.is_dir() {
        return Err(KernelError::Input(format!("source `{}` is not a directory", o.source.display())));
    }
    let cache = &o.cache;
    let mut engine = None;
    let reading = crate::trace::span("kernel: read inputs (source, image)");
    let read = inputs::Inputs::read(o, &mut engine)?;
    drop(reading);
    let (image, outputs, out_paths) = (read.image, &read.outputs, &read.out_paths);
    let skip: Vec<&str> = read.skip.iter().map(String::as_str).collect();
    let skip = skip.as_slice();
    let inputs = read.key_inputs(o);
    let key = key::key(&inputs);
    let mut ran = Ran::Failed { code: 0 };
    let mut project_cc = None;
    let sharing = Sharing::unless_networked(o.network);
    let found = if o.no_cache { None } else { cache.entry(Bucket::Kernels, &key.hex(), &sharing)? };
    let (entry, tier) = match found {
        Some(hit) => (hit.value, Some(hit.tier)),
        None => {
            let project = key::project_key(&inputs).hex();
            let restored = if o.compiler_cache == compiler_cache::Mode::Off || o.no_cache {
                None
            } else {
                cache.entry(Bucket::CompilerObjects, &project, &sharing)?
            };
            let staged = cache.stage()?;
            let staged_cc = cache.stage()?;
            let _running = crate::trace::span("kernel: container (start, copy in, command, copy out)");
            ran = run_in_container(
                o,
                &mut engine,
                &image,
                skip,
                outputs,
                &staged.files(),
                restored.as_ref().map(|h| h.value.files()),
                &staged_cc.files(),
            )?;
            let copied = match &ran {
                Ran::Failed { code } => return Err(KernelError::Failed { code: *code }),
                Ran::Built { copied, .. } => *copied,
            };
            if copied == 0 {
                return Err(KernelError::Input(format!(
                    "the command succeeded but wrote nothing to copy out (looked at {}); write outputs there or name them with --output",
                    out_paths.join(" and ")
                )));
            }
            drop(_running);
            let _committing = crate::trace::span("kernel: commit (compiler cache, outputs)");
            if let Ran::Built { compiler_cache: Some(stats), .. } = &ran {
                // A build that compiled nothing new leaves the project's cache as it was.
                if stats.misses > 0 || restored.is_none() {
                    cache.commit(Bucket::CompilerObjects, &project, staged_cc, &sharing)?;
                }
                project_cc =
                    Some(CompilerCacheReport { key: project, restored_from: restored.map(|h| h.tier), stats: *stats });
            }
            (cache.commit(Bucket::Kernels, &key.hex(), staged, &sharing)?, None)
        }
    };
    let checking = crate::trace::span("kernel: copy outputs, check targets");
    let files = entry
        .copy_files_to(&o.output)
        .map_err(|e| KernelError::Input(format!("copying the outputs to `{}`: {e}", o.output.display())))?;
    let reports = check::inspect(&o.output, &files)?;
    drop(checking);
    let missing = check::missing(&reports, &o.targets.targets);
    if !missing.is_empty() {
        if !o.allow_missing_targets {
            return Err(KernelError::MissingTargets { missing, output: o.output.clone() });
        }
        for m in &missing {
            log::warn!("{m} (--allow-missing-targets)");
        }
    }
    let (jobs, resources, container_cpu_seconds) = match ran {
        Ran::Built { jobs, resources, cpu_seconds, .. } => (Some(jobs), resources, cpu_seconds),
        Ran::Failed { .. } => (None, None, None),
    };
    Ok(Report {
        output_dir: o.output.clone(),
        cached: tier.is_some(),
        tier,
        seconds: started.elapsed().as_secs_f64(),
        key: key.hex(),
        image: image.to_string(),
        source_tree: read.source.hex(),
        targets: o.targets.targets.clone(),
        targets_source: o.targets.source.clone(),
        jobs,
        resources,
        container_cpu_seconds,
        outputs: reports,
        missing,
        compiler_cache: project_cc,
        cache_registry: cache.remote_report(),
        provenance: None,
    })
}

/// Run the command in a fresh container; its outputs land in `into`, its
/// compiler cache (started from `restore`, when given) in `cc_into`.
#[allow(clippy::too_many_arguments)]
fn run_in_container(
    o: &KernelOptions,
    engine: &mut Option<Engine>,
    image: &Digest,
    skip: &[&str],
    outputs: &[OutputPath],
    into: &Path,
    restore: Option<PathBuf>,
    cc_into: &Path,
) -> Result<Ran, KernelError> {
    let engine = crate::engine::build_image::connect(engine)?;
    let loading = crate::trace::span("kernel: image in the engine");
    let reference = o.image.in_engine(engine, image, &o.cache.tmp_dir())?;
    drop(loading);
    crate::progress::announce(format!("building kernels in a container of {reference}"));
    let mut env = targets::env(&o.targets.targets);
    env.extend(o.env.iter().cloned());
    let mut copy_in = inputs::source_copies(&o.source, skip)?;
    if let Some(dir) = restore {
        copy_in.push(CopyIn { host: dir, dest: CCACHE_DIR.into() });
    }
    let compiler_cache = (o.compiler_cache != compiler_cache::Mode::Off)
        .then_some(CompilerCacheJob { mode: o.compiler_cache, save_into: cc_into });
    let job = container::ContainerJob {
        opts: RunOptions {
            image: reference,
            env,
            workdir: Some(SRC_DIR.into()),
            network: if o.network { Network::Bridge } else { Network::None },
            gpu: o.gpu.clone(),
            ..Default::default()
        },
        copy_in,
        cmd: o.cmd.clone(),
        jobs: o.jobs,
        outputs,
        targets: &o.targets.targets,
        into,
        compiler_cache,
    };
    Ok(container::run(engine, &job)?)
}
