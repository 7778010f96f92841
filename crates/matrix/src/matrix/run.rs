//! `quarry matrix run`: one cell, the one its scheduler (or `--cell`,
//! `--index`) names. It builds through the shared cache (a cell another
//! machine built is taken from there), pushes its product to the registry
//! as an OCI artifact (by digest, tagged by the cell's key) and writes its
//! report beside its products. A failed build pushes its report alone, so
//! `collect` can name it; the exit status is the build's. With no registry
//! named, nothing is pushed: the products and the report stay in the
//! output directory (and the build in the local cache).

use super::cells::Cell;
use super::job;
use super::plan::Shared;
use super::product::{CellReport, Products, Status};
use super::MatrixError;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// This machine's name, for reports.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// Where a cell's report is written: beside its products' directory.
pub fn report_path(out: &Path, cell: &Cell) -> PathBuf {
    out.join(format!("{}.json", cell.id))
}

fn write_report(path: &Path, r: &CellReport) -> Result<(), MatrixError> {
    let io = |err| MatrixError::Io { path: path.to_path_buf(), err };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let text = serde_json::to_vec_pretty(r).map_err(|e| MatrixError::Input(e.to_string()))?;
    std::fs::write(path, text).map_err(io)
}

/// Run `cell`; the report, and the build's error when it failed (its
/// report says so too and was pushed, when a registry is named). Errors
/// before a report can be pushed (the registry unreachable) are returned
/// as errors.
pub fn run_cell(
    shared: &Shared,
    registry: Option<&str>,
    cell: &Cell,
) -> Result<(CellReport, Option<MatrixError>), MatrixError> {
    let started = Instant::now();
    let m = shared.matrix;
    let mut products = registry.map(Products::open).transpose()?;
    let mut report = CellReport {
        matrix: m.name.clone(),
        cell: cell.id.clone(),
        index: cell.index,
        values: cell.values.clone(),
        kind: m.job.kind,
        key: None,
        status: Status::Ok,
        exit_code: 0,
        error: None,
        seconds: 0.0,
        build_seconds: 0.0,
        cached: false,
        products: Vec::new(),
        image: None,
        artifact: None,
        host: host(),
    };
    let scratch = tempfile::tempdir().map_err(|err| MatrixError::Io { path: std::env::temp_dir(), err })?;
    let failure = match attempt(shared, registry, cell, &mut report) {
        Ok(files) => {
            report.seconds = started.elapsed().as_secs_f64();
            if let Some(products) = &mut products {
                let pushed =
                    crate::trace::time("cell: push products", || products.push(&report, &files, scratch.path()))?;
                report.artifact = Some(pushed);
            }
            None
        }
        Err(e) => {
            report.status = Status::Failed;
            report.exit_code = e.exit_code();
            report.error = Some(e.to_string());
            report.products.clear();
            report.seconds = started.elapsed().as_secs_f64();
            if let Some(products) = &mut products {
                report.artifact = Some(products.push(&report, &[], scratch.path())?);
            }
            Some(e)
        }
    };
    write_report(&report_path(&shared.out, cell), &report)?;
    Ok((report, failure))
}

/// Build the cell into `report`; the files to push.
fn attempt(
    shared: &Shared,
    registry: Option<&str>,
    cell: &Cell,
    report: &mut CellReport,
) -> Result<Vec<(String, PathBuf)>, MatrixError> {
    let m = shared.matrix;
    let cx = shared.context(cell);
    let build = job::options(&cx, cell)?;
    let cell_key = |b: &job::CellBuild| -> Result<Option<String>, MatrixError> {
        Ok(b.build_key()?.map(|k| job::cell_key(m.job.kind, &cell.id, &k).hex()))
    };
    // Known before building for most jobs; a failed build reports it too.
    let lock_before = build.lock_bytes();
    report.key = crate::trace::time("cell: key before building", || cell_key(&build)).ok().flatten();
    let outcome = crate::trace::time("cell: build (lookups, session, commits)", || build.run(&cx.out))?;
    // Known now for every job: an isolated wheel build may have written its
    // lock. With the lock as it was, the key is the one above (asking the
    // engine again for the image's id can wait seconds on a busy engine).
    let key = match &report.key {
        Some(k) if build.lock_bytes() == lock_before => Some(k.clone()),
        _ => crate::trace::time("cell: key after building", || cell_key(&build))?,
    };
    report.key = key.clone();
    report.cached = outcome.cached;
    report.build_seconds = outcome.build_seconds;
    report.products = outcome.files.iter().map(|(f, _)| f.clone()).collect();
    // An image job's image goes to the registry; with none named, its layout stays in the output.
    if let (Some(layout), Some(registry)) = (&outcome.layout, registry) {
        let tag = format!("image-{}", key.as_deref().unwrap_or(&cell.id));
        let reference = crate::registry::Reference::parse(&format!("{registry}:{tag}"))
            .map_err(crate::registry::RegistryError::from)?;
        let opts = crate::registry::push::PushOptions {
            plain_http: crate::registry::pull::plain_http_default(&reference),
            chunk_size: 64 << 20,
            progress: crate::progress::Progress::hidden(),
            sign: None,
        };
        let pushed = crate::registry::push::push_image(layout, &reference, None, &opts)?;
        report.image = Some(format!("{registry}@{}", pushed.digest));
    }
    Ok(outcome.files.iter().map(|(f, p)| (f.name.clone(), p.clone())).collect())
}
