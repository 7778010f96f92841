//! The layer tree: every entry a layer will hold, keyed by its normalized
//! path. A `BTreeMap` over the path bytes gives the bytewise order the
//! determinism contract asks for, and each directory sorts before its
//! contents because a path's prefix always sorts first.
//!
//! Over 400 lines: 60 of them are tests (the code is under 400).

use super::path::{display, join, parent};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a regular file's bytes come from when the tar is written.
#[derive(Debug, Clone)]
pub enum Content {
    /// A file on the host, read when written (its size is checked again).
    Host(PathBuf),
    /// A host file whose content identity is learned as it is written (a
    /// first build's cache key, see `source::hashes::KeyHashing`): the
    /// writer takes its `security.capability` from the open file into the
    /// entry's header and reports its sha256 and capability.
    HostToHash(PathBuf),
    /// A byte range of a file: a member of an uncompressed tar, or a spool.
    Slice { file: Arc<PathBuf>, offset: u64 },
    /// Bytes held in memory (small generated files).
    Bytes(Arc<[u8]>),
}

#[derive(Debug, Clone)]
pub enum Kind {
    Dir,
    File {
        size: u64,
        content: Content,
    },
    Symlink(Vec<u8>),
    /// Another entry of the same tree (a normalized path).
    Hardlink(Vec<u8>),
    CharDev(u32, u32),
    BlockDev(u32, u32),
    Fifo,
}

impl Kind {
    pub fn is_dir(&self) -> bool {
        matches!(self, Kind::Dir)
    }
    pub fn is_device(&self) -> bool {
        matches!(self, Kind::CharDev(..) | Kind::BlockDev(..))
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky (mask 0o7777).
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    /// Seconds since the epoch; clamped to SOURCE_DATE_EPOCH when written.
    pub mtime: u64,
    /// Extended attributes kept in the layer (only `security.capability`).
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// Created only because a deeper path needed a parent directory.
    pub implicit: bool,
}

impl Node {
    /// The bytes of a regular file's content, wherever it lives.
    pub fn read_content(&self) -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let Kind::File { size, content } = &self.kind else {
            return Err(std::io::Error::other("not a regular file"));
        };
        let mut v = Vec::with_capacity(*size as usize);
        match content {
            Content::Bytes(b) => v.extend_from_slice(b),
            Content::Host(p) | Content::HostToHash(p) => {
                std::fs::File::open(p)?.take(*size).read_to_end(&mut v)?;
            }
            Content::Slice { file, offset } => {
                let mut f = std::fs::File::open(file.as_ref())?;
                f.seek(SeekFrom::Start(*offset))?;
                f.take(*size).read_to_end(&mut v)?;
            }
        }
        Ok(v)
    }

    pub fn new(kind: Kind, mode: u32) -> Node {
        Node { kind, mode: mode & 0o7777, uid: 0, gid: 0, mtime: 0, xattrs: Vec::new(), implicit: false }
    }
    pub fn dir(mode: u32) -> Node {
        Node::new(Kind::Dir, mode)
    }
    pub fn bytes(data: impl Into<Arc<[u8]>>, mode: u32) -> Node {
        let data: Arc<[u8]> = data.into();
        Node::new(Kind::File { size: data.len() as u64, content: Content::Bytes(data) }, mode)
    }
    pub fn owned(mut self, uid: u64, gid: u64) -> Node {
        self.uid = uid;
        self.gid = gid;
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("`{path}` would be written through the symlink `{link}`")]
    ThroughSymlink { path: String, link: String },
    #[error("`{path}` needs `{ancestor}` to be a directory, but an earlier entry made it a file")]
    NotADirectory { path: String, ancestor: String },
    #[error("hardlink `{path}` points to `{target}`, which is not a file in this layer")]
    BadHardlink { path: String, target: String },
    #[error("cannot write a whiteout for the root directory")]
    WhiteoutRoot,
}

#[derive(Debug, Default, Clone)]
pub struct Tree {
    entries: BTreeMap<Vec<u8>, Node>,
}

