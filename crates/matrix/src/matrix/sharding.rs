//! Wheel matrices sharded by GPU target: `[job] merge = true` (or
//! `split = "by-target"`) with an axis over GPU targets. Each cell builds
//! the wheel for its own targets (one shard; linked so its host parts do
//! not depend on its device code); the cells that differ only in the
//! target axis form one merge, which `collect` turns into the host and
//! device wheels (`wheel::merge`) that splitting a fat build gives.

use super::cells::Cell;
use super::split_mode::TARGET_AXES;
use std::collections::BTreeMap;

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

#[cfg(test)]
mod tests {
    use super::*;

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
