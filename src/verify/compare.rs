//! The given image beside its rebuild: the first layer that differs and,
//! in it, each differing path and what about it (type, mode, owner, size,
//! content, link, mtime; for content, where: [`crate::diff::explain`]); the
//! config fields that differ; and the inputs where the two provenances
//! disagree (a dependency with another digest, one only one side has).

use super::VerifyError;
use crate::diff::explain::{explain, Detail};
use crate::diff::image::{diff, layer_files, ConfigChange};
use crate::provenance::{ResourceDescriptor, Statement};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Files explained byte by byte in the first differing layer, at most.
const EXPLAINED_FILES: usize = 64;
/// Larger files are named, not explained.
const EXPLAINED_SIZE: u64 = 1 << 30;

#[derive(Debug, Clone, Serialize)]
pub struct LayerDifference {
    pub index: usize,
    pub given: Option<String>,
    pub rebuilt: Option<String>,
    pub files: Vec<FileDifference>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileDifference {
    pub path: String,
    /// `added` (only the rebuild has it), `removed` (only the given image), `changed`.
    pub change: &'static str,
    pub what: Vec<&'static str>,
    pub size_given: u64,
    pub size_rebuilt: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
}

/// An input the two provenances record differently.
#[derive(Debug, Clone, Serialize)]
pub struct InputDifference {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub given: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<BTreeMap<String, String>>,
}

pub struct Differences {
    pub config: Vec<ConfigChange>,
    pub layer: Option<LayerDifference>,
}

pub fn images(given: &Path, rebuilt: &Path) -> Result<Differences, VerifyError> {
    let d = diff(given, rebuilt)?;
    let Some(first) = d.layers.iter().find(|l| l.state != "shared") else {
        return Ok(Differences { config: d.config, layer: None });
    };
    let wanted: BTreeSet<String> = first
        .files
        .iter()
        .filter(|f| f.change == "changed" && f.what.contains(&"content"))
        .take(EXPLAINED_FILES)
        .map(|f| f.path.clone())
        .collect();
    let (a, b) = (
        layer_files(given, first.index, &wanted, EXPLAINED_SIZE)?,
        layer_files(rebuilt, first.index, &wanted, EXPLAINED_SIZE)?,
    );
    let files = first
        .files
        .iter()
        .map(|f| FileDifference {
            path: f.path.clone(),
            // The diff's sides are (given, rebuilt): `added` is what only the rebuild has.
            change: f.change,
            what: f.what.clone(),
            size_given: f.size_from,
            size_rebuilt: f.size_to,
            detail: match (a.get(&f.path), b.get(&f.path)) {
                (Some(x), Some(y)) => explain(x, y),
                _ => None,
            },
        })
        .collect();
    Ok(Differences {
        config: d.config,
        layer: Some(LayerDifference {
            index: first.index,
            given: first.from.clone(),
            rebuilt: first.to.clone(),
            files,
        }),
    })
}

/// Where the rebuilt provenance's inputs differ from the given one's.
pub fn inputs(given: &Statement, rebuilt: &Statement) -> Vec<InputDifference> {
    let key = |d: &ResourceDescriptor| d.name.clone().or_else(|| d.uri.clone()).unwrap_or_default();
    let index = |s: &Statement| -> BTreeMap<String, BTreeMap<String, String>> {
        s.predicate.build_definition.resolved_dependencies.iter().map(|d| (key(d), d.digest.clone())).collect()
    };
    let (a, b) = (index(given), index(rebuilt));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .map(|n| InputDifference { name: n.clone(), given: a.get(n).cloned(), rebuilt: b.get(n).cloned() })
        .collect()
}
