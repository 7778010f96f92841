//! Which `--set` parameter fixes a source's path: a source error names the
//! field (`source[0].rocm`); when the field's value in the definition file
//! came from `${NAME}`, the error says so, since the user changes NAME, not
//! the file (`quarry build images/manylinux-rocm-builder.toml` without
//! `--set ROCM_DIST=...` names the directory the default points at).

use std::path::Path;

/// The `${NAME}` parameters the raw value of `field` (`source[0].dir`,
/// `layer[1].source[0].rocm`) refers to in `file`; empty when none or unreadable.
pub fn params_of_field(file: &Path, field: &str) -> Vec<String> {
    let Some(doc) = std::fs::read_to_string(file).ok().and_then(|t| t.parse::<toml::Table>().ok()) else {
        return Vec::new();
    };
    let mut value = toml::Value::Table(doc);
    for part in field.split('.') {
        let (key, index) = match part.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        let Some(next) = value.get(key) else { return Vec::new() };
        value = match index {
            Some(i) => match next.get(i) {
                Some(v) => v.clone(),
                None => return Vec::new(),
            },
            None => next.clone(),
        };
    }
    value.as_str().map(crate::definition::params::referenced).unwrap_or_default()
}

/// `; it comes from ${NAME}: pass --set NAME=PATH` for a field set by parameters.
pub fn set_hint(file: &Path, field: &str) -> String {
    let names = params_of_field(file, field);
    if names.is_empty() {
        return String::new();
    }
    let sets: Vec<String> = names.iter().map(|n| format!("--set {n}=PATH")).collect();
    let refs: Vec<String> = names.iter().map(|n| format!("${{{n}}}")).collect();
    format!("; the path comes from {}: pass {}", refs.join(", "), sets.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_parameters_behind_a_field() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("rocm-dist.toml");
        std::fs::write(
            &f,
            "name = \"x\"\n[[source]]\nfile = \"a\"\n[[source]]\nrocm = \"${ROCM_DIST}\"\ndest = \"/opt/rocm\"\n",
        )
        .unwrap();
        assert_eq!(params_of_field(&f, "source[1].rocm"), ["ROCM_DIST"]);
        assert!(params_of_field(&f, "source[0].file").is_empty());
        assert!(params_of_field(&f, "source[7].rocm").is_empty());
        assert_eq!(set_hint(&f, "source[1].rocm"), "; the path comes from ${ROCM_DIST}: pass --set ROCM_DIST=PATH");
        let inline = d.path().join("img.toml");
        std::fs::write(&inline, "name = \"i\"\n[[layer]]\nname = \"l\"\n[[layer.source]]\ndir = \"${TREE}/x\"\n")
            .unwrap();
        assert_eq!(params_of_field(&inline, "layer[0].source[0].dir"), ["TREE"]);
    }
}
