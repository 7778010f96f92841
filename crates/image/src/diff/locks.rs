//! What moved between two lock files: per package set (the base, each
//! packages layer), the packages added, removed, up- or downgraded; and
//! the PyPI files whose pin changed.

use super::packages::{changes, PackageChange, Versions};
use crate::distro::pins::PackagePins;
use crate::plan::lockfile::LockFile;
use serde::Serialize;
use std::collections::BTreeSet;

#[derive(Debug, Clone, Serialize)]
pub struct LockDiff {
    /// One entry per package set that changed: `base`, or `layer NAME`.
    pub sets: Vec<SetDiff>,
    pub pypi: Vec<PypiChange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SetDiff {
    pub set: String,
    pub packages: Vec<PackageChange>,
    /// Suites whose signed InRelease differs (the archive moved).
    pub releases_changed: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PypiChange {
    pub requirement: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

fn versions(p: Option<&PackagePins>) -> Versions {
    p.map(|p| p.packages.iter().map(|k| (k.name.clone(), (k.version.clone(), Some(k.sha256.clone())))).collect())
        .unwrap_or_default()
}

fn set_diff(name: String, a: Option<&PackagePins>, b: Option<&PackagePins>) -> Option<SetDiff> {
    let packages = changes(&versions(a), &versions(b));
    let empty = Default::default();
    let (ra, rb) = (a.map(|p| &p.release).unwrap_or(&empty), b.map(|p| &p.release).unwrap_or(&empty));
    let suites: BTreeSet<&String> = ra.keys().chain(rb.keys()).collect();
    let releases_changed: Vec<String> = suites.into_iter().filter(|s| ra.get(*s) != rb.get(*s)).cloned().collect();
    (!packages.is_empty() || !releases_changed.is_empty()).then_some(SetDiff { set: name, packages, releases_changed })
}

pub fn diff(a: &LockFile, b: &LockFile) -> LockDiff {
    let mut sets = Vec::new();
    sets.extend(set_diff("base".into(), a.base.as_ref(), b.base.as_ref()));
    let layers: BTreeSet<&String> = a.layer.keys().chain(b.layer.keys()).collect();
    for l in layers {
        sets.extend(set_diff(format!("layer {l}"), a.layer.get(l), b.layer.get(l)));
    }
    let reqs: BTreeSet<&String> = a.pypi.iter().chain(&b.pypi).map(|p| &p.requirement).collect();
    let file = |l: &LockFile, r: &str| l.pypi.iter().find(|p| p.requirement == r).map(|p| p.file.clone());
    let pypi = reqs
        .into_iter()
        .filter_map(|r| {
            let (from, to) = (file(a, r), file(b, r));
            (from != to).then(|| PypiChange { requirement: r.clone(), from, to })
        })
        .collect();
    LockDiff { sets, pypi }
}
