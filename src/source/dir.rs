//! `dir` sources: a host directory placed at `dest`. The walk never follows
//! symlinks; include/exclude globs match paths relative to the directory.

mod fingerprint;

use super::hashes::{capability, FileDigest};
use crate::layer::path::join;
use crate::layer::{Content, Kind, Node, Tree};
use crate::store::key::Key;
use rayon::prelude::*;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What selects and shapes a directory's entries.
#[derive(Debug, Clone, Default)]
pub struct DirOptions {
    /// Globs relative to the directory; empty: everything.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// `uid:gid` for every entry (`0:0` when not given).
    pub owner: Option<(u64, u64)>,
    /// Keep device nodes (dropped otherwise).
    pub devices: bool,
}

pub struct DirEntry {
    /// Relative to the source directory; empty for the directory itself.
    pub rel: Vec<u8>,
    pub path: PathBuf,
    pub meta: Metadata,
    pub link: Option<Vec<u8>>,
    /// The `security.capability` xattr of a regular file, once the
    /// fingerprint has learned it (from the stat memo or by reading it), so
    /// building the tree does not ask the filesystem again.
    pub capability: OnceLock<Option<Vec<u8>>>,
}

pub struct DirScan {
    pub root: PathBuf,
    pub entries: Vec<DirEntry>,
    /// The fingerprint, once known.
    key: Option<Key>,
    /// A deferred fingerprint: per content file, what the memo knew.
    pending: Option<Vec<Option<FileDigest>>>,
}

#[derive(Default)]
pub struct DirReport {
    pub dropped_devices: usize,
    pub skipped_sockets: usize,
}

fn globs(pats: &[String]) -> Result<Option<globset::GlobSet>, String> {
    if pats.is_empty() {
        return Ok(None);
    }
    let mut b = globset::GlobSetBuilder::new();
    for p in pats {
        b.add(globset::Glob::new(p).map_err(|e| format!("`{p}` is not a valid glob: {e}"))?);
    }
    b.build().map(Some).map_err(|e| e.to_string())
}

/// Walk `root` (stat only). Errors are messages for the `dir` field.
///
/// The `lstat` calls dominate a no-op rebuild, so every directory's
/// subdirectories are walked in parallel (a tree under one top-level
/// directory, like `usr/`, keeps both cores busy too); the result is
/// sorted, so the order never depends on the walk.
pub fn scan(root: &Path, s: &DirOptions) -> Result<DirScan, String> {
    let meta = std::fs::metadata(root).map_err(|e| format!("cannot read directory `{}`: {e}", root.display()))?;
    if !meta.is_dir() {
        return Err(format!("`{}` is not a directory", root.display()));
    }
    let filters = Filters { include: globs(&s.include)?, exclude: globs(&s.exclude)? };
    let mut entries = walk(root, root, 0, 0, &filters)?;
    entries.extend(walk_children(root, root, &filters)?);
    entries.sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    Ok(DirScan { root: root.to_path_buf(), entries, key: None, pending: None })
}

/// The entries below `dir` (inside `root`), recursively, applying the
/// filters; subdirectories are walked in parallel.
fn walk_children(root: &Path, dir: &Path, f: &Filters) -> Result<Vec<DirEntry>, String> {
    let walk_err = |e: std::io::Error| format!("walking `{}` failed: `{}`: {e}", root.display(), dir.display());
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(walk_err)? {
        let e = e.map_err(walk_err)?;
        let path = e.path();
        let rel = relative(root, &path);
        if f.exclude.as_ref().is_some_and(|x| x.is_match(Path::new(OsStr::from_bytes(rel)))) {
            continue;
        }
        // `DirEntry::metadata` does not follow symlinks.
        let meta = e.metadata().map_err(|err| format!("cannot stat `{}`: {err}", path.display()))?;
        if let Some(inc) = &f.include {
            if !meta.is_dir() && !inc.is_match(Path::new(OsStr::from_bytes(rel))) {
                continue;
            }
        }
        let link = if meta.file_type().is_symlink() {
            Some(
                std::fs::read_link(&path)
                    .map_err(|err| format!("cannot read symlink `{}`: {err}", path.display()))?
                    .into_os_string()
                    .into_vec(),
            )
        } else {
            None
        };
        let rel = rel.to_vec();
        entries.push(DirEntry { rel, path, meta, link, capability: OnceLock::new() });
    }
    let nested: Vec<Vec<DirEntry>> = entries
        .par_iter()
        .filter(|e| e.meta.is_dir())
        .map(|e| walk_children(root, &e.path, f))
        .collect::<Result<_, String>>()?;
    entries.extend(nested.into_iter().flatten());
    Ok(entries)
}

struct Filters {
    include: Option<globset::GlobSet>,
    exclude: Option<globset::GlobSet>,
}

/// `path` relative to `root` (which it starts with: walkdir joins onto it).
fn relative<'p>(root: &Path, path: &'p Path) -> &'p [u8] {
    let (r, p) = (root.as_os_str().as_bytes(), path.as_os_str().as_bytes());
    match p.strip_prefix(r) {
        Some(rest) => rest.strip_prefix(b"/").unwrap_or(rest),
        None => path.strip_prefix(root).map(|x| x.as_os_str().as_bytes()).unwrap_or_default(),
    }
}

