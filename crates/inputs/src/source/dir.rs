//! `dir` sources: a host directory placed at `dest`. The walk never follows
//! symlinks; include/exclude globs match paths relative to the directory.

mod fingerprint;

use super::hashes::{capability, FileDigest, HashError};
use crate::cache::key::Key;
use crate::layer::path::join;
use crate::layer::{Content, Kind, Node, Tree, TreeError};
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

/// Why a directory could not be scanned, fingerprinted or placed; the
/// message for the source's `dir` field.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("`{pattern}` is not a valid glob: {source}")]
    Glob { pattern: String, source: globset::Error },
    #[error(transparent)]
    Globs(globset::Error),
    #[error("cannot read directory `{}`: {source}", path.display())]
    Root { path: PathBuf, source: std::io::Error },
    #[error("`{}` is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("walking `{}` failed: `{}`: {source}", root.display(), dir.display())]
    Walk { root: PathBuf, dir: PathBuf, source: std::io::Error },
    #[error("cannot stat `{}`: {source}", path.display())]
    Stat { path: PathBuf, source: std::io::Error },
    #[error("cannot read symlink `{}`: {source}", path.display())]
    ReadLink { path: PathBuf, source: std::io::Error },
    #[error("`{}`: {source}", rel.display())]
    Place { rel: PathBuf, source: TreeError },
    #[error(transparent)]
    Hash(#[from] HashError),
}

#[derive(Default)]
pub struct DirReport {
    pub dropped_devices: usize,
    pub skipped_sockets: usize,
}

fn globs(pats: &[String]) -> Result<Option<globset::GlobSet>, DirError> {
    if pats.is_empty() {
        return Ok(None);
    }
    let mut b = globset::GlobSetBuilder::new();
    for p in pats {
        b.add(globset::Glob::new(p).map_err(|source| DirError::Glob { pattern: p.clone(), source })?);
    }
    b.build().map(Some).map_err(DirError::Globs)
}

/// Walk `root` (stat only). Errors are for the `dir` field.
///
/// The `lstat` calls dominate a no-op rebuild, so every directory's
/// subdirectories are walked in parallel (a tree under one top-level
/// directory, like `usr/`, keeps both cores busy too). Entries come out in
/// path order whatever the walk's timing: each directory's entries are
/// stat'ed in name order and the walks are joined in that order at the end,
/// each entry moved once (no sort, no re-copying per level: a scan of tens
/// of thousands of entries is tens of megabytes).
pub fn scan(root: &Path, s: &DirOptions) -> Result<DirScan, DirError> {
    let meta = std::fs::metadata(root).map_err(|source| DirError::Root { path: root.to_path_buf(), source })?;
    if !meta.is_dir() {
        return Err(DirError::NotADirectory { path: root.to_path_buf() });
    }
    let filters = Filters { include: globs(&s.include)?, exclude: globs(&s.exclude)? };
    // The root itself, followed if it is a symlink, like its listing.
    let top = DirEntry { rel: Vec::new(), path: root.to_path_buf(), meta, link: None, capability: OnceLock::new() };
    let walked = walk_dir(root, root, &filters)?;
    let mut entries = Vec::with_capacity(1 + walked.len());
    entries.push(top);
    walked.flatten_into(&mut entries);
    Ok(DirScan { root: root.to_path_buf(), entries, key: None, pending: None })
}

/// One directory's walk: its entries in name order, and the walks of those
/// that are directories (by index into `entries`, ascending).
struct Walked {
    entries: Vec<DirEntry>,
    subdirs: Vec<(usize, Walked)>,
}

impl Walked {
    fn len(&self) -> usize {
        self.entries.len() + self.subdirs.iter().map(|(_, w)| w.len()).sum::<usize>()
    }

    /// Append everything below this directory to `out` in path (byte)
    /// order. A subdirectory `d`'s contents sort as `d/`, which is not
    /// right after `d`: `d.txt` (`.` < `/`) comes between. So a
    /// subdirectory's walk waits on a stack until the next entry sorts
    /// after `d/`; of the waiting ones the last pushed sorts first.
    fn flatten_into(self, out: &mut Vec<DirEntry>) {
        let mut subdirs = self.subdirs.into_iter().peekable();
        let mut waiting: Vec<(Vec<u8>, Walked)> = Vec::new();
        for (i, e) in self.entries.into_iter().enumerate() {
            while waiting.last().is_some_and(|(key, _)| key.as_slice() < name(&e.rel)) {
                let (_, w) = waiting.pop().expect("checked");
                w.flatten_into(out);
            }
            if let Some((_, w)) = subdirs.next_if(|(j, _)| *j == i) {
                let mut key = name(&e.rel).to_vec();
                key.push(b'/');
                waiting.push((key, w));
            }
            out.push(e);
        }
        while let Some((_, w)) = waiting.pop() {
            w.flatten_into(out);
        }
    }
}

