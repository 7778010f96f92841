//! A cell as a build: the options of its wheel, kernel or image build, its
//! cache key, and running it. Axis values reach the build as the job says:
//! `python` is the Python to build for (wheels), `targets` the GPU target
//! list; every other axis is an environment variable of the build named
//! after it in capitals (`torch` -> `TORCH=2.5`), `[job.env]` adds
//! variables made from templates, and `[job.env_for.AXIS.VALUE]` adds
//! some only to cells with that value. The local version label, the image of a
//! wheel or kernel job and image parameters (`[job.set]`) are templates
//! filled the same way.

use super::cells::Cell;
use super::definition::{fill, JobKind, JobSource, Matrix};
use super::product::{files_of, ProductFile};
use super::MatrixError;
use crate::cache::{Bucket, Cache, Key, KeyEncoder};
use crate::code_objects::target_list::TargetList;
use crate::engine::build_image::BuildImage;
use crate::engine::gpu::{self, GpuMode, GpuPlan};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Axes with a meaning of their own.
const PYTHON_AXIS: &str = "python";
const TARGETS_AXIS: &str = "targets";

/// What a cell needs besides the matrix.
pub struct CellContext<'a> {
    pub matrix: &'a Matrix,
    /// The cache, with the registry tier the products go to.
    pub cache: Cache,
    /// Wheel and kernel jobs: the build image (a definition already built).
    pub image: Option<BuildImage>,
    /// Where the cell's products go.
    pub out: PathBuf,
    /// GPUs the scheduler gave (device names); None: not said.
    pub gpus: Option<Vec<String>>,
    /// The cell runs here: its GPUs are looked up (planning needs none).
    pub running: bool,
}

/// A cell's build, ready to run.
pub enum CellBuild {
    Wheel(Box<crate::wheel::build::BuildOptions>),
    Kernel(Box<crate::kernel::KernelOptions>),
    Image { definition: PathBuf, opts: Box<crate::build::BuildOptions> },
}

/// What running a cell's build gave.
pub struct Outcome {
    /// Taken from the cache: nothing was built.
    pub cached: bool,
    /// Seconds the build itself took (0 from the cache).
    pub build_seconds: f64,
    pub files: Vec<(ProductFile, PathBuf)>,
    /// Image jobs: the layout written.
    pub layout: Option<PathBuf>,
}

/// The build's environment from the cell's values.
fn env_of(m: &Matrix, cell: &Cell) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (axis, value) in &cell.values {
        if axis != PYTHON_AXIS && axis != TARGETS_AXIS {
            env.insert(axis.to_uppercase(), value.clone());
        }
    }
    for (name, template) in &m.job.env {
        env.insert(name.clone(), fill(template, &cell.values));
    }
    for (axis, by_value) in &m.job.env_for {
        let vars = cell.values.get(axis).and_then(|v| by_value.get(v));
        for (name, template) in vars.into_iter().flatten() {
            env.insert(name.clone(), fill(template, &cell.values));
        }
    }
    env.into_iter().collect()
}

/// The cell's GPU targets: the value of the matrix's target axis (`targets`,
/// or one named after a variable such as `pytorch_rocm_arch`), else the
/// default list.
fn targets_of(m: &Matrix, cell: &Cell) -> Result<TargetList, MatrixError> {
    let Some(axis) = super::split_mode::target_axis(&m.axes) else { return Ok(gpu::build_targets(&[])) };
    match cell.values.get(axis) {
        Some(t) => TargetList::parse(t, "the matrix")
            .map_err(|e| MatrixError::Input(format!("{}: axes.{axis}: `{t}`: {e}", m.file.display()))),
        None => Ok(gpu::build_targets(&[])),
    }
}

/// GPUs are passed to a cell that needs them, when it runs (planning needs none).
fn gpu_mode(cx: &CellContext, cell: &Cell) -> GpuMode {
    match cell.needs.gpus == 0 || !cx.running {
        true => GpuMode::None,
        false => GpuMode::Amd,
    }
}

fn gpu_of(cx: &CellContext, cell: &Cell) -> Result<GpuPlan, MatrixError> {
    Ok(gpu::plan(gpu_mode(cx, cell), cx.gpus.as_deref().unwrap_or_default())?)
}

