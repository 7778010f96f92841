//! Debian version comparison (deb-version(7)): `[epoch:]upstream[-revision]`,
//! compared part by part with dpkg's algorithm (`~` sorts before everything,
//! even the end of the string; letters before other characters).
//! Hand-written: the algorithm is short and fixed by Debian policy, and the
//! crates that implement it pull in regex engines for parsing we do not need.

use std::cmp::Ordering;

/// A parsed version; compares like dpkg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version<'a> {
    epoch: u64,
    upstream: &'a str,
    revision: &'a str,
}

impl<'a> Version<'a> {
    pub fn parse(s: &'a str) -> Version<'a> {
        let s = s.trim();
        let (epoch, rest) = match s.split_once(':') {
            Some((e, r)) if e.bytes().all(|b| b.is_ascii_digit()) && !e.is_empty() => (e.parse().unwrap_or(0), r),
            _ => (0, s),
        };
        let (upstream, revision) = match rest.rfind('-') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        Version { epoch, upstream, revision }
    }
}

impl Ord for Version<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| compare_part(self.upstream, other.upstream))
            .then_with(|| compare_part(self.revision, other.revision))
    }
}

impl PartialOrd for Version<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Compare two version strings.
pub fn compare(a: &str, b: &str) -> Ordering {
    Version::parse(a).cmp(&Version::parse(b))
}

fn order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(b'~') => -1,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => c as i32,
        Some(c) => c as i32 + 256,
    }
}

fn compare_part(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        // Non-digit run, character by character.
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let ac = order(a.get(i).copied().filter(|c| !c.is_ascii_digit()));
            let bc = order(b.get(j).copied().filter(|c| !c.is_ascii_digit()));
            if ac != bc {
                return ac.cmp(&bc);
            }
            if i < a.len() && !a[i].is_ascii_digit() {
                i += 1;
            }
            if j < b.len() && !b[j].is_ascii_digit() {
                j += 1;
            }
        }
        // Digit run, numerically (leading zeros ignored, any length).
        while i < a.len() && a[i] == b'0' {
            i += 1;
        }
        while j < b.len() && b[j] == b'0' {
            j += 1;
        }
        let si = i;
        let sj = j;
        while i < a.len() && a[i].is_ascii_digit() {
            i += 1;
        }
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        let (da, db) = (&a[si..i], &b[sj..j]);
        let c = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
        if c != Ordering::Equal {
            return c;
        }
    }
    Ordering::Equal
}

/// A version relation from a dependency field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
}

impl Relation {
    pub fn parse(s: &str) -> Option<Relation> {
        Some(match s {
            "<<" => Relation::Lt,
            "<=" | "<" => Relation::Le,
            "=" => Relation::Eq,
            ">=" | ">" => Relation::Ge,
            ">>" => Relation::Gt,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Lt => "<<",
            Relation::Le => "<=",
            Relation::Eq => "=",
            Relation::Ge => ">=",
            Relation::Gt => ">>",
        }
    }

    /// Does `have` satisfy `have REL want`?
    pub fn holds(self, have: &str, want: &str) -> bool {
        let c = compare(have, want);
        match self {
            Relation::Lt => c == Ordering::Less,
            Relation::Le => c != Ordering::Greater,
            Relation::Eq => c == Ordering::Equal,
            Relation::Ge => c != Ordering::Less,
            Relation::Gt => c == Ordering::Greater,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_ordering() {
        // Cases from dpkg's own test suite (lib/dpkg/t/t-version.c) and policy.
        let less = [
            ("1.0~rc1", "1.0"),
            ("1.0", "1.0-1"),
            ("1.0-1", "1.0.1"),
            ("1.2.3", "1.2.10"),
            ("1:0.9", "2:0.1"),
            ("9.9", "1:0.1"),
            ("1.0~~", "1.0~"),
            ("1.0a", "1.0+"),
            ("2.36.1-8", "2.36.1-8+deb12u1"),
            ("5.2.15-2", "5.2.15-2+b7"),
            ("0.0.0~", "0.0.0"),
        ];
        for (a, b) in less {
            assert_eq!(compare(a, b), Ordering::Less, "{a} < {b}");
            assert_eq!(compare(b, a), Ordering::Greater, "{b} > {a}");
        }
        assert_eq!(compare("1.01", "1.1"), Ordering::Equal);
        assert_eq!(compare("0:1.0", "1.0"), Ordering::Equal);
        assert!(Relation::Ge.holds("2.36-9", "2.36"));
        assert!(!Relation::Lt.holds("2.36", "2.36"));
        assert!(Relation::Gt.holds("1:1", "2"));
    }
}
