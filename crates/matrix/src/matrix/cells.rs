//! A matrix's cells: every combination of its axes' values (axes in name
//! order, values as written), those matching an `exclude` entry left out,
//! then each `include` entry. A cell's id is made from its values alone
//! (`opt-2_python-cp313`), so it is the same in every run, on every machine
//! and in every scheduler's job description; its index is its place in this
//! list.

use super::definition::{Matrix, Needs};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cell {
    pub id: String,
    pub index: usize,
    /// Axis name -> value.
    pub values: BTreeMap<String, String>,
    pub needs: Needs,
}

/// A value as it appears in an id: letters, digits and `.`; anything else
/// becomes `-`; an empty value is `none`.
fn id_part(v: &str) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect()
}

/// The id of a cell with these values.
pub fn cell_id(values: &BTreeMap<String, String>) -> String {
    if values.is_empty() {
        return "all".into();
    }
    values.iter().map(|(k, v)| format!("{k}-{}", id_part(v))).collect::<Vec<_>>().join("_")
}

fn product(axes: &BTreeMap<String, Vec<String>>) -> Vec<BTreeMap<String, String>> {
    let mut out = vec![BTreeMap::new()];
    for (name, values) in axes {
        let mut next = Vec::with_capacity(out.len() * values.len());
        for partial in &out {
            for v in values {
                let mut m = partial.clone();
                m.insert(name.clone(), v.clone());
                next.push(m);
            }
        }
        out = next;
    }
    out
}

/// The cells of `m`, in order. Two cells with the same values are one: an
/// include naming a cell the axes make already gives it its `needs` (as a
/// GitHub Actions matrix's `include` extends a combination it matches).
pub fn cells(m: &Matrix) -> Vec<Cell> {
    let excluded =
        |values: &BTreeMap<String, String>| m.exclude.iter().any(|e| e.iter().all(|(k, v)| values.get(k) == Some(v)));
    let mut list: Vec<(BTreeMap<String, String>, Needs)> =
        product(&m.axes).into_iter().filter(|v| !excluded(v)).map(|v| (v, m.needs.clone())).collect();
    for (values, needs) in &m.include {
        let needs = needs.clone().unwrap_or_else(|| m.needs.clone());
        match list.iter_mut().find(|(v, _)| v == values) {
            Some((_, n)) => *n = needs,
            None => list.push((values.clone(), needs)),
        }
    }
    list.into_iter()
        .enumerate()
        .map(|(index, (values, needs))| Cell { id: cell_id(&values), index, values, needs })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(text: &str) -> Matrix {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("m.toml");
        std::fs::write(&f, format!("[job]\nkind = \"wheel\"\nsource = \"p\"\nimage = \"i\"\n{text}")).unwrap();
        Matrix::load(&f).unwrap()
    }

    #[test]
    fn every_combination_minus_excludes_plus_includes() {
        let m = matrix(
            "[axes]\ntorch = [\"2.5\", \"2.6\"]\nrocm = [\"6.2\", \"6.3\"]\nbackend = [\"\", \"triton\"]\n\
             [[exclude]]\ntorch = \"2.5\"\nrocm = \"6.3\"\n\
             [[include]]\ntorch = \"2.7\"\nrocm = \"6.4\"\nbackend = \"triton\"\nneeds = { gpus = 1 }\n",
        );
        let c = cells(&m);
        assert_eq!(c.len(), 8 - 2 + 1);
        assert_eq!(c[0].id, "backend-none_rocm-6.2_torch-2.5");
        assert!(c.iter().all(|x| !(x.values["torch"] == "2.5" && x.values["rocm"] == "6.3")));
        let last = c.last().unwrap();
        assert_eq!((last.id.as_str(), last.index, last.needs.gpus), ("backend-triton_rocm-6.4_torch-2.7", 6, 1));
        let ids: std::collections::BTreeSet<&str> = c.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(ids.len(), c.len(), "ids are unique");
        // Stable: the same file gives the same list.
        assert_eq!(cells(&m), c);
    }

    #[test]
    fn ids_are_made_of_safe_characters() {
        let v: BTreeMap<String, String> = [("targets".to_string(), "gfx90a;gfx942".to_string())].into();
        assert_eq!(cell_id(&v), "targets-gfx90a-gfx942");
    }
}
