//! Where a files layer's content comes from. A layer's sources are first
//! *scanned* (cheap: stat calls only), which gives the fingerprint for the
//! cache key; only when the layer must be built is the scan turned into a
//! tree (reading archives and wheels).

pub mod dir;
mod encode;
pub mod hashes;
mod hint;
pub mod rocm;
#[cfg(test)]
mod tests;
mod tree;
pub mod wheel_install;
pub mod wheelhouse;
use encode::encode_source;

use crate::cache::key::{Key, KeyEncoder};
use crate::definition::{FilesLayer, Layer, RocmSource, Source, SourceKind};
use crate::oci::Digest;
use dir::DirOptions;
use hashes::{ContentHasher, FileToHash};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("{file}: `{field}`: {message}")]
pub struct SourceError {
    pub file: String,
    pub field: String,
    pub message: String,
    /// The error the message tells of, when one caused it.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl SourceError {
    /// The message gains which `--set` parameter fixes the field, when the
    /// field's value came from one.
    pub fn new(layer: &Layer, field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let message = message.into() + &hint::set_hint(&layer.file, &field);
        SourceError { file: layer.file.display().to_string(), field, message, source: None }
    }

    /// [`SourceError::new`] with `cause`'s message, kept as the source.
    pub fn caused(
        layer: &Layer,
        field: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let e = SourceError::new(layer, field, cause.to_string());
        SourceError { source: Some(Box::new(cause)), ..e }
    }
}

/// One source after scanning.
enum Scanned {
    Dir(dir::DirScan),
    File(std::fs::Metadata),
    Archive(std::fs::Metadata),
    Remove,
    Rocm(crate::rocm_artifacts::Artifacts, crate::rocm_artifacts::Selection, Vec<dir::DirScan>),
    /// A ROCm dist tree given as `rocm`: copied like a `dir`.
    RocmTree(dir::DirScan),
    /// A wheel, known by its sha256 (pinned, or fetched already).
    Pypi(Digest),
    /// The wheels a `wheels` source selected from its wheelhouse.
    Wheels(Vec<(std::path::PathBuf, std::fs::Metadata)>),
}

/// Does `dir` hold ROCm build artifacts (subdirectories with an
/// `artifact_manifest.txt`) rather than a dist tree?
pub fn is_rocm_artifacts(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).any(|e| e.path().join(crate::rocm_artifacts::MANIFEST).is_file()))
        .unwrap_or(false)
}

/// A files layer's sources, scanned. Owns what it scanned, so a plan can
/// keep it until the layer is built.
pub struct FilesScan {
    layer: Layer,
    scans: Vec<Scanned>,
}

/// What building the tree noticed, for the user.
#[derive(Debug, Default)]
pub struct TreeReport {
    pub dropped_devices: usize,
    pub skipped_sockets: usize,
}

fn dir_options(s: &Source, include: &[String], exclude: &[String], devices: bool) -> DirOptions {
    DirOptions { include: include.to_vec(), exclude: exclude.to_vec(), owner: s.owner, devices }
}

/// The options of a `dir` source, or of a `rocm` dist tree (no filters).
fn tree_options(s: &Source) -> DirOptions {
    match &s.kind {
        SourceKind::Dir(d) => dir_options(s, &d.include, &d.exclude, d.devices),
        _ => dir_options(s, &[], &[], false),
    }
}

fn files_of(layer: &Layer) -> &FilesLayer {
    match &layer.kind {
        crate::definition::LayerKind::Files(f) => f,
        _ => unreachable!("a FilesScan is made from a files layer"),
    }
}

