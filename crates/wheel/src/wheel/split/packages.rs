//! Which device wheels a split makes and what their METADATA and the host
//! wheel's METADATA say. A target's code goes to the wheel of its package
//! key: the processor (`gfx942`; features stay inside the archive names),
//! or, for code built for an LLVM generic processor, the sub-family or
//! family rocm-bootstrap gives that generic (`gfx11-generic` -> `gfx11`).
//! With families, a target's device wheel requires the wheels of its
//! sub-family and family that the split makes, and every target whose
//! chain reaches a made wheel gets a `device-<target>` extra; `device-all`
//! requires every device wheel. Names are spelled as rocm-bootstrap's
//! `device_dist_name` does: `{prefix}-{key}`, `_` becoming `-`.

use crate::code_objects::packaging_chain::{self, Chain};
use crate::code_objects::target_id::TargetId;
use std::collections::{BTreeMap, BTreeSet};

/// Whether parent packages (sub-family, family) come into play.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Families {
    /// rocm-bootstrap's packaging chain.
    Auto,
    /// One wheel per key; no chain.
    None,
}

/// How wide a device wheel is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Target,
    SubFamily,
    Family,
    /// A generic processor with no group (with `--families none`).
    Generic,
}

/// The package key of code built for `arch` (a full target id), and its level.
pub fn key_of(arch: &TargetId, families: Families) -> (String, Level) {
    if arch.is_generic() {
        if families == Families::Auto {
            if let Some(group) = packaging_chain::generic_group(&arch.processor) {
                let level = if packaging_chain::is_family(group) { Level::Family } else { Level::SubFamily };
                return (group.to_string(), level);
            }
        }
        return (arch.processor.clone(), Level::Generic);
    }
    let owner = packaging_chain::chain(&arch.processor).map_or(arch.processor.clone(), |c| c.target.to_string());
    (owner, Level::Target)
}

/// `{prefix}-{key}` with `_` as `-`.
pub fn dist_name(prefix: &str, key: &str) -> String {
    format!("{prefix}-{}", key.replace('_', "-"))
}

/// The chain of a target key, when families are on and rocm-bootstrap knows it.
fn chain(key: &str, families: Families) -> Option<Chain> {
    (families == Families::Auto).then(|| packaging_chain::chain(key)).flatten()
}

/// The device wheels' requirements on each other: for each key made, the
/// other made keys its wheel requires (a target's sub-family and family).
pub fn parents(keys: &BTreeSet<String>, families: Families) -> BTreeMap<String, Vec<String>> {
    keys.iter()
        .map(|k| {
            let ps = chain(k, families)
                .map(|c| {
                    [c.sub_family, c.family].into_iter().filter(|p| keys.contains(*p)).map(str::to_string).collect()
                })
                .unwrap_or_default();
            (k.clone(), ps)
        })
        .collect()
}

/// The lines the host wheel's METADATA gains: `Requires-Dist:
/// rocm-bootstrap` (which installers use to pick the device extra), then
/// per target `Provides-Extra: device-T` with the wheels of T's chain
/// that were made, then `device-all`.
pub fn host_metadata_lines(prefix: &str, version: &str, keys: &BTreeSet<String>, families: Families) -> Vec<String> {
    let mut lines = vec!["Requires-Dist: rocm-bootstrap".to_string()];
    // Targets with an extra: the made target keys, and with families every
    // target rocm-bootstrap knows whose chain reaches a made wheel.
    let mut extras: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for k in keys {
        if packaging_chain::members(k).is_empty() || chain(k, families).is_some() {
            extras.entry(k.clone()).or_default();
        }
    }
    if families == Families::Auto {
        for t in packaging_chain::known_targets() {
            let c = packaging_chain::chain(t).expect("a known target");
            if [c.sub_family, c.family].iter().any(|g| keys.contains(*g)) {
                extras.entry(c.target.to_string()).or_default();
            }
        }
    }
    for (target, wheels) in extras.iter_mut() {
        let chain_keys: Vec<String> = match chain(target, families) {
            Some(c) => [c.target, c.sub_family, c.family].iter().map(|s| s.to_string()).collect(),
            None => vec![target.clone()],
        };
        wheels.extend(chain_keys.into_iter().filter(|k| keys.contains(k)));
    }
    let key_order =
        |t: &String| (packaging_chain::known_targets().position(|k| k == t).unwrap_or(usize::MAX), t.clone());
    let mut ordered: Vec<(&String, &Vec<String>)> = extras.iter().collect();
    ordered.sort_by_key(|(t, _)| key_order(t));
    for (target, wheels) in ordered {
        lines.push(format!("Provides-Extra: device-{target}"));
        for k in wheels {
            lines.push(format!("Requires-Dist: {} == {version}; extra == \"device-{target}\"", dist_name(prefix, k)));
        }
    }
    lines.push("Provides-Extra: device-all".to_string());
    let all: BTreeSet<String> = keys.iter().map(|k| dist_name(prefix, k)).collect();
    for d in all {
        lines.push(format!("Requires-Dist: {d} == {version}; extra == \"device-all\""));
    }
    lines
}

/// Insert `lines` at the end of METADATA's headers (before the body).
pub fn add_to_metadata(text: &str, lines: &[String]) -> String {
    let block: String = lines.iter().map(|l| format!("{l}\n")).collect();
    match text.find("\n\n") {
        Some(i) => format!("{}{}{}", &text[..i + 1], block, &text[i + 1..]),
        None if text.ends_with('\n') || text.is_empty() => format!("{text}{block}"),
        None => format!("{text}\n{block}"),
    }
}

