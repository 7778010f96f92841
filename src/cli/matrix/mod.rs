//! `quarry matrix plan|run|emit|collect FILE`: build matrices run by the
//! schedulers users already have (see `crate::matrix`).

use crate::cli::table::Table;
use crate::cli::{cache_args::CacheArgs, image_arg};
use crate::matrix::emit::{EmitOptions, Format};
use crate::matrix::plan::Shared;
use crate::matrix::scheduler::{self, Selector};
use crate::matrix::{self, Matrix};
use crate::progress::Progress;
use clap::ValueEnum;
use std::path::PathBuf;

mod plan;

#[derive(clap::Subcommand)]
pub enum Command {
    /// The cells: id, index, needs, key, and whether each is done (its product in the registry; with no registry named, its build in the local cache)
    Plan(PlanArgs),
    /// Run one cell (--cell, --index, or the index its scheduler sets) and push its product (with no registry named, it stays in --output-dir)
    Run(RunArgs),
    /// Write the scheduler's job description for the cells not done yet
    Emit(EmitArgs),
    /// Fetch every cell's product into a wheelhouse with a PEP 503 index; name what is missing
    Collect(CollectArgs),
}

#[derive(clap::Args)]
pub struct Common {
    /// The matrix file (TOML)
    file: PathBuf,
    /// Set a parameter of the job's image definition: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    sets: Vec<String>,
    #[command(flatten)]
    cache: CacheArgs,
}

#[derive(clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    common: Common,
    /// Print JSON: matrix, file, kind, registry, done_in (registry, local_cache, not_looked_up), cache_dir, cells[] ({id, index, values, needs, local_version, key, done}), to_run
    #[arg(long)]
    json: bool,
    /// The cells only: no keys, nothing asked of the image, the source or the registry (every cell "to run")
    #[arg(long)]
    no_keys: bool,
    /// Build the job's image when the cache lacks it (the cells' keys need its digest); without it, such a plan says so and computes no keys
    #[arg(long)]
    build_image: bool,
}

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// The cell, by id
    #[arg(long, conflicts_with = "index")]
    cell: Option<String>,
    /// The cell, by index (in QUARRY_MATRIX_CELLS when set, else in the matrix)
    #[arg(long)]
    index: Option<usize>,
    /// Where the cell's products and report go (DIR/<cell id>/, DIR/<cell id>.json)
    #[arg(short = 'o', long = "output-dir", value_name = "DIR", default_value = "matrix-out")]
    out: PathBuf,
    /// Print the cell's report as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Slurm,
    Kubernetes,
    Github,
}

#[derive(clap::Args)]
pub struct EmitArgs {
    #[command(flatten)]
    common: Common,
    /// The scheduler
    #[arg(long, value_enum)]
    format: FormatArg,
    /// At most this many cells at once (Slurm's %P, the Job's parallelism, max-parallel)
    #[arg(long)]
    parallel: Option<usize>,
    /// The quarry command on the scheduler's machines [default: Slurm: this
    /// quarry's absolute path, or `quarry` when that is this binary on PATH;
    /// Kubernetes and GitHub: `quarry`]
    #[arg(long, value_name = "PATH")]
    quarry: Option<String>,
    /// The matrix file as the tasks see it [default: its absolute path; Kubernetes mounts it; GitHub: its path in the git checkout]
    #[arg(long, value_name = "PATH")]
    matrix_path: Option<String>,
    /// Where each task writes its products and report
    #[arg(long, value_name = "DIR", default_value = "matrix-out")]
    task_output: String,
    /// Slurm: where task logs go
    #[arg(long, value_name = "DIR", default_value = ".")]
    log_dir: String,
    /// Kubernetes: the image the pods run (quarry in it)
    #[arg(long, value_name = "IMAGE", default_value = "quarry:latest")]
    runner_image: String,
    /// Kubernetes: the docker-config secret with the registry's credentials
    #[arg(long, value_name = "NAME", default_value = "quarry-registry")]
    registry_secret: String,
    /// GitHub: the runner label of cells without GPUs
    #[arg(long, value_name = "LABEL", default_value = "ubuntu-latest")]
    runs_on: String,
    /// GitHub: the runner label of cells with GPUs
    #[arg(long, value_name = "LABEL", default_value = "self-hosted")]
    gpu_runs_on: String,
    /// Every cell, without asking the registry which are done
    #[arg(long)]
    all: bool,
    /// Write to FILE instead of stdout
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct CollectArgs {
    #[command(flatten)]
    common: Common,
    /// The wheelhouse (wheels, simple/, report.json; other products under <cell id>/)
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    out: PathBuf,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// Where the scheduler wrote the tasks' output (`emit --log-dir`): a
    /// missing cell's file is named, with its last lines
    #[arg(long, value_name = "DIR", default_value = ".")]
    log_dir: PathBuf,
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Plan(a) => plan::plan(a),
        Command::Run(a) => run_one(a),
        Command::Emit(a) => emit(a),
        Command::Collect(a) => collect(a),
    }
}

