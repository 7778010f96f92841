//! `quarry matrix plan`: every cell, its id, index and needs, its key, and
//! whether the registry already holds its product (done cells are left out
//! of what `emit` writes, and `run` builds nothing for them).

use super::cells::{cells, Cell};
use super::definition::{JobKind, Matrix, Needs};
use super::job::{self, CellContext};
use super::product::Products;
use super::MatrixError;
use crate::cache::Cache;
use crate::engine::build_image::BuildImage;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, serde::Serialize)]
pub struct CellPlan {
    pub id: String,
    pub index: usize,
    pub values: BTreeMap<String, String>,
    pub needs: Needs,
    /// Wheel jobs: the local version label its wheels get (`+` and this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_version: Option<String>,
    /// The cell's key; null when it cannot be known before building (an
    /// isolated wheel build without a lock).
    pub key: Option<String>,
    /// The registry holds its product.
    pub done: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MatrixPlan {
    pub matrix: String,
    pub file: PathBuf,
    pub kind: JobKind,
    pub registry: String,
    pub cells: Vec<CellPlan>,
    /// Cells not done.
    pub to_run: usize,
}

/// What every cell shares.
pub struct Shared<'a> {
    pub matrix: &'a Matrix,
    pub cache: Cache,
    pub image: Option<BuildImage>,
    /// Each cell's products go to `<out>/<cell id>`.
    pub out: PathBuf,
    pub gpus: Option<Vec<String>>,
    /// Cells run here (`matrix run`): their GPUs are looked up.
    pub running: bool,
}

impl Shared<'_> {
    pub fn context(&self, cell: &Cell) -> CellContext<'_> {
        CellContext {
            matrix: self.matrix,
            cache: self.cache.clone(),
            image: self.image.clone(),
            out: cell_out(&self.out, cell),
            gpus: self.gpus.clone(),
            running: self.running,
        }
    }
}

pub fn cell_out(out: &Path, cell: &Cell) -> PathBuf {
    out.join(&cell.id)
}

/// A wheel cell's local version label.
fn local_version(m: &Matrix, c: &Cell) -> Option<String> {
    match m.job.kind {
        JobKind::Wheel => m.job.local_version.as_ref().map(|t| super::definition::fill(t, &c.values)),
        _ => None,
    }
}

/// The cell's key (hex), when it can be known before building.
pub fn key_of(shared: &Shared, cell: &Cell) -> Result<Option<String>, MatrixError> {
    let b = job::options(&shared.context(cell), cell)?;
    Ok(b.build_key()?.map(|k| job::cell_key(shared.matrix.job.kind, &cell.id, &k).hex()))
}

pub fn plan(shared: &Shared, registry: &str) -> Result<MatrixPlan, MatrixError> {
    let m = shared.matrix;
    let all = cells(m);
    super::check_cells(m, &all)?;
    let mut products = Products::open(registry)?;
    let mut out = Vec::new();
    for c in &all {
        let key = key_of(shared, c)?;
        let done = match &key {
            Some(k) => products.done(k)?,
            None => false,
        };
        out.push(CellPlan {
            id: c.id.clone(),
            index: c.index,
            values: c.values.clone(),
            needs: c.needs.clone(),
            local_version: local_version(m, c),
            key,
            done,
        });
    }
    let to_run = out.iter().filter(|c| !c.done).count();
    Ok(MatrixPlan {
        matrix: m.name.clone(),
        file: m.file.clone(),
        kind: m.job.kind,
        registry: registry.to_string(),
        cells: out,
        to_run,
    })
}

/// Every cell as not done, keys not computed (`emit --all`, `plan
/// --no-keys`): nothing is asked of the image, the source or the registry.
pub fn every_cell(m: &Matrix, registry: &str) -> Result<MatrixPlan, MatrixError> {
    let all = cells(m);
    super::check_cells(m, &all)?;
    let out: Vec<CellPlan> = all
        .iter()
        .map(|c| CellPlan {
            id: c.id.clone(),
            index: c.index,
            values: c.values.clone(),
            needs: c.needs.clone(),
            local_version: local_version(m, c),
            key: None,
            done: false,
        })
        .collect();
    Ok(MatrixPlan {
        matrix: m.name.clone(),
        file: m.file.clone(),
        kind: m.job.kind,
        registry: registry.to_string(),
        to_run: out.len(),
        cells: out,
    })
}
