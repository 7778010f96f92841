//! Planning a packages layer: its pins from the lock, or resolved over the
//! layers below (now, when they are all in the cache; else when built).

use super::super::keys;
use super::super::pins;
use super::super::{Node, NodeKind, Plan, PlanError, PlanOptions, Work};
use super::{configure_layer, deb_inputs, Planner};
use crate::cache::key::Key;
use crate::definition::{Layer, PackageSet};
use crate::plan::lockfile::LockFile;
use std::path::Path;

impl Planner<'_> {
    pub(super) fn packages(
        &mut self,
        scope: usize,
        layer: &Layer,
        set: &PackageSet,
        lock: Option<&LockFile>,
    ) -> Result<(), PlanError> {
        let fresh = self.scopes[scope].fresh;
        let path = self.scopes[scope].lock_path.clone();
        let derr =
            |err| PlanError::DistroLayer { file: layer.file.display().to_string(), layer: layer.name.clone(), err };
        let pins = pins::layer_pins(lock, &path, &layer.name, set, fresh).map_err(derr)?;
        let mirror = crate::distro::mirrors(set).map_err(Box::new).map_err(derr)?;
        if let Some(p) = &pins {
            self.scopes[scope].pins.layer.insert(layer.name.clone(), p.clone());
        }
        let history = format!("quarry: layer {} (packages {} {})", layer.name, set.suite(), set.include.join(" "));
        let from_lock = pins.is_some();
        let own = pins.as_ref().map(|p| keys::packages_layer(&layer.name, set, p, &mirror));
        let inputs = pins.as_ref().map(deb_inputs).unwrap_or_default();
        let note = pins
            .is_none()
            .then(|| "resolved over the layers below it once they are built (no pins in the lock)".to_string());
        let work = Work::Packages { layer: Box::new(layer.clone()), set: set.clone(), pins, from_lock };
        let archive = super::archive(set, mirror).map_err(derr)?;
        let n = self.push(scope, layer.name.clone(), NodeKind::Packages, Some(history), work);
        n.own = own;
        n.inputs = inputs;
        n.archive = Some(archive);
        if let Work::Packages { pins, .. } = &n.work {
            n.pins = pins.clone();
        }
        n.note = note;
        if set.configure == crate::definition::Configure::Engine {
            let field = format!("{}source.packages.configure.", layer.field_prefix);
            let script = crate::distro::engine_configure_script(&[], &Default::default());
            let l = configure_layer(&format!("{}-configure", layer.name), &layer.file, &field, script);
            self.configure(scope, l)?;
        }
        Ok(())
    }
}

/// Resolve the packages layers whose pins are not in a lock but whose
/// layers below are all in the cache: reading those layers and the
/// archive's index is what their key needs.
pub(super) fn resolve_over_cached(plan: &mut Plan, opts: &PlanOptions, spool: &Path) -> Result<(), PlanError> {
    for i in 0..plan.layers.len() {
        let Work::Packages { pins: None, .. } = &plan.layers[i].work else { continue };
        let below_keys: Option<Vec<Key>> = plan.layers[..i].iter().map(|n| n.key).collect();
        let Some(below_keys) = below_keys else { continue };
        let mut blobs = Vec::new();
        let mut all = true;
        for (n, k) in plan.layers[..i].iter().zip(&below_keys) {
            match &n.work {
                Work::Oci { .. } | Work::Registry { .. } => {
                    all = false; // their blobs are listed by their manifests, read when built
                }
                // A layer only the registry tier has is pulled: this key needs it.
                _ => match opts.cache.layer(k, &crate::cache::Sharing::unless_networked(n.network))? {
                    Some(hit) => blobs.push(opts.cache.blobs().path(&hit.value.digest)),
                    None => all = false,
                },
            }
        }
        if !all {
            continue;
        }
        let below = crate::distro::below::Below::read(&blobs, spool).map_err(|err| layer_err(&plan.layers[i], err))?;
        resolve_packages(plan, i, &below, &opts.cache, spool)?;
    }
    Ok(())
}

fn layer_err(n: &Node, err: crate::distro::DistroError) -> PlanError {
    let (file, layer) = match &n.work {
        Work::Packages { layer, .. } => (layer.file.display().to_string(), layer.name.clone()),
        _ => (String::new(), n.name.clone()),
    };
    PlanError::DistroLayer { file, layer, err: Box::new(err) }
}

/// Resolve packages node `i` over `below` (the layers under it, built):
/// its pins, own key and the keys above it are then known.
pub fn resolve_packages(
    plan: &mut Plan,
    i: usize,
    below: &crate::distro::below::Below,
    cache: &crate::cache::Cache,
    spool: &Path,
) -> Result<(), PlanError> {
    let n = &plan.layers[i];
    let Work::Packages { layer, set, .. } = &n.work else { unreachable!("a packages node") };
    let pins = crate::distro::resolve_over(set, below, cache, spool).map_err(|e| layer_err(n, e))?;
    let mirror = crate::distro::mirrors(set).map_err(|e| layer_err(n, e))?;
    let own = keys::packages_layer(&layer.name, set, &pins, &mirror);
    let name = layer.name.clone();
    let scope = n.scope;
    plan.scopes[scope].pins.layer.insert(name, pins.clone());
    let n = &mut plan.layers[i];
    n.inputs = deb_inputs(&pins);
    n.pins = Some(pins.clone());
    n.own = Some(own);
    n.note =
        Some(format!("resolved now over the layers below (dpkg status {})", pins.below.as_deref().unwrap_or("none")));
    if let Work::Packages { pins: slot, .. } = &mut n.work {
        *slot = Some(pins);
    }
    plan.rekey();
    Ok(())
}
