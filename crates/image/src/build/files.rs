//! A files layer (or a rootfs base): its wheels fetched (pinned, so from
//! the download cache when they are there), its sources read into a tree,
//! packed. A layer whose files the plan left unhashed (a first build, see
//! `KeyHashing`) gets its key from the sha256 of each file as packing read it.

use super::{BuildError, Executor};
use crate::layer::write::HostDigests;
use crate::plan::{Plan, PlanError, PypiFile};
use crate::source::hashes::ContentHasher;
use crate::source::FilesScan;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) fn run(
    exec: &mut Executor,
    plan: &mut Plan,
    i: usize,
    mut scan: FilesScan,
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
    if plan.layers[i].own.is_some() {
        return exec.pack(plan, i, &tree);
    }
    let mut packed = HostDigests::new();
    let blob = exec.pack_blob(plan, i, &tree, Some(&mut packed))?;
    drop(tree);
    let mut hasher = ContentHasher::new(exec.cache.clone(), exec.opts.verify);
    let (own, contents) = crate::trace::time("fingerprint (after packing)", || {
        scan.complete(&mut hasher, exec.opts.source_date_epoch, &packed)
    })?;
    crate::plan::files_keyed(plan, i, &layer, wheels, own, &contents, hasher.files_hashed);
    exec.record(plan, i, blob)
}
