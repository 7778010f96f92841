//! `quarry wheel build`: build wheels in a container for every Python of an
//! image and every combination of build axes, then give them a local
//! version label, repair them (with the libraries of the image they were
//! built in), and test each in a fresh container. The wheels of a build are
//! a cache entry keyed by everything they depend on ([`key`], [`reuse`]):
//! a machine that finds them (locally, or in a shared registry tier) builds
//! nothing.
//!
//! The project is copied in through the engine's archive API, never
//! bind-mounted, so remote engines work. One idle container per image runs
//! every build with `exec`; it is removed however the build ends. The
//! network is off unless asked for. By default each Python builds in an
//! isolated environment holding the project's build requirements (see
//! [`isolation`]); `--no-build-isolation` uses the image's own
//! packages with `pip wheel`. Every wheel is rewritten deterministically
//! (see [`crate::wheel::normalize`]) with SOURCE_DATE_EPOCH (default 0), which the
//! build also sees.
//!
//! The path of a build: [`setup`] checks a request once and makes the
//! [`BuildOptions`] (the CLI and matrix cells alike), [`reuse`]'s `build`
//! looks the wheels up in the cache, `session` runs the container on a
//! miss, `output` labels and repairs what it made, `test` tests it.

mod axes;
mod isolation;
pub mod key;
pub mod lock;
mod output;
mod pythons;
mod reuse;
pub mod rocm;
mod session;
pub mod setup;
pub mod system;
mod test;