/// The last component of a relative path.
fn name(rel: &[u8]) -> &[u8] {
    rel.rsplit(|&b| b == b'/').next().unwrap_or(rel)
}

/// Walk the entries below `dir` (inside `root`), recursively, applying the
/// filters; subdirectories are walked in parallel.
fn walk_dir(root: &Path, dir: &Path, f: &Filters) -> Result<Walked, DirError> {
    let walk_err = |source: std::io::Error| DirError::Walk { root: root.to_path_buf(), dir: dir.to_path_buf(), source };
    let mut listing = std::fs::read_dir(dir)
        .map_err(walk_err)?
        .map(|e| e.map(|e| (e.file_name(), e)).map_err(walk_err))
        .collect::<Result<Vec<_>, DirError>>()?;
    // Sorting the listing (names and small handles) instead of the stat'ed
    // entries keeps the large entries in place.
    listing.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut entries = Vec::with_capacity(listing.len());
    for (_, e) in listing {
        let path = e.path();
        let rel = relative(root, &path);
        if f.exclude.as_ref().is_some_and(|x| x.is_match(Path::new(OsStr::from_bytes(rel)))) {
            continue;
        }
        // `DirEntry::metadata` does not follow symlinks, and stats relative
        // to the directory's descriptor.
        let meta = e.metadata().map_err(|source| DirError::Stat { path: path.clone(), source })?;
        if let Some(inc) = &f.include {
            if !meta.is_dir() && !inc.is_match(Path::new(OsStr::from_bytes(rel))) {
                continue;
            }
        }
        let link = if meta.file_type().is_symlink() {
            Some(
                std::fs::read_link(&path)
                    .map_err(|source| DirError::ReadLink { path: path.clone(), source })?
                    .into_os_string()
                    .into_vec(),
            )
        } else {
            None
        };
        let rel = rel.to_vec();
        entries.push(DirEntry { rel, path, meta, link, capability: OnceLock::new() });
    }
    let subdirs = entries
        .par_iter()
        .enumerate()
        .filter(|(_, e)| e.meta.is_dir())
        .map(|(i, e)| Ok((i, walk_dir(root, &e.path, f)?)))
        .collect::<Result<Vec<_>, DirError>>()?;
    Ok(Walked { entries, subdirs })
}

struct Filters {
    include: Option<globset::GlobSet>,
    exclude: Option<globset::GlobSet>,
}

/// `path` relative to `root` (which it starts with: the walk joins onto it).
fn relative<'p>(root: &Path, path: &'p Path) -> &'p [u8] {
    let (r, p) = (root.as_os_str().as_bytes(), path.as_os_str().as_bytes());
    match p.strip_prefix(r) {
        Some(rest) => rest.strip_prefix(b"/").unwrap_or(rest),
        None => path.strip_prefix(root).map(|x| x.as_os_str().as_bytes()).unwrap_or_default(),
    }
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
    pub fn into_tree(&self, dest: &[u8], s: &DirOptions, tree: &mut Tree) -> Result<DirReport, DirError> {
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
                .map_err(|source| DirError::Place { rel: PathBuf::from(OsStr::from_bytes(&e.rel)), source })?;
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

        let err = scan(&root.join("top.txt"), &DirOptions::default()).err().unwrap().to_string();
        assert!(err.contains("is not a directory"), "{err}");
    }

    /// A directory's contents sort as `name/`: names that extend a
    /// directory's name with a byte below `/` (`a.txt`, `a-b`, `a b`) come
    /// between the directory and its contents, at every depth.
    #[test]
    fn scan_order_is_byte_order_of_whole_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let files =
            ["a/z", "a.txt", "a-b/c", "a b", "a!/x/y", "a.b/c/d", "a.b.c", "a0", "a/b.c/d", "a/b/e", "a/b-c", "b", "A"];
        for f in files {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), f).unwrap();
        }
        let got = rels(&scan(root, &DirOptions::default()).unwrap());
        let mut want = got.clone();
        want.sort();
        assert_eq!(got, want);
        // Every file and directory is there once.
        assert_eq!(got.len(), 1 + files.len() + ["a", "a-b", "a!", "a!/x", "a.b", "a.b/c", "a/b.c", "a/b"].len());
    }
}
