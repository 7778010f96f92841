//! `quarry kernel build`: compile GPU kernels in a container of a given
//! image, for a known set of targets, and check the result holds code for
//! every one of them.
//!
//! The flow: resolve the targets ([`targets`]) and the image's digest; key
//! the build on the image, the source tree's content, the command, the
//! targets, the environment, the outputs and the network setting
//! ([`cache`]); on a hit copy the cached outputs into the output directory.
//! Otherwise copy the source into a fresh container ([`container`]), run
//! the command with the targets and the job count ([`jobs`]) in its
//! environment, copy the outputs out into the cache and from there into
//! the output directory. Either way every output is inspected and each
//! host ELF with GPU code must have code for each target ([`check`]).

pub mod cache;
pub mod check;
pub mod container;
pub mod jobs;
pub mod target_id;
pub mod targets;

use crate::engine::copy::CopyIn;
use crate::engine::gpu::{GpuPlan, TargetList};
use crate::engine::run::{Network, RunOptions};
use crate::engine::{Engine, EngineError};
use crate::store::cache::Cache;
use crate::store::Digest;
use check::{Missing, OutputFile};
use container::{OutputPath, Ran, OUT_DIR, SRC_DIR};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The image to build in.
pub enum KernelImage {
    /// An OCI layout (a definition is built into one first), loaded as `tag` on a cache miss.
    Layout { dir: PathBuf, tag: String },
    /// An image the engine has.
    Reference(String),
}

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
    pub cache_dir: PathBuf,
}

/// What a build did (the `--json` report).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub output_dir: PathBuf,
    /// The outputs came from the cache: the command did not run.
    pub cached: bool,
    /// The whole command's time, cache lookup and checks included.
    pub seconds: f64,
    pub key: String,
    pub image: String,
    pub targets: Vec<String>,
    pub targets_source: String,
    /// The job count the command ran with (absent on a cache hit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<jobs::Resources>,
    pub outputs: Vec<OutputFile>,
    /// Requested targets an output lacks (only with --allow-missing-targets).
    pub missing: Vec<Missing>,
}

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the kernel cache: {0}")]
    Cache(String),
    #[error("the build command exited with code {code} (its output is above); nothing was kept and the container was removed")]
    Failed { code: i32 },
    #[error("{}; the outputs are in `{}`. Compile for every target (the build sees them in PYTORCH_ROCM_ARCH, HIP_OFFLOAD_ARCH, GPU_TARGETS, HIPCC_COMPILE_FLAGS_APPEND and ROCM_TARGET_LST, which CMake reads through rocm_agent_enumerator), ask for fewer with --targets, or pass --allow-missing-targets", describe_missing(missing), output.display())]
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

/// The container paths to copy out: `--output` paths under the source
/// (relative, no `..`), else `build/` and `/out`.
pub fn output_paths(outputs: &[String]) -> Result<Vec<OutputPath>, KernelError> {
    if outputs.is_empty() {
        return Ok(vec![
            OutputPath { path: format!("{SRC_DIR}/build"), required: false },
            OutputPath { path: OUT_DIR.to_string(), required: false },
        ]);
    }
    outputs
        .iter()
        .map(|o| {
            let rel = o.trim_end_matches('/');
            let bad = rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|c| c == ".." || c == ".");
            if bad {
                return Err(KernelError::Input(format!(
                    "--output `{o}`: give a path inside the source directory, relative to it (e.g. build/libkernels.so)"
                )));
            }
            Ok(OutputPath { path: format!("{SRC_DIR}/{rel}"), required: true })
        })
        .collect()
}

fn image_digest(image: &KernelImage, engine: &mut Option<Engine>) -> Result<Digest, KernelError> {
    let id = match image {
        KernelImage::Layout { dir, .. } => {
            return Ok(crate::store::layout::open_image(dir, None, None).map_err(EngineError::from)?.config_digest)
        }
        KernelImage::Reference(r) => container::image_id(connect(engine)?, r)?,
    };
    Digest::parse(&id).map_err(|e| KernelError::Input(format!("the engine's id of the image: {e}")))
}

fn connect(engine: &mut Option<Engine>) -> Result<&Engine, KernelError> {
    if engine.is_none() {
        *engine = Some(Engine::connect()?);
    }
    Ok(engine.as_ref().expect("connected above"))
}

/// The source's top-level entries, each copied to the same place under
/// [`SRC_DIR`]; `skip` names are left out.
fn source_copies(src: &Path, skip: &[&str]) -> Result<Vec<CopyIn>, KernelError> {
    let io = |e: std::io::Error| KernelError::Input(format!("source `{}`: {e}", src.display()));
    let mut names: Vec<std::ffi::OsString> =
        std::fs::read_dir(src).map_err(io)?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>().map_err(io)?;
    names.sort();
    Ok(names
        .into_iter()
        .filter(|n| !skip.iter().any(|s| n == s))
        .map(|n| CopyIn { host: src.join(&n), dest: format!("{SRC_DIR}/{}", n.to_string_lossy()) })
        .collect())
}

