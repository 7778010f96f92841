//! PEP 817 variant wheels (`--variants`): beside the classic host wheel,
//! whose `device-<target>` extras any installer understands, one host
//! wheel per GPU target labelled with it
//! (`torch-2.9-cp312-cp312-linux_x86_64-gfx942.whl`) for installers that
//! pick a variant by the machine's properties (`amd :: gfx_arch :: gfx942`).
//!
//! What ROCm's splitter writes, and where we differ on purpose:
//! - METADATA: the classic lines, and after each `extra == "device-T"`
//!   requirement (not `device-all`) the same requirement under
//!   `"amd :: gfx_arch :: T" in variant_properties`, as ROCm's splitter
//!   does; every variant wheel carries all of them (only its own
//!   property matches when it is installed), so their METADATA is the same.
//! - `variant.json`: ROCm's splitter writes one `-variant.whl` whose
//!   `variant.json` lists a variant per target. PEP 817 (and `variantlib`,
//!   which refuses it) has one variant per wheel, named by the label in the
//!   file name, and the list of all of them in the index-level
//!   `{name}-{version}-variants.json`. We write that: each wheel's
//!   `variant.json` holds its own variant, and `-variants.json` beside the
//!   wheels holds what ROCm's `variant.json` holds, key for key.
//! - Which targets: every target with a `device-<target>` extra, so also
//!   the targets served only by a family wheel (ROCm's splitter lists the
//!   target wheels it made only, so a gfx1151 user of a gfx11 family wheel
//!   gets no variant there).
//! - Schema: `pep817` (default) is PEP 817's form, as ROCm writes it
//!   (`install-time`, `default-priorities.property`); `wheelnext-0.2` is the
//!   earlier wheelnext schema v0.2.0 that PyPI's `variantlib` 0.2 reads, which
//!   refuses those two keys: the same variants without them.

use crate::wheel::name::variant_label_ok as label_ok;
use std::collections::{BTreeMap, BTreeSet};

/// The provider namespace and feature of a GPU target property.
pub const NAMESPACE: &str = "amd";
pub const FEATURE: &str = "gfx_arch";
const PLUGIN_API: &str = "amd_variant_provider.plugin:AMDVariantPlugin";
const PROVIDER_REQUIRES: &str = "amd-variant-provider >= 1.0";

/// Which draft of the variant metadata to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schema {
    Pep817,
    #[serde(rename = "wheelnext-0.2")]
    Wheelnext02,
}

impl Schema {
    pub fn name(self) -> &'static str {
        match self {
            Schema::Pep817 => "pep817",
            Schema::Wheelnext02 => "wheelnext-0.2",
        }
    }

    /// The schema a provenance statement records (`variants`: its name;
    /// absent in statements of splits without variants).
    pub fn recorded(v: &serde_json::Value) -> Option<Schema> {
        [Schema::Pep817, Schema::Wheelnext02].into_iter().find(|s| v.as_str() == Some(s.name()))
    }
}

/// The targets that get a variant wheel: those of the extras (the lines
/// `Provides-Extra: device-T`, not `device-all`) whose name can be a label.
pub fn targets(host_lines: &[String]) -> BTreeSet<String> {
    host_lines
        .iter()
        .filter_map(|l| l.strip_prefix("Provides-Extra: device-"))
        .filter(|t| *t != "all" && label_ok(t))
        .map(str::to_string)
        .collect()
}

/// The classic lines with, after each `extra == "device-T"` requirement of
/// a target in `targets`, the same requirement under T's variant property.
pub fn with_markers(host_lines: &[String], targets: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(host_lines.len() * 2);
    for line in host_lines {
        out.push(line.clone());
        let Some((requirement, extra)) = line.split_once("; extra == \"device-") else { continue };
        let target = extra.trim_end_matches('"');
        if line.starts_with("Requires-Dist: ") && targets.contains(target) {
            out.push(format!("{requirement}; \"{NAMESPACE} :: {FEATURE} :: {target}\" in variant_properties"));
        }
    }
    out
}

