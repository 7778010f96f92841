//! A files layer (or a rootfs base): its wheels fetched (pinned, so from
//! the download cache when they are there), its sources read into a tree,
//! packed.

use super::{BuildError, Executor};
use crate::plan::{Plan, PlanError, PypiFile};
use crate::source::FilesScan;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) fn run(
    exec: &mut Executor,
    plan: &Plan,
    i: usize,
    scan: FilesScan,
    wheels: &BTreeMap<usize, PypiFile>,
) -> Result<(), BuildError> {
    let layer = scan.layer().clone();
    let mut paths: BTreeMap<usize, PathBuf> = BTreeMap::new();
    for (j, w) in wheels {
        let fetched =
            crate::pypi::fetch(&exec.cache, &w.request, Some(&w.sha256.hex())).map_err(|err| PlanError::Pypi {
                file: layer.file.display().to_string(),
                field: format!("{}source[{j}].pypi", layer.field_prefix),
                err: Box::new(err),
            })?;
        paths.insert(*j, fetched.path);
    }
    let (tree, report) = crate::trace::time("tree (into_tree)", || scan.into_tree(&paths, exec.spool()))?;
    if report.dropped_devices > 0 {
        log::warn!(
            "layer `{}`: dropped {} device node(s); set `devices = true` on the source to keep them",
            layer.name,
            report.dropped_devices
        );
    }
    exec.pack(plan, i, &tree)
}
