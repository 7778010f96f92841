//! Choosing the pins a plan uses, per image: from its lock file when it
//! has one (and the plan is not making fresh pins), else resolved or
//! fetched now, which is what its keys need.

use super::lockfile::LockFile;
use super::{PlanError, PypiFile};
use crate::cache::Cache;
use crate::definition::{Layer, PackageSet, PackagesBase, PypiRequest};
use crate::distro::pins::PackagePins;
use crate::distro::DistroError;
use crate::oci::Digest;
use crate::pypi::PypiPin;
use std::path::Path;

/// A PyPI request's file for a plan. `lock`: the image's lock as read;
/// `made`: the pins this plan makes or uses (a lock written from it holds
/// exactly those). With `fresh`, pip is asked again unless the definition
/// pins the file; otherwise the definition's or the lock's pin is used
/// without running pip, and an unpinned request is fetched now (with a
/// warning: pip chooses the file on every build).
#[allow(clippy::too_many_arguments)]
pub(super) fn pypi_file(
    cache: &Cache,
    lock: Option<&LockFile>,
    made: &mut Vec<PypiPin>,
    fresh: bool,
    request: &PypiRequest,
    def_pin: Option<&Digest>,
    layer: &Layer,
    field: &str,
) -> Result<PypiFile, PlanError> {
    let err =
        |err| PlanError::Pypi { file: layer.file.display().to_string(), field: field.to_string(), err: Box::new(err) };
    let def_hex = def_pin.map(|d| d.hex());
    let lock_pin = if fresh { None } else { lock.and_then(|l| crate::pypi::find_pin(&l.pypi, request)) };
    let pin = crate::pypi::pinned_sha(request, def_hex.as_deref(), lock_pin).map_err(err)?;
    let (sha256, file) = match (&pin, fresh) {
        (Some(sha), false) => {
            let file = lock_pin
                .filter(|l| l.sha256 == *sha)
                .map(|l| l.file.clone())
                .or_else(|| crate::pypi::cached(cache, sha).map(|f| f.file));
            (sha.clone(), file)
        }
        _ => {
            if pin.is_none() && !fresh {
                log::warn!(
                    "layer `{}`: `{}` is not pinned; pip chooses the file on every build (run `quarry lock` on the image, or add `sha256`)",
                    layer.name, request.requirement
                );
            }
            let f = crate::pypi::fetch(cache, request, pin.as_deref()).map_err(err)?;
            (f.sha256, Some(f.file))
        }
    };
    let sha = Digest::from_hex(&sha256).map_err(|e| {
        err(crate::pypi::PypiError::Other { requirement: request.requirement.clone(), message: e.to_string() })
    })?;
    if let Some(file) = &file {
        if crate::pypi::find_pin(made, request).is_none() {
            made.push(PypiPin {
                requirement: request.requirement.clone(),
                format: request.format,
                platform: request.platform.clone(),
                python: request.python.clone(),
                file: file.clone(),
                sha256: sha.hex(),
            });
        }
    }
    Ok(PypiFile { request: request.clone(), sha256: sha, file })
}

/// A packages base's pins: fresh, from the lock, or (no lock) resolved now.
pub(super) fn base_pins(
    lock: Option<&LockFile>,
    lock_path: &Path,
    base: &PackagesBase,
    fresh: bool,
    cache: &Cache,
    spool: &Path,
) -> Result<(PackagePins, Option<String>), Box<DistroError>> {
    if let (Some(file), false) = (lock, fresh) {
        let pins = file.base.clone().ok_or_else(|| DistroError::Lock {
            lock: lock_path.display().to_string(),
            message: "has no pins for the `packages` base; run `quarry lock` on the image again".into(),
        })?;
        pins.check_matches(&base.set, Some(base.variant), lock_path, "the base")?;
        return Ok((pins, None));
    }
    let pins = crate::distro::resolve_now(&base.set, Some(base.variant), &[], None, cache, spool)?;
    let note = (!fresh).then(|| "not locked: resolved against the archive as it is now (run `quarry lock`)".into());
    Ok((pins, note))
}

/// A packages layer's pins from the lock (`None`: to be resolved over the
/// layers below). A lock that exists must pin the layer.
pub(super) fn layer_pins(
    lock: Option<&LockFile>,
    lock_path: &Path,
    name: &str,
    set: &PackageSet,
    fresh: bool,
) -> Result<Option<PackagePins>, Box<DistroError>> {
    let Some(file) = lock.filter(|_| !fresh) else { return Ok(None) };
    let what = format!("layer `{name}`");
    let pins = file.layer.get(name).cloned().ok_or_else(|| DistroError::Lock {
        lock: lock_path.display().to_string(),
        message: format!("has no pins for the packages {what}; run `quarry lock` on the image again"),
    })?;
    pins.check_matches(set, None, lock_path, &what)?;
    Ok(Some(pins))
}
