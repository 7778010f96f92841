//! `--axis KEY=V1,V2`: build axes and their combinations.

use super::WheelBuildError;
use std::collections::BTreeMap;

/// Parse `KEY=V1,V2`.
pub fn parse_axis(s: &str) -> Result<(String, Vec<String>), WheelBuildError> {
    let bad = |why: &str| {
        WheelBuildError::Input(format!("--axis `{s}`: {why}; expected KEY=V1,V2 (e.g. TORCH_VERSION=2.5,2.6)"))
    };
    let (k, v) = s.split_once('=').ok_or_else(|| bad("no `=`"))?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("the key must be a variable name (letters, digits, `_`)"));
    }
    let values: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(bad("a value is empty"));
    }
    Ok((k.to_string(), values))
}

/// Every combination of the axes' values (one empty map without axes).
pub fn combinations(axes: &[(String, Vec<String>)]) -> Vec<BTreeMap<String, String>> {
    let mut out = vec![BTreeMap::new()];
    for (k, values) in axes {
        out = out
            .into_iter()
            .flat_map(|m| {
                values.iter().map(move |v| {
                    let mut m = m.clone();
                    m.insert(k.clone(), v.clone());
                    m
                })
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_combinations() {
        let a = parse_axis("TORCH_VERSION=2.5,2.6").unwrap();
        assert_eq!(a.1, vec!["2.5", "2.6"]);
        assert!(parse_axis("nokey").is_err());
        assert!(parse_axis("A=1,,2").is_err());
        assert!(parse_axis("A B=1").is_err());
        let c = combinations(&[a, parse_axis("ROCM_VERSION=6.2").unwrap()]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1]["TORCH_VERSION"], "2.6");
        assert_eq!(c[1]["ROCM_VERSION"], "6.2");
        assert_eq!(combinations(&[]).len(), 1);
    }
}
