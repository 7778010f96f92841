//! Does `pip install HOST[device-<target>]` pull every wheel the runtime
//! takes the target's code from? The extra's requirements, then the plain
//! requirements of every wheel they name, within the install set. A PEP 817
//! variant host wheel also pulls the requirements whose
//! `"P" in variant_properties` marker names one of its properties (a
//! variant-aware installer picks it for the machine and needs no extra).

use crate::code_objects::target_id::TargetId;
pub use crate::pypi::metadata::{variant_properties, Metadata, Requirement};
use std::collections::BTreeSet;

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
    use crate::pypi::metadata::normalize_name;

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
