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
use crate::splice::Splice;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Give the tree's edited files the size of their edited bytes.
pub fn use_edited(tree: &mut Tree, edited: &HashMap<PathBuf, Arc<Splice>>) -> Result<(), PackageError> {
    let swaps: Vec<(Vec<u8>, Node)> = tree
        .iter()
        .filter_map(|(p, n)| match &n.kind {
            Kind::File { content: Content::Host(src), .. } => edited.get(src).map(|s| {
                (p.clone(), Node::new(Kind::File { size: s.len(), content: Content::Host(src.clone()) }, n.mode))
            }),
            _ => None,
        })
        .collect();
    for (p, n) in swaps {
        tree.insert(p, n).map_err(|e| PackageError::DevelTree(e.to_string()))?;
    }
    Ok(())
}

/// The devel tree as a tar described by parts (entries sorted, owners 0:0,
/// times clamped to SOURCE_DATE_EPOCH or 0): edited files from their
/// splices, the others read from the artifacts when the tar is.
pub fn tar(tree: &Tree, edited: &HashMap<PathBuf, Arc<Splice>>, epoch: u64) -> Result<Splice, PackageError> {
    let opts = crate::layer::write::WriteOptions { source_date_epoch: epoch };
    let content = |src: &Path, size: u64| match edited.get(src) {
        Some(s) => (**s).clone(),
        None => Splice::unopened(src, size),
    };
    crate::layer::tar_splice::tar_splice(tree, &opts, &content).map_err(|e| PackageError::DevelTree(e.to_string()))
}
