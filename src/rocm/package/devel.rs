//! The devel package's tree, written as one tar (`rocm_sdk_devel/_devel.tar`
//! in the wheel, a wheel cannot hold symlinks) whose members sit under
//! `_rocm_sdk_devel/`, with an empty `_rocm_sdk_devel/__init__.py` (what the
//! expansion checks). Per install path, as the reference decides:
//! - another name of a shared library (an alias in a runtime package) ->
//!   a symlink to the bare SONAME;
//! - a file a runtime package ships (core, profiler, libraries, device, in
//!   that order) -> a symlink `"../" x depth + <package dir>/<path>`;
//! - a symlink of the artifacts -> the same symlink, verbatim;
//! - anything else -> the file (an ELF file built with an RPATH or RUNPATH
//!   gets it back as DT_RPATH).
//!
//! Directories come before their contents (sorted paths); `rocm_sdk`
//! expands the tar on first use.

use super::classify::Facts;
use super::collect::{backtrack, Item, Staged};
use super::runtime::RuntimeLayout;
use super::PackageError;
use crate::layer::tree::{Content, Kind, Node};
use crate::layer::Tree;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A devel file that needs its RPATH rewritten: (source, DT_RPATH to set).
pub type Normalize = (PathBuf, String);

/// The devel tree, rooted above the devel package directory `devel_dir`.
/// `runtime`: (package directory, layout) in the reference's order.
pub fn tree(
    staged: &Staged,
    facts: &HashMap<PathBuf, Facts>,
    devel_dir: &str,
    runtime: &[(String, &RuntimeLayout)],
) -> Result<(Tree, Vec<Normalize>), PackageError> {
    let mut tree = Tree::new();
    let mut normalize = Vec::new();
    let mut put = |path: String, node: Node| {
        tree.insert(path.into_bytes(), node).map_err(|e| PackageError::DevelTree(e.to_string()))
    };
    let link = |text: String| Node::new(Kind::Symlink(text.into_bytes()), 0o777);
    put(format!("{devel_dir}/__init__.py"), Node::bytes(Vec::new(), 0o644))?;
    for (rel, item) in &staged.items {
        let path = format!("{devel_dir}/{rel}");
        if matches!(item, Item::Dir) {
            put(path, Node::dir(0o755))?;
            continue;
        }
        if let Some(soname) = runtime.iter().find_map(|(_, l)| l.aliases.get(rel)) {
            put(path, link(soname.clone()))?;
            continue;
        }
        if let Some((pkg, _)) = runtime.iter().find(|(_, l)| l.files.contains_key(rel)) {
            put(path, link(format!("{}{pkg}/{rel}", backtrack(rel))))?;
            continue;
        }
        match item {
            Item::Symlink { text, .. } => put(path, link(text.clone()))?,
            Item::File { src, executable } => {
                let f = &facts[src];
                if let (true, Some(r)) = (f.patchable, f.built_rpath.as_ref()) {
                    normalize.push((src.clone(), r.clone()));
                }
                let size =
                    std::fs::metadata(src).map_err(|source| PackageError::Io { path: src.clone(), source })?.len();
                let node = Node::new(
                    Kind::File { size, content: Content::Host(src.clone()) },
                    if *executable { 0o755 } else { 0o644 },
                );
                put(path, node)?;
            }
            Item::Dir => unreachable!("handled above"),
        }
    }
    Ok((tree, normalize))
}

/// Point the tree's copies of patched files at their patched copies.
pub fn use_patched(tree: &mut Tree, patched: &HashMap<PathBuf, PathBuf>) -> Result<(), PackageError> {
    let swaps: Vec<(Vec<u8>, Node)> = tree
        .iter()
        .filter_map(|(p, n)| match &n.kind {
            Kind::File { content: Content::Host(src), .. } => patched.get(src).map(|copy| {
                let size = std::fs::metadata(copy).map(|m| m.len()).unwrap_or(0);
                (p.clone(), Node::new(Kind::File { size, content: Content::Host(copy.clone()) }, n.mode))
            }),
            _ => None,
        })
        .collect();
    for (p, n) in swaps {
        tree.insert(p, n).map_err(|e| PackageError::DevelTree(e.to_string()))?;
    }
    Ok(())
}

/// Write the devel tree as a tar at `out` (entries sorted, owners 0:0,
/// times clamped to SOURCE_DATE_EPOCH or 0).
pub fn write(tree: &Tree, out: &Path, epoch: u64) -> Result<(), PackageError> {
    let f = std::fs::File::create(out).map_err(|source| PackageError::Io { path: out.to_path_buf(), source })?;
    let opts = crate::layer::write::WriteOptions { source_date_epoch: epoch };
    let w = crate::layer::write::write_tar(tree, std::io::BufWriter::with_capacity(1 << 20, f), &opts, &mut |_| {})
        .map_err(|e| PackageError::DevelTree(e.to_string()))?;
    w.into_inner().map_err(|e| PackageError::Io { path: out.to_path_buf(), source: e.into_error() })?;
    Ok(())
}
