use crate::engine::Engine;
use crate::tools::patchelf::{ContainerPatchelf, Patchelf};
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
    /// Never bundle libraries matching this glob, nor the libraries only they
    /// need (matched against versioned sonames and resolved paths: use
    /// `libamdhip64.so*`, not `libamdhip64.so`; a path like
    /// `/opt/rocm/lib/*` works too)
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Never bundle what ROCm's Python packages in DIR provide (a wheel built
    /// with `wheel build --rocm-packages`: rocm_sdk finds and loads them);
    /// says which libraries that covered
    #[arg(long = "rocm-packages", value_name = "DIR")]
    rocm_packages: Option<PathBuf>,
    /// Target policy (`manylinux_2_28_x86_64`, `manylinux2014`..., or `auto`:
    /// the best reachable)
    #[arg(long, value_name = "POLICY", env = "AUDITWHEEL_PLAT", default_value = "auto")]
    plat: String,
    /// Tag the wheel with the --plat policy only, not also the more compatible one it satisfies
    #[arg(long)]
    only_plat: bool,
    /// Strip symbols (.symtab, debug sections) from the bundled libraries and the wheel's ELF files
    #[arg(long)]
    strip: bool,
    /// Keep the wheel's file name and WHEEL tags as they are
    #[arg(long)]
    no_update_tags: bool,
    /// The patchelf to make every ELF edit with (0.19 or later) [default:
    /// $QUARRY_PATCHELF, else quarry edits natively and runs its own pinned
    /// patchelf, fetched into the cache once, only on files it cannot edit]
    #[arg(long, value_name = "PATH")]
    patchelf: Option<PathBuf>,
    /// Repair against the image the wheel was built in (an OCI layout, an
    /// image definition or an engine image): its libraries are bundled;
    /// the files are edited here (a fallback patchelf, quarry's own, is
    /// copied in and runs there: the image needs none)
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// Set a parameter of an image definition: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V", requires = "image")]
    sets: Vec<String>,
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::super::set_output_mode(a.json, false);
    if !a.wheel.is_file() {
        bail!("wheel `{}` does not exist", a.wheel.display());
    }
    let rocm = a.rocm_packages.as_deref().map(crate::wheel::rocm_packages::RocmPackages::read).transpose()?;
    let mut exclude = a.exclude.clone();
    exclude.extend(rocm.iter().flat_map(|r| r.exclude_globs()));
    let engine;
    let cache = a.cache.open()?;
    let within = match &a.image {
        None => RepairIn::Host { patchelf: Patchelf::chosen(a.patchelf.as_deref())?, cache: cache.clone() },
        Some(arg) => {
            let patchelf = ContainerPatchelf::choose(&cache, a.patchelf.as_deref())?;
            engine = Engine::connect()?;
            let image = crate::cli::image_arg::image_in_engine(&engine, arg, &a.sets, &cache)?;
            RepairIn::Image { image: RepairImage { engine: &engine, image }, patchelf }
        }
    };
    let options = RepairOptions {
        exclude,
        plat: Some(a.plat),
        only_plat: a.only_plat,
        strip: a.strip,
        update_tags: !a.no_update_tags,
        within,
    };
    let report = repair(&a.wheel, &a.output, &options)
        .map_err(|e| anyhow::Error::new(e).context(format!("repairing `{}`", a.wheel.display())))?;
    if let Some(r) = &rocm {
        let covered: Vec<&str> =
            report.excluded_libs.iter().filter(|l| r.libraries.contains(*l)).map(String::as_str).collect();
        eprintln!(
            "quarry: left out {} libraries the ROCm packages in `{}` provide (rocm_sdk loads them){}{}",
            covered.len(),
            r.dir.display(),
            if covered.is_empty() { "" } else { ": " },
            covered.join(", ")
        );
    }
    if a.json {
        super::super::print_json(&report)?;
        return Ok(0);
    }
    outln!("{}", report.output.display());
    outln!("  policy   {}", report.policy);
    let from = report.image.as_deref().map(|i| format!(" in {i}")).unwrap_or_default();
    for b in &report.bundled {
        outln!("  bundled  {} => {} (from {}{from})", b.soname, b.path, b.source.display());
    }
    for e in &report.excluded_libs {
        outln!("  excluded {e}");
    }
    if let Some(sbom) = &report.sbom {
        outln!("  sbom     {sbom}");
    }
    match report.elf_editor {
        "patchelf" => {
            outln!("  edited   by {}", report.patchelf.as_deref().unwrap_or("patchelf (no file needed edits)"))
        }
        _ => outln!("  edited   natively: {} files", report.native_edits),
    }
    for f in &report.patchelf_fallbacks {
        outln!("  fallback {} (by {}): {}", f.file, report.patchelf.as_deref().unwrap_or("patchelf"), f.reason);
    }
    for (file, bytes) in &report.copied_from_input {
        outln!("  kept     {file}: {bytes} bytes of its original deflate stream, not compressed again");
    }
    Ok(0)
}
