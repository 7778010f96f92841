//! What a wheel's METADATA says about requirements: its name, extras and
//! `Requires-Dist` lines (the project, the extra and the PEP 817 variant
//! property its marker asks for), read from the email-style headers. Here,
//! below `wheel`, because both the wheel checks and a files layer's
//! wheelhouse selection (`source::wheelhouse`) read them.

use std::collections::BTreeSet;

/// Values of every `key:` header line (case-insensitive key).
pub fn header_values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    headers(text)
        .filter_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(key).then(|| v.trim())
        })
        .collect()
}

/// The header lines: up to the first empty line (the body follows it).
pub fn headers(text: &str) -> impl Iterator<Item = &str> {
    text.lines().take_while(|l| !l.trim().is_empty())
}

/// The distribution name as it appears in wheel file names: lowercase, runs
/// of `-`, `_` and `.` become one `_`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_sep {
                out.push('_');
            }
            in_sep = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_sep = false;
        }
    }
    out
}

/// A variant label (and property value) PEP 817 allows: `[0-9a-z._]`, at
/// most 16 characters (a GPU target key like `gfx942` always is).
pub fn variant_label_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 16
        && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'.' || b == b'_')
}

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