#[derive(serde::Serialize)]
struct Provider {
    #[serde(rename = "install-time", skip_serializing_if = "Option::is_none")]
    install_time: Option<bool>,
    #[serde(rename = "plugin-api")]
    plugin_api: &'static str,
    requires: Vec<&'static str>,
}

type Properties = BTreeMap<&'static str, BTreeMap<&'static str, Vec<String>>>;

#[derive(serde::Serialize)]
struct Priorities {
    namespace: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    property: Option<Properties>,
}

/// Field order as ROCm's splitter writes it.
#[derive(serde::Serialize)]
struct Document {
    providers: BTreeMap<&'static str, Provider>,
    #[serde(rename = "default-priorities")]
    priorities: Priorities,
    variants: BTreeMap<String, Properties>,
}

fn property(values: Vec<String>) -> Properties {
    BTreeMap::from([(NAMESPACE, BTreeMap::from([(FEATURE, values)]))])
}

/// The variant metadata of `targets` (all of them: the index-level
/// `-variants.json`) or of `only` (a wheel's `variant.json`), as JSON text
/// (two-space indents and a final newline, as ROCm's splitter writes it).
pub fn document(targets: &BTreeSet<String>, only: Option<&str>, schema: Schema) -> String {
    let all: Vec<String> = targets.iter().cloned().collect();
    let pep817 = schema == Schema::Pep817;
    let doc = Document {
        providers: BTreeMap::from([(
            NAMESPACE,
            Provider {
                install_time: pep817.then_some(true),
                plugin_api: PLUGIN_API,
                requires: vec![PROVIDER_REQUIRES],
            },
        )]),
        priorities: Priorities { namespace: vec![NAMESPACE], property: pep817.then(|| property(all.clone())) },
        variants: all
            .iter()
            .filter(|t| only.is_none_or(|o| o == t.as_str()))
            .map(|t| (t.clone(), property(vec![t.clone()])))
            .collect(),
    };
    serde_json::to_string_pretty(&doc).expect("plain data serializes") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn markers_follow_each_target_extra_but_not_device_all() {
        let lines: Vec<String> = [
            "Requires-Dist: rocm-bootstrap",
            "Provides-Extra: device-gfx942",
            "Requires-Dist: p-device-gfx942 == 1.0; extra == \"device-gfx942\"",
            "Requires-Dist: p-device-gfx9 == 1.0; extra == \"device-gfx942\"",
            "Provides-Extra: device-all",
            "Requires-Dist: p-device-gfx942 == 1.0; extra == \"device-all\"",
        ]
        .map(String::from)
        .to_vec();
        let t = targets(&lines);
        assert_eq!(t, set(&["gfx942"]));
        let m = with_markers(&lines, &t);
        assert_eq!(m.len(), lines.len() + 2);
        assert_eq!(m[3], "Requires-Dist: p-device-gfx942 == 1.0; \"amd :: gfx_arch :: gfx942\" in variant_properties");
        assert_eq!(m[5], "Requires-Dist: p-device-gfx9 == 1.0; \"amd :: gfx_arch :: gfx942\" in variant_properties");
        assert!(!m.iter().any(|l| l.contains("device-all") && l.contains("variant_properties")));
    }

    #[test]
    fn a_wheel_holds_its_own_variant_and_the_index_all() {
        let t = set(&["gfx942", "gfx1100"]);
        let index: serde_json::Value = serde_json::from_str(&document(&t, None, Schema::Pep817)).unwrap();
        assert_eq!(
            index["default-priorities"]["property"]["amd"]["gfx_arch"],
            serde_json::json!(["gfx1100", "gfx942"])
        );
        assert_eq!(index["variants"].as_object().unwrap().len(), 2);
        assert_eq!(index["providers"]["amd"]["install-time"], true);
        let one: serde_json::Value = serde_json::from_str(&document(&t, Some("gfx942"), Schema::Wheelnext02)).unwrap();
        assert_eq!(one["variants"], serde_json::json!({"gfx942": {"amd": {"gfx_arch": ["gfx942"]}}}));
        assert!(one["providers"]["amd"].get("install-time").is_none());
        assert!(one["default-priorities"].get("property").is_none());
        assert!(label_ok("gfx90a") && !label_ok("gfx11-generic") && !label_ok("GFX942"));
    }
}
