//! `quarry kernel build SRC --image IMAGE -o DIR ... -- CMD...`: compile GPU
//! kernels in a container for a known target list (see `crate::kernel`).
//! Exit status: 0, the build command's own code when it fails, else 1.

use crate::cli::image_arg;
use crate::engine::compiler_cache::Mode as CompilerCacheMode;
use crate::engine::gpu::{self, GpuMode};
use crate::engine::run::parse_env;
use crate::kernel::{self, targets, KernelOptions};
use crate::progress::Progress;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Compile GPU kernels in a container of IMAGE for a target list, cache
    /// the outputs and check they hold code for every target
    Build(BuildArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// The source directory (copied into the container at /quarry/src, never bind-mounted)
    source: PathBuf,
    /// An OCI layout directory, an image definition (.toml, built first) or an engine image
    #[arg(long)]
    image: String,
    /// Directory the outputs are copied to (`-o`)
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    output: PathBuf,
    /// `auto`: PYTORCH_ROCM_ARCH / GPU_ARCHS when set, else this machine's GPUs, else
    /// gfx90a,gfx942,gfx950,gfx1100,gfx1201; or a list like gfx90a,gfx942. The build sees
    /// them as PYTORCH_ROCM_ARCH, GPU_ARCHS, HIP_OFFLOAD_ARCH, GPU_TARGETS, AMDGPU_TARGETS,
    /// hipcc's HCC_AMDGPU_TARGET and CMake's CMAKE_HIP_ARCHITECTURES (CMAKE_TOOLCHAIN_FILE)
    #[arg(long, default_value = "auto")]
    targets: String,
    /// Parallel jobs (MAX_JOBS, CMAKE_BUILD_PARALLEL_LEVEL, MAKEFLAGS=-jN) [default: the
    /// container's cores, at most one per 2 GiB of its memory]
    #[arg(long)]
    jobs: Option<u64>,
    /// GPUs passed to the build container: `auto` when /dev/kfd exists (not needed to compile)
    #[arg(long, value_parser = crate::cli::values::gpu_mode(), default_value = "auto")]
    gpu: GpuMode,
    /// Set an environment variable: K=V, or K to pass quarry's own value (repeatable; part of the cache key)
    #[arg(long, value_name = "K=V")]
    env: Vec<String>,
    /// A file or directory the command writes, relative to the source (repeatable)
    /// [default: everything under build/ and /out; a host build/ is then not copied in]
    #[arg(long = "output", value_name = "PATH_IN_SRC")]
    outputs: Vec<String>,
    /// Let the build container reach the network (off by default)
    #[arg(long)]
    network: bool,
    /// Warn instead of failing when an output lacks code for a requested target
    #[arg(long)]
    allow_missing_targets: bool,
    /// Compile through ccache, its directory kept in the cache (and shared
    /// through --cache-registry) per image, targets and project: `auto` when
    /// the image has ccache
    #[arg(long, value_parser = crate::cli::values::compiler_cache(), value_name = "MODE", default_value = "auto")]
    compiler_cache: CompilerCacheMode,
    /// Build even when the cache has the result (the compiler cache starts empty too); the cache is still written
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    def: super::DefinitionArgs,
    #[command(flatten)]
    sign: super::sign_args::SignArgs,
    /// Print a JSON report: per output file its targets and size, the time, whether cached
    #[arg(long)]
    json: bool,
    /// The build command (after `--`), run in /quarry/src
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    let Command::Build(a) = c;
    super::set_output_mode(a.json, false);
    // A key that cannot be opened (a wrong password) fails before anything is built.
    let sign_key = a.sign.load()?;
    let cache = a.def.cache.open()?;
    let arg = targets::parse(&a.targets)?;
    let detected = match (&arg, a.gpu) {
        (targets::TargetsArg::Auto, GpuMode::None) => Vec::new(),
        (targets::TargetsArg::Auto, _) => gpu::detect()?,
        _ => Vec::new(),
    };
    let image = image_arg::build_image(&a.image, &a.def.sets, &cache, Progress::new(false, true))?;
    if a.jobs == Some(0) {
        anyhow::bail!("--jobs must be at least 1");
    }
    let opts = KernelOptions {
        source: a.source,
        image,
        output: a.output,
        cmd: a.cmd,
        targets: targets::resolve(&arg, &detected),
        jobs: a.jobs,
        gpu: gpu::plan(a.gpu, &[])?,
        env: a.env.iter().map(|e| parse_env(e)).collect::<Result<_, _>>()?,
        outputs: a.outputs,
        network: a.network,
        allow_missing_targets: a.allow_missing_targets,
        cache,
        compiler_cache: a.compiler_cache,
        no_cache: a.no_cache,
    };
    if !a.json {
        eprintln!("targets ({}): {}", opts.targets.source, opts.targets.joined());
    }
    let built = kernel::build(&opts);
    for line in crate::trace::summary() {
        eprintln!("quarry trace: {line}");
    }
    let mut report = built?;
    let image_name = crate::provenance::image_argument(&a.image);
    report.provenance = Some(kernel::provenance::write(&opts, &image_name, &report, sign_key.as_ref())?.provenance);
    if a.json {
        super::print_json(&report)?;
        return Ok(0);
    }
    for o in &report.outputs {
        let t = if o.targets.is_empty() { "-".to_string() } else { o.targets.join(" ") };
        outln!("{:<40} {:>10}  {t}", o.file, super::human_size(o.size));
    }
    if report.cached {
        let from = if report.tier == Some(crate::cache::Tier::Remote) { " (from the cache registry)" } else { "" };
        outln!(
            "cached{from}: nothing changed (key {}), outputs copied to {} in {:.2} s",
            &report.key[..12],
            report.output_dir.display(),
            report.seconds
        );
    } else {
        let cpu =
            report.container_cpu_seconds.map(|c| format!(" ({c:.1} s of CPU in the container)")).unwrap_or_default();
        outln!(
            "built with {} jobs in {:.1} s{cpu}, outputs in {}",
            report.jobs.unwrap_or(0),
            report.seconds,
            report.output_dir.display()
        );
    }
    if let Some(cc) = &report.compiler_cache {
        outln!("compiler cache: {} hit(s), {} compiled", cc.stats.hits, cc.stats.misses);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_help_names_the_fallback_targets_quarry_uses() {
        use clap::CommandFactory;
        let mut cli = crate::cli::Cli::command();
        let build = cli.find_subcommand_mut("kernel").and_then(|k| k.find_subcommand_mut("build")).unwrap();
        let help = build.render_long_help().to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains(&crate::engine::gpu::DEFAULT_TARGETS.join(",")), "{help}");
    }
}
