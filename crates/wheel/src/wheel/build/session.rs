//! The container session of a wheel build: one idle container per image,
//! every Python and axis combination built in it with `exec` (in the
//! project's isolated environment, or with `pip wheel
//! --no-build-isolation`), the results copied out, labelled and repaired
//! (`output`). What is built and whether it must be is decided before
//! (`setup`, `reuse`).

use super::isolation::{self, Isolation, FRONTEND, FRONTEND_PATH};
use super::lock::{self as build_lock, BuildLock};
use super::pythons::{parse_pythons, Python, FIND_PYTHONS};
use super::system::{self as build_system, BuildSystem};
use super::{axes_suffix, combinations, io, is_sdist, output, rocm, BuildOptions, Built, WheelBuildError};
use crate::engine::compiler_cache::{self, Stats, CCACHE_DIR};
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::run::{Network, RunOptions};
use crate::engine::Engine;
use crate::wheel::version::{expand_template, normalize_local_label};
use crate::wheel::WheelError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the project, the find-links wheelhouse and the results live in
/// the build container.
const SRC_DIR: &str = "/quarry/src";
const SDIST_DIR: &str = "/quarry/sdist";
pub(in crate::wheel::build) const FIND_LINKS_DIR: &str = "/quarry/find-links";
/// Each build's copy of the project: `/quarry/build/<python>-<axes index>`,
/// the same path in every run, so nothing built records a random one.
const BUILD_DIR: &str = "/quarry/build";
const OUT_DIR: &str = "/quarry/out";
/// The link script of split builds and merge shards (see `BuildOptions::split_link`).
const LINK_SCRIPT_PATH: &str = "/quarry/hip-fatbin-last.ld";

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
    let targets = o.targets.joined();
    let mut env: Vec<String> = ["PYTORCH_ROCM_ARCH", "GPU_ARCHS", "GPU_TARGETS", "AMDGPU_TARGETS"]
        .iter()
        .map(|var| format!("{var}={targets}"))
        .collect();
    env.extend(axes.iter().map(|(k, v)| format!("{k}={v}")));
    if o.split_link {
        // Appended to what the axes set: build systems pass LDFLAGS to
        // every link (setuptools, CMake, Meson), hipcc its own variable.
        for var in ["LDFLAGS", "HIPCC_LINK_FLAGS_APPEND"] {
            let given = axes.get(var).map(|v| format!("{v} ")).unwrap_or_default();
            env.retain(|e| !e.starts_with(&format!("{var}=")));
            env.push(format!("{var}={given}-Wl,-T,{LINK_SCRIPT_PATH}"));
        }
    }
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

/// Build in `image` (loaded in `engine`), label and repair; returns the
/// wheels in the output directory. `cc`: the compiler cache's directory
/// to start from (copied in) and where to save it.
pub(super) fn run_builds(
    engine: &Engine,
    image: &str,
    o: &BuildOptions,
    cache: &crate::cache::Cache,
    cc: (Option<PathBuf>, &Path),
) -> Result<Ran, WheelBuildError> {
    let before_session = crate::trace::span("wheel: before the session (inputs, lock)");
    let epoch = o.epoch;
    let combos = combinations(&o.axes);
    // Check the template against every combination before building anything.
    let labels: Vec<Option<String>> = combos
        .iter()
        .map(|c| o.local_version.as_deref().map(|t| normalize_local_label(&expand_template(t, c)?)).transpose())
        .collect::<Result<_, WheelError>>()?;
    // The build system and the lock, read before any container starts.
    let build_system: Option<BuildSystem> = if o.isolation {
        let bs = if o.source.is_dir() { build_system::of_dir(&o.source) } else { build_system::of_sdist(&o.source) };
        Some(bs?)
    } else {
        None
    };
    let lock_path = o.lock.clone().unwrap_or_else(|| o.output.join(build_lock::DEFAULT_NAME));
    // Read with or without isolation: `--test` pins its requirements here too.
    let mut lock = BuildLock::read(&lock_path).map_err(WheelBuildError::Lock)?;

    std::fs::create_dir_all(&o.output).map_err(io(&o.output))?;
    let staging =
        tempfile::Builder::new().prefix(".quarry-wheel-build-").tempdir_in(&o.output).map_err(io(&o.output))?;
    let raw = staging.path().join("raw");
    let frontend = staging.path().join("frontend.py");
    std::fs::write(&frontend, FRONTEND).map_err(io(&frontend))?;

    let network = if o.network { Network::Bridge } else { Network::None };
    let run_opts = RunOptions { image: image.to_string(), network, gpu: o.gpu.clone(), ..Default::default() };
    let mut copy_in = vec![CopyIn { host: frontend.clone(), dest: FRONTEND_PATH.into() }];
    if o.split_link {
        let script = staging.path().join("hip-fatbin-last.ld");
        std::fs::write(&script, crate::elf::kpack_ref::FATBIN_LAST_LINK_SCRIPT).map_err(io(&script))?;
        copy_in.push(CopyIn { host: script, dest: LINK_SCRIPT_PATH.into() });
    }
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
    engine.guarded(async |s| {
        let id = s.start_idle(&run_opts, copy_in.clone()).await?;
        let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        let ccache = s.prepare_compiler_cache(&id, o.compiler_cache).await?;
        let cc_env = if ccache { compiler_cache::env(BUILD_DIR) } else { Vec::new() };
        let (_, out) = s.exec(&id, sh(FIND_PYTHONS), vec![], None, ExecOutput::Capture).await?;
        let mut pythons = parse_pythons(&String::from_utf8_lossy(&out));
        if pythons.is_empty() {
            return Err(WheelBuildError::NoPython { image: image.to_string() });
        }
        if let Some(want) = &o.pythons {
            for w in want {
                if !pythons.iter().any(|p| &p.tag == w) {
                    return Err(WheelBuildError::Input(format!(
                        "--python {w}: image `{}` has no such Python (found: {})",
                        image,
                        pythons.iter().map(|p| p.tag.as_str()).collect::<Vec<_>>().join(", ")
                    )));
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
                    let made = isolation::prepare(s, &id, python, image, iso, &mut lock, &probe, &env).await?;
                    // The lock is written once the requirements are known, built or not.
                    if lock != lock_before {
                        lock.write(&lock_path).map_err(WheelBuildError::Lock)?;
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
                    return Err(WheelBuildError::Failed { python: python.tag.clone(), axes: axes.clone(), what, code });
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
        Ok::<_, WheelBuildError>(())
    })?;

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
