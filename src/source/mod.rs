//! Where layer content comes from. A layer's sources are first *scanned*
//! (cheap: stat calls only), which gives the fingerprint for the cache key;
//! only on a cache miss is the scan turned into a tree (reading archives).

pub mod dir;
pub mod hashes;

use crate::digest::KeyHasher;
use crate::spec::{Layer, Source, SourceKind};
use crate::tarball::archive::{read_into, Placement};
use crate::tarball::path::{display, normalize_dest, normalize_member};
use crate::tarball::{Content, Kind, Node, Tree};
use hashes::{ContentHasher, FileToHash};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{file}: `{field}`: {message}")]
pub struct SourceError {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl SourceError {
    fn new(layer: &Layer, field: String, message: impl Into<String>) -> Self {
        SourceError { file: layer.file.display().to_string(), field, message: message.into() }
    }
}

/// One source after scanning.
enum Scanned {
    Dir(dir::DirScan),
    File {
        path: PathBuf,
        meta: std::fs::Metadata,
    },
    Archive {
        path: PathBuf,
        meta: std::fs::Metadata,
    },
    Remove,
    Rocm(crate::rocm::artifacts::Artifacts, crate::rocm::artifacts::Selection, Vec<dir::DirScan>),
    /// A wheel already fetched into the download cache (verified).
    Pypi {
        path: PathBuf,
        sha256: String,
    },
}

/// A `pypi` source's file, fetched before the scan (see `pypi::fetch`).
#[derive(Debug, Clone)]
pub struct FetchedWheel {
    pub path: PathBuf,
    pub sha256: String,
}

/// Does `dir` hold ROCm build artifacts (subdirectories with an
/// `artifact_manifest.txt`) rather than a dist tree?
pub fn is_rocm_artifacts(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries.filter_map(|e| e.ok()).any(|e| e.path().join(crate::rocm::artifacts::MANIFEST).is_file())
        })
        .unwrap_or(false)
}

fn scan_rocm_artifacts(
    layer: &Layer,
    s: &Source,
    field: String,
    root: &Path,
    components: &[String],
    targets: &[String],
) -> Result<Scanned, SourceError> {
    let a = crate::rocm::artifacts::read(root).map_err(|e| SourceError::new(layer, field.clone(), e.to_string()))?;
    let sel = crate::rocm::artifacts::Selection { components: components.to_vec(), targets: targets.to_vec() };
    // Scanned now for the fingerprint; flattened again on a miss.
    let mut scans = Vec::new();
    for art in a.artifacts.iter().filter(|x| sel.takes(&x.name)) {
        for p in &art.prefixes {
            scans.push(dir::scan(p, s).map_err(|m| SourceError::new(layer, field.clone(), m))?);
        }
    }
    Ok(Scanned::Rocm(a, sel, scans))
}

/// A layer's sources, scanned.
pub struct LayerScan<'a> {
    layer: &'a Layer,
    field_prefix: String,
    scans: Vec<(usize, &'a Source, Scanned)>,
}

/// What building the tree noticed, for the user.
#[derive(Debug, Default)]
pub struct TreeReport {
    pub dropped_devices: usize,
    pub skipped_sockets: usize,
}