use crate::code_objects::target_list::TargetList;
use crate::engine::build_image::BuildImage;
use crate::engine::compiler_cache;
use crate::engine::gpu::GpuPlan;
use crate::engine::EngineError;
use crate::tools::patchelf::ContainerPatchelf;
use crate::wheel::WheelError;
pub use axes::{combinations, parse_axis};
pub use pythons::Python;
pub use reuse::{build, built_by, cache_key, output_inside};
pub use rocm::RocmBuild;
use session::FIND_LINKS_DIR;
use session::{run_builds, Job};
pub use setup::{prepare, BuildRequest, Prepared, RocmRequest};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WheelBuildError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Wheel(#[from] WheelError),
    /// `--split` of a built wheel.
    #[error("splitting the built wheel: {0}")]
    Split(#[from] crate::wheel::split::SplitError),
    #[error(transparent)]
    Pypi(#[from] crate::pypi::PypiError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error(transparent)]
    Patchelf(#[from] crate::tools::patchelf::PatchelfError),
    #[error(transparent)]
    Gpu(#[from] crate::engine::gpu::GpuError),
    #[error(transparent)]
    RocmPackages(#[from] crate::wheel::rocm_packages::PackagesDirError),
    #[error(transparent)]
    Epoch(#[from] crate::epoch::BadEpoch),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(transparent)]
    BuildSystem(#[from] system::SystemError),
    #[error("image `{image}` has no Python: looked for /opt/python/cp3*/bin/python and python3 on PATH; use an image with Python")]
    NoPython { image: String },
    #[error("build requirement `{requirement}` has no wheel for {python} on {platform} ({detail}); put one in a wheelhouse given with --find-links DIR, or build with --no-build-isolation in an image that has it installed")]
    Requirement { requirement: String, python: String, platform: String, detail: String },
    #[error("installing {what} into the isolated environment of {python} failed (pip exited with {code}); its output is above")]
    Install { python: String, what: String, code: i64 },
    #[error("the build backend's {hook} failed for {python} (exit code {code}); its output is above")]
    Backend { python: String, hook: &'static str, code: i64 },
    #[error("the build for {python}{} failed ({what} exited with {code}); its output is above", axes_suffix(axes))]
    Failed { python: String, axes: BTreeMap<String, String>, what: &'static str, code: i64 },
    #[error("the build for {python}{} left {count} wheels in its output instead of one: {names}", axes_suffix(axes))]
    WheelCount { python: String, axes: BTreeMap<String, String>, count: usize, names: String },
    #[error("the builds for {python}{} and{} both made `{name}`: one would overwrite the other in the output directory, so nothing more was written; give a --local-version that names the axis (e.g. `{{{}}}`), or build each into its own -o", axes_suffix(first), axes_suffix(second), second.keys().next().map_or("KEY", String::as_str))]
    SameName { name: String, python: String, first: BTreeMap<String, String>, second: BTreeMap<String, String> },
    #[error("testing `{wheel}` failed (exit code {code}); its output is above")]
    TestFailed { wheel: String, code: i32 },
    #[error("`{path}`: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

fn axes_suffix(axes: &BTreeMap<String, String>) -> String {
    if axes.is_empty() {
        return String::new();
    }
    let v: Vec<String> = axes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(" with {}", v.join(" "))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WheelBuildError + '_ {
    move |err| WheelBuildError::Io { path: path.to_path_buf(), err }
}

/// What to build and how: made only by [`setup::prepare`], which checks it.
// A private field, not `#[non_exhaustive]`: that would still let the rest of
// this crate build options without the checks.
#[allow(clippy::manual_non_exhaustive)]
pub struct BuildOptions {
    /// A project directory or an sdist.
    pub source: PathBuf,
    /// The image to build in (a layout is loaded into the engine only when a build runs).
    pub image: BuildImage,
    pub output: PathBuf,
    /// Python tags (`cp311`) to build for; None builds for every one found.
    pub pythons: Option<Vec<String>>,
    /// `KEY=V1,V2` axes, in the order given.
    pub axes: Vec<(String, Vec<String>)>,
    /// A local version template (`rocm{ROCM_VERSION}torch{TORCH_VERSION}`).
    pub local_version: Option<String>,
    /// Repair each wheel with the libraries of the image.
    pub repair: bool,
    /// Split each wheel into a host wheel and device wheels (after repair).
    pub split: bool,
    /// Link with `.hip_fatbin` last (`elf::kpack_ref::FATBIN_LAST_LINK_SCRIPT`
    /// in LDFLAGS), so the split host binaries do not depend on the device
    /// code: split builds and merge shards.
    pub split_link: bool,
    /// The patchelf to repair with (quarry's own, copied into the image,
    /// unless the user named one).
    pub patchelf: ContainerPatchelf,
    pub exclude: Vec<String>,
    /// A command to run against each installed wheel.
    pub test: Option<String>,
    /// The image the test runs in (loaded when a test runs); None: the build image.
    pub test_image: Option<BuildImage>,
    /// Requirements installed beside each wheel for its test (`--test-requires`).
    pub test_requires: Vec<String>,
    pub find_links: Option<PathBuf>,
    pub gpu: GpuPlan,
    pub targets: TargetList,
    /// Build in an isolated environment with the project's build
    /// requirements (false: `pip wheel --no-build-isolation`).
    pub isolation: bool,
    /// Let the build container reach the network.
    pub network: bool,
    /// The lock of build requirements; None: `quarry-wheel.lock` in the output directory.
    pub lock: Option<PathBuf>,
    /// quarry's cache (built wheels, downloaded build requirements, compiler caches).
    pub cache: crate::cache::Cache,
    pub compiler_cache: compiler_cache::Mode,
    /// Build even when the cache has the wheels (and start the compiler
    /// cache empty); what is built is still committed.
    pub no_cache: bool,
    /// Build against ROCm's Python packages (`--rocm-packages`), pin them
    /// in each wheel and load them before its native code.
    pub rocm: Option<RocmBuild>,
    /// SOURCE_DATE_EPOCH, read once (0 when unset): the wheels' times and the build's.
    pub epoch: u64,
    /// Private: only [`setup`] makes options.
    _checked: (),
}

/// One built wheel.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Built {
    /// The wheel's path in the output directory.
    pub wheel: PathBuf,
    /// The Python tag it was built with (`cp311`).
    pub python: String,
    pub axes: BTreeMap<String, String>,
    /// `python-abi-platform`, e.g. `cp311-cp311-manylinux_2_17_x86_64`.
    pub tag: String,
    pub size: u64,
    /// sha256 of the wheel file (the same for the same inputs).
    pub sha256: String,
    /// Seconds the container build took.
    pub seconds: f64,
    /// Seconds the build's container ran, for every wheel of the build
    /// (environments made, every job, copies in and out); 0 from the cache.
    #[serde(default)]
    pub session_seconds: f64,
    /// Built in an isolated environment of its build requirements.
    pub isolated: bool,
    pub repaired: bool,
    pub tested: bool,
    /// A `none-any` wheel: nothing to repair, but worth a note.
    pub pure: bool,
    /// The interpreter's path in the image (what `--test` runs).
    pub python_path: String,
    /// Taken from the cache: nothing was built.
    pub cached: bool,
    /// Which cache tier had it (`local`, or `remote`: the shared registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<crate::cache::Tier>,
    /// With --rocm-packages: the requirement the wheel was given (`rocm[libraries]==5.7.dev0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm_requirement: Option<String>,
    /// With --rocm-packages: the packages given a `_rocm_init.py`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rocm_init: Vec<String>,
    /// With --rocm-packages and --repair: the libraries repair left out
    /// because ROCm's packages provide them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm_excluded: Option<Vec<String>>,
    /// With --split: the device wheels beside `wheel` (now the host wheel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_wheels: Vec<PathBuf>,
    /// `NAME.intoto.json` beside the wheel, once the command wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<PathBuf>,
}

fn is_sdist(p: &Path) -> bool {
    let n = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    [".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz", ".tar"].iter().any(|s| n.ends_with(s))
}

impl WheelBuildError {
    /// The exit status for the CLI (130/143 after a signal, else 1).
    pub fn exit_code(&self) -> i32 {
        match self {
            WheelBuildError::Engine(e) => e.exit_code(),
            WheelBuildError::Wheel(e) => e.exit_code(),
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdist_names() {
        assert!(is_sdist(Path::new("x/msgpack-1.1.0.tar.gz")));
        assert!(!is_sdist(Path::new("x/setup.py")));
    }
}
