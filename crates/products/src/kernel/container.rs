//! The build container of `quarry kernel build`: started idle from the
//! image with the source copied in (never bind-mounted), the network off
//! unless asked for; the container's cores and memory are probed for the
//! job count, the command runs with `exec` in the source directory, and
//! the outputs are copied out through the archive API, and so is the
//! compiler cache when the image has ccache. It belongs to a
//! guarded engine session, so it is removed however the build ends
//! (success, failing command, error, SIGINT/SIGTERM).

use super::jobs::{self, Resources};
use super::targets::{self, TARGETS_FILE, TOOLCHAIN_FILE};
use crate::engine::compiler_cache::{self, Stats};
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::run::RunOptions;
use crate::engine::{Engine, EngineError};
use std::path::{Path, PathBuf};

/// Where the source is copied in the container (the command's working directory).
pub const SRC_DIR: &str = "/quarry/src";
/// The other default output directory, created empty before the command runs.
pub const OUT_DIR: &str = "/out";

/// One output to copy out.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputPath {
    /// Absolute in the container.
    pub path: String,
    /// Missing is an error (given with `--output`), else skipped (a default).
    pub required: bool,
}

pub struct ContainerJob<'a> {
    /// The container (image, environment, network, GPUs, working directory).
    pub opts: RunOptions,
    pub copy_in: Vec<CopyIn>,
    pub cmd: Vec<String>,
    /// `--jobs`; None: from the container's resources.
    pub jobs: Option<u64>,
    pub outputs: &'a [OutputPath],
    /// Written to [`TARGETS_FILE`] and [`TOOLCHAIN_FILE`].
    pub targets: &'a [String],
    /// Each output's files are merged into this directory.
    pub into: &'a Path,
    /// Compile through ccache (its directory already among `copy_in`, when
    /// there was one), and copy it out into `save_into` afterwards.
    pub compiler_cache: Option<CompilerCacheJob<'a>>,
}

pub struct CompilerCacheJob<'a> {
    pub mode: compiler_cache::Mode,
    pub save_into: &'a Path,
}

/// How the command ended.
pub enum Ran {
    Built {
        jobs: u64,
        resources: Option<Resources>,
        copied: usize,
        /// What ccache did (None: the build did not use it); its directory is in `save_into`.
        compiler_cache: Option<Stats>,
        /// CPU seconds the container used (None: the engine did not say).
        cpu_seconds: Option<f64>,
    },
    Failed {
        code: i32,
    },
}