/// The cell's build image: the one every cell shares, or the engine image
/// its values name (`image = "builder:rocm{rocm}-torch{torch}"`).
fn image_of(cx: &CellContext, cell: &Cell) -> Result<BuildImage, MatrixError> {
    if let Some(image) = &cx.image {
        return Ok(image.clone());
    }
    if cx.matrix.job.image_is_template() {
        return Ok(BuildImage::Reference(fill(&cx.matrix.job.image, &cell.values)));
    }
    Err(MatrixError::Input(format!("{}: job.image: no build image", cx.matrix.file.display())))
}

/// The project a wheel or kernel job builds: a path, or the pinned sdist
/// (the path or the requirement filled from the cell's values) fetched into the cache
/// with the user's pip.
fn source_of(cx: &CellContext, cell: &Cell) -> Result<PathBuf, MatrixError> {
    let file = || cx.matrix.file.display();
    match &cx.matrix.job.source {
        Some(JobSource::Path(p)) => Ok(PathBuf::from(fill(&p.to_string_lossy(), &cell.values))),
        Some(pypi) => {
            let (requirement, hash) = pypi
                .sha256_for(&cell.values)
                .map_err(|e| MatrixError::Input(format!("{}: job.source.sha256: {e}", file())))?
                .ok_or_else(|| MatrixError::Input(format!("{}: job.source: not a package-index source", file())))?;
            let req = crate::definition::PypiRequest {
                requirement,
                format: crate::definition::PypiFormat::Sdist,
                platform: None,
                python: None,
            };
            Ok(crate::pypi::fetch(&cx.cache, &req, Some(&hash))?.path)
        }
        None => Err(MatrixError::Input(format!("{}: job.source: none given", file()))),
    }
}

/// The cell's build options.
pub fn options(cx: &CellContext, cell: &Cell) -> Result<CellBuild, MatrixError> {
    let m = cx.matrix;
    let env = env_of(m, cell);
    Ok(match m.job.kind {
        JobKind::Wheel => {
            // The same setup as `quarry wheel build`, with what the matrix
            // file says. The target list is fixed (the axis, else the
            // environment or the default list, never the GPUs detected
            // here): a cell's key must be the same where it is planned and
            // where it runs.
            let request = crate::wheel::build::BuildRequest {
                pythons: cell.values.get(PYTHON_AXIS).map(|p| vec![p.clone()]),
                axes: env.into_iter().map(|(k, v)| (k, vec![v])).collect(),
                local_version: m.job.local_version.as_ref().map(|t| fill(t, &cell.values)),
                repair: m.job.repair,
                split: m.job.split,
                shard: m.job.merge,
                exclude: m.job.exclude.clone(),
                test: m.job.test.clone(),
                gpu: gpu_mode(cx, cell),
                gpu_devices: cx.gpus.clone().unwrap_or_default(),
                targets: Some(targets_of(m, cell)?),
                isolation: m.job.isolation,
                lock: Some(m.job.lock.clone().unwrap_or_else(|| m.file.with_extension("lock"))),
                ..crate::wheel::build::BuildRequest::new(source_of(cx, cell)?, cx.out.clone(), cx.cache.clone())
            };
            let prepared = crate::wheel::build::prepare(request)?;
            CellBuild::Wheel(Box::new(prepared.with_image(image_of(cx, cell)?, None)))
        }
        JobKind::Kernel => CellBuild::Kernel(Box::new(crate::kernel::KernelOptions {
            source: source_of(cx, cell)?,
            image: image_of(cx, cell)?,
            output: cx.out.clone(),
            cmd: m.job.command.clone(),
            targets: targets_of(m, cell)?,
            jobs: None,
            gpu: gpu_of(cx, cell)?,
            env: env.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
            outputs: m.job.outputs.clone(),
            network: false,
            allow_missing_targets: false,
            cache: cx.cache.clone(),
            compiler_cache: crate::engine::compiler_cache::Mode::Auto,
            no_cache: false,
        })),
        JobKind::Image => {
            let sets: BTreeMap<String, String> =
                m.job.set.iter().map(|(k, t)| (k.clone(), fill(t, &cell.values))).collect();
            let mut opts =
                crate::build::BuildOptions::defaults(sets, cx.cache.clone(), crate::progress::Progress::hidden())?;
            opts.output = Some(cx.out.clone());
            CellBuild::Image { definition: PathBuf::from(&m.job.image), opts: Box::new(opts) }
        }
    })
}