/// The registry named on the command line (`--cache-registry` or its variable).
fn given(c: &Common) -> Option<&str> {
    c.cache.cache_registry.as_deref().filter(|r| !r.trim().is_empty())
}

/// The build image every cell of `m` shares: built here when the matrix
/// names a definition, through `cache`.
fn build_image(
    c: &Common,
    m: &Matrix,
    json: bool,
    cache: &crate::cache::Cache,
) -> anyhow::Result<Option<crate::engine::build_image::BuildImage>> {
    Ok(match m.job.kind {
        // An image job builds its own; a templated image is one per cell.
        matrix::definition::JobKind::Image => None,
        _ if m.job.image_is_template() => None,
        _ => Some(image_arg::build_image(&m.job.image, &c.sets, cache, Progress::new(json, false))?),
    })
}

/// The cache, with the registry tier the matrix uses (None: local only):
/// each subcommand opens it once.
fn open_cache(c: &Common, registry: Option<&str>) -> anyhow::Result<crate::cache::Cache> {
    let mut args = c.cache.clone();
    args.cache_registry = registry.map(str::to_string);
    Ok(args.open()?)
}

fn shared(
    m: &Matrix,
    cache: crate::cache::Cache,
    image: Option<crate::engine::build_image::BuildImage>,
    out: PathBuf,
) -> anyhow::Result<Shared<'_>> {
    Ok(Shared {
        matrix: m,
        cache,
        image,
        out,
        gpus: crate::engine::allocation::slurm_gpus()?.map(|a| a.devices),
        running: false,
    })
}

fn run_one(a: RunArgs) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let m = Matrix::load(&a.common.file)?;
    let registry = matrix::registry_named(&m, given(&a.common));
    let cache = open_cache(&a.common, registry.as_deref())?;
    let image = build_image(&a.common, &m, a.json, &cache)?;
    let all = matrix::cells::cells(&m);
    matrix::check_cells(&m, &all)?;
    let selector = match (&a.cell, a.index) {
        (Some(id), _) => Selector::Id(id.clone()),
        (None, Some(i)) => Selector::Index(i),
        (None, None) => scheduler::selector_from_env()?.ok_or(scheduler::SchedulerError::NoCell)?,
    };
    let cell = scheduler::pick(&all, &selector)?.clone();
    let s = Shared { running: true, ..shared(&m, cache, image, a.out.clone())? };
    let (report, failed) = matrix::run::run_cell(&s, registry.as_deref(), &cell)?;
    for line in crate::trace::summary() {
        eprintln!("{line}");
    }
    if a.json {
        super::print_json(&report)?;
    } else {
        let how = if report.cached { "from the cache" } else { "built" };
        let kept = match (&report.artifact, &registry) {
            (Some(d), _) => format!("pushed as {d}"),
            (None, Some(_)) => "not pushed".to_string(),
            (None, None) => format!(
                "kept in {} (no registry named: nothing pushed; report {})",
                matrix::plan::cell_out(&a.out, &cell).display(),
                matrix::run::report_path(&a.out, &cell).display()
            ),
        };
        outln!(
            "{} {}: {} product(s) {how} in {:.1} s (build {:.1} s), {kept}",
            m.name,
            cell.id,
            report.products.len(),
            report.seconds,
            report.build_seconds,
        );
    }
    match failed {
        Some(e) => Err(anyhow::Error::new(e).context(format!("cell {}", cell.id))),
        None => Ok(0),
    }
}

