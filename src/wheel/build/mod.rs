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

mod axes;
mod isolation;
pub mod key;
pub mod lock;
mod output;
mod pythons;
mod reuse;
pub mod rocm;
pub mod system;
mod test;

use crate::cache::CacheConfig;
use crate::elf::patchelf::ContainerPatchelf;
use crate::engine::build_image::BuildImage;
use crate::engine::compiler_cache::{self, Stats, CCACHE_DIR};
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::gpu::{GpuPlan, TargetList};
use crate::engine::run::{Network, RunOptions};
use crate::engine::{Engine, EngineError};
use crate::wheel::version::{expand_template, normalize_local_label};
use crate::wheel::WheelError;
pub use axes::{combinations, parse_axis};
use isolation::{Isolation, FRONTEND, FRONTEND_PATH};
use lock::{self as build_lock, BuildLock};
pub use pythons::Python;
use pythons::{parse_pythons, FIND_PYTHONS};
pub use reuse::{build, cache_key};
pub use rocm::RocmBuild;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use system::{self as build_system, BuildSystem};

/// Where the project, the find-links wheelhouse and the results live in
/// the build container.
const SRC_DIR: &str = "/quarry/src";
const SDIST_DIR: &str = "/quarry/sdist";
pub(super) const FIND_LINKS_DIR: &str = "/quarry/find-links";
/// Each build's copy of the project: `/quarry/build/<python>-<axes index>`,
/// the same path in every run, so nothing built records a random one.
const BUILD_DIR: &str = "/quarry/build";
const OUT_DIR: &str = "/quarry/out";

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Wheel(#[from] WheelError),
    #[error(transparent)]
    Pypi(#[from] crate::pypi::PypiError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(transparent)]
    BuildSystem(#[from] build_system::SystemError),
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

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |err| BuildError::Io { path: path.to_path_buf(), err }
}

/// What to build and how.
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
    pub cache: CacheConfig,
    pub compiler_cache: compiler_cache::Mode,
    /// Build even when the cache has the wheels (and start the compiler
    /// cache empty); what is built is still committed.
    pub no_cache: bool,
    /// Build against ROCm's Python packages (`--rocm-packages`), pin them
    /// in each wheel and load them before its native code.
    pub rocm: Option<RocmBuild>,
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
}

fn is_sdist(p: &Path) -> bool {
    let n = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    [".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz", ".tar"].iter().any(|s| n.ends_with(s))
}

/// One job: a Python and a combination of axes.
pub(super) struct Job {
    pub python: Python,
    pub axes: BTreeMap<String, String>,
    /// Index of the axes combination.
    pub combo: usize,
    pub seconds: f64,
}

/// The environment of every command of a build for `python`.
fn build_env(
    o: &BuildOptions,
    python: &Python,
    axes: &BTreeMap<String, String>,
    epoch: u64,
    venv: Option<&str>,
) -> Vec<String> {
    let bin = match venv {
        Some(v) => format!("{v}/bin"),
        None => Path::new(&python.path).parent().map(|p| p.display().to_string()).unwrap_or_default(),
    };
    // The targets first: an axis of the same name (PYTORCH_ROCM_ARCH=...) comes later and wins.
    let mut env =
        vec![format!("PYTORCH_ROCM_ARCH={}", o.targets.joined()), format!("GPU_ARCHS={}", o.targets.joined())];
    env.extend(axes.iter().map(|(k, v)| format!("{k}={v}")));
    env.push(format!("QUARRY_PYTHON={}", python.path));
    env.push(format!("PATH={bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    if let Some(v) = venv {
        env.push(format!("VIRTUAL_ENV={v}"));
    }
    env.push(format!("SOURCE_DATE_EPOCH={epoch}"));
    env.push("PYTHONNOUSERSITE=1".into());
    env.push("PIP_DISABLE_PIP_VERSION_CHECK=1".into());
    env.push("PIP_NO_INPUT=1".into());
    env
}

/// Where the project is in the container: an sdist's path, or None for a directory at SRC_DIR.
fn sdist_arg(o: &BuildOptions) -> Option<String> {
    is_sdist(&o.source).then(|| format!("{SDIST_DIR}/{}", o.source.file_name().unwrap_or_default().to_string_lossy()))
}

/// The script of one build: a fresh copy of the project at a fixed path,
/// then the backend (isolated) or `pip wheel --no-build-isolation`.
fn job_script(o: &BuildOptions, python: &Python, combo: usize, n: usize, venv: Option<&str>) -> String {
    let dest = format!("{BUILD_DIR}/{}-{combo}", python.tag);
    let mut script = format!(
        "set -e
mkdir -p {OUT_DIR}/{n}
"
    );
    script.push_str(&isolation::unpack_lines(sdist_arg(o).as_deref(), SRC_DIR, &dest));
    script.push_str("cd \"$SRC\"\n");
    match venv {
        Some(v) => script.push_str(&format!(
            "{v}/bin/python {FRONTEND_PATH} build \"$QUARRY_BACKEND\" \"$QUARRY_BACKEND_PATH\" {OUT_DIR}/{n} /quarry/built-{n}\n"
        )),
        None => {
            let links = if o.find_links.is_some() { format!("--find-links {FIND_LINKS_DIR} ") } else { String::new() };
            script.push_str(&format!(
                "exec \"$QUARRY_PYTHON\" -m pip wheel --no-deps --no-build-isolation --no-index {links}-w {OUT_DIR}/{n} .\n"
            ));
        }
    }
    script
}

/// What one container's builds made.
pub(super) struct Ran {
    pub built: Vec<Built>,
    /// What ccache did (None: not used); its directory is then in the compiler-cache staging.
    pub compiler_cache: Option<Stats>,
}

/// Check the inputs before anything runs.
pub(super) fn check_inputs(o: &BuildOptions) -> Result<std::fs::Metadata, BuildError> {
    let meta = std::fs::metadata(&o.source).map_err(|e| {
        BuildError::Input(format!(
            "source `{}` cannot be read ({e}); give a project directory or an sdist",
            o.source.display()
        ))
    })?;
    if !meta.is_dir() && !is_sdist(&o.source) {
        return Err(BuildError::Input(format!(
            "source `{}` is neither a directory nor an sdist (.tar.gz, .zip); give a project directory or an sdist",
            o.source.display()
        )));
    }
    if o.rocm.is_some() && !o.isolation {
        return Err(BuildError::Input(
            "--rocm-packages installs ROCm's packages into the isolated build environment; drop --no-build-isolation"
                .into(),
        ));
    }
    if let Some(f) = &o.find_links {
        if !f.is_dir() {
            return Err(BuildError::Input(format!("--find-links `{}` is not a directory of wheels", f.display())));
        }
    }
    Ok(meta)
}

/// Build in `image` (loaded in `engine`), label and repair; returns the
/// wheels in the output directory. `cc`: the compiler cache's directory
/// to start from (copied in) and where to save it.
pub(super) fn run_builds(
    engine: &Engine,
    image: &str,
    o: &BuildOptions,
    cache: &crate::cache::Cache,
    cc: (Option<PathBuf>, &Path),
) -> Result<Ran, BuildError> {
    let before_session = crate::trace::span("wheel: before the session (inputs, lock)");
    let meta = check_inputs(o)?;
    let epoch = crate::epoch::from_env_or_zero().map_err(|e| BuildError::Input(e.to_string()))?;
    let combos = combinations(&o.axes);
    // Check the template against every combination before building anything.
    let labels: Vec<Option<String>> = combos
        .iter()
        .map(|c| o.local_version.as_deref().map(|t| normalize_local_label(&expand_template(t, c)?)).transpose())
        .collect::<Result<_, WheelError>>()?;
    // The build system and the lock, read before any container starts.
    let build_system: Option<BuildSystem> = if o.isolation {
        let bs = if meta.is_dir() { build_system::of_dir(&o.source) } else { build_system::of_sdist(&o.source) };
        Some(bs?)
    } else {
        None
    };
    let lock_path = o.lock.clone().unwrap_or_else(|| o.output.join(build_lock::DEFAULT_NAME));
    // Read with or without isolation: `--test` pins its requirements here too.
    let mut lock = BuildLock::read(&lock_path).map_err(BuildError::Lock)?;

    std::fs::create_dir_all(&o.output).map_err(io(&o.output))?;
    let staging =
        tempfile::Builder::new().prefix(".quarry-wheel-build-").tempdir_in(&o.output).map_err(io(&o.output))?;
    let raw = staging.path().join("raw");
    let frontend = staging.path().join("frontend.py");
    std::fs::write(&frontend, FRONTEND).map_err(io(&frontend))?;

    let network = if o.network { Network::Bridge } else { Network::None };
    let run_opts = RunOptions { image: image.to_string(), network, gpu: o.gpu.clone(), ..Default::default() };
    let mut copy_in = vec![CopyIn { host: frontend.clone(), dest: FRONTEND_PATH.into() }];
    if let Some(dir) = &cc.0 {
        copy_in.push(CopyIn { host: dir.clone(), dest: CCACHE_DIR.into() });
    }
    copy_in.push(match sdist_arg(o) {
        Some(dest) => CopyIn { host: o.source.clone(), dest },
        None => CopyIn { host: o.source.clone(), dest: SRC_DIR.into() },
    });
    if let Some(r) = &o.rocm {
        copy_in.push(CopyIn { host: r.packages.dir.clone(), dest: rocm::ROCM_PACKAGES_DIR.into() });
    }
    if let (Some(f), false) = (&o.find_links, o.isolation) {
        copy_in.push(CopyIn { host: f.clone(), dest: FIND_LINKS_DIR.into() });
    }
    let iso = build_system.as_ref().map(|bs| Isolation {
        cache,
        // pip runs in a scratch directory: give it an absolute path.
        find_links: o.find_links.iter().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())).collect(),
        build_system: bs,
    });
    let backend_env = build_system
        .as_ref()
        .map(|bs| {
            vec![
                format!("QUARRY_BACKEND={}", bs.backend),
                format!("QUARRY_BACKEND_PATH={}", serde_json::to_string(&bs.backend_path).unwrap_or_default()),
            ]
        })
        .unwrap_or_default();

    let mut jobs: Vec<Job> = Vec::new();
    let lock_before = lock.clone();
    let mut cc_stats = None;
    drop(before_session);
    let session = Instant::now();
    engine
        .guarded(async |s| {
            let id = s.start_idle(&run_opts, copy_in.clone()).await?;
            let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
            let ccache = s.prepare_compiler_cache(&id, o.compiler_cache).await?;
            let cc_env = if ccache { compiler_cache::env(BUILD_DIR) } else { Vec::new() };
            let (_, out) = s.exec(&id, sh(FIND_PYTHONS), vec![], None, ExecOutput::Capture).await?;
            let mut pythons = parse_pythons(&String::from_utf8_lossy(&out));
            if pythons.is_empty() {
                return Err(BuildError::NoPython { image: image.to_string() }.into_engine());
            }
            if let Some(want) = &o.pythons {
                for w in want {
                    if !pythons.iter().any(|p| &p.tag == w) {
                        return Err(BuildError::Input(format!(
                            "--python {w}: image `{}` has no such Python (found: {})",
                            image,
                            pythons.iter().map(|p| p.tag.as_str()).collect::<Vec<_>>().join(", ")
                        ))
                        .into_engine());
                    }
                }
                pythons.retain(|p| want.contains(&p.tag));
            }
            for python in &pythons {
                let mut sdk_paths = None;
                let venv = match &iso {
                    Some(iso) => {
                        let mut env = build_env(o, python, &combos[0], epoch, None);
                        env.extend(backend_env.iter().cloned());
                        let probe = isolation::unpack_lines(
                            sdist_arg(o).as_deref(),
                            SRC_DIR,
                            &format!("{BUILD_DIR}/{}-probe", python.tag),
                        );
                        let made = isolation::prepare(s, &id, python, image, iso, &mut lock, &probe, &env)
                            .await
                            .map_err(BuildError::into_engine)?;
                        // The lock is written once the requirements are known, built or not.
                        if lock != lock_before {
                            lock.write(&lock_path).map_err(|e| BuildError::Lock(e).into_engine())?;
                        }
                        if let Some(r) = &o.rocm {
                            sdk_paths = Some(rocm::install(s, &id, r, &made, &python.tag, &env).await?);
                        }
                        Some(made.dir)
                    }
                    None => None,
                };
                for (combo, axes) in combos.iter().enumerate() {
                    let n = jobs.len();
                    let mut env = build_env(o, python, axes, epoch, venv.as_deref());
                    env.extend(backend_env.iter().cloned());
                    env.extend(cc_env.iter().cloned());
                    if let (Some(r), Some(paths)) = (&o.rocm, &sdk_paths) {
                        rocm::apply_env(&mut env, paths, r);
                    }
                    log::info!("building for {}{} in `{}`", python.tag, axes_suffix(axes), image);
                    let t = Instant::now();
                    let script = job_script(o, python, combo, n, venv.as_deref());
                    let (code, _) = s.exec(&id, sh(&script), env, None, ExecOutput::Stderr).await?;
                    if code != 0 {
                        let what = if venv.is_some() { "the build backend" } else { "pip wheel" };
                        return Err(BuildError::Failed { python: python.tag.clone(), axes: axes.clone(), what, code }
                            .into_engine());
                    }
                    jobs.push(Job {
                        python: python.clone(),
                        axes: axes.clone(),
                        combo,
                        seconds: t.elapsed().as_secs_f64(),
                    });
                }
            }
            s.copy_out(&id, OUT_DIR, &raw).await?;
            if ccache {
                cc_stats = Some(s.compiler_cache_stats(&id).await?);
                s.save_compiler_cache(&id, cc.1).await?;
            }
            s.remove_container(&id).await;
            Ok(())
        })
        .map_err(BuildError::Engine)?;

    let session_seconds = session.elapsed().as_secs_f64();
    let mut built = crate::trace::time("wheel: finish (labels, files)", || {
        output::finish(engine, image, o, &jobs, &labels, &raw, staging.path(), epoch)
    })?;
    for b in &mut built {
        b.session_seconds = session_seconds;
    }
    drop(staging);
    Ok(Ran { built, compiler_cache: cc_stats })
}

/// The guarded engine session returns [`EngineError`]; build errors raised
/// inside it travel as `Invalid` carrying the message and come back out
/// unchanged in meaning.
impl BuildError {
    pub(super) fn into_engine(self) -> EngineError {
        match self {
            BuildError::Engine(e) => e,
            other => EngineError::Invalid(other.to_string()),
        }
    }

    /// The exit status for the CLI (130/143 after a signal, else 1).
    pub fn exit_code(&self) -> i32 {
        match self {
            BuildError::Engine(e) => e.exit_code(),
            BuildError::Wheel(e) => e.exit_code(),
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