/// Scan every source of a files layer. `wheels` holds the sha256 of each
/// `pypi` source's wheel (pinned, or fetched), by source index.
pub fn scan(layer: &Layer, wheels: &BTreeMap<usize, Digest>) -> Result<FilesScan, SourceError> {
    let crate::definition::LayerKind::Files(files) = &layer.kind else {
        return Err(SourceError::new(layer, layer.field_prefix.clone(), "is not a files layer"));
    };
    let mut scans = Vec::new();
    for (i, s) in files.sources.iter().enumerate() {
        let field = |what: &str| format!("{}source[{i}].{what}", layer.field_prefix);
        let stat_file = |p: &Path, what: &str| {
            let meta = std::fs::metadata(p)
                .map_err(|e| SourceError::new(layer, field(what), format!("cannot read `{}`: {e}", p.display())))?;
            if !meta.is_file() {
                return Err(SourceError::new(layer, field(what), format!("`{}` is not a regular file", p.display())));
            }
            Ok(meta)
        };
        let scanned = match &s.kind {
            SourceKind::Dir(d) => Scanned::Dir(
                dir::scan(&d.path, &dir_options(s, &d.include, &d.exclude, d.devices))
                    .map_err(|e| SourceError::caused(layer, field("dir"), e))?,
            ),
            SourceKind::File(f) => Scanned::File(stat_file(&f.path, "file")?),
            SourceKind::Archive(a) => Scanned::Archive(stat_file(&a.path, "archive")?),
            SourceKind::Remove => Scanned::Remove,
            SourceKind::RocmArtifacts(r) => scan_rocm_artifacts(layer, s, field("rocm_artifacts"), r)?,
            SourceKind::Rocm(r) => {
                if is_rocm_artifacts(&r.dir) {
                    scan_rocm_artifacts(layer, s, field("rocm"), r)?
                } else if r.dir.join("bin").is_dir() || r.dir.join("lib").is_dir() {
                    if !r.components.is_empty() || !r.targets.is_empty() {
                        return Err(SourceError::new(
                            layer,
                            field("rocm"),
                            format!(
                                "`{}` is a dist tree: `components` and `targets` select artifacts only; remove them",
                                r.dir.display()
                            ),
                        ));
                    }
                    Scanned::RocmTree(
                        dir::scan(&r.dir, &dir_options(s, &[], &[], false))
                            .map_err(|e| SourceError::caused(layer, field("rocm"), e))?,
                    )
                } else if !r.dir.exists() {
                    return Err(SourceError::new(
                        layer,
                        field("rocm"),
                        format!(
                            "`{}` does not exist (give a ROCm dist tree or an artifacts directory)",
                            r.dir.display()
                        ),
                    ));
                } else {
                    return Err(SourceError::new(
                        layer,
                        field("rocm"),
                        format!(
                            "`{}` is neither a ROCm dist tree (with `bin/` or `lib/`) nor an artifacts directory (subdirectories with `{}`)",
                            r.dir.display(),
                            crate::rocm_artifacts::MANIFEST
                        ),
                    ));
                }
            }
            SourceKind::Wheels(w) => {
                let chosen = wheelhouse::select(&w.dir, w.extra.as_deref())
                    .map_err(|why| SourceError::new(layer, field("wheels"), why))?;
                let stats = chosen.into_iter().map(|p| stat_file(&p, "wheels").map(|m| (p, m)));
                Scanned::Wheels(stats.collect::<Result<_, _>>()?)
            }
            SourceKind::Pypi(p) => Scanned::Pypi(*wheels.get(&i).ok_or_else(|| {
                SourceError::new(layer, field("pypi"), format!("`{}` was not fetched", p.request.requirement))
            })?),
        };
        scans.push(scanned);
    }
    Ok(FilesScan { layer: layer.clone(), scans })
}

fn scan_rocm_artifacts(layer: &Layer, s: &Source, field: String, r: &RocmSource) -> Result<Scanned, SourceError> {
    let a = crate::rocm_artifacts::read(&r.dir).map_err(|e| SourceError::caused(layer, field.clone(), e))?;
    let sel = crate::rocm_artifacts::Selection { components: r.components.clone(), targets: r.targets.clone() };
    // Scanned now for the fingerprint; flattened again when built.
    let opts = dir_options(s, &[], &[], false);
    let mut scans = Vec::new();
    for art in a.artifacts.iter().filter(|x| sel.takes(&x.name)) {
        for p in &art.prefixes {
            scans.push(dir::scan(p, &opts).map_err(|e| SourceError::caused(layer, field.clone(), e))?);
        }
    }
    Ok(Scanned::Rocm(a, sel, scans))
}

