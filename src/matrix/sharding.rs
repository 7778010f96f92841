//! Wheel matrices sharded by GPU target: `[job] merge = true` (or
//! `split = "by-target"`) with an axis over GPU targets. Each cell builds
//! the wheel for its own targets (one shard; linked so its host parts do
//! not depend on its device code); the cells that differ only in the
//! target axis form one merge, which `collect` turns into the host and
//! device wheels (`wheel::merge`) that splitting a fat build gives.

use super::cells::Cell;
use super::collect::{CellStatus, CollectedCell};
use super::definition::JobKind;
use super::MatrixError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Axes that carry the GPU target list: quarry's own `targets`, or one
/// named after a variable builds read it from (the axis `pytorch_rocm_arch`
/// sets `PYTORCH_ROCM_ARCH`).
pub const TARGET_AXES: [&str; 5] = ["targets", "pytorch_rocm_arch", "gpu_targets", "amdgpu_targets", "gpu_archs"];

/// `split` as a matrix file may write it: `true`/`false`, or `"by-target"`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum RawSplit {
    Flag(bool),
    Mode(String),
}

/// How a wheel job's products are split: (split each wheel, merge shards).
pub fn resolve(
    split: Option<RawSplit>,
    merge: bool,
    kind: JobKind,
    axes: &BTreeMap<String, Vec<String>>,
) -> Result<(bool, bool), (&'static str, String)> {
    let (split, by_target) = match split {
        None | Some(RawSplit::Flag(false)) => (false, false),
        Some(RawSplit::Flag(true)) => (true, false),
        Some(RawSplit::Mode(m)) if m == "by-target" => (false, true),
        Some(RawSplit::Mode(m)) => {
            return Err(("job.split", format!("`{m}`: give true, false or \"by-target\" (shards merged by collect)")))
        }
    };
    let merge = merge || by_target;
    if (split || merge) && kind != JobKind::Wheel {
        let field = if split { "job.split" } else { "job.merge" };
        return Err((field, "only wheel jobs split their products into host and device wheels".into()));
    }
    if split && merge {
        return Err(("job.split", "a merged matrix splits once, when collect merges: leave split out".into()));
    }
    if merge && target_axis(axes).is_none() {
        return Err((
            "job.merge",
            format!(
                "merging shards needs an axis over GPU targets (one of: {}), one target set per value",
                TARGET_AXES.join(", ")
            ),
        ));
    }
    Ok((split, merge))
}

/// The matrix's axis of GPU targets, when it has one.
pub fn target_axis(axes: &BTreeMap<String, Vec<String>>) -> Option<&'static str> {
    TARGET_AXES.iter().copied().find(|a| axes.contains_key(*a))
}

/// The merge a cell belongs to: its values less the target axis, as a cell
/// id (`python-cp313`; `all` when the targets are the only axis).
pub fn merge_group(cell: &Cell) -> String {
    let mut values = cell.values.clone();
    for a in TARGET_AXES {
        values.remove(a);
    }
    super::cells::cell_id(&values)
}

/// The cells of each merge, by group, in cell order.
pub fn merges(cells: &[Cell]) -> BTreeMap<String, Vec<&Cell>> {
    let mut out: BTreeMap<String, Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        out.entry(merge_group(c)).or_default().push(c);
    }
    out
}

/// One merge `collect` made (or could not).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Merged {
    pub group: String,
    pub cells: Vec<String>,
    /// The host wheel and the device wheels, in the output directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<PathBuf>,
    pub device: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Merge each group's shards (each cell's wheels under `shards/<cell id>`)
/// into `dir`; `keys` are the cells' keys (named in a refusal). A group
/// with a cell that did not complete is not merged: that is said, and the
/// other groups are.
pub fn merge_collected(
    all: &[Cell],
    collected: &[CollectedCell],
    keys: &BTreeMap<String, String>,
    shards: &Path,
    dir: &Path,
) -> Result<Vec<Merged>, MatrixError> {
    let mut out = Vec::new();
    for (group, cells) in merges(all) {
        let ids: Vec<String> = cells.iter().map(|c| c.id.clone()).collect();
        let mut merged = Merged { group, cells: ids.clone(), host: None, device: Vec::new(), error: None };
        let not_ok: Vec<&str> = ids
            .iter()
            .filter(|id| !collected.iter().any(|c| &c.id == *id && c.status == CellStatus::Ok))
            .map(String::as_str)
            .collect();
        if !not_ok.is_empty() {
            merged.error = Some(format!("not merged: cell {} did not complete", not_ok.join(", ")));
            out.push(merged);
            continue;
        }
        let mut list = Vec::new();
        for id in &ids {
            let d = shards.join(id);
            let mut wheels: Vec<PathBuf> = std::fs::read_dir(&d)
                .map_err(|err| MatrixError::Io { path: d.clone(), err })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "whl"))
                .collect();
            wheels.sort();
            list.extend(
                wheels.into_iter().map(|wheel| crate::wheel::merge::Shard { wheel, build_key: keys.get(id).cloned() }),
            );
        }
        let options = crate::wheel::merge::MergeOptions {
            device_prefix: None,
            families: crate::wheel::split::Families::Auto,
            scheme: crate::code_objects::kpack_writer::Scheme::ZstdPerKernel,
        };
        match crate::wheel::merge::merge(&list, dir, &options) {
            Ok(r) => {
                merged.host = Some(r.host);
                merged.device = r.device.into_iter().map(|d| d.wheel).collect();
            }
            Err(e) => merged.error = Some(e.to_string()),
        }
        out.push(merged);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axes(names: &[&str]) -> BTreeMap<String, Vec<String>> {
        names.iter().map(|n| (n.to_string(), vec!["x".to_string()])).collect()
    }

    #[test]
    fn split_and_merge_are_read_and_checked() {
        let t = axes(&["targets", "python"]);
        assert_eq!(resolve(None, false, JobKind::Wheel, &t), Ok((false, false)));
        assert_eq!(resolve(Some(RawSplit::Flag(true)), false, JobKind::Wheel, &t), Ok((true, false)));
        assert_eq!(resolve(Some(RawSplit::Mode("by-target".into())), false, JobKind::Wheel, &t), Ok((false, true)));
        assert_eq!(resolve(None, true, JobKind::Wheel, &axes(&["pytorch_rocm_arch"])), Ok((false, true)));
        assert_eq!(resolve(None, true, JobKind::Wheel, &axes(&["python"])).unwrap_err().0, "job.merge");
        assert_eq!(resolve(None, true, JobKind::Kernel, &t).unwrap_err().0, "job.merge");
        assert_eq!(
            resolve(Some(RawSplit::Mode("sideways".into())), false, JobKind::Wheel, &t).unwrap_err().0,
            "job.split"
        );
        assert_eq!(resolve(Some(RawSplit::Flag(true)), true, JobKind::Wheel, &t).unwrap_err().0, "job.split");
    }

    #[test]
    fn cells_differing_only_in_targets_merge_together() {
        let cell = |values: &[(&str, &str)]| {
            let values: BTreeMap<String, String> = values.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Cell { id: super::super::cells::cell_id(&values), index: 0, values, needs: Default::default() }
        };
        let cells = vec![
            cell(&[("targets", "gfx90a"), ("python", "cp311")]),
            cell(&[("targets", "gfx942"), ("python", "cp311")]),
            cell(&[("targets", "gfx90a"), ("python", "cp313")]),
        ];
        let m = merges(&cells);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["python-cp311", "python-cp313"]);
        assert_eq!(m["python-cp311"].len(), 2);
        assert_eq!(merge_group(&cell(&[("targets", "gfx90a")])), "all");
    }
}
