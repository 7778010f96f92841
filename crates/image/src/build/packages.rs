//! Packages: a `[base.packages]` rootfs, and a packages layer over the
//! layers below (what they lack of the packages it names, their merged
//! dpkg database and a fresh loader cache; see `distro`).

use super::{BuildError, Executor};
use crate::cache::Tier;
use crate::definition::PackagesBase;
use crate::distro::below::Below;
use crate::distro::pins::PackagePins;
use crate::plan::{Plan, PlanError, Work};

fn base_err(plan: &Plan, i: usize, err: crate::distro::DistroError) -> BuildError {
    let file = plan.scopes[plan.layers[i].scope].image.file.display().to_string();
    PlanError::Distro { file, err: Box::new(err) }.into()
}

pub(super) fn base(
    exec: &mut Executor,
    plan: &Plan,
    i: usize,
    base: &PackagesBase,
    pins: &PackagePins,
) -> Result<(), BuildError> {
    let debs = crate::distro::fetch_debs(&base.set, pins, &exec.cache).map_err(|e| base_err(plan, i, e))?;
    let epoch = exec.opts.source_date_epoch;
    let tree = crate::distro::assemble(base, pins, &debs, exec.spool(), epoch).map_err(|e| base_err(plan, i, e))?;
    exec.pack(plan, i, &tree)
}

/// A packages layer. With pins from the lock and the layer in the cache,
/// nothing below is read; otherwise the layers below are read, the pins
/// resolved over them (no lock) or checked against them (lock).
pub(super) fn layer(exec: &mut Executor, plan: &mut Plan, i: usize, reuse: bool) -> Result<bool, BuildError> {
    type Found = Option<(crate::oci::LayerBlob, Tier)>;
    let cached = |exec: &Executor, plan: &Plan| -> Result<Found, BuildError> {
        let Some(k) = plan.layers[i].key.filter(|_| reuse) else { return Ok(None) };
        if exec.is_dry() {
            return Ok(exec.cache.local_layer(&k).map(|b| (b, Tier::Local)));
        }
        Ok(exec.cache.layer(&k, &crate::cache::Sharing::Shared)?.map(|h| (h.value, h.tier)))
    };
    let from_lock = matches!(plan.layers[i].work, Work::Packages { from_lock: true, .. });
    if from_lock {
        if let Some((blob, tier)) = cached(exec, plan)? {
            exec.push(plan.layers[i].name.clone(), blob, Some(tier), 0);
            return Ok(true);
        }
    }
    let blobs: Vec<std::path::PathBuf> = exec.layers.iter().map(|l| exec.cache.blobs().path(&l.digest)).collect();
    let err = |plan: &Plan, e| {
        let Work::Packages { layer, .. } = &plan.layers[i].work else { unreachable!("a packages node") };
        BuildError::from(PlanError::DistroLayer {
            file: layer.file.display().to_string(),
            layer: layer.name.clone(),
            err: Box::new(e),
        })
    };
    let below = Below::read(&blobs, exec.spool()).map_err(|e| err(plan, e))?;
    match &plan.layers[i].work {
        Work::Packages { pins: None, .. } => {
            let spool = exec.spool().to_path_buf();
            crate::plan::resolve_packages(plan, i, &below, &exec.cache, &spool)?;
        }
        Work::Packages { pins: Some(pins), from_lock: true, layer, .. } => {
            let lock = &plan.scopes[plan.layers[i].scope].lock_path;
            crate::distro::check_below(pins, &below, &format!("layer `{}`", layer.name), lock)
                .map_err(|e| err(plan, e))?;
        }
        _ => {}
    }
    if let Some((blob, tier)) = cached(exec, plan)? {
        exec.push(plan.layers[i].name.clone(), blob, Some(tier), 0);
        return Ok(true);
    }
    if exec.is_dry() {
        return Ok(false);
    }
    let Work::Packages { set, pins: Some(pins), .. } = &plan.layers[i].work else { unreachable!("resolved above") };
    let debs = crate::distro::fetch_debs(set, pins, &exec.cache).map_err(|e| err(plan, e))?;
    let epoch = exec.opts.source_date_epoch;
    let tree = crate::distro::assemble_layer(set, pins, &debs, below, &blobs, exec.spool(), epoch)
        .map_err(|e| err(plan, e))?;
    exec.pack(plan, i, &tree)?;
    Ok(true)
}
