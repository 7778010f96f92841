//! What the layers below a `packages` layer hold, read from their blobs:
//! one merged view (whiteouts and opaque directories applied in layer
//! order) with every directory, symlink and file name, but file *contents*
//! kept only where unpacking over them needs them: the dpkg database's
//! `status`, `diversions` and trigger interests, apt's sources and marks. Other files are
//! placeholders of size 0, never written to a layer (the sandbox that runs
//! the scripts lays the layers below out from their blobs).

use super::control::{parse_paragraphs, Paragraph};
use super::DistroError;
use crate::layer::path::{join, normalize_member, parent};
use crate::layer::stream::{decoder, sniff, Checks, Format};
use crate::layer::{Content, Kind, Node, Tree};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const STATUS: &[u8] = b"var/lib/dpkg/status";

/// The merged lower filesystem.
pub struct Below {
    pub tree: Tree,
    /// The bytes of every regular file below (what laying them out takes).
    pub content_bytes: u64,
}

const TRIGGERS: &[u8] = b"var/lib/dpkg/triggers/";

/// Does unpacking over the layers (or apt's state beside it) need this file's bytes?
fn keeps_content(path: &[u8]) -> bool {
    path == STATUS
        || path == b"var/lib/dpkg/diversions"
        || path.starts_with(TRIGGERS)
        || path == b"var/lib/apt/extended_states"
        || path == b"etc/apt/sources.list"
        || path.starts_with(b"etc/apt/sources.list.d/")
        || path == b"usr/lib/os-release"
}

fn layer_reader(blob: &Path) -> std::io::Result<Box<dyn Read>> {
    let f = BufReader::with_capacity(1 << 20, std::fs::File::open(blob)?);
    match sniff(blob)? {
        // A zip is no layer: read as a tar, it fails there with the tar's error.
        Format::Zip => Ok(Box::new(f)),
        format => decoder(format, f, Checks::Verify),
    }
}

/// Follow the symlinks of `path`'s parent directories (not of its last
/// component) through `tree`, as dpkg and layer extraction do on a real
impl Below {
    /// Read `blobs` (lowest first) into one view; kept contents go to a
    /// spool file in `spool`.
    pub fn read(blobs: &[PathBuf], spool: &Path) -> Result<Below, DistroError> {
        let tmp =
            tempfile::Builder::new().prefix("below-").tempfile_in(spool).map_err(|e| DistroError::io(spool, e))?;
        let (file, spool_path) = tmp.keep().map_err(|e| DistroError::io(spool, e.error))?;
        let spool_path = Arc::new(spool_path);
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut len = 0u64;
        let mut tree = Tree::new();
        let mut content_bytes = 0u64;
        for blob in blobs {
            let err = |e: std::io::Error| DistroError::Assemble {
                message: format!("reading the layer below `{}`: {e}", blob.display()),
            };
            let mut a = tar::Archive::new(layer_reader(blob).map_err(err)?);
            let mut entries: Vec<(Vec<u8>, Node)> = Vec::new();
            let mut whiteouts: Vec<Vec<u8>> = Vec::new();
            let mut opaque: Vec<Vec<u8>> = Vec::new();
            for e in a.entries().map_err(err)? {
                let mut e = e.map_err(err)?;
                let Ok(path) = normalize_member(&e.path_bytes()) else { continue };
                if path.is_empty() {
                    continue;
                }
                let dir = parent(&path).unwrap_or(b"").to_vec();
                let name = &path[if dir.is_empty() { 0 } else { dir.len() + 1 }..];
                if name == b".wh..wh..opq" {
                    opaque.push(dir);
                    continue;
                }
                if let Some(gone) = name.strip_prefix(b".wh.") {
                    whiteouts.push(join(&dir, gone));
                    continue;
                }
                let h = e.header();
                let mode = h.mode().unwrap_or(0o644);
                let (uid, gid) = (h.uid().unwrap_or(0), h.gid().unwrap_or(0));
                let link = e.link_name_bytes().map(|l| l.into_owned()).unwrap_or_default();
                let kind = match h.entry_type() {
                    tar::EntryType::Directory => Kind::Dir,
                    tar::EntryType::Symlink => Kind::Symlink(link),
                    tar::EntryType::Link => match normalize_member(&link) {
                        Ok(t) => Kind::Hardlink(t),
                        Err(_) => continue,
                    },
                    tar::EntryType::Regular | tar::EntryType::Continuous if keeps_content(&path) => {
                        let size = std::io::copy(&mut e, &mut out).map_err(err)?;
                        content_bytes += size;
                        let content = Content::Slice { file: spool_path.clone(), offset: len };
                        len += size;
                        Kind::File { size, content }
                    }
                    tar::EntryType::Regular | tar::EntryType::Continuous => {
                        content_bytes += e.size();
                        Kind::File { size: 0, content: Content::Bytes(Arc::from(Vec::new())) }
                    }
                    tar::EntryType::Fifo => Kind::Fifo,
                    tar::EntryType::Char => Kind::CharDev(0, 0),
                    tar::EntryType::Block => Kind::BlockDev(0, 0),
                    _ => continue,
                };
                entries.push((path, Node::new(kind, mode).owned(uid, gid)));
            }
            // A layer's deletions apply to the layers under it, whatever
            // their place in its tar.
            for d in opaque {
                tree.remove_subtree(&d);
            }
            for w in whiteouts {
                tree.remove(&w);
            }
            for (p, n) in entries {
                tree.insert_following(p, n);
            }
        }
        out.flush().map_err(|e| DistroError::io(&spool_path, e))?;
        Ok(Below { tree, content_bytes })
    }

