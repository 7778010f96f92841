//! A cell's product in the registry: an OCI artifact (artifactType
//! `application/vnd.quarry.matrix.cell.v1`) whose config is the cell's
//! report and whose layers are its files (wheels, kernel outputs; each
//! titled with its name, as oras names files), tagged `cell-<cell key>`:
//! a cell is done when that tag exists. A failed cell pushes its report
//! alone, tagged `failed-<cell key>`, so `collect` can name it. Pulled
//! files are checked against their digests and sizes as they stream.

use super::definition::JobKind;
use crate::oci::{BlobWriter, Digest};
use crate::registry::artifact::{self, Artifact, ArtifactFile};
use crate::registry::{Client, Reference, RegistryError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ARTIFACT_TYPE: &str = "application/vnd.quarry.matrix.cell.v1";
const REPORT_MEDIA_TYPE: &str = "application/vnd.quarry.matrix.report.v1+json";
const FILE_MEDIA_TYPE: &str = "application/octet-stream";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Failed,
}

/// One file a cell made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProductFile {
    /// Its path relative to the cell's output (a wheel's file name).
    pub name: String,
    pub digest: Digest,
    pub size: u64,
}

/// What a cell did: written beside its products, and pushed as their config.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CellReport {
    pub matrix: String,
    pub cell: String,
    pub index: usize,
    pub values: BTreeMap<String, String>,
    pub kind: JobKind,
    /// The cell's key (its build's key, its kind and id), when known.
    pub key: Option<String>,
    pub status: Status,
    /// The build's exit status (0 when it succeeded).
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The whole run of the cell.
    pub seconds: f64,
    /// The build itself (the container's work; 0 when it came from the cache).
    pub build_seconds: f64,
    /// The build came from the cache: nothing was built.
    pub cached: bool,
    pub products: Vec<ProductFile>,
    /// Image jobs: the image pushed, by digest (`HOST/REPO@sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The product artifact's manifest digest, once pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Digest>,
    pub host: String,
}

/// A session with the registry repository products go to.
pub struct Products {
    client: Client,
    pub reference: Reference,
}

impl Products {
    pub fn open(registry: &str) -> Result<Products, RegistryError> {
        let reference = Reference::parse(registry)?;
        let mut client = Client::new(&reference.registry, crate::registry::pull::plain_http_default(&reference))?;
        client.add_scope(&reference.repository, "pull,push");
        Ok(Products { client, reference })
    }

    fn repo(&self) -> String {
        self.reference.repository.clone()
    }

    /// Whether the cell with `key` is done (its product is there).
    pub fn done(&mut self, key: &str) -> Result<bool, RegistryError> {
        let repo = self.repo();
        artifact::has_manifest(&mut self.client, &repo, &format!("cell-{key}"))
    }

    /// Push a report and its files (`(name, path)`); returns the artifact's digest.
    pub fn push(
        &mut self,
        report: &CellReport,
        files: &[(String, PathBuf)],
        scratch: &Path,
    ) -> Result<Digest, RegistryError> {
        let key = report.key.clone().unwrap_or_else(|| format!("unkeyed-{}", report.cell));
        let tag = match report.status {
            Status::Ok => format!("cell-{key}"),
            Status::Failed => format!("failed-{key}"),
        };
        let mut artifact_files = Vec::new();
        for ((name, path), f) in files.iter().zip(&report.products) {
            artifact_files.push(ArtifactFile {
                path: path.clone(),
                digest: f.digest,
                size: f.size,
                media_type: FILE_MEDIA_TYPE.into(),
                title: Some(name.clone()),
            });
        }
        let a = Artifact {
            artifact_type: ARTIFACT_TYPE.into(),
            config_media_type: REPORT_MEDIA_TYPE.into(),
            config: serde_json::to_vec(report).expect("a report serializes"),
            files: artifact_files,
            annotations: BTreeMap::from([
                ("io.quarry.matrix".to_string(), report.matrix.clone()),
                ("io.quarry.matrix.cell".to_string(), report.cell.clone()),
            ]),
        };
        let repo = self.repo();
        let bar = indicatif::ProgressBar::hidden();
        let pushed = artifact::push(&mut self.client, &repo, &tag, &a, scratch, &bar)?;
        Ok(pushed.manifest.expect("a push names its manifest"))
    }

    /// The report of the cell with `key` (its product's, when it is done,
    /// else its failure's) with the artifact's layers and digest.
    pub fn report(
        &mut self,
        key: &str,
        scratch: &Path,
    ) -> Result<Option<(CellReport, Vec<Layer>, Digest)>, RegistryError> {
        for tag in [format!("cell-{key}"), format!("failed-{key}")] {
            let repo = self.repo();
            let Some((bytes, manifest_digest)) = artifact::manifest(&mut self.client, &repo, &tag)? else { continue };
            let m: Manifest = serde_json::from_slice(&bytes)
                .map_err(|e| self.client.protocol(&tag, format!("not a cell artifact: {e}")))?;
            let digest = Digest::parse(&m.config.digest).map_err(|e| self.client.protocol(&tag, e.to_string()))?;
            let stored = self.download(&digest, m.config.size, &format!("report {tag}"), scratch)?;
            let text = std::fs::read(&stored).map_err(|err| RegistryError::Io {
                path: stored.display().to_string(),
                what: "cannot read a report".into(),
                err,
            })?;
            let report: CellReport =
                serde_json::from_slice(&text).map_err(|e| self.client.protocol(&tag, format!("bad report: {e}")))?;
            return Ok(Some((report, m.layers, manifest_digest)));
        }
        Ok(None)
    }

    /// A blob into `dir`, checked; returns its path (named by its digest).
    pub fn download(&mut self, digest: &Digest, size: u64, what: &str, dir: &Path) -> Result<PathBuf, RegistryError> {
        let repo = self.repo();
        let writer = || BlobWriter::into_dir(dir, dir).map_err(|e| crate::registry::artifact::blob_err(e, what));
        let bar = indicatif::ProgressBar::hidden();
        Ok(artifact::download(&mut self.client, &repo, digest, size, what, &writer, &bar)?.path)
    }
}

/// A layer of a cell artifact: one product file.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Layer {
    pub digest: String,
    pub size: u64,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Layer {
    pub fn title(&self) -> Option<&str> {
        self.annotations.get("org.opencontainers.image.title").map(String::as_str)
    }
}

#[derive(serde::Deserialize)]
struct Config {
    digest: String,
    size: u64,
}

#[derive(serde::Deserialize)]
struct Manifest {
    config: Config,
    layers: Vec<Layer>,
}

/// The files of a directory (relative names, sorted) with their digests.
pub fn files_of(dir: &Path) -> std::io::Result<Vec<(ProductFile, PathBuf)>> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(dir).sort_by_file_name().follow_links(false).min_depth(1) {
        let e = e.map_err(std::io::Error::other)?;
        if !e.file_type().is_file() {
            continue;
        }
        let name = e.path().strip_prefix(dir).map_err(std::io::Error::other)?.to_string_lossy().into_owned();
        let (digest, size) = crate::oci::digest::digest_file(e.path())?;
        out.push((ProductFile { name, digest, size }, e.path().to_path_buf()));
    }
    Ok(out)
}