fn emit(a: EmitArgs) -> anyhow::Result<i32> {
    super::set_output_mode(false, true);
    let out = PathBuf::from(&a.task_output);
    // The tasks push their products to the registry: emit needs one.
    let m = Matrix::load(&a.common.file)?;
    let registry = matrix::registry_of(&m, given(&a.common))?;
    let cache = open_cache(&a.common, Some(&registry))?;
    let image = build_image(&a.common, &m, true, &cache)?;
    let s = shared(&m, cache, image, out)?;
    let p =
        if a.all { matrix::plan::every_cell(&m, Some(&registry))? } else { matrix::plan::plan(&s, Some(&registry))? };
    let matrix_path = match (a.matrix_path, a.format) {
        (Some(p), _) => p,
        // A GitHub runner has the checkout, not this machine's paths.
        (None, FormatArg::Github) => matrix::emit::path_in_checkout(&a.common.file)?,
        (None, _) => std::path::absolute(&a.common.file)?.display().to_string(),
    };
    let quarry = match (a.quarry, a.format) {
        (Some(q), _) => q,
        (None, FormatArg::Slurm) => matrix::emit::slurm_quarry(),
        (None, _) => "quarry".into(),
    };
    if matches!(a.format, FormatArg::Slurm) && matrix::emit::on_path(&quarry).is_none() {
        // Shown whatever the output: a task that cannot start quarry fails
        // only in Slurm's output files.
        eprintln!(
            "quarry: warning: `{quarry}` is not a program on this machine; the tasks run it on the compute nodes, check that it is there (--quarry PATH)"
        );
    }
    let o = EmitOptions {
        quarry,
        parallel: a.parallel,
        matrix_path,
        out: a.task_output,
        log_dir: a.log_dir,
        runner_image: a.runner_image,
        registry_secret: a.registry_secret,
        runs_on: a.runs_on,
        gpu_runs_on: a.gpu_runs_on,
    };
    let format = match a.format {
        FormatArg::Slurm => Format::Slurm,
        FormatArg::Kubernetes => Format::Kubernetes,
        FormatArg::Github => Format::Github,
    };
    let text = matrix::emit::emit(&m, &p, format, &o);
    match a.output {
        Some(f) => std::fs::write(&f, text).map_err(|e| anyhow::anyhow!("cannot write `{}`: {e}", f.display()))?,
        None => out!("{text}"),
    }
    Ok(0)
}

fn collect(a: CollectArgs) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let m = Matrix::load(&a.common.file)?;
    let registry = matrix::registry_of(&m, given(&a.common))?;
    let cache = open_cache(&a.common, Some(&registry))?;
    let image = build_image(&a.common, &m, a.json, &cache)?;
    let s = shared(&m, cache, image, a.out.join(".cells"))?;
    let r = matrix::collect::collect(&s, &registry, &a.out, &a.log_dir)?;
    if a.json {
        super::print_json(&r)?;
    } else {
        let mut t = Table::new(&["cell", "status", "time", "digest", "size"]).right(2).right(4);
        for c in &r.cells {
            let status = serde_json::to_value(c.status)?.as_str().unwrap_or("").to_string();
            let time = c.seconds.map(|t| format!("{t:.1} s")).unwrap_or_else(|| "-".into());
            let digest = c.digest.as_deref().map(super::short_digest).unwrap_or_else(|| "-".into());
            t.row(vec![c.id.clone(), status, time, digest, super::human_size(c.size)]);
        }
        let mut lines = t.lines().into_iter();
        outln!("{}", lines.next().unwrap_or_default());
        for (c, line) in r.cells.iter().zip(lines) {
            outln!("{line}");
            if let Some(e) = &c.error {
                outln!("    {e}");
            }
            if let Some(log) = &c.log {
                outln!("    its task's output, {}:", log.path.display());
                for line in &log.tail {
                    outln!("      {line}");
                }
            }
        }
        for m in &r.merges {
            let made = m.host.as_ref().map(|h| format!("{} and {} device wheel(s)", h.display(), m.device.len()));
            outln!("merge {} ({}): {}", m.group, m.cells.join(" + "), made.or(m.error.clone()).unwrap_or_default());
        }
        outln!("{}: {} cells, report in {}", r.output.display(), r.cells.len(), r.output.join("report.json").display());
    }
    if let Some(e) = r.merges.iter().find_map(|m| m.error.as_ref().filter(|_| r.incomplete.is_empty())) {
        return Err(anyhow::anyhow!("{e}"));
    }
    if !r.incomplete.is_empty() {
        anyhow::bail!(
            "cells failed or missing: {}; run them again (quarry matrix run --cell ID)",
            r.incomplete.join(", ")
        );
    }
    Ok(0)
}
