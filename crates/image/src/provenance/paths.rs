//! How provenance names a file the user gave: by a path that is the same on
//! every machine that has the same checkout, never by where this machine
//! keeps it (no home directory, no user name, no clone location).

use std::path::{Path, PathBuf};

/// `file` relative to the root of the git checkout holding it (the nearest
/// directory up with a `.git`), else relative to the working directory when
/// it is below it, else its file name alone; `/`-separated.
pub fn portable(file: &Path) -> String {
    let abs = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let abs = normalize(&abs);
    let rel = checkout_root(&abs)
        .and_then(|root| abs.strip_prefix(root).ok().map(Path::to_path_buf))
        .or_else(|| {
            let cwd = std::env::current_dir().ok()?;
            abs.strip_prefix(normalize(&cwd)).ok().map(Path::to_path_buf)
        })
        .or_else(|| abs.file_name().map(PathBuf::from))
        .unwrap_or(abs);
    rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// How provenance names an `--image` argument: a file or layout by its
/// portable path (no machine path), an engine image by its reference.
pub fn image_argument(arg: &str) -> String {
    let p = Path::new(arg);
    if p.exists() {
        portable(p)
    } else {
        arg.to_string()
    }
}

/// The nearest directory above `abs` holding a `.git`.
pub fn checkout_root(abs: &Path) -> Option<&Path> {
    abs.ancestors().skip(1).find(|d| d.join(".git").exists())
}

/// `a/./b/../c` as `a/c`, without reading the file system (a definition
/// path may name a file through `..`).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_in_a_checkout_is_named_from_its_root() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("repo/.git")).unwrap();
        std::fs::create_dir_all(t.path().join("repo/images")).unwrap();
        let f = t.path().join("repo/images/../images/a.toml");
        assert_eq!(portable(&f), "images/a.toml");
        let outside = t.path().join("elsewhere/b.toml");
        let name = portable(&outside);
        assert!(!name.contains(&*t.path().to_string_lossy()), "{name}");
    }
}
