use crate::elf::patchelf::Patchelf;
use crate::engine::Engine;
use crate::wheel::image::RepairImage;
use crate::wheel::repair::{repair, RepairIn, RepairOptions};
use anyhow::bail;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The wheel to repair
    wheel: PathBuf,
    /// Directory for the repaired wheel
    #[arg(long, short)]
    output: PathBuf,
    /// Never bundle libraries matching this glob (matched against versioned
    /// sonames and resolved paths: use `libamdhip64.so*`, not `libamdhip64.so`)
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Target policy (`manylinux_2_28_x86_64`, `manylinux2014`...) [default: auto]
    #[arg(long, value_name = "POLICY")]
    plat: Option<String>,
    /// The patchelf to run (0.19 or later) [default: `patchelf` on PATH]
    #[arg(long, value_name = "PATH")]
    patchelf: Option<PathBuf>,
    /// Repair against the image the wheel was built in (an OCI layout, an
    /// image definition or an engine image): its libraries are bundled and
    /// its patchelf (0.19 or later) runs there
    #[arg(long, value_name = "IMAGE", conflicts_with = "patchelf")]
    image: Option<String>,
    /// Set a parameter of an image definition: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V", requires = "image")]
    sets: Vec<String>,
    /// Layer cache directory [default: $QUARRY_CACHE, else ~/.cache/quarry]
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if !a.wheel.is_file() {
        bail!("wheel `{}` does not exist", a.wheel.display());
    }
    let engine;
    let within = match &a.image {
        None => RepairIn::Host(Patchelf::find(a.patchelf.as_deref())?),
        Some(arg) => {
            engine = Engine::connect()?;
            let cache_dir = a.cache_dir.clone().unwrap_or_else(crate::store::cache::default_dir);
            let image = super::image_in_engine(&engine, arg, &a.sets, &cache_dir)?;
            RepairIn::Image { image: RepairImage { engine: &engine, image }, patchelf: None, host_has_none: false }
        }
    };
    let options = RepairOptions { exclude: a.exclude, plat: a.plat, within };
    let report = match repair(&a.wheel, &a.output, &options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("quarry: error: repairing `{}`: {e}", a.wheel.display());
            return Ok(e.exit_code());
        }
    };
    if a.json {
        super::super::print_json(&report)?;
        return Ok(0);
    }
    println!("{}", report.output.display());
    println!("  policy   {}", report.policy);
    let from = report.image.as_deref().map(|i| format!(" in {i}")).unwrap_or_default();
    for b in &report.bundled {
        println!("  bundled  {} => {} (from {}{from})", b.soname, b.path, b.source.display());
    }
    for e in &report.excluded_libs {
        println!("  excluded {e}");
    }
    Ok(0)
}
