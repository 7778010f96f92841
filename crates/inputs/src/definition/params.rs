//! `${NAME}` substitution over a parsed TOML document. Runs on the value tree
//! so every error can name the field it came from. `$$` writes a literal `$`.

use std::collections::BTreeMap;
use toml::Value;

/// A reference to a parameter that has no value.
#[derive(Debug)]
pub struct Unset {
    pub field: String,
    pub name: String,
}

/// Errors in `${...}` syntax (unterminated, empty or bad names).
#[derive(Debug)]
pub struct BadSyntax {
    pub field: String,
    pub message: String,
}

#[derive(Debug)]
pub enum SubstError {
    Unset(Unset),
    Syntax(BadSyntax),
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !n.starts_with(|c: char| c.is_ascii_digit())
}

/// Substitute parameters in one string.
pub fn subst_str(s: &str, field: &str, params: &BTreeMap<String, String>) -> Result<String, SubstError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                return Err(SubstError::Syntax(BadSyntax {
                    field: field.into(),
                    message: format!("unterminated `${{` in {s:?}"),
                }));
            };
            let name = &body[..end];
            if !valid_name(name) {
                return Err(SubstError::Syntax(BadSyntax {
                    field: field.into(),
                    message: format!("`${{{name}}}` is not a valid parameter name (letters, digits, `_`)"),
                }));
            }
            match params.get(name) {
                Some(v) => out.push_str(v),
                None => return Err(SubstError::Unset(Unset { field: field.into(), name: name.into() })),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The "did you mean" part of an unknown parameter's error: the closest
/// known name (by edit distance), then every known one.
pub fn suggest(name: &str, known: &std::collections::BTreeSet<String>) -> String {
    if known.is_empty() {
        return " (it has none)".into();
    }
    let close = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&name.to_lowercase(), &k.to_lowercase()), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min();
    let list = known.iter().map(String::as_str).collect::<Vec<_>>().join(", ");
    match close {
        Some((_, k)) => format!("; did you mean `{k}`? (known: {list})"),
        None => format!(" (known: {list})"),
    }
}

/// Names of every parameter a string refers to.
pub fn referenced(s: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        if i > 0 && rest.as_bytes()[i - 1] == b'$' {
            rest = &rest[i + 2..];
            continue;
        }
        let body = &rest[i + 2..];
        match body.find('}') {
            Some(end) => {
                v.push(body[..end].to_string());
                rest = &body[end + 1..];
            }
            None => break,
        }
    }
    v
}

/// Substitute in every string of a value tree; `skip` names top-level keys
/// left alone (the `[params]` table itself).
pub fn subst_value(
    v: &mut Value,
    field: &str,
    params: &BTreeMap<String, String>,
    skip: &[&str],
) -> Result<(), SubstError> {
    match v {
        Value::String(s) => *s = subst_str(s, field, params)?,
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                subst_value(item, &format!("{field}[{i}]"), params, &[])?;
            }
        }
        Value::Table(t) => {
            for (k, item) in t.iter_mut() {
                if skip.contains(&k.as_str()) {
                    continue;
                }
                let f = if field.is_empty() { k.clone() } else { format!("{field}.{k}") };
                subst_value(item, &f, params, &[])?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_and_escapes() {
        let p: BTreeMap<String, String> = [("A".to_string(), "x".to_string())].into();
        assert_eq!(subst_str("${A}/b/$${A}/$5", "f", &p).unwrap(), "x/b/${A}/$5");
        match subst_str("${B}", "source[0].dir", &p) {
            Err(SubstError::Unset(u)) => {
                assert_eq!(u.name, "B");
                assert_eq!(u.field, "source[0].dir");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(subst_str("${A", "f", &p), Err(SubstError::Syntax(_))));
        assert_eq!(referenced("${A}-$${B}-${C}"), ["A", "C"]);
    }
}