    /// A kept file as text.
    pub fn text(&self, path: &[u8]) -> Option<String> {
        self.read_file(path).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// The explicit triggers with interests below (`triggers/<name>` files).
    pub fn trigger_names(&self) -> Vec<String> {
        self.tree
            .iter()
            .filter_map(|(p, _)| p.strip_prefix(TRIGGERS))
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .filter(|n| !n.contains('/') && !matches!(n.as_str(), "File" | "Unincorp" | "Lock"))
            .collect()
    }

    /// The bytes of a kept file.
    pub fn read_file(&self, path: &[u8]) -> Option<Vec<u8>> {
        self.tree.get(path).and_then(|n| n.read_content().ok())
    }

    /// The dpkg status paragraphs (none when there is no dpkg database).
    pub fn status(&self) -> Vec<Paragraph> {
        self.read_file(STATUS).map(|b| parse_paragraphs(&String::from_utf8_lossy(&b))).unwrap_or_default()
    }

    /// The dpkg status paragraphs, each with its text as written (ending in
    /// a newline, without the blank line after it).
    pub fn status_paragraphs(&self) -> Vec<(Paragraph, String)> {
        let Some(b) = self.read_file(STATUS) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&b);
        let mut out = Vec::new();
        let mut cur = String::new();
        for line in text.split_inclusive('\n') {
            if line.trim().is_empty() {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            } else {
                cur.push_str(line);
                if !line.ends_with('\n') {
                    cur.push('\n');
                }
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        out.into_iter().filter_map(|raw| parse_paragraphs(&raw).into_iter().next().map(|p| (p, raw))).collect()
    }

    /// What a layer's lock was resolved against: `sha256:` of the packages
    /// present below (one `name:arch version` line each, sorted), or `none`.
    /// The installed set, not the status file's bytes: dpkg rewrites those
    /// (field order, trigger states) without changing what is installed.
    pub fn status_digest(&self) -> String {
        if self.read_file(STATUS).is_none() {
            return "none".into();
        }
        let mut lines: Vec<String> = self
            .status()
            .iter()
            .filter(|p| is_present(p))
            .map(|p| {
                let get = |k| p.get(k).unwrap_or_default();
                format!("{}:{} {}\n", get("Package"), get("Architecture"), get("Version"))
            })
            .collect();
        lines.sort();
        crate::oci::Digest::of_bytes(lines.concat().as_bytes()).to_string()
    }

    pub fn has_dpkg_database(&self) -> bool {
        self.tree.get(STATUS).is_some()
    }
}

/// The dpkg database key of a status paragraph, in dpkg's order: name,
/// then the architecture of `Multi-Arch: same` packages.
pub fn package_key(p: &Paragraph) -> (String, String) {
    let name = p.get("Package").unwrap_or_default().to_string();
    match (p.get("Multi-Arch"), p.get("Architecture")) {
        (Some("same"), Some(arch)) => (name, arch.to_string()),
        _ => (name, String::new()),
    }
}

/// Is the package of this status paragraph on the system (its files
/// present), whether configured or only unpacked?
pub fn is_present(p: &Paragraph) -> bool {
    let status: Vec<&str> = p.get("Status").unwrap_or("").split_whitespace().collect();
    matches!(status.as_slice(), [want, _, state]
        if *want != "purge" && !matches!(*state, "not-installed" | "config-files"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_follow_symlinks() {
        let mut t = Tree::new();
        t.insert(b"usr/bin".to_vec(), Node::dir(0o755)).unwrap();
        t.insert(b"bin".to_vec(), Node::new(Kind::Symlink(b"usr/bin".to_vec()), 0o777)).unwrap();
        t.insert(b"var/run".to_vec(), Node::new(Kind::Symlink(b"/run".to_vec()), 0o777)).unwrap();
        assert_eq!(t.resolve_parents(b"bin/ls"), b"usr/bin/ls");
        assert_eq!(t.resolve_parents(b"bin"), b"bin", "the last component is not followed");
        assert_eq!(t.resolve_parents(b"var/run/x/y"), b"run/x/y");
        assert_eq!(t.resolve_parents(b"opt/x"), b"opt/x");
        let mut t2 = t.clone();
        t2.insert_following(b"bin/sh".to_vec(), Node::bytes(b"x".to_vec(), 0o755));
        assert!(t2.get(b"usr/bin/sh").is_some());
    }

    #[test]
    fn presence_from_status() {
        let p = |s: &str| Paragraph { fields: vec![("Package".into(), "a".into()), ("Status".into(), s.into())] };
        assert!(is_present(&p("install ok installed")));
        assert!(is_present(&p("install ok unpacked")));
        assert!(!is_present(&p("deinstall ok config-files")));
        assert!(!is_present(&p("purge ok not-installed")));
    }
}
