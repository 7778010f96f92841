//! Package changes between two sets of `name -> version`, ordered by name,
//! versions compared as dpkg does.

use serde::Serialize;
use std::cmp::Ordering;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageChange {
    pub name: String,
    /// `added`, `removed`, `upgraded`, `downgraded` (or `changed` when the
    /// versions are equal but the file is not: a rebuild).
    pub change: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// A package's version and (when known) the sha256 of its file.
pub type Versions = BTreeMap<String, (String, Option<String>)>;

pub fn changes(a: &Versions, b: &Versions) -> Vec<PackageChange> {
    let mut out = Vec::new();
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for name in names {
        let change = match (a.get(name), b.get(name)) {
            (Some(_), None) => "removed",
            (None, Some(_)) => "added",
            (Some((va, sa)), Some((vb, sb))) => match crate::distro::version::compare(va, vb) {
                Ordering::Less => "upgraded",
                Ordering::Greater => "downgraded",
                Ordering::Equal if sa != sb => "changed",
                Ordering::Equal => continue,
            },
            (None, None) => continue,
        };
        out.push(PackageChange {
            name: name.clone(),
            change,
            from: a.get(name).map(|v| v.0.clone()),
            to: b.get(name).map(|v| v.0.clone()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_dpkg_does() {
        let v = |pairs: &[(&str, &str)]| -> Versions {
            pairs.iter().map(|(n, v)| (n.to_string(), (v.to_string(), None))).collect()
        };
        let a = v(&[("ca-certificates", "20230311"), ("libc6", "2.36-9+deb12u9"), ("gone", "1")]);
        let b = v(&[("ca-certificates", "20230311+deb12u1"), ("libc6", "2.36-9+deb12u10"), ("new", "2")]);
        let c = changes(&a, &b);
        let got: Vec<(&str, &str)> = c.iter().map(|c| (c.name.as_str(), c.change)).collect();
        assert_eq!(
            got,
            [("ca-certificates", "upgraded"), ("gone", "removed"), ("libc6", "upgraded"), ("new", "added")]
        );
        assert!(changes(&a, &a).is_empty());
    }
}