/// The bytes just after every path below `p/` in bytewise order ('0' follows '/').
fn subtree_range(p: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = p.to_vec();
    lo.push(b'/');
    let mut hi = p.to_vec();
    hi.push(b'0');
    (lo, hi)
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, path: &[u8]) -> Option<&Node> {
        self.entries.get(path)
    }

    /// `path` with its symlinks (absolute or relative, any component)
    /// followed, as the kernel would in the image. `strict`: a missing
    /// component or a loop (more than 40 hops) gives None; otherwise the
    /// missing component is taken as it is and a loop stops being followed.
    /// `path` with its parent directories' symlinks followed (the last
    /// component is not), as extraction onto a real filesystem would place it.
    pub fn resolve_parents(&self, path: &[u8]) -> Vec<u8> {
        match path.iter().rposition(|&b| b == b'/') {
            Some(i) => {
                let dir = self.follow_symlinks(&path[..i], false).unwrap_or_default();
                join(&dir, &path[i + 1..])
            }
            None => path.to_vec(),
        }
    }

    /// Insert as extraction onto a real filesystem would: through symlinked
    /// parent directories. Entries that cannot be placed are left out.
    pub fn insert_following(&mut self, path: Vec<u8>, node: Node) {
        if let Err(TreeError::ThroughSymlink { .. }) = self.insert(path.clone(), node.clone()) {
            let _ = self.insert(self.resolve_parents(&path), node);
        }
    }

    pub fn follow_symlinks(&self, path: &[u8], strict: bool) -> Option<Vec<u8>> {
        let mut todo: Vec<Vec<u8>> =
            path.split(|&b| b == b'/').filter(|c| !c.is_empty()).map(|c| c.to_vec()).rev().collect();
        let mut cur: Vec<u8> = Vec::new();
        let mut hops = 0;
        while let Some(comp) = todo.pop() {
            match comp.as_slice() {
                b"." => continue,
                b".." => {
                    cur = parent(&cur).unwrap_or(b"").to_vec();
                    continue;
                }
                _ => {}
            }
            let next = join(&cur, &comp);
            match self.get(&next).map(|n| &n.kind) {
                Some(Kind::Symlink(t)) if hops < 40 => {
                    hops += 1;
                    if t.first() == Some(&b'/') {
                        cur.clear();
                    }
                    todo.extend(t.split(|&b| b == b'/').filter(|c| !c.is_empty()).map(|c| c.to_vec()).rev());
                }
                Some(Kind::Symlink(_)) | None if strict => return None,
                _ => cur = next,
            }
        }
        Some(cur)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Node)> {
        self.entries.iter()
    }

    /// Total bytes of regular-file content (for progress bars).
    pub fn content_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|n| match &n.kind {
                Kind::File { size, .. } => *size,
                _ => 0,
            })
            .sum()
    }

    /// Make sure every ancestor of `path` is a directory, creating implicit
    /// ones; refuse to go through a symlink or a file.
    fn ensure_parents(&mut self, path: &[u8]) -> Result<(), TreeError> {
        // Every stored entry's ancestors are stored directories (a non-dir
        // replacing a dir takes its subtree with it), so the walk up stops
        // at the nearest ancestor present: one lookup for most inserts.
        let mut missing = Vec::new();
        let mut p = parent(path);
        while let Some(a) = p.filter(|a| !a.is_empty()) {
            match self.entries.get(a) {
                Some(n) => match n.kind {
                    Kind::Dir => break,
                    Kind::Symlink(_) => {
                        return Err(TreeError::ThroughSymlink { path: display(path), link: display(a) })
                    }
                    _ => return Err(TreeError::NotADirectory { path: display(path), ancestor: display(a) }),
                },
                None => missing.push(a),
            }
            p = parent(a);
        }
        for a in missing.into_iter().rev() {
            let mut d = Node::dir(0o755);
            d.implicit = true;
            self.entries.insert(a.to_vec(), d);
        }
        Ok(())
    }

    /// Insert an entry. The root itself (empty path) is never stored: a layer
    /// does not carry metadata for `/`.
    pub fn insert(&mut self, path: Vec<u8>, node: Node) -> Result<(), TreeError> {
        if path.is_empty() {
            return Ok(());
        }
        self.ensure_parents(&path)?;
        if let Some(existing) = self.entries.get(&path) {
            if existing.kind.is_dir() {
                if node.kind.is_dir() {
                    if node.implicit {
                        return Ok(());
                    }
                } else {
                    self.remove_subtree(&path);
                }
            }
        }
        self.entries.insert(path, node);
        Ok(())
    }

    /// Remove `path` and everything below it.
    pub fn remove(&mut self, path: &[u8]) {
        self.remove_subtree(path);
        self.entries.remove(path);
    }

    /// Remove everything below `path` (not `path` itself).
    pub fn remove_subtree(&mut self, path: &[u8]) {
        let (lo, hi) = subtree_range(path);
        let doomed: Vec<Vec<u8>> = self.entries.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            self.entries.remove(&k);
        }
    }

    /// Record the deletion of a lower layer's `path` as an OCI whiteout file.
    pub fn whiteout(&mut self, path: &[u8]) -> Result<(), TreeError> {
        let parent_dir = parent(path).ok_or(TreeError::WhiteoutRoot)?;
        let base = &path[if parent_dir.is_empty() { 0 } else { parent_dir.len() + 1 }..];
        let mut name = b".wh.".to_vec();
        name.extend_from_slice(base);
        self.insert(join(parent_dir, &name), Node::bytes(Vec::new(), 0o644))
    }

    /// Make every hardlink group well-formed for tar readers: the member
    /// that sorts first carries the content and the others link to it
    /// (a reader cannot link to a file it has not extracted yet).
    pub fn finalize_hardlinks(&mut self) -> Result<(), TreeError> {
        let links: Vec<(Vec<u8>, Vec<u8>)> = self
            .entries
            .iter()
            .filter_map(|(p, n)| match &n.kind {
                Kind::Hardlink(t) => Some((p.clone(), t.clone())),
                _ => None,
            })
            .collect();
        if links.is_empty() {
            return Ok(());
        }
        // Resolve each link to the entry that holds the data.
        let mut groups: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        for (path, target) in links {
            let mut t = target.clone();
            let mut hops = 0;
            loop {
                match self.entries.get(&t).map(|n| &n.kind) {
                    Some(Kind::Hardlink(next)) if hops < 64 && *next != t => {
                        t = next.clone();
                        hops += 1;
                    }
                    Some(Kind::Hardlink(_)) | Some(Kind::Dir) | None => {
                        return Err(TreeError::BadHardlink { path: display(&path), target: display(&target) })
                    }
                    Some(_) => break,
                }
            }
            groups.entry(t).or_default().push(path);
        }
        for (holder, members) in groups {
            let first = members.iter().min().cloned().expect("group has a member");
            let canonical = if first < holder { first } else { holder.clone() };
            if canonical != holder {
                let data_node = self.entries.get(&holder).cloned().expect("holder exists");
                let mut link_node = data_node.clone();
                link_node.kind = Kind::Hardlink(canonical.clone());
                self.entries.insert(canonical.clone(), data_node);
                self.entries.insert(holder.clone(), link_node);
            }
            for m in members {
                if m != canonical {
                    if let Some(n) = self.entries.get_mut(&m) {
                        n.kind = Kind::Hardlink(canonical.clone());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str) -> Node {
        Node::bytes(data.as_bytes().to_vec(), 0o644)
    }

    #[test]
    fn parents_are_implicit_and_ordered() {
        let mut t = Tree::new();
        t.insert(b"usr/bin/x".to_vec(), file("x")).unwrap();
        t.insert(b"usr.txt".to_vec(), file("y")).unwrap();
        let keys: Vec<String> = t.iter().map(|(k, _)| display(k)).collect();
        assert_eq!(keys, ["usr", "usr.txt", "usr/bin", "usr/bin/x"]);
        assert!(t.get(b"usr").unwrap().implicit);
    }

    #[test]
    fn refuses_writes_through_symlinks() {
        let mut t = Tree::new();
        t.insert(b"etc".to_vec(), Node::new(Kind::Symlink(b"/tmp".to_vec()), 0o777)).unwrap();
        let e = t.insert(b"etc/passwd".to_vec(), file("root")).unwrap_err();
        assert!(matches!(e, TreeError::ThroughSymlink { .. }), "{e}");
    }

    #[test]
    fn replacing_a_dir_drops_its_contents() {
        let mut t = Tree::new();
        t.insert(b"a/b/c".to_vec(), file("1")).unwrap();
        t.insert(b"a/b".to_vec(), file("2")).unwrap();
        assert!(t.get(b"a/b/c").is_none());
        assert!(matches!(t.get(b"a/b").unwrap().kind, Kind::File { .. }));
    }

    #[test]
    fn hardlink_holder_moves_to_first_path() {
        let mut t = Tree::new();
        t.insert(b"z/data".to_vec(), file("d")).unwrap();
        t.insert(b"a/link".to_vec(), Node::new(Kind::Hardlink(b"z/data".to_vec()), 0o644)).unwrap();
        t.finalize_hardlinks().unwrap();
        assert!(matches!(t.get(b"a/link").unwrap().kind, Kind::File { .. }));
        match &t.get(b"z/data").unwrap().kind {
            Kind::Hardlink(target) => assert_eq!(target, b"a/link"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dangling_hardlink_is_an_error() {
        let mut t = Tree::new();
        t.insert(b"a".to_vec(), Node::new(Kind::Hardlink(b"nowhere".to_vec()), 0o644)).unwrap();
        assert!(t.finalize_hardlinks().is_err());
    }

    #[test]
    fn whiteout_names() {
        let mut t = Tree::new();
        t.whiteout(b"usr/share/doc").unwrap();
        assert!(t.get(b"usr/share/.wh.doc").is_some());
        t.whiteout(b"top").unwrap();
        assert!(t.get(b".wh.top").is_some());
    }
}
