//! `quarry matrix collect`: every cell's product, fetched from the registry
//! and checked, into one directory: wheels side by side with a PEP 503
//! `simple/` index (`pip install --index-url file://DIR/simple NAME`), other
//! products under `<cell id>/`; and a report of every cell (JSON, and a
//! table on stdout). A cell that failed or never ran is named; the others
//! are kept.

use super::cells::{cells, Cell};
use super::definition::JobKind;
use super::plan::{key_of, Shared};
use super::product::{Products, Status};
use super::task_logs::{self, TaskLog};
use super::MatrixError;
use crate::oci::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CellStatus {
    Ok,
    Failed,
    /// No product and no failure: the cell never ran (or its key is unknown).
    Missing,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CollectedCell {
    pub id: String,
    pub status: CellStatus,
    /// The cell's run, as its report says.
    pub seconds: Option<f64>,
    /// Its product artifact's digest.
    pub digest: Option<String>,
    /// Bytes of its products.
    pub size: u64,
    pub products: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A missing cell's scheduler output file and its last lines, when found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<TaskLog>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Collected {
    pub matrix: String,
    pub output: PathBuf,
    pub cells: Vec<CollectedCell>,
    /// Cells that failed or never ran: `collect` exits non-zero when any.
    pub incomplete: Vec<String>,
    /// Merged matrices: each merge's host and device wheels (or why none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merges: Vec<Merged>,
}

impl Collected {
    /// Every cell collected and every merge made.
    pub fn complete(&self) -> bool {
        self.incomplete.is_empty() && self.merges.iter().all(|m| m.error.is_none())
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MatrixError + '_ {
    move |err| MatrixError::Io { path: path.to_path_buf(), err }
}

/// Collect every cell's product into `dir`; a missing cell's task log is
/// looked for in `log_dir` (the directory `emit --log-dir` named).
pub fn collect(shared: &Shared, registry: &str, dir: &Path, log_dir: &Path) -> Result<Collected, MatrixError> {
    let m = shared.matrix;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let scratch = tempfile::Builder::new().prefix(".quarry-collect-").tempdir_in(dir).map_err(io(dir))?;
    let mut products = Products::open(registry)?;
    let mut out = Vec::new();
    // Merged matrices: the shards wait here until their merge is made.
    let shards_dir = scratch.path().join("shards");
    let mut keys = BTreeMap::new();
    for cell in cells(m) {
        let mut c = CollectedCell {
            id: cell.id.clone(),
            status: CellStatus::Missing,
            seconds: None,
            digest: None,
            size: 0,
            products: Vec::new(),
            error: None,
            log: None,
        };
        let key = match key_of(shared, &cell)? {
            Some(k) => k,
            None => {
                c.error = Some("its key is known only once it is built (no lock yet): run it".into());
                out.push(c);
                continue;
            }
        };
        let Some((report, layers, artifact)) = products.report(&key, scratch.path())? else {
            c.error = Some("no product in the registry: it did not run, or did not finish".into());
            c.log = task_logs::find(log_dir, &m.name, &cell.id);
            out.push(c);
            continue;
        };
        keys.insert(cell.id.clone(), key.clone());
        c.seconds = Some(report.seconds);
        c.digest = Some(artifact.to_string());
        if report.status == Status::Failed {
            c.status = CellStatus::Failed;
            c.error = report.error.clone().or_else(|| Some(format!("exit code {}", report.exit_code)));
            out.push(c);
            continue;
        }
        let place = |name: &str| -> PathBuf {
            match (m.job.kind, m.job.merge) {
                (JobKind::Wheel, true) => shards_dir.join(&cell.id).join(name),
                (JobKind::Wheel, false) => dir.join(name),
                _ => dir.join(&cell.id).join(name),
            }
        };
        for layer in &layers {
            let name = layer.title().unwrap_or_default().to_string();
            let safe =
                !name.is_empty() && !name.starts_with('/') && !name.split('/').any(|p| p == ".." || p.is_empty());
            if !safe {
                return Err(MatrixError::Input(format!("cell {}: a product named `{name}` is refused", cell.id)));
            }
            let digest = Digest::parse(&layer.digest).map_err(|e| MatrixError::Input(e.to_string()))?;
            let got = products.download(&digest, layer.size, &format!("{name} of cell {}", cell.id), scratch.path())?;
            let dest = place(&name);
            if let Some(p) = dest.parent() {
                std::fs::create_dir_all(p).map_err(io(p))?;
            }
            std::fs::rename(&got, &dest).map_err(io(&dest))?;
            c.size += layer.size;
            c.products.push(name);
        }
        if let Some(image) = &report.image {
            c.products.push(image.clone());
        }
        c.status = CellStatus::Ok;
        out.push(c);
    }
    let merges = match m.job.merge {
        true => merge_collected(&cells(m), &out, &keys, &shards_dir, dir)?,
        false => Vec::new(),
    };
    if m.job.kind == JobKind::Wheel {
        write_index(dir)?;
    }
    let incomplete = out.iter().filter(|c| c.status != CellStatus::Ok).map(|c| c.id.clone()).collect();
    let collected = Collected { matrix: m.name.clone(), output: dir.to_path_buf(), cells: out, incomplete, merges };
    let report = dir.join("report.json");
    let text = serde_json::to_vec_pretty(&collected).map_err(|e| MatrixError::Input(e.to_string()))?;
    std::fs::write(&report, text).map_err(io(&report))?;
    Ok(collected)
}

/// A project's name as PEP 503 normalizes it (what pip asks the index for):
/// lowercase, each run of `-`, `_` and `.` one `-`.
fn pep503_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// A PEP 503 simple index of the wheels in `dir`, at `dir/simple/`.
fn write_index(dir: &Path) -> Result<(), MatrixError> {
    let mut projects: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let p = e.map_err(io(dir))?.path();
        let file = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let Ok(name) = crate::wheel::name::WheelName::parse(&file) else { continue };
        let sha = crate::oci::digest::sha256_file(&p).map_err(io(&p))?;
        projects.entry(pep503_name(&name.name)).or_default().push((file, sha));
    }
    let simple = dir.join("simple");
    let _ = std::fs::remove_dir_all(&simple);
    let page = |title: &str, links: String| {
        format!("<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>{title}</title></head><body>\n{links}</body></html>\n")
    };
    let mut root = String::new();
    for (project, files) in projects.iter_mut() {
        files.sort();
        root.push_str(&format!("<a href=\"{project}/\">{project}</a>\n"));
        let links: String =
            files.iter().map(|(f, sha)| format!("<a href=\"../../{f}#sha256={sha}\">{f}</a>\n")).collect();
        let d = simple.join(project);
        std::fs::create_dir_all(&d).map_err(io(&d))?;
        std::fs::write(d.join("index.html"), page(&format!("Links for {project}"), links)).map_err(io(&d))?;
    }
    std::fs::create_dir_all(&simple).map_err(io(&simple))?;
    std::fs::write(simple.join("index.html"), page("Simple index", root)).map_err(io(&simple))
}

/// One merge `collect` made (or could not).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Merged {
    pub group: String,
    pub cells: Vec<String>,
    /// The host wheel and the device wheels, in the output directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<PathBuf>,
    pub device: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Merge each group's shards (each cell's wheels under `shards/<cell id>`)
