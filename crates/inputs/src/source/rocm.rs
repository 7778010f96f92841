//! ROCm build artifacts -> the dist tree (the `/opt/rocm` layout): every
//! selected artifact's prefixes overlaid, in artifact-name order. The result
//! is a layer `Tree`, packed by a `rocm`/`rocm_artifacts` source or written
//! to disk by `quarry rocm flatten`.

use super::dir::{DirError, DirOptions};
use crate::layer::{Tree, TreeError};
use crate::rocm_artifacts::{Artifacts, Selection};

#[derive(Debug, thiserror::Error)]
pub enum FlattenError {
    #[error("artifact `{artifact}`: {source}")]
    Dir { artifact: String, source: DirError },
    /// The hardlinks of all the artifacts together.
    #[error("artifact `(all)`: {0}")]
    Hardlinks(#[source] TreeError),
}

/// What flattening saw.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FlattenReport {
    pub artifacts: Vec<String>,
    pub entries: usize,
}

/// Overlay the selected artifacts into `tree` under `dest` (normalized).
pub fn into_tree(
    a: &Artifacts,
    sel: &Selection,
    dest: &[u8],
    owner: Option<(u64, u64)>,
    tree: &mut Tree,
) -> Result<FlattenReport, FlattenError> {
    let mut report = FlattenReport::default();
    let opts = DirOptions { owner, ..DirOptions::default() };
    for art in a.artifacts.iter().filter(|x| sel.takes(&x.name)) {
        let label = art.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for prefix in &art.prefixes {
            let failed = |source| FlattenError::Dir { artifact: label.clone(), source };
            let scan = super::dir::scan(prefix, &opts).map_err(failed)?;
            report.entries += scan.entries.len();
            scan.into_tree(dest, &opts, tree).map_err(failed)?;
        }
        report.artifacts.push(label);
    }
    tree.finalize_hardlinks().map_err(FlattenError::Hardlinks)?;
    Ok(report)
}
