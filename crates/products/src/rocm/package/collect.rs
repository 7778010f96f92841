//! Overlaying artifacts into one map of install paths per package: each
//! artifact's prefixes in manifest order, artifacts in name order, a later
//! entry replacing an earlier one at the same path (the reference's one
//! relpath map). Nothing is copied: entries point at their place in the
//! artifact directory. A symlink is resolved on disk inside its own
//! artifact (as the reference resolves it), so a link whose target lives in
//! another artifact is dangling here; one that leaves its artifact (an
//! absolute link, too many `..`) is dangling too, never a host file.

use super::PackageError;
use crate::rocm_artifacts::Artifact;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What a symlink leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    File { src: PathBuf, executable: bool },
    Dir,
    Dangling,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Dir,
    File { src: PathBuf, executable: bool },
    Symlink { text: String, target: Target },
}

/// Paths relative to the install root (`lib/libamdhip64.so.7`), `/`-separated.
#[derive(Debug, Default, Clone)]
pub struct Staged {
    pub items: BTreeMap<String, Item>,
    /// The artifact names that contributed.
    pub names: Vec<String>,
}

/// The directory part of a tree path (`""` at the top).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

pub fn file_name(path: &str) -> &str {
    path.rsplit_once('/').map(|(_, f)| f).unwrap_or(path)
}

/// `"../"` once per component of `relpath` (from its directory to the root
/// above the package directory).
pub fn backtrack(relpath: &str) -> String {
    "../".repeat(relpath.split('/').count())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PackageError + '_ {
    move |source| PackageError::Io { path: path.to_path_buf(), source }
}

fn executable(meta: &std::fs::Metadata) -> bool {
    meta.permissions().mode() & 0o111 != 0
}

/// Resolve the symlink at `link` on disk, inside `root` (its artifact).
fn resolve(link: &Path, root: &Path) -> Target {
    let Ok(real) = std::fs::canonicalize(link) else { return Target::Dangling };
    let Ok(root) = std::fs::canonicalize(root) else { return Target::Dangling };
    if !real.starts_with(&root) {
        return Target::Dangling;
    }
    match std::fs::metadata(&real) {
        Ok(m) if m.is_dir() => Target::Dir,
        Ok(m) if m.is_file() => Target::File { executable: executable(&m), src: real },
        _ => Target::Dangling,
    }
}

/// Overlay every artifact's prefixes; `exclude(rel)` leaves paths out.
pub fn collect<'a>(
    artifacts: impl IntoIterator<Item = &'a Artifact>,
    exclude: &dyn Fn(&str) -> bool,
) -> Result<Staged, PackageError> {
    let mut staged = Staged::default();
    for art in artifacts {
        staged.names.push(art.name.name.clone());
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
                    let text = std::fs::read_link(entry.path()).map_err(io_err(entry.path()))?;
                    let text =
                        text.to_str().ok_or_else(|| PackageError::NonUtf8Path(entry.path().to_path_buf()))?.to_string();
                    Item::Symlink { text, target: resolve(entry.path(), &art.dir) }
                } else if ft.is_file() {
                    let meta = std::fs::metadata(entry.path()).map_err(io_err(entry.path()))?;
                    Item::File { src: entry.path().to_path_buf(), executable: executable(&meta) }
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
    staged.names.sort();
    staged.names.dedup();
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parent("lib/x.so"), "lib");
        assert_eq!(parent("x"), "");
        assert_eq!(file_name("lib/x.so"), "x.so");
        assert_eq!(backtrack("lib/libamdhip64.so.7"), "../../");
        assert_eq!(backtrack("x"), "../");
    }

    #[test]
    fn links_resolve_inside_their_artifact() {
        let t = tempfile::tempdir().unwrap();
        let art = t.path().join("core-hip_lib_generic");
        let lib = art.join("stage/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libx.so.1.2"), "x").unwrap();
        std::os::unix::fs::symlink("libx.so.1.2", lib.join("libx.so.1")).unwrap();
        std::os::unix::fs::symlink("../../../other/lib/y", lib.join("outside")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", lib.join("absolute")).unwrap();
        std::os::unix::fs::symlink(".", lib.join("self")).unwrap();
        assert!(matches!(resolve(&lib.join("libx.so.1"), &art), Target::File { .. }));
        assert_eq!(resolve(&lib.join("outside"), &art), Target::Dangling);
        assert_eq!(resolve(&lib.join("absolute"), &art), Target::Dangling);
        assert_eq!(resolve(&lib.join("self"), &art), Target::Dir);
    }
}
