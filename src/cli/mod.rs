//! The command line: one file per subcommand (arguments, output, exit
//! codes); the work itself lives in the library modules.

mod build;
mod dockerfile;
mod doctor;
mod export;
mod gc;
mod gpus;
mod inspect;
mod load;
mod lock;
mod pull;
mod push;
mod rocm;
mod run;
mod wheel;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "quarry",
    version,
    about = "Hermetic, reproducible OCI images and GPU-ready containers for ROCm builds"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build an image definition into an OCI image layout
    Build(build::Args),
    /// Show an OCI layout or archive: layers, sizes, digests, config
    Inspect(inspect::Args),
    /// Write an OCI layout as an OCI archive or a docker-archive
    Export(export::Args),
    /// Render an image definition as an equivalent Dockerfile
    Dockerfile(dockerfile::Args),
    /// ROCm builds: flatten artifacts into a dist tree, package them for pip
    Rocm(rocm::Args),
    /// Load an OCI layout or image definition into the Docker Engine, skipping layers it has
    Load(load::Args),
    /// Run a command in a container, with AMD GPUs passed through
    Run(run::Args),
    /// Remove containers and temporary images left by killed quarry runs
    Gc(gc::Args),
    /// Show the GPUs (KFD topology) and the target list builds use
    Gpus(gpus::Args),
    /// Check the engine, GPU nodes and cache
    Doctor(doctor::Args),
    /// Push an OCI layout's image to a registry (OCI distribution API)
    Push(push::Args),
    /// Pull an image from a registry into an OCI layout
    Pull(pull::Args),
    /// Check and repair Python wheels
    #[command(subcommand)]
    Wheel(wheel::Command),
    /// Pin a `[base.packages]` image's packages and every PyPI file in IMAGE.lock
    Lock(lock::Args),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(a) => build::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Export(a) => export::run(a),
        Command::Dockerfile(a) => dockerfile::run(a),
        Command::Rocm(a) => rocm::run(a),
        Command::Load(a) => load::run(a),
        Command::Run(a) => run::run(a),
        Command::Gc(a) => gc::run(a),
        Command::Gpus(a) => gpus::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Push(a) => push::run(a),
        Command::Pull(a) => pull::run(a),
        Command::Wheel(c) => wheel::run(c),
        Command::Lock(a) => lock::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("quarry: error: {e:#}");
            1
        }
    }
}

/// Build a definition with default options (gzip, all cores,
/// SOURCE_DATE_EPOCH from the env) on the way to the engine; returns the
/// layout and the tag to load it as. `sets` are `--set K=V` arguments.
/// `--set` and `--cache-dir`, for the commands that take an image
/// definition as well as a layout or an engine image.
#[derive(clap::Args)]
pub(crate) struct DefinitionArgs {
    /// Set a parameter of an image definition: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    pub sets: Vec<String>,
    /// Layer cache directory [default: $QUARRY_CACHE, else ~/.cache/quarry]
    #[arg(long)]
    pub cache_dir: Option<std::path::PathBuf>,
}

impl DefinitionArgs {
    pub fn cache_dir(&self) -> std::path::PathBuf {
        self.cache_dir.clone().unwrap_or_else(crate::store::cache::default_dir)
    }
}

pub(crate) fn build_definition_for_engine(
    file: &std::path::Path,
    sets: &[String],
    cache_dir: &std::path::Path,
    progress: crate::progress::Progress,
) -> anyhow::Result<(std::path::PathBuf, String)> {
    let sets = crate::spec::parse_sets(sets).map_err(|e| anyhow::anyhow!(e))?;
    let opts = crate::build::BuildOptions::defaults(sets, cache_dir.to_path_buf(), progress)
        .map_err(|e| anyhow::anyhow!(e))?;
    let r = crate::engine::image_arg::build_definition(file, &opts)?;
    let tag = crate::engine::image_arg::definition_tag(&r);
    Ok((r.output, tag))
}

/// Print a value as one JSON document on stdout.
pub(crate) fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let text = serde_json::to_string_pretty(v)?;
    // A closed pipe (`quarry ... --json | head`) is the reader's choice, not an error.
    match writeln!(out, "{text}").and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

pub(crate) fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub(crate) fn short_digest(d: &str) -> &str {
    let hex = d.trim_start_matches("sha256:");
    &hex[..hex.len().min(12)]
}