/// The `--device-requires-dist` templates for the device wheel of `key`:
/// `@GFXARCH@` becomes the key; a template naming it is for target wheels
/// only (it names per-target packages, `rocm-sdk-device-<target>`, which
/// exist for targets; a family wheel is installed beside a target wheel
/// that carries them), as ROCm's splitter does.
pub fn device_requires(templates: &[String], key: &str, level: Level) -> Vec<String> {
    templates
        .iter()
        .filter(|t| !t.contains("@GFXARCH@") || level == Level::Target)
        .map(|t| t.replace("@GFXARCH@", key))
        .collect()
}

/// A device wheel's METADATA: its host, then `extra` (`--device-requires-dist`),
/// then the family wheels it needs.
pub fn device_metadata(
    dist: &str,
    version: &str,
    host: &str,
    key: &str,
    parents: &[String],
    prefix: &str,
    extra: &[String],
) -> String {
    let mut m = format!(
        "Metadata-Version: 2.4\nName: {dist}\nVersion: {version}\nSummary: AMD GPU device code ({key}) for {host}\n\
         Requires-Dist: {host} == {version}\n"
    );
    for e in extra {
        m.push_str(&format!("Requires-Dist: {e}\n"));
    }
    for p in parents {
        m.push_str(&format!("Requires-Dist: {} == {version}\n", dist_name(prefix, p)));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_requires_expand_for_targets_and_skip_families() {
        let t = ["rocm-sdk-device-@GFXARCH@ == 7.1".to_string(), "numpy>=1".to_string()];
        assert_eq!(device_requires(&t, "gfx942", Level::Target), ["rocm-sdk-device-gfx942 == 7.1", "numpy>=1"]);
        assert_eq!(device_requires(&t, "gfx11", Level::Family), ["numpy>=1"]);
        assert_eq!(device_requires(&t, "gfx12_0", Level::SubFamily), ["numpy>=1"]);
        let extra = device_requires(&t[..1], "gfx942", Level::Target);
        let m = device_metadata("p-device-gfx942", "1.0", "p", "gfx942", &["gfx9".into()], "p-device", &extra);
        let lines: Vec<&str> = m.lines().filter(|l| l.starts_with("Requires-Dist")).collect();
        assert_eq!(
            lines,
            [
                "Requires-Dist: p == 1.0",
                "Requires-Dist: rocm-sdk-device-gfx942 == 7.1",
                "Requires-Dist: p-device-gfx9 == 1.0"
            ]
        );
    }

    fn keys(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keys_follow_processors_and_generic_groups() {
        let k = |s: &str, f| key_of(&TargetId::parse(s).unwrap(), f);
        assert_eq!(k("gfx90a:xnack+", Families::Auto), ("gfx90a".into(), Level::Target));
        assert_eq!(k("gfx11-generic", Families::Auto), ("gfx11".into(), Level::Family));
        assert_eq!(k("gfx9-generic", Families::Auto), ("gfx9_0".into(), Level::SubFamily));
        assert_eq!(k("gfx11-generic", Families::None), ("gfx11-generic".into(), Level::Generic));
        assert_eq!(k("gfx803", Families::Auto), ("gfx803".into(), Level::Target));
        assert_eq!(dist_name("torch-device", "gfx9_0"), "torch-device-gfx9-0");
    }

    #[test]
    fn host_extras_name_every_target_and_device_all() {
        let lines = host_metadata_lines("p-device", "1.0", &keys(&["gfx942", "gfx1100", "gfx803"]), Families::Auto);
        assert_eq!(
            lines,
            [
                "Requires-Dist: rocm-bootstrap",
                "Provides-Extra: device-gfx942",
                "Requires-Dist: p-device-gfx942 == 1.0; extra == \"device-gfx942\"",
                "Provides-Extra: device-gfx1100",
                "Requires-Dist: p-device-gfx1100 == 1.0; extra == \"device-gfx1100\"",
                "Provides-Extra: device-gfx803",
                "Requires-Dist: p-device-gfx803 == 1.0; extra == \"device-gfx803\"",
                "Provides-Extra: device-all",
                "Requires-Dist: p-device-gfx1100 == 1.0; extra == \"device-all\"",
                "Requires-Dist: p-device-gfx803 == 1.0; extra == \"device-all\"",
                "Requires-Dist: p-device-gfx942 == 1.0; extra == \"device-all\"",
            ]
        );
        // A family wheel (generic code) gives every member target an extra that pulls it.
        let lines = host_metadata_lines("p-device", "1.0", &keys(&["gfx1100", "gfx11"]), Families::Auto);
        assert!(lines.contains(&"Requires-Dist: p-device-gfx11 == 1.0; extra == \"device-gfx1151\"".to_string()));
        assert!(lines.contains(&"Requires-Dist: p-device-gfx11 == 1.0; extra == \"device-gfx1100\"".to_string()));
        assert!(lines.contains(&"Requires-Dist: p-device-gfx1100 == 1.0; extra == \"device-gfx1100\"".to_string()));
        assert_eq!(parents(&keys(&["gfx1100", "gfx11"]), Families::Auto)["gfx1100"], ["gfx11"]);
        assert!(parents(&keys(&["gfx1100", "gfx11"]), Families::None)["gfx1100"].is_empty());
    }

    #[test]
    fn metadata_lines_go_before_the_body() {
        let m = add_to_metadata("Name: x\nVersion: 1\n\nbody\n", &["A: b".into()]);
        assert_eq!(m, "Name: x\nVersion: 1\nA: b\n\nbody\n");
        assert_eq!(add_to_metadata("Name: x\n", &["A: b".into()]), "Name: x\nA: b\n");
    }
}
