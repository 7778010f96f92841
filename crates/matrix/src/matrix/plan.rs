//! `quarry matrix plan`: every cell, its id, index and needs, its key, and
//! whether it is done: the registry products go to holds its product (done
//! cells are left out of what `emit` writes, and `run` builds nothing for
//! them), or, when no registry is named, this machine's cache holds its
//! build (a local `matrix run` of it would build nothing). A plan needs no
//! registry.

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
    /// Merged matrices: the merge the cell is a shard of (see `sharding`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_group: Option<String>,
    /// Done: the registry holds its product, or (no registry named) the
    /// local cache holds its build; see [`MatrixPlan::done_in`].
    pub done: bool,
}

/// Where a plan looked for done cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneIn {
    /// The registry products go to: a done cell's product is there.
    Registry,
    /// No registry named: a done cell's build is in the local cache.
    LocalCache,
    /// Keys not computed (`plan --no-keys`, `emit --all`): every cell to run.
    NotLookedUp,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MatrixPlan {
    pub matrix: String,
    pub file: PathBuf,
    pub kind: JobKind,
    /// The registry products go to; empty when none is named.
    pub registry: String,
    pub done_in: DoneIn,
    /// The local cache, when done cells were looked up there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    pub cells: Vec<CellPlan>,
    /// Cells not done.
    pub to_run: usize,
    /// Merged matrices: each merge and the cells (shards) it takes.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub merges: BTreeMap<String, Vec<String>>,
}

/// A cell's merge group, when the matrix merges.
fn group_of(m: &Matrix, c: &Cell) -> Option<String> {
    m.job.merge.then(|| super::sharding::merge_group(c))
}

/// Each merge's cells, when the matrix merges.
fn merges_of(m: &Matrix, cells: &[Cell]) -> BTreeMap<String, Vec<String>> {
    if !m.job.merge {
        return BTreeMap::new();
    }
    super::sharding::merges(cells).into_iter().map(|(g, cs)| (g, cs.iter().map(|c| c.id.clone()).collect())).collect()
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

/// The cell's key (hex), when it can be known before building, and
/// whether the local cache holds its build.
fn key_and_local(shared: &Shared, cell: &Cell) -> Result<(Option<String>, bool), MatrixError> {
    let b = job::options(&shared.context(cell), cell)?;
    let Some(build_key) = b.build_key()? else { return Ok((None, false)) };
    let key = job::cell_key(shared.matrix.job.kind, &cell.id, &build_key).hex();
    Ok((Some(key), b.in_local_cache(&shared.cache, &build_key)?))
}

/// Every cell with its key; done when the registry holds its product, or,
/// with no registry named (`registry` None), when the local cache holds
/// its build.
pub fn plan(shared: &Shared, registry: Option<&str>) -> Result<MatrixPlan, MatrixError> {
    let m = shared.matrix;
    let all = cells(m);
    super::check_cells(m, &all)?;
    let mut products = registry.map(Products::open).transpose()?;
    let mut out = Vec::new();
    for c in &all {
        let (key, done) = match &mut products {
            Some(products) => {
                let key = key_of(shared, c)?;
                let done = match &key {
                    Some(k) => products.done(k)?,
                    None => false,
                };
                (key, done)
            }
            None => key_and_local(shared, c)?,
        };
        out.push(CellPlan {
            id: c.id.clone(),
            index: c.index,
            values: c.values.clone(),
            needs: c.needs.clone(),
            local_version: local_version(m, c),
            key,
            merge_group: group_of(m, c),
            done,
        });
    }
    let to_run = out.iter().filter(|c| !c.done).count();
    Ok(MatrixPlan {
        matrix: m.name.clone(),
        file: m.file.clone(),
        kind: m.job.kind,
        registry: registry.unwrap_or_default().to_string(),
        done_in: if registry.is_some() { DoneIn::Registry } else { DoneIn::LocalCache },
        cache_dir: registry.is_none().then(|| shared.cache.root().to_path_buf()),
        cells: out,
        to_run,
        merges: merges_of(m, &all),
    })
}

/// Every cell as not done, keys not computed (`emit --all`, `plan
/// --no-keys`): nothing is asked of the image, the source or the registry.
pub fn every_cell(m: &Matrix, registry: Option<&str>) -> Result<MatrixPlan, MatrixError> {
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
            merge_group: group_of(m, c),
            done: false,
        })
        .collect();
    Ok(MatrixPlan {
        matrix: m.name.clone(),
        file: m.file.clone(),
        kind: m.job.kind,
        registry: registry.unwrap_or_default().to_string(),
        done_in: DoneIn::NotLookedUp,
        cache_dir: None,
        to_run: out.len(),
        merges: merges_of(m, &all),
        cells: out,
    })
}