/// Walk `start` (inside `root`) between two depths, applying the filters.
fn walk(root: &Path, start: &Path, min_depth: usize, max_depth: usize, f: &Filters) -> Result<Vec<DirEntry>, String> {
    let mut entries = Vec::new();
    let walker = walkdir::WalkDir::new(start)
        .follow_links(false)
        .min_depth(min_depth)
        .max_depth(max_depth)
        .into_iter()
        .filter_entry(|e| {
            let rel = relative(root, e.path());
            rel.is_empty() || f.exclude.as_ref().map(|x| !x.is_match(Path::new(OsStr::from_bytes(rel)))).unwrap_or(true)
        });
    for e in walker {
        let e = e.map_err(|e| format!("walking `{}` failed: {e}", root.display()))?;
        let rel = relative(root, e.path());
        let meta = e.metadata().map_err(|err| format!("cannot stat `{}`: {err}", e.path().display()))?;
        if let Some(inc) = &f.include {
            if !rel.is_empty() && !meta.is_dir() && !inc.is_match(Path::new(OsStr::from_bytes(rel))) {
                continue;
            }
        }
        let link = if meta.file_type().is_symlink() {
            Some(
                std::fs::read_link(e.path())
                    .map_err(|err| format!("cannot read symlink `{}`: {err}", e.path().display()))?
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else {
            None
        };
        entries.push(DirEntry {
            rel: rel.to_vec(),
            path: e.path().to_path_buf(),
            meta,
            link,
            capability: OnceLock::new(),
        });
    }
    Ok(entries)
}

impl DirScan {
    /// A regular file's content: while the fingerprint waits on packing,
    /// a file the memo did not know is hashed (and its capability read)
    /// as it is written.
    fn content_of(&self, e: &DirEntry) -> Content {
        if self.pending.is_some() && e.capability.get().is_none() {
            Content::HostToHash(e.path.clone())
        } else {
            Content::Host(e.path.clone())
        }
    }

    /// Place the scanned entries under `dest` in `tree`.
    pub fn into_tree(&self, dest: &[u8], s: &DirOptions, tree: &mut Tree) -> Result<DirReport, String> {
        let (uid, gid) = s.owner.unwrap_or((0, 0));
        let mut report = DirReport::default();
        let mut first_of_inode: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
        for e in &self.entries {
            let m = &e.meta;
            let ft = m.file_type();
            let target = join(dest, &e.rel);
            let kind = if ft.is_dir() {
                Kind::Dir
            } else if ft.is_symlink() {
                Kind::Symlink(e.link.clone().unwrap_or_default())
            } else if ft.is_file() {
                if m.nlink() > 1 {
                    let key = (m.dev(), m.ino());
                    if let Some(first) = first_of_inode.get(&key) {
                        Kind::Hardlink(first.clone())
                    } else {
                        first_of_inode.insert(key, target.clone());
                        Kind::File { size: m.size(), content: self.content_of(e) }
                    }
                } else {
                    Kind::File { size: m.size(), content: self.content_of(e) }
                }
            } else if ft.is_char_device() || ft.is_block_device() {
                if !s.devices {
                    report.dropped_devices += 1;
                    continue;
                }
                let (maj, min) = (libc::major(m.rdev()), libc::minor(m.rdev()));
                if ft.is_char_device() {
                    Kind::CharDev(maj, min)
                } else {
                    Kind::BlockDev(maj, min)
                }
            } else if ft.is_fifo() {
                Kind::Fifo
            } else {
                report.skipped_sockets += 1;
                continue;
            };
            let mut node = Node::new(kind, m.mode() & 0o7777).owned(uid, gid);
            node.mtime = m.mtime().max(0) as u64;
            let learned_when_written = matches!(node.kind, Kind::File { content: Content::HostToHash(_), .. });
            if ft.is_file() && !learned_when_written {
                if let Some(cap) = e.capability.get_or_init(|| capability(&e.path)) {
                    node.xattrs.push(("security.capability".into(), cap.clone()));
                }
            }
            tree.insert(target, node)
                .map_err(|err| format!("`{}`: {err}", Path::new(OsStr::from_bytes(&e.rel)).display()))?;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rels(scan: &DirScan) -> Vec<String> {
        scan.entries.iter().map(|e| String::from_utf8(e.rel.clone()).unwrap()).collect()
    }

    /// The parallel walk: every level, sorted, symlinks not followed,
    /// `exclude` pruning whole subtrees, `include` selecting files only.
    #[test]
    fn scan_walks_every_level_in_order_with_the_filters() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for f in ["usr/lib/a.so", "usr/lib/py/x.py", "usr/lib/py/cache/x.pyc", "usr/share/doc/README", "top.txt"] {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), f).unwrap();
        }
        std::os::unix::fs::symlink("../usr", root.join("usr/share/loop")).unwrap();
        let all = scan(root, &DirOptions::default()).unwrap();
        let want = [
            "",
            "top.txt",
            "usr",
            "usr/lib",
            "usr/lib/a.so",
            "usr/lib/py",
            "usr/lib/py/cache",
            "usr/lib/py/cache/x.pyc",
            "usr/lib/py/x.py",
            "usr/share",
            "usr/share/doc",
            "usr/share/doc/README",
            "usr/share/loop",
        ];
        assert_eq!(rels(&all), want);
        let link = all.entries.iter().find(|e| e.rel == b"usr/share/loop").unwrap();
        assert!(link.meta.file_type().is_symlink());
        assert_eq!(link.link.as_deref(), Some(&b"../usr"[..]));

        let opts = DirOptions {
            include: vec!["**/*.py".into(), "**/README".into()],
            exclude: vec!["usr/lib/py/cache".into(), "usr/share/loop".into()],
            ..DirOptions::default()
        };
        let some = scan(root, &opts).unwrap();
        let want = [
            "",
            "usr",
            "usr/lib",
            "usr/lib/py",
            "usr/lib/py/x.py",
            "usr/share",
            "usr/share/doc",
            "usr/share/doc/README",
        ];
        assert_eq!(rels(&some), want);

        let err = scan(&root.join("top.txt"), &DirOptions::default()).err().unwrap();
        assert!(err.contains("is not a directory"), "{err}");
    }
}