/// Top-level source entries that are not inputs: `build` when it is the
/// default output directory, and the output directory when it is directly
/// in the source (`-o SRC/dist`), so earlier outputs never change the key.
fn skipped_inputs(source: &Path, output: &Path, default_outputs: bool) -> Vec<String> {
    let mut skip: Vec<String> = Vec::new();
    if default_outputs {
        skip.push("build".into());
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (src, out) = (abs(source), abs(output));
    if let Some(name) = out.parent().filter(|p| *p == src).and(out.file_name()) {
        skip.push(name.to_string_lossy().into_owned());
    }
    skip
}

/// Build (or take from the cache), copy the outputs to `o.output`, check them.
pub fn build(o: &KernelOptions) -> Result<Report, KernelError> {
    let started = Instant::now();
    if !o.source.is_dir() {
        return Err(KernelError::Input(format!("source `{}` is not a directory", o.source.display())));
    }
    if o.cmd.is_empty() {
        return Err(KernelError::Input("no build command: give it after `--`, e.g. -- make".into()));
    }
    let outputs = output_paths(&o.outputs)?;
    // A host `build/` is where outputs go by default: it is not an input.
    let skip_names = skipped_inputs(&o.source, &o.output, o.outputs.is_empty());
    let skip: Vec<&str> = skip_names.iter().map(String::as_str).collect();
    let skip = skip.as_slice();
    let cache_err = |e: std::io::Error| KernelError::Cache(e.to_string());
    let cache = Cache::open(&o.cache_dir).map_err(|e| KernelError::Cache(e.to_string()))?;
    let mut engine = None;
    let image = image_digest(&o.image, &mut engine)?;
    let source = cache::source_key(&o.source, skip)
        .map_err(|e| KernelError::Input(format!("reading source `{}`: {e}", o.source.display())))?;
    let out_paths: Vec<String> = outputs.iter().map(|p| p.path.clone()).collect();
    let key = cache::key(&cache::KeyInputs {
        image: &image,
        source: &source,
        cmd: &o.cmd,
        targets: &o.targets.targets,
        env: &o.env,
        outputs: &out_paths,
        network: o.network,
    });
    let (tree, cached, jobs, resources) = match cache::lookup(&cache, &key) {
        Some(tree) => (tree, true, None, None),
        None => {
            let engine = connect(&mut engine)?;
            let reference = match &o.image {
                KernelImage::Layout { dir, tag } => {
                    // Already there under this name with this config: no load at all.
                    let have = container::image_id(engine, tag).ok();
                    if have.as_deref() != Some(image.to_string().as_str()) {
                        engine.load_layout(dir, tag, &o.cache_dir)?;
                    }
                    tag.clone()
                }
                KernelImage::Reference(r) => r.clone(),
            };
            let mut env = targets::env(&o.targets.targets);
            env.extend(o.env.iter().cloned());
            let staged = cache::staging(&cache).map_err(cache_err)?;
            let files = staged.path().join("files");
            let job = container::ContainerJob {
                opts: RunOptions {
                    image: reference,
                    env,
                    workdir: Some(SRC_DIR.into()),
                    network: if o.network { Network::Bridge } else { Network::None },
                    gpu: o.gpu.clone(),
                    ..Default::default()
                },
                copy_in: source_copies(&o.source, skip)?,
                cmd: o.cmd.clone(),
                jobs: o.jobs,
                outputs: &outputs,
                targets: &o.targets.targets,
                into: &files,
            };
            match container::run(engine, &job)? {
                Ran::Failed { code } => return Err(KernelError::Failed { code }),
                Ran::Built { copied: 0, .. } => {
                    return Err(KernelError::Input(format!(
                        "the command succeeded but wrote nothing to copy out (looked at {}); write outputs there or name them with --output",
                        out_paths.join(" and ")
                    )))
                }
                Ran::Built { jobs, resources, .. } => {
                    (cache::commit(&cache, &key, staged).map_err(cache_err)?, false, Some(jobs), resources)
                }
            }
        }
    };
    let files = cache::copy_tree(&tree, &o.output)
        .map_err(|e| KernelError::Input(format!("copying the outputs to `{}`: {e}", o.output.display())))?;
    let reports = check::inspect(&o.output, &files).map_err(KernelError::Input)?;
    let missing = check::missing(&reports, &o.targets.targets);
    if !missing.is_empty() {
        if !o.allow_missing_targets {
            return Err(KernelError::MissingTargets { missing, output: o.output.clone() });
        }
        for m in &missing {
            log::warn!("{m} (--allow-missing-targets)");
        }
    }
    Ok(Report {
        output_dir: o.output.clone(),
        cached,
        seconds: started.elapsed().as_secs_f64(),
        key: key.hex(),
        image: image.to_string(),
        targets: o.targets.targets.clone(),
        targets_source: o.targets.source.clone(),
        jobs,
        resources,
        outputs: reports,
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_default_to_build_and_out_and_stay_inside_the_source() {
        let d = output_paths(&[]).unwrap();
        assert_eq!(d.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["/quarry/src/build", "/out"]);
        assert!(d.iter().all(|p| !p.required));
        let given = output_paths(&["dist/lib.so".into()]).unwrap();
        assert_eq!(given, [OutputPath { path: "/quarry/src/dist/lib.so".into(), required: true }]);
        let skipped = skipped_inputs(Path::new("src"), Path::new("src/dist"), true);
        assert_eq!(skipped, ["build", "dist"]);
        assert!(skipped_inputs(Path::new("src"), Path::new("out"), false).is_empty());
        for bad in ["/etc/passwd", "../x", "a/../../b", ""] {
            let e = output_paths(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains("--output"), "{e}");
        }
    }
}