/// Scan every source of `layer`. `field_prefix` is how the definition
/// names the layer's sources (`source` or `layer[0].source`).
/// `wheels` holds the fetched file of each `pypi` source, by source index.
pub fn scan<'a>(
    layer: &'a Layer,
    field_prefix: &str,
    wheels: &std::collections::BTreeMap<usize, FetchedWheel>,
) -> Result<LayerScan<'a>, SourceError> {
    let mut scans = Vec::new();
    for (i, s) in layer.sources.iter().enumerate() {
        let field = |what: &str| format!("{field_prefix}[{i}].{what}");
        let scanned = match &s.kind {
            SourceKind::Dir(p) => Scanned::Dir(dir::scan(p, s).map_err(|m| SourceError::new(layer, field("dir"), m))?),
            SourceKind::File(p) => {
                let meta = std::fs::metadata(p).map_err(|e| {
                    SourceError::new(layer, field("file"), format!("cannot read `{}`: {e}", p.display()))
                })?;
                if !meta.is_file() {
                    return Err(SourceError::new(
                        layer,
                        field("file"),
                        format!("`{}` is not a regular file", p.display()),
                    ));
                }
                Scanned::File { path: p.clone(), meta }
            }
            SourceKind::Archive(p) => {
                let meta = std::fs::metadata(p).map_err(|e| {
                    SourceError::new(layer, field("archive"), format!("cannot read `{}`: {e}", p.display()))
                })?;
                if !meta.is_file() {
                    return Err(SourceError::new(layer, field("archive"), format!("`{}` is not a file", p.display())));
                }
                Scanned::Archive { path: p.clone(), meta }
            }
            SourceKind::Remove => Scanned::Remove,
            SourceKind::Packages(_) => {
                // Built by the builder's packages layer over the layers below.
                return Err(SourceError::new(
                    layer,
                    field("packages"),
                    "a `packages` source is built over the layers below, not scanned",
                ));
            }
            SourceKind::RocmArtifacts { dir: root, components, targets } => {
                scan_rocm_artifacts(layer, s, field("rocm_artifacts"), root, components, targets)?
            }
            SourceKind::Rocm { dir: root, components, targets } => {
                if is_rocm_artifacts(root) {
                    scan_rocm_artifacts(layer, s, field("rocm"), root, components, targets)?
                } else if root.join("bin").is_dir() || root.join("lib").is_dir() {
                    if !components.is_empty() || !targets.is_empty() {
                        return Err(SourceError::new(
                            layer,
                            field("rocm"),
                            format!(
                                "`{}` is a dist tree: `components` and `targets` select artifacts only; remove them",
                                root.display()
                            ),
                        ));
                    }
                    Scanned::Dir(dir::scan(root, s).map_err(|m| SourceError::new(layer, field("rocm"), m))?)
                } else {
                    return Err(SourceError::new(
                        layer,
                        field("rocm"),
                        format!(
                            "`{}` is neither a ROCm dist tree (with `bin/` or `lib/`) nor an artifacts directory (subdirectories with `{}`)",
                            root.display(),
                            crate::rocm::artifacts::MANIFEST
                        ),
                    ));
                }
            }
            SourceKind::Pypi { request, .. } => {
                let w = wheels.get(&i).ok_or_else(|| {
                    SourceError::new(layer, field("pypi"), format!("`{}` was not fetched", request.requirement))
                })?;
                Scanned::Pypi { path: w.path.clone(), sha256: w.sha256.clone() }
            }
        };
        scans.push((i, s, scanned));
    }
    Ok(LayerScan { layer, field_prefix: field_prefix.to_string(), scans })
}

