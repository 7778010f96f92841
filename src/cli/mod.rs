//! The command line: one file per subcommand (arguments, output, exit
//! codes); the work itself lives in the library modules.

mod build;
mod export;
mod inspect;
mod lock;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "quarry", version, about = "Hermetic, reproducible OCI images and GPU-ready containers for ROCm builds")]
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
    /// Resolve a `[base.packages]` image and pin every package in IMAGE.lock
    Lock(lock::Args),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(a) => build::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Export(a) => export::run(a),
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

/// Print a value as one JSON document on stdout.
pub(crate) fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
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