impl CellBuild {
    /// The build's own cache key, when it can be known before building.
    pub fn build_key(&self) -> Result<Option<Key>, MatrixError> {
        Ok(match self {
            CellBuild::Wheel(o) => crate::wheel::build::cache_key(o, &mut None)?,
            CellBuild::Kernel(o) => Some(crate::kernel::cache_key(o)?),
            CellBuild::Image { definition, opts } => image_key(definition, opts)?,
        })
    }

    /// Whether this machine's cache holds the output of the build keyed
    /// `key` (its [`CellBuild::build_key`]): running it here would build
    /// nothing. Only the local tier is looked at.
    pub fn in_local_cache(&self, cache: &Cache, key: &Key) -> Result<bool, MatrixError> {
        let entry = |bucket| crate::cache::peek_entry_files(cache.root(), bucket, &key.hex()).is_some();
        Ok(match self {
            CellBuild::Wheel(_) => entry(Bucket::Wheels),
            CellBuild::Kernel(_) => entry(Bucket::Kernels),
            // Every layer: the image is written from the cache alone.
            CellBuild::Image { definition, opts } => image_plan(definition, opts)?
                .layers
                .iter()
                .all(|n| n.key.as_ref().is_some_and(|k| cache.local_layer(k).is_some())),
        })
    }

    /// A wheel build's lock as it is now (what its key reads of it).
    pub fn lock_bytes(&self) -> Option<Vec<u8>> {
        match self {
            CellBuild::Wheel(o) => o.lock.as_ref().and_then(|l| std::fs::read(l).ok()),
            _ => None,
        }
    }

    /// Run the build (or take it from the cache).
    pub fn run(&self, out: &Path) -> Result<Outcome, MatrixError> {
        let io = |e: std::io::Error| MatrixError::Io { path: out.to_path_buf(), err: e };
        Ok(match self {
            CellBuild::Wheel(o) => {
                let built = crate::wheel::build::build(o)?;
                let mut files = Vec::new();
                for b in &built {
                    let name = b.wheel.file_name().unwrap_or_default().to_string_lossy().into_owned();
                    let (digest, size) = crate::oci::digest::digest_file(&b.wheel).map_err(io)?;
                    files.push((ProductFile { name, digest, size }, b.wheel.clone()));
                }
                Outcome {
                    cached: built.iter().all(|b| b.cached),
                    build_seconds: built.iter().map(|b| b.session_seconds).fold(0.0, f64::max),
                    files,
                    layout: None,
                }
            }
            CellBuild::Kernel(o) => {
                let r = crate::kernel::build(o)?;
                Outcome {
                    cached: r.cached,
                    build_seconds: if r.cached { 0.0 } else { r.seconds },
                    files: files_of(out).map_err(io)?,
                    layout: None,
                }
            }
            CellBuild::Image { definition, opts } => {
                let started = std::time::Instant::now();
                let r = crate::build::build(definition, opts)?;
                let cached = r.layers.iter().all(|l| l.cached);
                let build_seconds = if cached { 0.0 } else { started.elapsed().as_secs_f64() };
                Outcome { cached, build_seconds, files: Vec::new(), layout: Some(r.output) }
            }
        })
    }
}

/// An image job's key: its last layer's chained key and its config, when
/// every key is known without building.
fn image_key(definition: &Path, opts: &crate::build::BuildOptions) -> Result<Option<Key>, MatrixError> {
    let plan = image_plan(definition, opts)?;
    let keys: Option<Vec<Key>> = plan.layers.iter().map(|n| n.key).collect();
    let Some(keys) = keys else { return Ok(None) };
    let mut k = KeyEncoder::new("matrix-image", 1);
    for key in &keys {
        k.key("layer", key);
    }
    k.key("config", &crate::plan::keys::config(&plan.top().image.config));
    Ok(Some(k.finish()))
}

/// An image job's plan, its pins as locked.
fn image_plan(definition: &Path, opts: &crate::build::BuildOptions) -> Result<crate::plan::Plan, MatrixError> {
    let image = crate::definition::load_image(definition, &opts.sets)?;
    Ok(crate::plan::make(&image, &opts.plan_options(crate::plan::PinMode::Locked))?)
}

/// A cell's key: its kind, its id and its build's key.
pub fn cell_key(kind: JobKind, id: &str, build: &Key) -> Key {
    let mut k = KeyEncoder::new("matrix-cell", 1);
    k.str("kind", &format!("{kind:?}")).str("id", id).key("build", build);
    k.finish()
}