impl LayerScan<'_> {
    /// Everything that decides the layer's bytes except the parent chain
    /// and the compression: the canonical definition and the *content* of
    /// every input (files hashed through `hasher`'s stat memo), so a changed
    /// mtime alone never rebuilds a layer unless the tar would store it.
    pub fn fingerprint(&self, hasher: &mut ContentHasher, source_date_epoch: u64) -> Result<String, SourceError> {
        let mut h = KeyHasher::new();
        h.field("layer-v2").field(&self.layer.name);
        h.field(format!("{:?}", self.layer.remove));
        for (i, s, scanned) in &self.scans {
            let field = |what: &str| format!("{}[{i}].{what}", self.field_prefix);
            // The validated definition, paths included, in a fixed order.
            h.field(format!("{s:?}"));
            match scanned {
                Scanned::Dir(d) => {
                    let fp = d
                        .fingerprint(s, hasher, source_date_epoch)
                        .map_err(|m| SourceError::new(self.layer, field("dir"), m))?;
                    h.field(fp);
                }
                Scanned::File { path, meta } | Scanned::Archive { path, meta } => {
                    let (kind, name) = match scanned {
                        Scanned::File { .. } => ("file", "file"),
                        _ => ("archive", "archive"),
                    };
                    let id = hashes::source_id(kind, path, &[]);
                    let one = [FileToHash { rel: b"", path, meta }];
                    let d = hasher
                        .hash_files(&id, &one)
                        .map_err(|m| SourceError::new(self.layer, field(name), m))?
                        .remove(0);
                    h.field(kind).field(meta.size().to_string()).field(d.sha256);
                    if kind == "file" {
                        // What `into_tree` takes from the host file's stat.
                        let mtime = (meta.mtime().max(0) as u64).min(source_date_epoch);
                        h.field(format!("{:o}:{mtime}", meta.mode() & 0o7777));
                    }
                }
                Scanned::Remove => {}
                Scanned::Pypi { sha256, .. } => {
                    h.field("pypi").field(sha256);
                }
                Scanned::Rocm(_, _, scans) => {
                    for d in scans {
                        let fp = d
                            .fingerprint(s, hasher, source_date_epoch)
                            .map_err(|m| SourceError::new(self.layer, field("rocm_artifacts"), m))?;
                        h.field(d.root.as_os_str().as_encoded_bytes()).field(fp);
                    }
                }
            }
        }
        Ok(h.finish())
    }

    /// Build the layer's tree. Archives are read (and sha256 pins checked) here.
    pub fn into_tree(self, spool_dir: &Path) -> Result<(Tree, TreeReport), SourceError> {
        let layer = self.layer;
        let mut tree = Tree::new();
        let mut report = TreeReport::default();
        for (i, s, scanned) in self.scans {
            let field = |what: &str| format!("{}[{i}].{what}", self.field_prefix);
            let dest = normalize_dest(&s.dest)
                .map_err(|p| SourceError::new(layer, field("dest"), format!("`{}` {p}", s.dest)))?;
            match scanned {
                Scanned::Dir(d) => {
                    let r = d.into_tree(&dest, s, &mut tree).map_err(|m| SourceError::new(layer, field("dir"), m))?;
                    report.dropped_devices += r.dropped_devices;
                    report.skipped_sockets += r.skipped_sockets;
                }
                Scanned::File { path, meta } => {
                    if let Some(pin) = &s.sha256 {
                        verify_pin(layer, &field("sha256"), &path, pin)?;
                    }
                    let target = if s.dest.ends_with('/') || dest.is_empty() {
                        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                        crate::tarball::path::join(&dest, name.as_bytes())
                    } else {
                        dest.clone()
                    };
                    let (uid, gid) = s.owner.unwrap_or((0, 0));
                    let mut node = Node::new(
                        Kind::File { size: meta.size(), content: Content::Host(path.clone()) },
                        s.mode.unwrap_or(meta.mode() & 0o7777),
                    )
                    .owned(uid, gid);
                    node.mtime = meta.mtime().max(0) as u64;
                    tree.insert(target, node).map_err(|e| SourceError::new(layer, field("dest"), e.to_string()))?;
                }
                Scanned::Archive { path, .. } => {
                    if let Some(pin) = &s.sha256 {
                        verify_pin(layer, &field("sha256"), &path, pin)?;
                    }
                    let mut map = Vec::new();
                    for (k, v) in &s.map {
                        let key = normalize_member(k.trim_start_matches('/').as_bytes()).unwrap_or_default();
                        let to = normalize_dest(v).unwrap_or_default();
                        map.push((key, to));
                    }
                    let place = Placement {
                        dest: dest.clone(),
                        strip_components: s.strip_components,
                        map,
                        owner: s.owner,
                        allow_devices: s.devices,
                    };
                    let r = read_into(&path, &mut tree, &place, spool_dir)
                        .map_err(|e| SourceError::new(layer, field("archive"), e.to_string()))?;
                    report.dropped_devices += r.dropped_devices;
                }
                Scanned::Remove => {}
                Scanned::Rocm(a, sel, _) => {
                    let key = if matches!(s.kind, SourceKind::Rocm { .. }) { "rocm" } else { "rocm_artifacts" };
                    crate::rocm::flatten::into_tree(&a, &sel, &dest, s.owner, &mut tree)
                        .map_err(|e| SourceError::new(layer, field(key), e.to_string()))?;
                }
                Scanned::Pypi { path, .. } => {
                    let SourceKind::Pypi { site_packages, bin, .. } = &s.kind else {
                        unreachable!("pypi scans come from pypi sources")
                    };
                    let opts = crate::pypi::install::Install { dest: &dest, site_packages, bin, owner: s.owner };
                    crate::pypi::install::wheel_into_tree(&path, &opts, &mut tree, spool_dir)
                        .map_err(|m| SourceError::new(layer, field("pypi"), m))?;
                }
            }
            for (j, r) in s.remove.iter().enumerate() {
                whiteout(layer, &mut tree, &format!("{}[{i}].remove[{j}]", self.field_prefix), r)?;
            }
        }
        for (j, r) in layer.remove.iter().enumerate() {
            whiteout(layer, &mut tree, &format!("remove[{j}]"), r)?;
        }
        tree.finalize_hardlinks().map_err(|e| SourceError::new(layer, self.field_prefix.clone(), e.to_string()))?;
        Ok((tree, report))
    }
}

fn whiteout(layer: &Layer, tree: &mut Tree, field: &str, path: &str) -> Result<(), SourceError> {
    let p = normalize_dest(path).map_err(|e| SourceError::new(layer, field.to_string(), format!("`{path}` {e}")))?;
    if p.is_empty() {
        return Err(SourceError::new(layer, field.to_string(), "cannot remove `/`"));
    }
    tree.whiteout(&p).map_err(|e| SourceError::new(layer, field.to_string(), format!("`{}`: {e}", display(&p))))
}

/// Check a file against its sha256 pin; a mismatch names file, expected, actual.
pub fn verify_pin(layer: &Layer, field: &str, path: &Path, expected: &str) -> Result<(), SourceError> {
    let actual = crate::digest::sha256_file(path)
        .map_err(|e| SourceError::new(layer, field.to_string(), format!("cannot read `{}`: {e}", path.display())))?;
    if actual != expected {
        return Err(SourceError::new(
            layer,
            field.to_string(),
            format!(
                "sha256 mismatch for `{}`: expected {expected}, actual {actual}; if the new file is intended, update the pin",
                path.display()
            ),
        ));
    }
    Ok(())
}
