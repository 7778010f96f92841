//! The abi3 audit: a wheel tagged `abi3` (`cp38-abi3`) promises that its
//! extensions use only CPython's Stable ABI as of the version its Python tag
//! names (3.8 here), so one wheel runs on that Python and every later one.
//! Each Python symbol (`Py*`, `_Py*`) its extensions import must be a
//! Stable ABI function or data item added no later than that version; the
//! list is CPython's own (`policy/stable_abi.toml`, vendored). Like
//! abi3audit, symbols the extension defines itself are not counted.

use super::name::WheelName;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

const STABLE_ABI: &str = include_str!("policy/stable_abi.toml");

/// One Stable ABI item.
#[derive(Debug, Clone, Copy)]
struct Item {
    added: (u32, u32),
}

/// symbol -> item, read once from the vendored file.
fn stable_abi() -> &'static HashMap<String, Item> {
    static TABLE: OnceLock<HashMap<String, Item>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let doc: toml::Table = STABLE_ABI.parse().expect("the vendored stable_abi.toml parses (a unit test checks)");
        let mut out = HashMap::new();
        for kind in ["function", "data"] {
            let Some(items) = doc.get(kind).and_then(|v| v.as_table()) else { continue };
            for (name, fields) in items {
                let added = fields.get("added").and_then(|v| v.as_str()).and_then(parse_version);
                if let Some(added) = added {
                    out.insert(name.clone(), Item { added });
                }
            }
        }
        out
    })
}

/// `3.10` -> (3, 10).
fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The minimum Python an abi3 wheel claims: from `cp38` (`cp3` alone:
/// 3.2, the first Stable ABI). None when the wheel is not tagged abi3.
pub fn claimed_minimum(name: &WheelName) -> Option<(u32, u32)> {
    if !name.abi_tags.iter().any(|t| t == "abi3") {
        return None;
    }
    name.python_tags
        .iter()
        .filter_map(|t| {
            let digits = t.strip_prefix("cp").or_else(|| t.strip_prefix("py"))?;
            let (major, minor) = digits.split_at(1.min(digits.len()));
            let major: u32 = major.parse().ok()?;
            let minor: u32 = if minor.is_empty() { 2 } else { minor.parse().ok()? };
            (major == 3).then_some((major, minor))
        })
        .min()
        .or(Some((3, 2)))
}

/// A symbol outside what the wheel promises.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The ELF file (path inside the wheel).
    pub file: String,
    pub symbol: String,
    /// The version that added it to the Stable ABI; None: it is not part of
    /// the Stable ABI at all.
    pub added: Option<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.added {
            None => write!(f, "{}: {} is not in the Stable ABI", self.file, self.symbol),
            Some(v) => write!(f, "{}: {} joined the Stable ABI in Python {v}", self.file, self.symbol),
        }
    }
}

/// The result of an abi3 audit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Audit {
    /// The minimum Python the wheel claims (`3.8`).
    pub minimum: String,
    pub violations: Vec<Violation>,
}

/// Audit the imports of a wheel's ELF files (path inside the wheel ->
/// undefined dynamic symbols) against the Stable ABI of `minimum`.
pub fn audit(minimum: (u32, u32), imports: &BTreeMap<String, BTreeSet<String>>) -> Audit {
    let table = stable_abi();
    let mut violations = Vec::new();
    for (file, symbols) in imports {
        for s in symbols.iter().filter(|s| s.starts_with("Py") || s.starts_with("_Py")) {
            match table.get(s) {
                Some(item) if item.added <= minimum => {}
                Some(item) => violations.push(Violation {
                    file: file.clone(),
                    symbol: s.clone(),
                    added: Some(format!("{}.{}", item.added.0, item.added.1)),
                }),
                None => violations.push(Violation { file: file.clone(), symbol: s.clone(), added: None }),
            }
        }
    }
    Audit { minimum: format!("{}.{}", minimum.0, minimum.1), violations }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_table_reads() {
        let t = stable_abi();
        assert!(t.len() > 800, "{}", t.len());
        assert_eq!(t["PyArg_ParseTuple"].added, (3, 2));
        assert_eq!(t["PyType_GetModuleByDef"].added, (3, 13));
        assert!(t.contains_key("PyExc_TypeError") && t.contains_key("_Py_Dealloc"));
        assert!(!t.contains_key("PyUnicode_AsUTF8") && !t.contains_key("_PyLong_AsInt"));
        assert_eq!(t["PyUnicode_AsUTF8AndSize"].added, (3, 10));
    }

    #[test]
    fn claims_and_violations() {
        let w = |n: &str| WheelName::parse(n).unwrap();
        assert_eq!(claimed_minimum(&w("x-1-cp38-abi3-manylinux_2_17_x86_64.whl")), Some((3, 8)));
        assert_eq!(claimed_minimum(&w("x-1-cp311-abi3-linux_x86_64.whl")), Some((3, 11)));
        assert_eq!(claimed_minimum(&w("x-1-cp311-cp311-linux_x86_64.whl")), None);
        let imports: BTreeMap<String, BTreeSet<String>> = [(
            "x.abi3.so".to_string(),
            ["PyArg_ParseTuple", "PyUnicode_AsUTF8", "PyType_GetModuleByDef", "memcpy"]
                .map(String::from)
                .into_iter()
                .collect(),
        )]
        .into_iter()
        .collect();
        let a = audit((3, 8), &imports);
        let v: Vec<String> = a.violations.iter().map(|v| v.to_string()).collect();
        assert_eq!(
            v,
            [
                "x.abi3.so: PyType_GetModuleByDef joined the Stable ABI in Python 3.13",
                "x.abi3.so: PyUnicode_AsUTF8 is not in the Stable ABI"
            ]
        );
        assert!(audit((3, 13), &imports).violations.len() == 1);
    }
}
