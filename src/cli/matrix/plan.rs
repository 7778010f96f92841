//! `quarry matrix plan`: the cells, their keys and whether each is done;
//! it builds nothing it was not asked to (the job's image: `--build-image`).

use super::{build_image, given, open_cache, shared, Common, PlanArgs};
use crate::cache::Cache;
use crate::cli::image_arg;
use crate::cli::table::Table;
use crate::matrix::plan::{DoneIn, MatrixPlan};
use crate::matrix::{self, Matrix};
use std::path::PathBuf;

/// The layers of the job's shared image the cache lacks (None: it has
/// them all, or the job has no such image to build).
fn image_layers_to_build(c: &Common, m: &Matrix, cache: &Cache) -> anyhow::Result<Option<Vec<String>>> {
    if m.job.kind == matrix::definition::JobKind::Image || m.job.image_is_template() {
        return Ok(None);
    }
    image_arg::layers_to_build(&m.job.image, &c.sets, cache)
}

fn print_plan(p: &MatrixPlan) {
    let mut t = Table::new(&["index", "cell", "key", "state", "gpus", "cpus", "memory"]);
    for c in &p.cells {
        let key = match (&c.key, p.done_in) {
            (Some(k), _) => k[..12].to_string(),
            (None, DoneIn::NotLookedUp) => "-".to_string(),
            (None, _) => "(unknown)".to_string(),
        };
        let state = if c.done { "done" } else { "to run" };
        let n = &c.needs;
        t.row(vec![
            c.index.to_string(),
            c.id.clone(),
            key,
            state.to_string(),
            n.gpus.to_string(),
            n.cpus.to_string(),
            n.memory.to_string(),
        ]);
    }
    for line in t.lines() {
        outln!("{line}");
    }
    let why = match (p.done_in, &p.cache_dir) {
        (DoneIn::Registry, _) => format!("done: its product is in {}", p.registry),
        (DoneIn::LocalCache, dir) => format!(
            "no registry named: done = its build is in the local cache{}",
            dir.as_ref().map(|d| format!(" {}", d.display())).unwrap_or_default()
        ),
        (DoneIn::NotLookedUp, _) if p.registry.is_empty() => "keys not computed: done cells are not looked up".into(),
        (DoneIn::NotLookedUp, _) => format!("keys not computed: done cells are not looked up in {}", p.registry),
    };
    outln!("{} of {} cells to run ({why})", p.to_run, p.cells.len());
    for (group, cells) in &p.merges {
        outln!("merge {group}: {} (collect merges them into host and device wheels)", cells.join(" + "));
    }
}

pub(super) fn plan(a: PlanArgs) -> anyhow::Result<i32> {
    crate::cli::set_output_mode(a.json, false);
    let m = Matrix::load(&a.common.file)?;
    let named = matrix::registry_named(&m, given(&a.common));
    // A plan builds nothing it was not asked to: the job's image only with
    // --build-image (cells' keys need its digest), and it says so first.
    // The cache only when keys are asked for (opened once).
    let cache = if a.no_keys { None } else { Some(open_cache(&a.common, named.as_deref())?) };
    let unbuilt = match &cache {
        Some(cache) => image_layers_to_build(&a.common, &m, cache)?,
        None => None,
    };
    let keyless = a.no_keys || (unbuilt.is_some() && !a.build_image);
    if let Some(layers) = &unbuilt {
        let list = layers.join(", ");
        if a.build_image {
            log::info!(
                "building the job's image `{}` first ({} layer(s): {list}): the cells' keys need its digest",
                m.job.image,
                layers.len()
            );
        } else {
            log::warn!(
                "the job's image `{}` is not built ({} layer(s) to make or fetch: {list}), and the cells' keys need its digest: no keys computed; build it (`quarry build {}`) or give --build-image",
                m.job.image,
                layers.len(),
                m.job.image
            );
        }
    }
    let p = match cache {
        // Nothing is asked of the registry; it is named when known.
        Some(cache) if !keyless => {
            let image = build_image(&a.common, &m, a.json, &cache)?;
            let s = shared(&m, cache, image, PathBuf::from("matrix-out"))?;
            matrix::plan::plan(&s, named.as_deref())?
        }
        _ => matrix::plan::every_cell(&m, named.as_deref())?,
    };
    if a.json {
        crate::cli::print_json(&p)?;
    } else {
        print_plan(&p);
    }
    Ok(0)
}
