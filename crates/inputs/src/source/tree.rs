//! A scanned files layer made into a layer tree: directories placed,
//! archives and wheels read (their pins checked), ROCm artifacts
//! flattened, whiteouts added.

use super::{dir_options, files_of, rocm, verify_pin, FilesScan, Scanned, SourceError, TreeReport};
use crate::definition::{Layer, SourceKind};
use crate::layer::archive::{read_into, Placement};
use crate::layer::path::{display, normalize_dest, normalize_member};
use crate::layer::{Content, Kind, Node, Tree};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

impl FilesScan {
    /// Build the layer's tree. Archives are read (and sha256 pins checked)
    /// here; `wheels` holds the fetched file of each `pypi` source.
    pub fn into_tree(
        &self,
        wheels: &BTreeMap<usize, PathBuf>,
        spool_dir: &Path,
    ) -> Result<(Tree, TreeReport), SourceError> {
        let FilesScan { layer, scans } = self;
        let files = files_of(layer);
        let prefix = &layer.field_prefix;
        let mut tree = Tree::new();
        let mut report = TreeReport::default();
        for (i, (s, scanned)) in files.sources.iter().zip(scans).enumerate() {
            let field = |what: &str| format!("{prefix}source[{i}].{what}");
            let dest = normalize_dest(&s.dest)
                .map_err(|p| SourceError::new(layer, field("dest"), format!("`{}` {p}", s.dest)))?;
            match (scanned, &s.kind) {
                (Scanned::Dir(d), SourceKind::Dir(def)) => {
                    let opts = dir_options(s, &def.include, &def.exclude, def.devices);
                    let r = d
                        .into_tree(&dest, &opts, &mut tree)
                        .map_err(|e| SourceError::caused(layer, field("dir"), e))?;
                    report.dropped_devices += r.dropped_devices;
                    report.skipped_sockets += r.skipped_sockets;
                }
                (Scanned::RocmTree(d), _) => {
                    let opts = dir_options(s, &[], &[], false);
                    let r = d
                        .into_tree(&dest, &opts, &mut tree)
                        .map_err(|e| SourceError::caused(layer, field("rocm"), e))?;
                    report.dropped_devices += r.dropped_devices;
                    report.skipped_sockets += r.skipped_sockets;
                }
                (Scanned::File(meta), SourceKind::File(f)) => {
                    if let Some(pin) = &f.sha256 {
                        verify_pin(layer, &field("sha256"), &f.path, pin)?;
                    }
                    let target = if s.dest.ends_with('/') || dest.is_empty() {
                        let name = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                        crate::layer::path::join(&dest, name.as_bytes())
                    } else {
                        dest.clone()
                    };
                    let (uid, gid) = s.owner.unwrap_or((0, 0));
                    let mut node = Node::new(
                        Kind::File { size: meta.size(), content: Content::Host(f.path.clone()) },
                        f.mode.unwrap_or(meta.mode() & 0o7777),
                    )
                    .owned(uid, gid);
                    node.mtime = meta.mtime().max(0) as u64;
                    tree.insert(target, node).map_err(|e| SourceError::new(layer, field("dest"), e.to_string()))?;
                }
                (Scanned::Archive(_), SourceKind::Archive(a)) => {
                    if let Some(pin) = &a.sha256 {
                        verify_pin(layer, &field("sha256"), &a.path, pin)?;
                    }
                    let mut map = Vec::new();
                    for (k, v) in &a.map {
                        let key = normalize_member(k.trim_start_matches('/').as_bytes()).unwrap_or_default();
                        let to = normalize_dest(v).unwrap_or_default();
                        map.push((key, to));
                    }
                    let place = Placement {
                        dest: dest.clone(),
                        strip_components: a.strip_components,
                        map,
                        owner: s.owner,
                        allow_devices: a.devices,
                        record_order: false,
                        verified: false,
                    };
                    let r = read_into(&a.path, &mut tree, &place, spool_dir)
                        .map_err(|e| SourceError::new(layer, field("archive"), e.to_string()))?;
                    report.dropped_devices += r.dropped_devices;
                }
                (Scanned::Remove, _) => {}
                (Scanned::Rocm(a, sel, _), kind) => {
                    let key = if matches!(kind, SourceKind::Rocm(_)) { "rocm" } else { "rocm_artifacts" };
                    rocm::into_tree(a, sel, &dest, s.owner, &mut tree)
                        .map_err(|e| SourceError::caused(layer, field(key), e))?;
                }
                (Scanned::Pypi(_), SourceKind::Pypi(p)) => {
                    let path = wheels.get(&i).ok_or_else(|| {
                        SourceError::new(layer, field("pypi"), format!("`{}` was not fetched", p.request.requirement))
                    })?;
                    let opts = super::wheel_install::Install {
                        dest: &dest,
                        site_packages: &p.site_packages,
                        bin: &p.bin,
                        owner: s.owner,
                    };
                    super::wheel_install::wheel_into_tree(path, &opts, &mut tree, spool_dir)
                        .map_err(|e| SourceError::caused(layer, field("pypi"), e))?;
                }
                (Scanned::Wheels(chosen), SourceKind::Wheels(w)) => {
                    let opts = super::wheel_install::Install {
                        dest: &dest,
                        site_packages: &w.site_packages,
                        bin: &w.bin,
                        owner: s.owner,
                    };
                    for (path, _) in chosen {
                        super::wheel_install::wheel_into_tree(path, &opts, &mut tree, spool_dir)
                            .map_err(|e| SourceError::caused(layer, field("wheels"), e))?;
                    }
                }
                _ => unreachable!("each source is scanned as its own kind"),
            }
            for (j, r) in s.remove.iter().enumerate() {
                whiteout(layer, &mut tree, &format!("{prefix}source[{i}].remove[{j}]"), r)?;
            }
        }
        for (j, r) in files.remove.iter().enumerate() {
            whiteout(layer, &mut tree, &format!("{prefix}remove[{j}]"), r)?;
        }
        tree.finalize_hardlinks().map_err(|e| SourceError::new(layer, format!("{prefix}source"), e.to_string()))?;
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