/// Run the job; the outputs land in `job.into` when the command succeeds.
pub fn run(engine: &Engine, job: &ContainerJob) -> Result<Ran, EngineError> {
    engine.guarded(async |s| {
        let starting = crate::trace::span("kernel container: start, copy in");
        let id = s.start_idle(&job.opts, job.copy_in.clone()).await?;
        drop(starting);
        let _preparing = crate::trace::span("kernel container: prepare (owner, jobs, ccache)");
        let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        // The copied source and /out belong to the image's user, who runs
        // the command; the target list and toolchain files are written beside
        // the source. The toolchain file includes the one the container's
        // environment names (the image's or --env's): the command's names quarry's.
        let owner = format!(
            "mkdir -p {SRC_DIR} {OUT_DIR} && chown -R \"$1\" {SRC_DIR} {OUT_DIR} && printf '%s' \"$2\" > {TOOLCHAIN_FILE} \
             && if [ -n \"$CMAKE_TOOLCHAIN_FILE\" ] && [ \"$CMAKE_TOOLCHAIN_FILE\" != {TOOLCHAIN_FILE} ]; then \
             printf 'include([=[%s]=])\\n' \"$CMAKE_TOOLCHAIN_FILE\" >> {TOOLCHAIN_FILE}; fi \
             && shift 2 && printf '%s\\n' \"$@\" > {TARGETS_FILE}"
        );
        let (ids, user) = s.exec(&id, sh("echo $(id -u):$(id -g)"), vec![], None, ExecOutput::Capture).await?;
        let user = String::from_utf8_lossy(&user).trim().to_string();
        let mut prepare = sh(&owner);
        prepare.extend(["sh".to_string(), user.clone(), targets::cmake_toolchain(job.targets)]);
        prepare.extend(job.targets.iter().cloned());
        let made =
            if ids == 0 { s.exec_as(&id, Some("0"), prepare, vec![], None, ExecOutput::Capture).await?.0 } else { ids };
        if made != 0 {
            log::warn!("could not give {SRC_DIR} and {OUT_DIR} to the image's user `{user}` (is there a shell?)");
        }
        let (jobs, resources) = match job.jobs {
            Some(n) => (n, None),
            None => {
                let (code, text) = s.exec(&id, sh(jobs::PROBE), vec![], None, ExecOutput::Capture).await?;
                let probed = (code == 0).then(|| jobs::parse_probe(&String::from_utf8_lossy(&text))).flatten();
                let r = probed.unwrap_or_else(|| {
                    log::warn!("could not read the build container's cores and memory; using this machine's");
                    jobs::host_resources()
                });
                (jobs::default_jobs(r), Some(r))
            }
        };
        let ccache = match &job.compiler_cache {
            Some(c) => s.prepare_compiler_cache(&id, c.mode).await?,
            None => false,
        };
        let mut env = jobs::env(jobs);
        env.extend(targets::command_env());
        if ccache {
            env.extend(compiler_cache::env(SRC_DIR));
        }
        drop(_preparing);
        let command = crate::trace::span("kernel container: the command");
        let (code, _) = s.exec(&id, job.cmd.clone(), env, Some(SRC_DIR), ExecOutput::Stderr).await?;
        drop(command);
        let cpu_seconds = s.cpu_seconds(&id).await;
        let _after = crate::trace::span("kernel container: ccache stats and copy out, outputs copy out");
        if code != 0 {
            return Ok(Ran::Failed { code: i32::try_from(code).unwrap_or(1) });
        }
        let mut stats = None;
        if let (true, Some(c)) = (ccache, &job.compiler_cache) {
            let st = s.compiler_cache_stats(&id).await?;
            s.save_compiler_cache(&id, c.save_into).await?;
            stats = Some(st);
        }
        let parts = job
            .into
            .with_file_name(format!("{}-parts", job.into.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()));
        let mut copied = 0;
        for (i, out) in job.outputs.iter().enumerate() {
            let (exists, _) = s
                .exec(&id, vec!["test".into(), "-e".into(), out.path.clone()], vec![], None, ExecOutput::Capture)
                .await?;
            if exists != 0 {
                if out.required {
                    return Err(EngineError::Invalid(format!(
                        "the command succeeded but wrote no `{}` (--output); nothing was kept",
                        out.path.strip_prefix(&format!("{SRC_DIR}/")).unwrap_or(&out.path)
                    )));
                }
                continue;
            }
            let part = parts.join(i.to_string());
            std::fs::create_dir_all(&part).map_err(|e| EngineError::io("cannot create", &part, e))?;
            s.copy_out(&id, &out.path, &part).await?;
            copied +=
                move_tree(&part, job.into).map_err(|e| EngineError::io("cannot move outputs into", job.into, e))?;
        }
        let _ = std::fs::remove_dir_all(&parts);
        Ok(Ran::Built { jobs, resources, copied, compiler_cache: stats, cpu_seconds })
    })
}

/// Move everything under `from` into `to` (merging directories; a later
/// output's file replaces an earlier one's). Returns how many files moved.
fn move_tree(from: &Path, to: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(to)?;
    let mut n = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest: PathBuf = to.join(entry.file_name());
        if entry.file_type()?.is_dir() && dest.is_dir() {
            n += move_tree(&entry.path(), &dest)?;
        } else {
            if dest.is_dir() {
                std::fs::remove_dir_all(&dest)?;
            }
            std::fs::rename(entry.path(), &dest)?;
            n += if entry.file_type()?.is_dir() {
                walkdir::WalkDir::new(&dest)
                    .into_iter()
                    .filter(|e| e.as_ref().is_ok_and(|e| !e.file_type().is_dir()))
                    .count()
            } else {
                1
            };
        }
    }
    Ok(n)
}
