//! Overlaying artifacts into one tree per package: each artifact's
//! prefixes in manifest order, artifacts in name order, a later entry
//! replacing an earlier one at the same path (as `flatten` does). Nothing
//! is copied: file entries point at their place in the artifact directory.

use super::PackageError;
use crate::rocm::artifacts::Artifact;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Dir,
    File {
        src: PathBuf,
        executable: bool,
    },
    /// The link text, as written.
    Symlink(String),
}

/// Paths relative to the install root (`lib/libamdhip64.so.7`), `/`-separated.
#[derive(Debug, Default, Clone)]
pub struct Staged {
    pub items: BTreeMap<String, Item>,
}

/// What a symlink leads to inside the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A regular file at this path.
    File(String),
    Dir(String),
    /// Missing, outside the tree (absolute or too many `..`), or a loop.
    Dangling,
}

/// `dir` joined with a relative link text, normalized; None when it
/// climbs out of the tree or is absolute.
pub fn join_link(dir: &str, link: &str) -> Option<String> {
    if link.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for c in link.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// The directory part of a tree path (`""` at the top).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

pub fn file_name(path: &str) -> &str {
    path.rsplit_once('/').map(|(_, f)| f).unwrap_or(path)
}

/// The link text that leads from a file in `from_dir` to `to` (both tree
/// paths relative to the same root).
pub fn relative(from_dir: &str, to: &str) -> String {
    let from: Vec<&str> = from_dir.split('/').filter(|p| !p.is_empty()).collect();
    let to_parts: Vec<&str> = to.split('/').filter(|p| !p.is_empty()).collect();
    let common = from.iter().zip(&to_parts).take_while(|(a, b)| a == b).count();
    let mut out: Vec<&str> = vec![".."; from.len() - common];
    out.extend(&to_parts[common..]);
    out.join("/")
}

impl Staged {
    /// Follow `path` through symlinks (and symlinked directories on the way).
    pub fn resolve(&self, path: &str) -> Resolved {
        let mut current = path.to_string();
        for _ in 0..40 {
            match self.lookup(&current) {
                Some((real, Item::File { .. })) => return Resolved::File(real),
                Some((real, Item::Dir)) => return Resolved::Dir(real),
                Some((real, Item::Symlink(target))) => match join_link(parent(&real), target) {
                    Some(next) => current = next,
                    None => return Resolved::Dangling,
                },
                None => return Resolved::Dangling,
            }
        }
        Resolved::Dangling
    }

    /// The entry at `path`, following symlinked directories among its
    /// ancestors; returns the path it was found at.
    fn lookup(&self, path: &str) -> Option<(String, &Item)> {
        if let Some(item) = self.items.get(path) {
            return Some((path.to_string(), item));
        }
        // An ancestor may be a directory symlink: rewrite through it.
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if i + 1 == parts.len() {
                break;
            }
            if let Some(Item::Symlink(t)) = self.items.get(&prefix) {
                let base = join_link(parent(&prefix), t)?;
                let rest = parts[i + 1..].join("/");
                let next = if base.is_empty() { rest } else { format!("{base}/{rest}") };
                // Bounded: each call strips one symlinked ancestor.
                return match self.resolve(&next) {
                    Resolved::File(p) => self.items.get(&p).map(|it| (p, it)),
                    Resolved::Dir(p) => self.items.get(&p).map(|it| (p, it)),
                    Resolved::Dangling => None,
                };
            }
        }
        None
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PackageError + '_ {
    move |source| PackageError::Io { path: path.to_path_buf(), source }
}

/// Overlay every artifact's prefixes; `exclude(rel)` leaves paths out.
pub fn collect<'a>(
    artifacts: impl IntoIterator<Item = &'a Artifact>,
    exclude: &dyn Fn(&str) -> bool,
) -> Result<Staged, PackageError> {
    let mut staged = Staged::default();
    for art in artifacts {
        for prefix in &art.prefixes {
            let walk = walkdir::WalkDir::new(prefix).follow_links(false).sort_by_file_name().min_depth(1);
            for entry in walk {
                let entry = entry.map_err(|e| {
                    let path = e.path().unwrap_or(prefix).to_path_buf();
                    PackageError::Io {
                        path,
                        source: e.into_io_error().unwrap_or_else(|| std::io::Error::other("walk failed")),
                    }
                })?;
                let rel = entry.path().strip_prefix(prefix).expect("walkdir stays under its root");
                let rel =
                    rel.to_str().ok_or_else(|| PackageError::NonUtf8Path(entry.path().to_path_buf()))?.to_string();
                if exclude(&rel) {
                    continue;
                }
                let ft = entry.file_type();
                let item = if ft.is_dir() {
                    Item::Dir
                } else if ft.is_symlink() {
                    let target = std::fs::read_link(entry.path()).map_err(io_err(entry.path()))?;
                    let target = target
                        .to_str()
                        .ok_or_else(|| PackageError::NonUtf8Path(entry.path().to_path_buf()))?
                        .to_string();
                    Item::Symlink(target)
                } else if ft.is_file() {
                    let meta = entry.metadata().map_err(|e| PackageError::Io {
                        path: entry.path().to_path_buf(),
                        source: e.into_io_error().unwrap_or_else(|| std::io::Error::other("stat failed")),
                    })?;
                    Item::File { src: entry.path().to_path_buf(), executable: meta.permissions().mode() & 0o111 != 0 }
                } else {
                    return Err(PackageError::SpecialFile(entry.path().to_path_buf()));
                };
                match (&item, staged.items.get(&rel)) {
                    (Item::Dir, Some(Item::Dir)) => {}
                    (_, Some(Item::Dir)) => {
                        // A non-directory replacing a directory takes its contents away.
                        let below = format!("{rel}/");
                        staged.items.retain(|k, _| !k.starts_with(&below));
                        staged.items.insert(rel, item);
                    }
                    _ => {
                        staged.items.insert(rel, item);
                    }
                }
            }
        }
    }
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(join_link("lib", "libx.so.1").unwrap(), "lib/libx.so.1");
        assert_eq!(join_link("lib/llvm/lib", "../../x").unwrap(), "lib/x");
        assert!(join_link("lib", "../../x").is_none());
        assert!(join_link("lib", "/opt/x").is_none());
        assert_eq!(relative("lib", "bin/x"), "../bin/x");
        assert_eq!(relative("bin", "bin/x"), "x");
        assert_eq!(relative("", "lib/x"), "lib/x");
        assert_eq!(relative("_rocm_sdk_libraries/lib", "_rocm_sdk_core/lib"), "../../_rocm_sdk_core/lib");
    }

    #[test]
    fn resolves_chains_and_dir_links() {
        let mut s = Staged::default();
        let f = |p: &str| Item::File { src: PathBuf::from(p), executable: false };
        s.items.insert("lib".into(), Item::Dir);
        s.items.insert("lib/libx.so.1.2".into(), f("x"));
        s.items.insert("lib/libx.so.1".into(), Item::Symlink("libx.so.1.2".into()));
        s.items.insert("lib/libx.so".into(), Item::Symlink("libx.so.1".into()));
        s.items.insert("lib64".into(), Item::Symlink("lib".into()));
        s.items.insert("lib/loop".into(), Item::Symlink("loop".into()));
        s.items.insert("lib/gone".into(), Item::Symlink("nothing".into()));
        assert_eq!(s.resolve("lib/libx.so"), Resolved::File("lib/libx.so.1.2".into()));
        assert_eq!(s.resolve("lib64/libx.so"), Resolved::File("lib/libx.so.1.2".into()));
        assert_eq!(s.resolve("lib64"), Resolved::Dir("lib".into()));
        assert_eq!(s.resolve("lib/loop"), Resolved::Dangling);
        assert_eq!(s.resolve("lib/gone"), Resolved::Dangling);
    }
}