/// into `dir`; `keys` are the cells' keys (named in a refusal). A group
/// with a cell that did not complete is not merged: that is said, and the
/// other groups are.
pub fn merge_collected(
    all: &[Cell],
    collected: &[CollectedCell],
    keys: &BTreeMap<String, String>,
    shards: &Path,
    dir: &Path,
) -> Result<Vec<Merged>, MatrixError> {
    let mut out = Vec::new();
    for (group, cells) in super::sharding::merges(all) {
        let ids: Vec<String> = cells.iter().map(|c| c.id.clone()).collect();
        let mut merged = Merged { group, cells: ids.clone(), host: None, device: Vec::new(), error: None };
        let not_ok: Vec<&str> = ids
            .iter()
            .filter(|id| !collected.iter().any(|c| &c.id == *id && c.status == CellStatus::Ok))
            .map(String::as_str)
            .collect();
        if !not_ok.is_empty() {
            merged.error = Some(format!("not merged: cell {} did not complete", not_ok.join(", ")));
            out.push(merged);
            continue;
        }
        let mut list = Vec::new();
        for id in &ids {
            let d = shards.join(id);
            let mut wheels: Vec<PathBuf> = std::fs::read_dir(&d)
                .map_err(|err| MatrixError::Io { path: d.clone(), err })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "whl"))
                .collect();
            wheels.sort();
            list.extend(
                wheels.into_iter().map(|wheel| crate::wheel::merge::Shard { wheel, build_key: keys.get(id).cloned() }),
            );
        }
        let options = crate::wheel::merge::MergeOptions {
            device_prefix: None,
            families: crate::wheel::split::Families::Auto,
            scheme: crate::code_objects::kpack_writer::Scheme::ZstdPerKernel,
            device_requires: Vec::new(),
            variants: None,
        };
        match crate::wheel::merge::merge(&list, dir, &options) {
            Ok(r) => {
                merged.host = Some(r.host);
                merged.device = r.device.into_iter().map(|d| d.wheel).collect();
            }
            Err(e) => merged.error = Some(e.to_string()),
        }
        out.push(merged);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_links_every_wheel_by_project_with_its_hash() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Foo_Bar-1.0+o2-cp313-cp313-linux_x86_64.whl"), "a").unwrap();
        std::fs::write(d.path().join("foo_bar-1.0+o3-cp313-cp313-linux_x86_64.whl"), "b").unwrap();
        std::fs::write(d.path().join("report.json"), "{}").unwrap();
        write_index(d.path()).unwrap();
        let root = std::fs::read_to_string(d.path().join("simple/index.html")).unwrap();
        assert!(root.contains("href=\"foo-bar/\""), "{root}");
        let page = std::fs::read_to_string(d.path().join("simple/foo-bar/index.html")).unwrap();
        assert_eq!(page.matches("<a href=\"../../").count(), 2, "{page}");
        assert!(page.contains(&format!("#sha256={}", crate::oci::digest::sha256_hex(b"a"))), "{page}");
    }
}
