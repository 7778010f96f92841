//! deb822 control data: paragraphs of `Field: value` lines with indented
//! continuation lines (Packages indexes, Release files, a .deb's `control`,
//! `/var/lib/dpkg/status`), and dependency fields (`a (>= 1) | b, c:any`).
//! Hand-written: the syntax is a few lines, and this reader streams a 50 MB
//! Packages index without building a syntax tree as the deb822 crates do.

use super::version::Relation;
use std::io::BufRead;

/// One paragraph; fields keep their order and original spelling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paragraph {
    pub fields: Vec<(String, String)>,
}

impl Paragraph {
    /// A field's value (field names are case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Write as deb822 text (no trailing blank line).
    pub fn write_to(&self, out: &mut String) {
        for (k, v) in &self.fields {
            out.push_str(k);
            out.push(':');
            if !v.is_empty() && !v.starts_with('\n') {
                out.push(' ');
            }
            out.push_str(v);
            out.push('\n');
        }
    }
}

/// Read every paragraph of a deb822 stream, calling `f` with each.
/// Multi-line values keep their newlines and leading spaces after the first line.
pub fn for_each_paragraph(r: impl BufRead, mut f: impl FnMut(Paragraph)) -> std::io::Result<()> {
    let mut cur = Paragraph::default();
    for line in r.split(b'\n') {
        let line = line?;
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            if !cur.fields.is_empty() {
                f(std::mem::take(&mut cur));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            if let Some((_, v)) = cur.fields.last_mut() {
                v.push('\n');
                v.push_str(line);
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            cur.fields.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    if !cur.fields.is_empty() {
        f(cur);
    }
    Ok(())
}

/// The first paragraph with values as dpkg keeps them: leading blanks after
/// the colon dropped, trailing ones kept (a .deb's `Description: x ` stays
/// so in dpkg's status file).
pub fn parse_exact(text: &str) -> Paragraph {
    let mut p = Paragraph::default();
    for line in text.lines() {
        if line.trim().is_empty() {
            if p.fields.is_empty() {
                continue;
            }
            break;
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            if let Some((_, v)) = p.fields.last_mut() {
                v.push('\n');
                v.push_str(line);
            }
        } else if let Some((k, v)) = line.split_once(':') {
            p.fields.push((k.trim().to_string(), v.trim_start().to_string()));
        }
    }
    p
}

pub fn parse_paragraphs(text: &str) -> Vec<Paragraph> {
    let mut v = Vec::new();
    let _ = for_each_paragraph(text.as_bytes(), |p| v.push(p));
    v
}

/// One alternative of a dependency: `name[:arch] [(REL version)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Atom {
    pub name: String,
    pub constraint: Option<(Relation, String)>,
}

impl std::fmt::Display for Atom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.constraint {
            Some((r, v)) => write!(f, "{} ({} {})", self.name, r.as_str(), v),
            None => write!(f, "{}", self.name),
        }
    }
}

/// A dependency field: a list of clauses, each a list of alternatives.
pub type Depends = Vec<Vec<Atom>>;

/// What is wrong with one alternative of a dependency field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependsError {
    #[error("`{0}` has no package name")]
    NoName(String),
    #[error("`{0}`: bad version relation")]
    BadRelation(String),
    #[error("`{0}`: missing version")]
    NoVersion(String),
}

/// Parse a dependency field. Architecture restrictions (`[amd64]`) and
/// build profiles (`<!nocheck>`) only appear in source packages; they are
/// dropped here. `:any` and `:native` qualifiers are dropped too: this
/// resolver installs one architecture.
pub fn parse_depends(field: &str) -> Result<Depends, DependsError> {
    let mut out = Vec::new();
    for clause in field.split(',') {
        let clause = clause.trim();
        if clause.is_empty() {
            continue;
        }
        let mut alts = Vec::new();
        for alt in clause.split('|') {
            let alt = alt.trim();
            let (name_part, rest) = match alt.find('(') {
                Some(i) => (alt[..i].trim(), Some(&alt[i + 1..])),
                None => (alt.split_whitespace().next().unwrap_or(""), None),
            };
            let name_part = name_part.split_whitespace().next().unwrap_or("");
            let name = name_part.split(':').next().unwrap_or("").to_string();
            if name.is_empty() {
                return Err(DependsError::NoName(alt.to_string()));
            }
            let constraint = match rest {
                Some(r) => {
                    let inner = r.split(')').next().unwrap_or("").trim();
                    let op_len = inner.find(|c: char| !"<>=".contains(c)).unwrap_or(inner.len());
                    let rel =
                        Relation::parse(&inner[..op_len]).ok_or_else(|| DependsError::BadRelation(alt.to_string()))?;
                    let ver = inner[op_len..].trim();
                    if ver.is_empty() {
                        return Err(DependsError::NoVersion(alt.to_string()));
                    }
                    Some((rel, ver.to_string()))
                }
                None => None,
            };
            alts.push(Atom { name, constraint });
        }
        out.push(alts);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_and_continuations() {
        let ps = parse_paragraphs("Package: a\nDescription: x\n y\n .\n z\n\n\nPackage: b\nVersion: 1\n");
        assert_eq!(ps.len(), 2);
        assert_eq!(ps[0].get("description"), Some("x\n y\n .\n z"));
        assert_eq!(ps[1].get("Version"), Some("1"));
        let mut s = String::new();
        ps[0].write_to(&mut s);
        assert_eq!(s, "Package: a\nDescription: x\n y\n .\n z\n");
    }

    #[test]
    fn dependency_fields() {
        let d =
            parse_depends("libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, python3:any, perl:any (>= 5.1)").unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d[0][0].constraint, Some((Relation::Ge, "2.34".into())));
        assert_eq!(d[1][1].name, "debconf-2.0");
        assert_eq!(d[2][0].name, "python3");
        assert_eq!(d[3][0].to_string(), "perl (>= 5.1)");
        assert!(parse_depends("a (>= )").is_err());
    }
}