/// A source's content, for a bill of materials: its digest as quarry knew it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedContent {
    pub index: usize,
    /// A sha256 of the file (file, archive, wheel) or quarry's fingerprint of a tree.
    pub digest: String,
}

impl FilesScan {
    pub fn layer(&self) -> &Layer {
        &self.layer
    }

    /// Everything that decides the layer's bytes except the parent chain
    /// and the compression: the definition's fields and the *content* of
    /// every input (files hashed through `hasher`'s stat memo), so a changed
    /// mtime alone never rebuilds a layer unless the tar would store it.
    /// Also returns each source's content digest.
    ///
    /// None when `hasher` left a directory's files to be hashed while the
    /// layer is packed (see `KeyHashing`): `complete` then gives the same
    /// key that hashing them now would have.
    pub fn fingerprint(
        &mut self,
        hasher: &mut ContentHasher,
        source_date_epoch: u64,
    ) -> Result<Option<(Key, Vec<ScannedContent>)>, SourceError> {
        let FilesScan { layer, scans } = self;
        let mut pending = false;
        for (i, (s, scanned)) in files_of(layer).sources.iter().zip(scans.iter_mut()).enumerate() {
            if let Scanned::Dir(d) | Scanned::RocmTree(d) = scanned {
                let key = d
                    .fingerprint(&tree_options(s), hasher, source_date_epoch, true)
                    .map_err(|e| SourceError::caused(layer, format!("{}source[{i}].dir", layer.field_prefix), e))?;
                pending |= key.is_none();
            }
        }
        if pending {
            return Ok(None);
        }
        self.compose(hasher, source_date_epoch).map(Some)
    }

    /// Files whose hashing `fingerprint` left to packing.
    pub fn pending_files(&self) -> usize {
        self.scans
            .iter()
            .map(|s| match s {
                Scanned::Dir(d) | Scanned::RocmTree(d) => d.pending(),
                _ => 0,
            })
            .sum()
    }

    /// The fingerprint of a scan `fingerprint` deferred, from the sha256
    /// of each host file that packing the layer computed.
    pub fn complete(
        &mut self,
        hasher: &mut ContentHasher,
        source_date_epoch: u64,
        packed: &crate::layer::write::HostDigests,
    ) -> Result<(Key, Vec<ScannedContent>), SourceError> {
        let FilesScan { layer, scans } = self;
        for (i, (s, scanned)) in files_of(layer).sources.iter().zip(scans.iter_mut()).enumerate() {
            if let Scanned::Dir(d) | Scanned::RocmTree(d) = scanned {
                d.complete(&tree_options(s), hasher, source_date_epoch, packed)
                    .map_err(|e| SourceError::caused(layer, format!("{}source[{i}].dir", layer.field_prefix), e))?;
            }
        }
        self.compose(hasher, source_date_epoch)
    }

