//! The command line: one file per subcommand (arguments, output, exit
//! codes); the work itself lives in the library modules.

/// `println!` for a command's output: a reader that closed the pipe
/// (`quarry inspect ... | head`) ends the output quietly with exit 0, as
/// ripgrep does, instead of the panic (exit 101) `println!` gives.
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` for a command's output (see `outln!`).
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!($($arg)*)) };
}

mod build;
mod cache;
mod cache_args;
mod cdi;
mod code_objects;
mod diff;
mod dockerfile;
mod doctor;
mod exit;
mod export;
mod gc;
mod gpus;
mod image_arg;
mod inspect;
mod kernel;
mod load;
mod lock;
mod matrix;
mod plan;
mod pull;
mod push;
#[cfg(test)]
mod readme_check;
mod rocm;
mod run;
mod sign_args;
mod table;
mod values;
mod verify;
mod wheel;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "quarry",
    version,
    about = "Hermetic, reproducible OCI images and GPU-ready containers for ROCm builds"
)]
struct Cli {
    /// The engine for commands that run containers: a docker context name, or unix:///PATH, tcp://HOST:PORT, ssh://[USER@]HOST[:PORT] [default: DOCKER_HOST, DOCKER_CONTEXT, the docker config's current context, the default socket]
    #[arg(long, global = true, env = "QUARRY_ENGINE", value_name = "CONTEXT|ADDRESS")]
    engine: Option<String>,
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
    /// CDI (Container Device Interface) specs for this machine's AMD GPUs
    #[command(subcommand)]
    Cdi(cdi::Command),
    /// Push an OCI layout's image to a registry (OCI distribution API)
    Push(push::Args),
    /// Compare two images (OCI layouts) or two lock files: packages, config, layers, files
    Diff(diff::Args),
    /// Pull an image from a registry into an OCI layout
    Pull(pull::Args),
    /// Rebuild an image from its provenance in a private cache: `reproduced`, or what differs
    Verify(verify::Args),
    /// Check and repair Python wheels
    #[command(subcommand)]
    Wheel(wheel::Command),
    /// Pin a `[base.packages]` image's packages and every PyPI file in IMAGE.lock
    Lock(lock::Args),
    /// Show what a build would do: each layer's kind, key, inputs and whether the cache has it
    Plan(plan::Args),
    /// List the AMD GPU targets that files, wheels or directories hold code for
    CodeObjects(code_objects::Args),
    /// Compile GPU kernels in a container for a target list, cached and checked
    #[command(subcommand)]
    Kernel(kernel::Command),
    /// The local cache: size per bucket, pruning
    #[command(subcommand)]
    Cache(cache::Command),
    /// Build matrices: plan cells, run one, emit a scheduler's job description, collect products
    #[command(subcommand)]
    Matrix(matrix::Command),
}

/// Runs the command line; returns the process exit code (see `exit`).
pub fn main() -> i32 {
    // The sandbox's inside (see `sandbox`): before anything that could
    // start a thread, as a new user namespace needs a single-threaded process.
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(std::ffi::OsStr::new(crate::sandbox::ARG)) {
        let Some(job) = args.next() else { return 2 };
        return match crate::sandbox::helper_main(std::path::Path::new(&job)) {
            Ok(()) => 0,
            Err(e) => {
                // The parent reads this.
                eprintln!("{e}");
                e.exit_code()
            }
        };
    }
    let cli = Cli::parse();
    crate::diagnostics::install(crate::diagnostics::Mode::Human);
    crate::engine::endpoint::select(cli.engine);
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
        Command::Cdi(c) => cdi::run(c),
        Command::Push(a) => push::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Pull(a) => pull::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Wheel(c) => wheel::run(c),
        Command::Lock(a) => lock::run(a),
        Command::Plan(a) => plan::run(a),
        Command::CodeObjects(a) => code_objects::run(a),
        Command::Kernel(c) => kernel::run(c),
        Command::Cache(c) => cache::run(c),
        Command::Matrix(c) => matrix::run(c),
    };
    match result {
        Ok(status) => status,
        Err(e) => {
            for line in exit::report(&e) {
                eprintln!("{line}");
            }
            exit::code(&e)
        }
    }
}

/// `--set` and the cache options, for the commands that take an image
/// definition as well as a layout or an engine image.
#[derive(clap::Args)]
pub(crate) struct DefinitionArgs {
    /// Set a parameter of an image definition: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    pub sets: Vec<String>,
    #[command(flatten)]
    pub cache: cache_args::CacheArgs,
}

/// Route warnings and notes for this command's output flags (see `diagnostics`).
/// Write command output to stdout. A closed pipe is the reader's choice:
/// the process ends there with exit 0 (nothing else is worth writing);
/// another write error (a full disk behind a redirect) ends it with 1.
pub(crate) fn write_out(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("quarry: error: writing the output: {e}");
            std::process::exit(1)
        }
    }
}

pub(crate) fn set_output_mode(json: bool, quiet: bool) {
    crate::diagnostics::install(crate::diagnostics::Mode::from_flags(json, quiet));
}

/// Print a value as one JSON document on stdout. An object also gets the
/// warnings reported while it was made, as `warnings: [...]`.
pub(crate) fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    use std::io::Write;
    let mut value = serde_json::to_value(v)?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("warnings".into(), crate::diagnostics::take_warnings().into());
    }
    let mut out = std::io::stdout().lock();
    let text = serde_json::to_string_pretty(&value)?;
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

/// The first 12 hex digits of a digest (typed, or as an engine or descriptor prints it).
pub(crate) fn short_digest(d: impl std::fmt::Display) -> String {
    let text = d.to_string();
    let hex = text.strip_prefix(crate::oci::Digest::PREFIX).unwrap_or(&text);
    hex[..hex.len().min(12)].to_string()
}
