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
    let (locked, _) = fresh(image, opts)?;
    locked.lock.write(&locked.path).map_err(PlanError::from)?;
    Ok(locked)
}

/// What `quarry lock --update` wrote.
#[derive(Debug, Clone)]
pub struct Updated {
    pub path: PathBuf,
    pub old: LockFile,
    pub lock: LockFile,
    /// Per package set (`base`, or the layer's name): the packages moved.
    pub moved: Vec<(String, Vec<crate::distro::update::Moved>)>,
}

/// Move only the packages `names` (and what their new versions need) of
/// `image`'s existing lock to the archive's current versions; every other
/// pin, and the PyPI pins, stay. A name no package set pins is refused.
pub fn update_image(image: &Image, opts: &BuildOptions, names: &[String]) -> Result<Updated, BuildError> {
    let path = crate::plan::lockfile::lock_path(&image.file);
    let old = LockFile::read(&path).map_err(PlanError::from)?.ok_or_else(|| {
        PlanError::from(LockFileError::Invalid {
            path: path.display().to_string(),
            message: "does not exist: `--update` moves packages of a lock; run `quarry lock` without it first".into(),
        })
    })?;
    let pinned =
        |n: &String| old.base.iter().chain(old.layer.values()).any(|p| p.packages.iter().any(|k| &k.name == n));
    if let Some(n) = names.iter().find(|n| !pinned(n)) {
        return Err(PlanError::from(LockFileError::Invalid {
            path: path.display().to_string(),
            message: format!("pins no package `{n}` in any package set; `--update` moves pinned packages (add it to the definition's `include` and run `quarry lock`)"),
        })
        .into());
    }
    let (fresh, spool) = fresh(image, opts)?;
    let mut lock = old.clone();
    let mut moved = Vec::new();
    let mut one = |label: &str,
                   set: &crate::definition::PackageSet,
                   pins: &mut crate::distro::pins::PackagePins,
                   now: Option<&crate::distro::pins::PackagePins>|
     -> Result<(), BuildError> {
        let Some(now) = now else { return Ok(()) };
        if !names.iter().any(|n| pins.packages.iter().any(|p| &p.name == n)) {
            return Ok(());
        }
        let index = crate::distro::index_now(set, &opts.cache, spool.path())
            .map_err(|err| PlanError::Distro { file: image.file.display().to_string(), err: Box::new(err) })?;
        let (updated, m) = crate::distro::update::update_pins(pins, now, &index, names);
        *pins = updated;
        if !m.is_empty() {
            moved.push((label.to_string(), m));
        }
        Ok(())
    };
    if let (Some(pins), crate::definition::Base::Packages(base)) = (lock.base.as_mut(), &image.base) {
        one("base", &base.set, pins, fresh.lock.base.as_ref())?;
    }
    for (name, pins) in lock.layer.iter_mut() {
        if let Some(set) = image.layers.iter().find(|l| &l.name == name).and_then(|l| l.packages()) {
            one(name, set, pins, fresh.lock.layer.get(name))?;
        }
    }
    lock.write(&path).map_err(PlanError::from)?;
    Ok(Updated { path, old, lock, moved })
}

/// A plan with fresh pins (not written), and a spool for reading indexes.
fn fresh(image: &Image, opts: &BuildOptions) -> Result<(Locked, tempfile::TempDir), BuildError> {
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
    let spool = cache.temp_dir("spool-").map_err(PlanError::from)?;
    Ok((Locked { path: scope.lock_path.clone(), lock, built_to_resolve }, spool))
}
