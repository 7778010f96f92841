//! PEP 440 local version labels (`2.8.3+rocm6.2torch2.5`): templates filled
//! from build axes, then normalized the way `packaging` normalizes them.

use super::WheelError;
use std::collections::BTreeMap;

/// Fill `{KEY}` placeholders of a local-version template from `vars`.
/// An unknown key or an unclosed brace is an error naming it.
pub fn expand_template(template: &str, vars: &BTreeMap<String, String>) -> Result<String, WheelError> {
    let bad = |why: String| WheelError::BadLocalVersion { label: template.to_string(), why };
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| bad("a `{` is never closed".into()))?;
        let key = &after[..close];
        let value = vars.get(key).ok_or_else(|| {
            let known: Vec<&str> = vars.keys().map(String::as_str).collect();
            bad(format!(
                "`{{{key}}}` names no axis (known: {})",
                if known.is_empty() { "none".into() } else { known.join(", ") }
            ))
        })?;
        out.push_str(value);
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(bad("a `}` has no matching `{`".into()));
    }
    out.push_str(rest);
    Ok(out)
}

/// Normalize a local version label: lowercase, `-` and `_` become `.`,
/// numeric segments lose leading zeros; segments must be `[a-z0-9]+`.
pub fn normalize_local_label(label: &str) -> Result<String, WheelError> {
    let bad = |why: &str| WheelError::BadLocalVersion { label: label.to_string(), why: why.to_string() };
    let label = label.strip_prefix('+').unwrap_or(label);
    if label.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut segments = Vec::new();
    for seg in label.split(['.', '-', '_']) {
        if seg.is_empty() {
            return Err(bad("it has an empty segment (two separators in a row, or one at an end)"));
        }
        if !seg.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad("segments may hold only letters and digits, separated by `.`"));
        }
        let seg = seg.to_ascii_lowercase();
        if seg.chars().all(|c| c.is_ascii_digit()) {
            let trimmed = seg.trim_start_matches('0');
            segments.push(if trimmed.is_empty() { "0".to_string() } else { trimmed.to_string() });
        } else {
            segments.push(seg);
        }
    }
    Ok(segments.join("."))
}

/// `version` with the local label appended (`2.8.3` + `rocm6.2` ->
/// `2.8.3+rocm6.2`; an existing label is extended with `.`).
pub fn with_local_label(version: &str, label: &str) -> Result<String, WheelError> {
    let label = normalize_local_label(label)?;
    Ok(match version.split_once('+') {
        Some((public, existing)) => {
            format!("{public}+{}.{label}", normalize_local_label(existing)?)
        }
        None => format!("{version}+{label}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_and_labels() {
        let vars: BTreeMap<String, String> =
            [("ROCM_VERSION", "6.2"), ("TORCH_VERSION", "2.5")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let label = expand_template("rocm{ROCM_VERSION}torch{TORCH_VERSION}", &vars).unwrap();
        assert_eq!(label, "rocm6.2torch2.5");
        assert_eq!(with_local_label("2.8.3", &label).unwrap(), "2.8.3+rocm6.2torch2.5");
        assert_eq!(with_local_label("2.5.0+rocm6.2", "Torch_2-5").unwrap(), "2.5.0+rocm6.2.torch.2.5");
        assert_eq!(normalize_local_label("ROCm-6.02").unwrap(), "rocm.6.2");
        assert!(expand_template("rocm{NOPE}", &vars).unwrap_err().to_string().contains("NOPE"));
        assert!(expand_template("rocm{ROCM_VERSION", &vars).is_err());
        assert!(normalize_local_label("rocm 6.2").is_err());
        assert!(normalize_local_label("rocm..6").is_err());
        assert!(normalize_local_label("").is_err());
    }
}
