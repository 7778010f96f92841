//! Templates of a matrix file: text with `{axis}` placeholders (local
//! version labels, environment values, image names, requirements), filled
//! from a cell's values.

use std::collections::BTreeMap;

/// The `{name}`s of a template.
pub fn placeholders(t: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                out.push(after[..close].to_string());
                rest = &after[close + 1..];
            }
            None => break,
        }
    }
    out
}

/// A template with each `{axis}` replaced by the cell's value.
pub fn fill(t: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = t.to_string();
    for (k, v) in values {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_from_axis_values() {
        let values: BTreeMap<String, String> =
            [("rocm".to_string(), "6.2".to_string()), ("torch".to_string(), "2.5".to_string())].into();
        assert_eq!(fill("rocm{rocm}torch{torch}", &values), "rocm6.2torch2.5");
        assert_eq!(placeholders("a{x}b{y}"), ["x", "y"]);
    }
}
