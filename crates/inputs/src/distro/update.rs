//! A targeted re-lock of one package set: the named packages move to the
//! versions a fresh resolution picks today, and so does whatever their new
//! versions need that the old pins no longer satisfy (a Depends or
//! Pre-Depends clause no pinned package meets: its first alternative the
//! fresh resolution has moves too, or joins). Every other pin stays as it
//! was, even where the archive has a newer version (`apt-get install
//! --only-upgrade NAME` on a pinned system, not `apt-get upgrade`).

use super::archive::Package;
use super::control::Atom;
use super::pins::{PackagePins, PinnedPackage};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A named package's pins: moved from one version to another, or added.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    pub name: String,
    /// None: the package joins the set (a new version needs it).
    pub from: Option<String>,
    pub to: String,
}

fn satisfies(atom: &Atom, name: &str, version: &str) -> bool {
    name == atom.name && atom.constraint.as_ref().is_none_or(|(rel, want)| rel.holds(version, want))
}

/// The set `old` with the packages `names` (those it holds) and what their
/// new versions need moved to their versions in `fresh`, a resolution of
/// the same set over the index `index` today. The suites' InRelease
/// digests become today's: the moved packages are listed there.
pub fn update_pins(
    old: &PackagePins,
    fresh: &PackagePins,
    index: &[Package],
    names: &[String],
) -> (PackagePins, Vec<Moved>) {
    let mut pinned: BTreeMap<String, PinnedPackage> =
        old.packages.iter().map(|p| (p.name.clone(), p.clone())).collect();
    let fresh_by: BTreeMap<&str, &PinnedPackage> = fresh.packages.iter().map(|p| (p.name.as_str(), p)).collect();
    let by_version: HashMap<(&str, &str), &Package> =
        index.iter().map(|p| ((p.name.as_str(), p.version.as_str()), p)).collect();
    let mut queue: VecDeque<String> = names.iter().filter(|n| pinned.contains_key(n.as_str())).cloned().collect();
    let mut moved = Vec::new();
    while let Some(name) = queue.pop_front() {
        let Some(new) = fresh_by.get(name.as_str()) else { continue };
        let from = pinned.get(&name).map(|p| p.version.clone());
        if from.as_deref() == Some(new.version.as_str()) {
            continue;
        }
        pinned.insert(name.clone(), (*new).clone());
        moved.push(Moved { name: name.clone(), from, to: new.version.clone() });
        let Some(control) = by_version.get(&(new.name.as_str(), new.version.as_str())) else { continue };
        for clause in control.pre_depends.iter().chain(control.depends.iter()) {
            let met = clause.iter().any(|atom| {
                pinned.values().any(|p| {
                    satisfies(atom, &p.name, &p.version)
                        || by_version.get(&(p.name.as_str(), p.version.as_str())).is_some_and(|c| {
                            c.provides.iter().any(|(v, pv)| {
                                v == &atom.name
                                    && atom
                                        .constraint
                                        .as_ref()
                                        .is_none_or(|(rel, want)| pv.as_deref().is_some_and(|pv| rel.holds(pv, want)))
                            })
                        })
                })
            });
            if met {
                continue;
            }
            let wanted = clause.iter().find_map(|atom| {
                fresh_by.values().find(|p| satisfies(atom, &p.name, &p.version)).map(|p| p.name.clone())
            });
            if let Some(w) = wanted {
                queue.push_back(w);
            }
        }
    }
    let mut packages: Vec<PinnedPackage> = pinned.into_values().collect();
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    let release = if moved.is_empty() { old.release.clone() } else { fresh.release.clone() };
    (PackagePins { packages, release, ..old.clone() }, moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distro::control::parse_paragraphs;

    fn index(text: &str) -> Vec<Package> {
        parse_paragraphs(text)
            .iter()
            .map(|p| {
                let mut p = p.clone();
                for (k, v) in [("Filename", "pool/x.deb"), ("SHA256", "00"), ("Size", "1"), ("Architecture", "all")] {
                    if p.get(k).is_none() {
                        p.fields.push((k.into(), v.into()));
                    }
                }
                Package::from_paragraph(&p).unwrap()
            })
            .collect()
    }

    fn pins(list: &[(&str, &str)]) -> PackagePins {
        PackagePins {
            suites: vec!["s".into()],
            architecture: "amd64".into(),
            components: vec!["main".into()],
            variant: None,
            include: vec![],
            below: None,
            release: BTreeMap::from([("s".to_string(), format!("sha256:{}", list.len()))]),
            packages: list
                .iter()
                .map(|(n, v)| PinnedPackage {
                    name: n.to_string(),
                    version: v.to_string(),
                    architecture: "all".into(),
                    suite: Some("s".into()),
                    priority: None,
                    file: format!("pool/{n}_{v}.deb"),
                    sha256: format!("{n}{v}"),
                    size: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn only_the_named_package_and_what_its_new_version_needs_move() {
        let idx = index(
            "Package: app\nVersion: 2\nDepends: lib (>= 2), newdep\n\n\
             Package: lib\nVersion: 2\n\nPackage: newdep\nVersion: 1\n\n\
             Package: other\nVersion: 9\n",
        );
        let old = pins(&[("app", "1"), ("lib", "1"), ("other", "1")]);
        let fresh = pins(&[("app", "2"), ("lib", "2"), ("newdep", "1"), ("other", "9")]);
        let (new, moved) = update_pins(&old, &fresh, &idx, &["app".into()]);
        let got: Vec<(String, String)> = new.packages.iter().map(|p| (p.name.clone(), p.version.clone())).collect();
        let want = [("app", "2"), ("lib", "2"), ("newdep", "1"), ("other", "1")];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
        assert_eq!(moved.len(), 3);
        assert_eq!(moved[2], Moved { name: "newdep".into(), from: None, to: "1".into() });
        assert_eq!(new.release, fresh.release);
        // Already current, or not in the set: nothing moves, the release stays.
        let (same, none) = update_pins(&old, &fresh, &idx, &["other-package".into()]);
        assert!(none.is_empty());
        assert_eq!(same, old);
    }
}
