//! Does `pip install HOST[device-<target>]` pull every wheel the runtime
//! takes the target's code from? The extra's requirements, then the plain
//! requirements of every wheel they name, within the install set. A PEP 817
//! variant host wheel also pulls the requirements whose
//! `"P" in variant_properties` marker names one of its properties (a
//! variant-aware installer picks it for the machine and needs no extra).

use crate::code_objects::target_id::TargetId;
use crate::wheel::metadata::header_values;
use crate::wheel::name::normalize_name;
use std::collections::BTreeSet;

/// One `Requires-Dist`: the project (normalized) and the extra it is under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub name: String,
    pub extra: Option<String>,
    /// The variant property its marker asks for (`amd :: gfx_arch :: gfx942`).
    pub variant: Option<String>,
}

/// What the check needs of a METADATA file.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// Normalized.
    pub name: String,
    pub shown: String,
    pub extras: Vec<String>,
    pub requires: Vec<Requirement>,
    /// A variant wheel's properties (from its `variant.json`); empty for others.
    pub variant_properties: BTreeSet<String>,
}

impl Metadata {
    pub fn parse(text: &str) -> Metadata {
        let shown = header_values(text, "Name").first().map(|s| s.to_string()).unwrap_or_default();
        let requires = header_values(text, "Requires-Dist")
            .into_iter()
            .map(|r| {
                let (req, marker) = r.split_once(';').unwrap_or((r, ""));
                let end = req.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(req.len());
                Requirement { name: normalize_name(&req[..end]), extra: extra_of(marker), variant: variant_of(marker) }
            })
            .collect();
        let extras = header_values(text, "Provides-Extra").into_iter().map(str::to_string).collect();
        Metadata { name: normalize_name(&shown), shown, extras, requires, variant_properties: BTreeSet::new() }
    }
}

/// The property of a `"P" in variant_properties` marker.
fn variant_of(marker: &str) -> Option<String> {
    let before = marker.split_once("in variant_properties")?.0.trim_end();
    let quote = before.chars().last().filter(|c| *c == '"' || *c == '\'')?;
    let inner = &before[..before.len() - 1];
    inner.rfind(quote).map(|start| inner[start + 1..].to_string())
}

/// The properties of a wheel's `variant.json` (`namespace :: feature ::
/// value` of its variants; a wheel holds one).
pub fn variant_properties(json: &[u8]) -> BTreeSet<String> {
    let doc: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    let mut out = BTreeSet::new();
    for namespaces in doc["variants"].as_object().into_iter().flat_map(|v| v.values()) {
        for (ns, features) in namespaces.as_object().into_iter().flatten() {
            for (feature, values) in features.as_object().into_iter().flatten() {
                for v in values.as_array().into_iter().flatten().filter_map(|v| v.as_str()) {
                    out.insert(format!("{ns} :: {feature} :: {v}"));
                }
            }
        }
    }
    out
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
    let by_variant = |r: &Requirement| r.variant.as_ref().is_some_and(|p| h.variant_properties.contains(p));
    if !h.extras.contains(&extra) && !h.requires.iter().any(by_variant) {
        return vec![format!("`{}` has no `{extra}` extra; its code for {target} is in {}", h.shown, holders())];
    }
    let mut pulled: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = h
        .requires
        .iter()
        .filter(|r| r.extra.as_deref() == Some(extra.as_str()) || by_variant(r))
        .map(|r| r.name.clone())
        .collect();
    while let Some(name) = todo.pop() {
        if !pulled.insert(name.clone()) {
            continue;
        }
        for m in set.iter().filter(|m| m.name == name) {
            todo.extend(m.requires.iter().filter(|r| r.extra.is_none() && r.variant.is_none()).map(|r| r.name.clone()));
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
            Requirement {
                name: normalize_name("torch-x-device-gfx942"),
                extra: Some("device-gfx942".into()),
                variant: None
            }
        );
        assert_eq!(m.requires[1], Requirement { name: normalize_name("numpy"), extra: None, variant: None });
    }

    #[test]
    fn a_variant_host_pulls_what_its_property_selects() {
        let mut host = Metadata::parse(
            "Name: p\nRequires-Dist: p-device-gfx942 == 1; \"amd :: gfx_arch :: gfx942\" in variant_properties\n\
             Requires-Dist: p-device-gfx1100 == 1; \"amd :: gfx_arch :: gfx1100\" in variant_properties\n",
        );
        assert_eq!(host.requires[0].variant.as_deref(), Some("amd :: gfx_arch :: gfx942"));
        let json = br#"{"variants": {"gfx942": {"amd": {"gfx_arch": ["gfx942"]}}}}"#;
        host.variant_properties = variant_properties(json);
        let d942 = Metadata::parse("Name: p-device-gfx942\nRequires-Dist: p == 1\n");
        let d1100 = Metadata::parse("Name: p-device-gfx1100\nRequires-Dist: p == 1\n");
        let t = |s: &str| TargetId::parse(s).unwrap();
        assert!(pulled(&[&host, &d942, &d1100], 0, &[1].into(), &t("gfx942")).is_empty());
        // gfx1100's wheel: its marker does not apply to the gfx942 variant, and there is no extra.
        let p = pulled(&[&host, &d942, &d1100], 0, &[2].into(), &t("gfx1100"));
        assert!(p[0].contains("does not pull `p-device-gfx1100`"), "{p:?}");
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
