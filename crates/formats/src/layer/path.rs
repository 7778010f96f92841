//! Path normalization for layer entries: relative, `/`-separated, no `.`,
//! no `..`, no empty components. Paths are bytes: Linux file names need not
//! be UTF-8.

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathProblem {
    Absolute,
    ParentDir,
    Empty,
}

impl std::fmt::Display for PathProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathProblem::Absolute => write!(f, "is an absolute path"),
            PathProblem::ParentDir => write!(f, "contains a `..` component"),
            PathProblem::Empty => write!(f, "is empty"),
        }
    }
}

impl std::error::Error for PathProblem {}

/// Normalize a path found inside an archive. `./x` and `x/` are fine;
/// `/x` and anything with `..` are refused (never stripped silently).
pub fn normalize_member(raw: &[u8]) -> Result<Vec<u8>, PathProblem> {
    if raw.first() == Some(&b'/') {
        return Err(PathProblem::Absolute);
    }
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    for comp in raw.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => continue,
            b".." => return Err(PathProblem::ParentDir),
            c => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

/// Normalize a destination written in a definition (`/opt/rocm`, `opt/rocm/`):
/// leading `/` allowed, `..` refused. The root gives an empty path.
pub fn normalize_dest(raw: &str) -> Result<Vec<u8>, PathProblem> {
    let trimmed = raw.trim_start_matches('/');
    normalize_member(trimmed.as_bytes())
}

/// Join a normalized prefix and a normalized relative path.
pub fn join(prefix: &[u8], rel: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        return rel.to_vec();
    }
    if rel.is_empty() {
        return prefix.to_vec();
    }
    let mut v = prefix.to_vec();
    v.push(b'/');
    v.extend_from_slice(rel);
    v
}

/// The parent of a normalized path (`a/b` -> `a`, `a` -> ``).
pub fn parent(p: &[u8]) -> Option<&[u8]> {
    if p.is_empty() {
        return None;
    }
    Some(match p.iter().rposition(|&b| b == b'/') {
        Some(i) => &p[..i],
        None => b"",
    })
}

/// Strip `n` leading components; `None` when nothing is left.
pub fn strip_components(p: &[u8], n: usize) -> Option<&[u8]> {
    let mut rest = p;
    for _ in 0..n {
        match rest.iter().position(|&b| b == b'/') {
            Some(i) => rest = &rest[i + 1..],
            None => return None,
        }
    }
    if rest.is_empty() {
        None
    } else {
        Some(rest)
    }
}

/// If `p` is `prefix` or lies below it, the remainder (possibly empty).
pub fn strip_prefix<'a>(p: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if prefix.is_empty() {
        return Some(p);
    }
    if p == prefix {
        return Some(b"");
    }
    if p.len() > prefix.len() && p.starts_with(prefix) && p[prefix.len()] == b'/' {
        return Some(&p[prefix.len() + 1..]);
    }
    None
}

pub fn display(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_members() {
        assert_eq!(normalize_member(b"./a//b/./c/").unwrap(), b"a/b/c");
        assert_eq!(normalize_member(b"/etc/passwd"), Err(PathProblem::Absolute));
        assert_eq!(normalize_member(b"a/../../x"), Err(PathProblem::ParentDir));
        assert_eq!(normalize_member(b"./").unwrap(), b"");
        assert_eq!(normalize_dest("/opt/rocm/").unwrap(), b"opt/rocm");
    }

    #[test]
    fn strips_and_joins() {
        assert_eq!(strip_components(b"pkg-1.0/src/a.c", 1).unwrap(), b"src/a.c");
        assert_eq!(strip_components(b"pkg-1.0", 1), None);
        assert_eq!(strip_prefix(b"sub/path/x", b"sub/path").unwrap(), b"x");
        assert_eq!(strip_prefix(b"sub/pathx", b"sub/path"), None);
        assert_eq!(join(b"opt", b"x/y"), b"opt/x/y");
        assert_eq!(parent(b"a/b/c").unwrap(), b"a/b");
        assert_eq!(parent(b"a").unwrap(), b"");
    }
}
