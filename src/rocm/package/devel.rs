//! The devel package's tree, written as one tar (`_devel.tar`) because a
//! wheel cannot hold symlinks:
//! - a file that already ships in a runtime wheel becomes a relative
//!   symlink into that wheel's directory, under its SONAME
//!   (`lib/libamdhip64.so.7 -> ../../_rocm_sdk_core/lib/libamdhip64.so.7`);
//! - its other names (SONAME aliases, the versioned file name) become
//!   relative symlinks to the SONAME entry;
//! - every other file is stored as is; symlinks inside the tree stay;
//!   dangling symlinks are dropped (listed in the report).
//!
//! `rocm_sdk._devel` expands it on first use.

use super::collect::{parent, relative, Item, Resolved, Staged};
use super::runtime::Dropped;
use super::PackageError;
use crate::tarball::tree::{Content, Kind, Node};
use crate::tarball::Tree;
use std::collections::BTreeMap;
use std::path::Path;

/// Where a runtime package holds a file of the install tree.
#[derive(Debug, Clone)]
pub struct InRuntime {
    /// The package directory (`_rocm_sdk_core`).
    pub package: String,
    /// The path under it (`lib/libamdhip64.so.7`), also the install path
    /// the devel tree gives it.
    pub path: String,
}

/// The devel tree, rooted at the devel package directory.
pub fn tree(
    staged: &Staged,
    devel_package: &str,
    runtime: &BTreeMap<String, InRuntime>,
) -> Result<(Tree, Vec<Dropped>), PackageError> {
    let mut entries: BTreeMap<String, Node> = BTreeMap::new();
    let mut dropped = Vec::new();
    let link = |from: &str, to: &str| Node::new(Kind::Symlink(relative(parent(from), to).into_bytes()), 0o777);
    for (path, item) in &staged.items {
        match item {
            Item::Dir => {
                entries.entry(path.clone()).or_insert_with(|| Node::dir(0o755));
            }
            Item::File { src, executable } => {
                if let Some(r) = runtime.get(path) {
                    let text =
                        relative(&format!("{devel_package}/{}", parent(&r.path)), &format!("{}/{}", r.package, r.path));
                    entries.insert(r.path.clone(), Node::new(Kind::Symlink(text.into_bytes()), 0o777));
                    if r.path != *path {
                        entries.insert(path.clone(), link(path, &r.path));
                    }
                } else {
                    let size =
                        std::fs::metadata(src).map_err(|source| PackageError::Io { path: src.clone(), source })?.len();
                    entries.entry(path.clone()).or_insert_with(|| {
                        Node::new(
                            Kind::File { size, content: Content::Host(src.clone()) },
                            if *executable { 0o755 } else { 0o644 },
                        )
                    });
                }
            }
            Item::Symlink(text) => match staged.resolve(path) {
                Resolved::Dangling => dropped.push(Dropped {
                    path: path.clone(),
                    reason: "dangling symlink (its target is not in the devel tree)".into(),
                }),
                Resolved::File(target) => {
                    let node = match runtime.get(&target) {
                        Some(r) if r.path != *path => link(path, &r.path),
                        Some(_) => continue, // the SONAME entry itself
                        None => Node::new(Kind::Symlink(text.clone().into_bytes()), 0o777),
                    };
                    entries.entry(path.clone()).or_insert(node);
                }
                Resolved::Dir(_) => {
                    entries
                        .entry(path.clone())
                        .or_insert_with(|| Node::new(Kind::Symlink(text.clone().into_bytes()), 0o777));
                }
            },
        }
    }
    let mut tree = Tree::new();
    for (path, node) in entries {
        tree.insert(path.clone().into_bytes(), node).map_err(|e| PackageError::DevelTree(e.to_string()))?;
    }
    Ok((tree, dropped))
}

/// Write the devel tree as a tar at `out` (entries sorted, owners 0:0,
/// times clamped to SOURCE_DATE_EPOCH or 0).
pub fn write(tree: &Tree, out: &Path, epoch: u64) -> Result<(), PackageError> {
    let f = std::fs::File::create(out).map_err(|source| PackageError::Io { path: out.to_path_buf(), source })?;
    let opts = crate::tarball::write::WriteOptions { source_date_epoch: epoch };
    let w = crate::tarball::write::write_tar(tree, std::io::BufWriter::new(f), &opts, &mut |_| {})
        .map_err(|e| PackageError::DevelTree(e.to_string()))?;
    w.into_inner()
        .map_err(|e| PackageError::Io { path: out.to_path_buf(), source: e.into_error() })?
        .sync_all()
        .map_err(|source| PackageError::Io { path: out.to_path_buf(), source })
}