    /// The layer's key once every directory's fingerprint is known.
    fn compose(
        &mut self,
        hasher: &mut ContentHasher,
        source_date_epoch: u64,
    ) -> Result<(Key, Vec<ScannedContent>), SourceError> {
        let FilesScan { layer, scans } = self;
        let layer = &*layer;
        let files = files_of(layer);
        // Version 2: no host paths (see `encode_source`).
        let mut h = KeyEncoder::new("files-layer", 2);
        h.str("name", &layer.name).list("remove", &files.remove);
        let mut contents = Vec::new();
        for (i, (s, scanned)) in files.sources.iter().zip(scans.iter_mut()).enumerate() {
            let field = |what: &str| format!("{}source[{i}].{what}", layer.field_prefix);
            encode_source(&mut h, s);
            let content = match scanned {
                Scanned::Dir(d) | Scanned::RocmTree(d) => {
                    let fp = d
                        .fingerprint(&tree_options(s), hasher, source_date_epoch, false)
                        .map_err(|e| SourceError::caused(layer, field("dir"), e))?
                        .expect("a directory's key is known once nothing is deferred");
                    h.key("tree", &fp);
                    Some(format!("sha256:{fp}"))
                }
                Scanned::File(meta) | Scanned::Archive(meta) => {
                    let (kind, path) = match &s.kind {
                        SourceKind::File(f) => ("file", &f.path),
                        SourceKind::Archive(a) => ("archive", &a.path),
                        _ => unreachable!("scanned as a file"),
                    };
                    let id = hashes::source_id(kind, path, &[]);
                    let one = [FileToHash { rel: b"", path, meta }];
                    let d =
                        hasher.hash_files(&id, &one).map_err(|e| SourceError::caused(layer, field(kind), e))?.remove(0);
                    h.u64("size", meta.size()).bytes("sha256", &d.sha256);
                    if kind == "file" {
                        // What `into_tree` takes from the host file's stat.
                        let mtime = (meta.mtime().max(0) as u64).min(source_date_epoch);
                        h.u64("host_mode", (meta.mode() & 0o7777) as u64).u64("mtime", mtime);
                    }
                    Some(Digest::from_bytes(d.sha256).to_string())
                }
                Scanned::Remove => None,
                Scanned::Wheels(chosen) => {
                    // Each wheel by file name and content: the selection is part of the key.
                    let mut all = KeyEncoder::new("wheelhouse", 1);
                    for (path, meta) in chosen.iter() {
                        let id = hashes::source_id("wheels", path, &[]);
                        let one = [FileToHash { rel: b"", path, meta }];
                        let d = hasher
                            .hash_files(&id, &one)
                            .map_err(|e| SourceError::caused(layer, field("wheels"), e))?
                            .remove(0);
                        let name = path.file_name().unwrap_or_default().as_encoded_bytes();
                        h.bytes("wheel", name).u64("size", meta.size()).bytes("sha256", &d.sha256);
                        all.bytes("wheel", name).bytes("sha256", &d.sha256);
                    }
                    Some(format!("sha256:{}", all.finish()))
                }
                Scanned::Pypi(sha256) => {
                    h.digest("wheel", sha256);
                    Some(sha256.to_string())
                }
                Scanned::Rocm(arts, _, scans) => {
                    let opts = dir_options(s, &[], &[], false);
                    let mut all = KeyEncoder::new("rocm-trees", 1);
                    for d in scans {
                        let fp = d
                            .fingerprint(&opts, hasher, source_date_epoch, false)
                            .map_err(|e| SourceError::caused(layer, field("rocm_artifacts"), e))?
                            .expect("an artifact's key is never deferred");
                        // Each prefix by its place in the artifacts directory.
                        let prefix = d.root.strip_prefix(&arts.root).unwrap_or(&d.root);
                        h.bytes("prefix", prefix.as_os_str().as_encoded_bytes()).key("tree", &fp);
                        all.key("tree", &fp);
                    }
                    Some(format!("sha256:{}", all.finish()))
                }
            };
            if let Some(digest) = content {
                contents.push(ScannedContent { index: i, digest });
            }
        }
        Ok((h.finish(), contents))
    }
}

/// Check a file against its sha256 pin; a mismatch names file, expected, actual.
pub fn verify_pin(layer: &Layer, field: &str, path: &Path, expected: &Digest) -> Result<(), SourceError> {
    let (actual, _) = crate::oci::digest::digest_file(path)
        .map_err(|e| SourceError::new(layer, field.to_string(), format!("cannot read `{}`: {e}", path.display())))?;
    if actual != *expected {
        return Err(SourceError::new(
            layer,
            field.to_string(),
            format!(
                "sha256 mismatch for `{}`: expected {}, actual {}; if the new file is intended, update the pin",
                path.display(),
                expected.hex(),
                actual.hex()
            ),
        ));
    }
    Ok(())
}
