//! Build matrices run by the schedulers users already have. A matrix file
//! describes one job (a wheel build, a kernel build or an image build) and
//! axes of values (`definition`); every combination is a cell (`cells`),
//! turned into a build (`job`). quarry never schedules: `emit` writes the
//! scheduler's own job description (a Slurm array, a Kubernetes Indexed
//! Job, a GitHub Actions matrix), each task runs `quarry matrix run` for
//! the cell its scheduler names (`scheduler`), which builds through the
//! shared cache and pushes its product to the registry (`product`);
//! `collect` gathers every cell's product into a wheelhouse with a PEP 503
//! index. A cell whose product the registry holds is done: `plan` says so,
//! `emit` leaves it out, `run` builds nothing. `plan` and `run` work without
//! a registry too: done then means the local cache holds the cell's build,
//! and a run's products stay in its output directory.

pub mod cells;
pub mod collect;
pub mod definition;
pub mod emit;
pub mod job;
pub mod plan;
pub mod product;
pub mod run;
pub mod scheduler;
pub mod sharding;
pub mod source;
pub mod split_mode;
pub mod task_logs;
pub mod template;

pub use cells::Cell;
pub use definition::Matrix;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error(transparent)]
    Definition(#[from] definition::MatrixFileError),
    #[error(transparent)]
    Scheduler(#[from] scheduler::SchedulerError),
    #[error("{0}")]
    Input(String),
    #[error("{}: job.source.sha256: {source} (cell {cell})", file.display())]
    Sha256 { file: PathBuf, cell: String, source: source::NoSha256 },
    #[error(transparent)]
    Wheel(Box<crate::wheel::build::WheelBuildError>),
    #[error(transparent)]
    Kernel(#[from] crate::kernel::KernelError),
    #[error(transparent)]
    Build(#[from] Box<crate::build::BuildError>),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error(transparent)]
    Pypi(#[from] crate::pypi::PypiError),
    #[error(transparent)]
    Patchelf(#[from] crate::tools::patchelf::PatchelfError),
    #[error(transparent)]
    Gpu(#[from] crate::engine::gpu::GpuError),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error(transparent)]
    Image(#[from] crate::definition::DefinitionError),
    #[error(transparent)]
    Epoch(#[from] crate::epoch::BadEpoch),
    #[error("`{path}`: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

impl From<crate::build::BuildError> for MatrixError {
    fn from(e: crate::build::BuildError) -> MatrixError {
        MatrixError::Build(Box::new(e))
    }
}

// Boxed: a wheel build's error is large, and every matrix result carries the enum.
impl From<crate::wheel::build::WheelBuildError> for MatrixError {
    fn from(e: crate::wheel::build::WheelBuildError) -> MatrixError {
        MatrixError::Wheel(Box::new(e))
    }
}

impl MatrixError {
    /// What to do about it, printed after the error (see `cli::exit`).
    pub fn hint(&self) -> Option<String> {
        match self {
            MatrixError::Build(e) => e.hint(),
            MatrixError::Plan(e) => e.hint(),
            _ => None,
        }
    }

    /// The exit status: the build's own when a build failed, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            MatrixError::Wheel(e) => e.exit_code(),
            MatrixError::Kernel(e) => e.exit_code(),
            _ => 1,
        }
    }
}

/// The registry products go to, when one is named: `--cache-registry` (or
/// its variable), else the matrix's `[cache] registry`.
pub fn registry_named(m: &Matrix, given: Option<&str>) -> Option<String> {
    given.map(str::to_string).or_else(|| m.registry.clone())
}

/// The registry products go to, which `emit` and `collect` need (the
/// scheduler's tasks push there; `collect` pulls from there).
pub fn registry_of(m: &Matrix, given: Option<&str>) -> Result<String, MatrixError> {
    registry_named(m, given).ok_or_else(|| {
        MatrixError::Input(format!(
            "{}: the cells' products go to a registry: give --cache-registry HOST/REPO (or QUARRY_CACHE_REGISTRY), or `[cache] registry` in the matrix",
            m.file.display()
        ))
    })
}

/// Every cell id once (two cells whose values differ only in characters an
/// id cannot hold would share one), and a package-index source pinned for
/// every cell (a requirement naming axes has a hash per version).
pub fn check_cells(m: &Matrix, cells: &[Cell]) -> Result<(), MatrixError> {
    let mut seen = std::collections::BTreeMap::new();
    for c in cells {
        if let Some(source) = &m.job.source {
            source.sha256_for(&c.values).map_err(|source| MatrixError::Sha256 {
                file: m.file.clone(),
                cell: c.id.clone(),
                source,
            })?;
        }
        if let Some(other) = seen.insert(c.id.as_str(), c) {
            return Err(MatrixError::Input(format!(
                "{}: cells {:?} and {:?} get the same id `{}`; make their values differ in letters or digits",
                m.file.display(),
                other.values,
                c.values,
                c.id
            )));
        }
    }
    Ok(())
}
