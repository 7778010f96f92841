//! `quarry cdi generate [-o FILE]`: the CDI spec for this machine's AMD GPUs.

use crate::engine::cdi;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write a CDI spec (kind amd.com/gpu) for the GPUs under /dev (or QUARRY_DEV_ROOT): one device per GPU by index and by stable id, and `all`
    Generate(GenerateArgs),
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// Write the spec here (e.g. /etc/cdi/amd.json) instead of stdout
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    let Command::Generate(a) = c;
    let spec = cdi::generate()?;
    match a.output {
        None => out!("{}", cdi::to_json(&spec)),
        Some(path) => {
            cdi::write(&spec, &path)?;
            let names: Vec<String> = spec.devices.iter().map(|d| format!("{}={}", spec.kind, d.name)).collect();
            outln!("wrote {} (cdiVersion {}): {}", path.display(), spec.cdi_version, names.join(", "));
        }
    }
    Ok(0)
}
