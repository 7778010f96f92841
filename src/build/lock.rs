//! `quarry lock`: a plan with fresh pins, written to `IMAGE.lock`. Nothing
//! is built to make it, except where a packages layer must be resolved over
//! the layers below it and those are not in the cache yet: then the
//! executor builds exactly those layers first, and the result says so.

use super::{BuildError, BuildOptions, Executor};
use crate::definition::Image;
use crate::plan::lockfile::{LockFile, LockFileError};
use crate::plan::{PinMode, PlanError, Work};
use std::path::PathBuf;

/// What `quarry lock` wrote.
#[derive(Debug, Clone)]
pub struct Locked {
    pub path: PathBuf,
    pub lock: LockFile,
    /// Per packages layer resolved over layers that had to be built first:
    /// the layer and the layers built.
    pub built_to_resolve: Vec<(String, Vec<String>)>,
}

/// Pin every package and PyPI file of `image` afresh and write its lock.
pub fn lock_image(image: &Image, opts: &BuildOptions) -> Result<Locked, BuildError> {
    let cache = &opts.cache;
    let mut plan = crate::plan::make(image, &opts.plan_options(PinMode::Fresh))?;
    let top = plan.scopes.len() - 1;
    let mut exec = Executor::new(opts, cache, false)?;
    let mut built_to_resolve = Vec::new();
    for i in 0..plan.layers.len() {
        let unresolved = matches!(plan.layers[i].work, Work::Packages { pins: None, .. });
        if plan.layers[i].scope != top || !unresolved {
            continue;
        }
        let before = exec.built.len();
        exec.run(&mut plan, i)?;
        let built = exec.built[before..].to_vec();
        let blobs: Vec<PathBuf> = exec.layers.iter().map(|l| cache.blobs().path(&l.digest)).collect();
        let below = crate::distro::below::Below::read(&blobs, exec.spool()).map_err(|err| PlanError::DistroLayer {
            file: plan.scopes[top].image.file.display().to_string(),
            layer: plan.layers[i].name.clone(),
            err: Box::new(err),
        })?;
        let spool = exec.spool().to_path_buf();
        crate::plan::resolve_packages(&mut plan, i, &below, cache, &spool)?;
        if !built.is_empty() {
            built_to_resolve.push((plan.layers[i].name.clone(), built));
        }
    }
    let scope = plan.top();
    let lock = scope.pins.clone();
    if lock.base.is_none() && lock.layer.is_empty() && lock.pypi.is_empty() {
        return Err(PlanError::from(LockFileError::Invalid {
            path: scope.lock_path.display().to_string(),
            message: format!(
                "has nothing to pin: `{}` has no `[base.packages]` table, no `packages` layer source and no `pypi` source or input (other inputs are pinned in the definition by sha256)",
                image.file.display()
            ),
        })
        .into());
    }
    lock.write(&scope.lock_path).map_err(PlanError::from)?;
    Ok(Locked { path: scope.lock_path.clone(), lock, built_to_resolve })
}
