//! Does `pip install HOST[device-<target>]` pull every wheel the runtime
//! takes the target's code from? The extra's requirements, then the plain
//! requirements of every wheel they name, within the install set.

use crate::code_objects::target_id::TargetId;
use crate::wheel::metadata::header_values;
use crate::wheel::name::normalize_name;
use std::collections::BTreeSet;

/// One `Requires-Dist`: the project (normalized) and the extra it is under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub name: String,
    pub extra: Option<String>,
}

/// What the check needs of a METADATA file.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// Normalized.
    pub name: String,
    pub shown: String,
    pub extras: Vec<String>,
    pub requires: Vec<Requirement>,
}

impl Metadata {
    pub fn parse(text: &str) -> Metadata {
        let shown = header_values(text, "Name").first().map(|s| s.to_string()).unwrap_or_default();
        let requires = header_values(text, "Requires-Dist")
            .into_iter()
            .map(|r| {
                let (req, marker) = r.split_once(';').unwrap_or((r, ""));
                let end = req.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(req.len());
                Requirement { name: normalize_name(&req[..end]), extra: extra_of(marker) }
            })
            .collect();
        let extras = header_values(text, "Provides-Extra").into_iter().map(str::to_string).collect();
        Metadata { name: normalize_name(&shown), shown, extras, requires }
    }
}

/// The extra a marker selects (`extra == "device-gfx942"`), if any.
fn extra_of(marker: &str) -> Option<String> {
    let at = marker.find("extra")?;
    let rest = marker[at + "extra".len()..].trim_start().strip_prefix("==")?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let rest = &rest[1..];
    rest.find(quote).map(|end| rest[..end].to_string())
}

/// What installing wheel `host`'s `device-<target>` extra misses of
/// `needed` (indices into `set`, the wheels the code was found in).
pub fn pulled(set: &[&Metadata], host: usize, needed: &BTreeSet<usize>, target: &TargetId) -> Vec<String> {
    let others: Vec<usize> = needed.iter().copied().filter(|&w| w != host).collect();
    if others.is_empty() {
        return Vec::new();
    }
    let extra = format!("device-{}", target.processor);
    let h = set[host];
    let holders = || others.iter().map(|&w| set[w].shown.clone()).collect::<Vec<_>>().join(", ");
    if !h.extras.contains(&extra) {
        return vec![format!("`{}` has no `{extra}` extra; its code for {target} is in {}", h.shown, holders())];
    }
    let mut pulled: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> =
        h.requires.iter().filter(|r| r.extra.as_deref() == Some(extra.as_str())).map(|r| r.name.clone()).collect();
    while let Some(name) = todo.pop() {
        if !pulled.insert(name.clone()) {
            continue;
        }
        for m in set.iter().filter(|m| m.name == name) {
            todo.extend(m.requires.iter().filter(|r| r.extra.is_none()).map(|r| r.name.clone()));
        }
    }
    others
        .into_iter()
        .filter(|&w| !pulled.contains(&set[w].name))
        .map(|w| {
            format!(
                "`pip install {}[{extra}]` does not pull `{}`, which holds code the runtime loads for {target}: \
                 a Requires-Dist on it is missing",
                h.shown, set[w].shown
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_and_their_extras_parse() {
        let m = Metadata::parse(
            "Name: Torch_X\nProvides-Extra: device-gfx942\n\
             Requires-Dist: torch-x-device-gfx942 == 1.0; extra == \"device-gfx942\"\nRequires-Dist: numpy>=1\n\nbody",
        );
        assert_eq!(m.name, normalize_name("torch-x"));
        assert_eq!(
            m.requires[0],
            Requirement { name: normalize_name("torch-x-device-gfx942"), extra: Some("device-gfx942".into()) }
        );
        assert_eq!(m.requires[1], Requirement { name: normalize_name("numpy"), extra: None });
    }

    #[test]
    fn a_device_wheel_must_pull_its_family_wheel() {
        let host = Metadata::parse("Name: p\nProvides-Extra: device-gfx1100\nRequires-Dist: p-device-gfx1100 == 1; extra == \"device-gfx1100\"\n");
        let dev = Metadata::parse("Name: p-device-gfx1100\nRequires-Dist: p == 1\n");
        let fam = Metadata::parse("Name: p-device-gfx11\nRequires-Dist: p == 1\n");
        let t = TargetId::parse("gfx1100").unwrap();
        let needed: BTreeSet<usize> = [1, 2].into();
        let problems = pulled(&[&host, &dev, &fam], 0, &needed, &t);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("p-device-gfx11`"), "{problems:?}");
        let dev_ok =
            Metadata::parse("Name: p-device-gfx1100\nRequires-Dist: p == 1\nRequires-Dist: p-device-gfx11 == 1\n");
        assert!(pulled(&[&host, &dev_ok, &fam], 0, &needed, &t).is_empty());
        let bare = Metadata::parse("Name: p\n");
        assert!(pulled(&[&bare, &dev, &fam], 0, &needed, &t)[0].contains("no `device-gfx1100` extra"));
    }
}
