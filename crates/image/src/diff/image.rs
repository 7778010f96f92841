//! What differs between two images in OCI layouts: the config fields
//! people set (env, entrypoint, cmd, user, working directory, labels), the
//! layers shared and changed, and in each changed layer the files added,
//! removed and changed (type, mode, owner, size, content, link target;
//! mtimes too); the Debian packages from the images' dpkg status.

use super::packages::{changes, PackageChange, Versions};
use super::DiffError;
use crate::oci::layout::{open_image, OpenImage};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct ImageDiff {
    pub a: String,
    pub b: String,
    pub identical: bool,
    pub config: Vec<ConfigChange>,
    pub layers: Vec<LayerDiff>,
    pub packages: Vec<PackageChange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigChange {
    pub field: String,
    pub from: serde_json::Value,
    pub to: serde_json::Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct LayerDiff {
    pub index: usize,
    /// `shared`, `changed`, `added`, `removed`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub size_from: u64,
    pub size_to: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileChange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileChange {
    pub path: String,
    /// `added`, `removed`, `changed`.
    pub change: &'static str,
    /// For `changed`: which of type, mode, owner, size, content, link, mtime.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub what: Vec<&'static str>,
    pub size_from: u64,
    pub size_to: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: u8,
    mode: u32,
    owner: (u64, u64),
    size: u64,
    content: Option<String>,
    link: Option<String>,
    mtime: u64,
}

const STATUS: &str = "var/lib/dpkg/status";

pub fn diff(a: &Path, b: &Path) -> Result<ImageDiff, DiffError> {
    let (ia, ib) = (open(a)?, open(b)?);
    let config = config_changes(&ia, &ib);
    let (la, lb) = (ia.manifest.layers(), ib.manifest.layers());
    let mut layers = Vec::new();
    let (mut status_a, mut status_b) = (None, None);
    for i in 0..la.len().max(lb.len()) {
        let (da, db) = (la.get(i), lb.get(i));
        let digest = |d: Option<&ocidir::oci_spec::image::Descriptor>| d.map(|d| d.digest().to_string());
        let state = match (da, db) {
            (Some(x), Some(y)) if x.digest() == y.digest() => "shared",
            (Some(_), Some(_)) => "changed",
            (None, Some(_)) => "added",
            _ => "removed",
        };
        let mut files = Vec::new();
        if state != "shared" {
            let ea = da.map(|d| entries(&ia, d, a, &mut status_a)).transpose()?.unwrap_or_default();
            let eb = db.map(|d| entries(&ib, d, b, &mut status_b)).transpose()?.unwrap_or_default();
            files = file_changes(&ea, &eb);
        }
        layers.push(LayerDiff {
            index: i,
            state,
            from: digest(da),
            to: digest(db),
            size_from: da.map(|d| d.size()).unwrap_or(0),
            size_to: db.map(|d| d.size()).unwrap_or(0),
            files,
        });
    }
    // The packages: from the dpkg status of the changed layers, else the
    // images are the same there.
    let packages = match (status_a, status_b) {
        (Some(sa), Some(sb)) => changes(&status_versions(&sa), &status_versions(&sb)),
        (Some(sa), None) => changes(&status_versions(&sa), &top_status(&ib, b)?),
        (None, Some(sb)) => changes(&top_status(&ia, a)?, &status_versions(&sb)),
        (None, None) => Vec::new(),
    };
    Ok(ImageDiff {
        a: a.display().to_string(),
        b: b.display().to_string(),
        identical: ia.manifest_digest == ib.manifest_digest,
        config,
        layers,
        packages,
    })
}

fn open(p: &Path) -> Result<OpenImage, DiffError> {
    open_image(p, None, None).map_err(|e| DiffError::Image { path: p.display().to_string(), message: e.to_string() })
}

fn config_changes(a: &OpenImage, b: &OpenImage) -> Vec<ConfigChange> {
    let (ca, cb) = (
        serde_json::to_value(a.config.config()).unwrap_or_default(),
        serde_json::to_value(b.config.config()).unwrap_or_default(),
    );
    ["Env", "Entrypoint", "Cmd", "User", "WorkingDir", "Labels", "ExposedPorts", "Volumes", "StopSignal"]
        .iter()
        .filter(|f| ca.get(**f) != cb.get(**f))
        .map(|f| ConfigChange {
            field: f.to_string(),
            from: ca.get(*f).cloned().unwrap_or_default(),
            to: cb.get(*f).cloned().unwrap_or_default(),
        })
        .collect()
}

/// Every entry of a layer; the dpkg status, when the layer holds one, into `status`.
fn entries(
    img: &OpenImage,
    desc: &ocidir::oci_spec::image::Descriptor,
    path: &Path,
    status: &mut Option<String>,
) -> Result<BTreeMap<String, Entry>, DiffError> {
    let what = format!("{} layer {}", path.display(), desc.digest());
    let io = |e: std::io::Error| DiffError::Image { path: what.clone(), message: e.to_string() };
    let mut archive = layer_archive(img, desc, &what)?;
    let mut out = BTreeMap::new();
    for e in archive.entries().map_err(io)? {
        let mut e = e.map_err(io)?;
        let name = e.path().map_err(io)?.to_string_lossy().trim_start_matches("./").trim_end_matches('/').to_string();
        let h = e.header().clone();
        let link = e.link_name().map_err(io)?.map(|l| l.to_string_lossy().to_string());
        let kind = h.entry_type().as_byte();
        let content = if h.entry_type().is_file() {
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).map_err(io)?;
            if name == STATUS {
                *status = Some(String::from_utf8_lossy(&bytes).to_string());
            }
            Some(crate::oci::digest::sha256_hex(&bytes))
        } else {
            None
        };
        let entry = Entry {
            kind,
            mode: h.mode().unwrap_or(0) & 0o7777,
            owner: (h.uid().unwrap_or(0), h.gid().unwrap_or(0)),
            size: h.size().unwrap_or(0),
            content,
            link,
            mtime: h.mtime().unwrap_or(0),
        };
        out.insert(name, entry);
    }
    Ok(out)
}

/// A layer's tar, decompressed whatever its compression.
fn layer_archive(
    img: &OpenImage,
    desc: &ocidir::oci_spec::image::Descriptor,
    what: &str,
) -> Result<tar::Archive<Box<dyn Read>>, DiffError> {
    let io = |e: std::io::Error| DiffError::Image { path: what.to_string(), message: e.to_string() };
    let reader = img
        .source
        .blob_reader(desc)
        .map_err(|e| DiffError::Image { path: what.to_string(), message: e.to_string() })?;
    let mut head = BufReader::new(reader);
    let magic = std::io::BufRead::fill_buf(&mut head).map_err(io)?.to_vec();
    let format = crate::layer::stream::Format::of_magic(&magic);
    let decoded = crate::layer::stream::decoder(format, head, crate::layer::stream::Checks::Verify).map_err(io)?;
    Ok(tar::Archive::new(decoded))
}

/// The contents of the regular files `wanted` (`/`-rooted paths) in layer
/// `index` of the image at `path`, each up to `limit` bytes (a larger file
/// is left out).
pub fn layer_files(
    path: &Path,
    index: usize,
    wanted: &std::collections::BTreeSet<String>,
    limit: u64,
) -> Result<BTreeMap<String, Vec<u8>>, DiffError> {
    let img = open(path)?;
    let Some(desc) = img.manifest.layers().get(index).cloned() else { return Ok(BTreeMap::new()) };
    let what = format!("{} layer {}", path.display(), desc.digest());
    let io = |e: std::io::Error| DiffError::Image { path: what.clone(), message: e.to_string() };
    let mut archive = layer_archive(&img, &desc, &what)?;
    let mut out = BTreeMap::new();
    for e in archive.entries().map_err(io)? {
        let mut e = e.map_err(io)?;
        let name = format!("/{}", e.path().map_err(io)?.to_string_lossy().trim_start_matches("./"));
        if !e.header().entry_type().is_file() || !wanted.contains(&name) || e.header().size().unwrap_or(0) > limit {
            continue;
        }
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).map_err(io)?;
        out.insert(name, bytes);
    }
    Ok(out)
}

fn file_changes(a: &BTreeMap<String, Entry>, b: &BTreeMap<String, Entry>) -> Vec<FileChange> {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut out = Vec::new();
    for n in names {
        let (ea, eb) = (a.get(n), b.get(n));
        let (change, what) = match (ea, eb) {
            (Some(_), None) => ("removed", vec![]),
            (None, Some(_)) => ("added", vec![]),
            (Some(x), Some(y)) if x == y => continue,
            (Some(x), Some(y)) => {
                let mut w = Vec::new();
                for (differs, field) in [
                    (x.kind != y.kind, "type"),
                    (x.mode != y.mode, "mode"),
                    (x.owner != y.owner, "owner"),
                    (x.size != y.size, "size"),
                    (x.content != y.content, "content"),
                    (x.link != y.link, "link"),
                    (x.mtime != y.mtime, "mtime"),
                ] {
                    if differs {
                        w.push(field);
                    }
                }
                ("changed", w)
            }
            (None, None) => continue,
        };
        out.push(FileChange {
            path: format!("/{n}"),
            change,
            what,
            size_from: ea.map(|e| e.size).unwrap_or(0),
            size_to: eb.map(|e| e.size).unwrap_or(0),
        });
    }
    out
}

fn status_versions(text: &str) -> Versions {
    crate::distro::unpack::status_paragraphs(text)
        .iter()
        .filter_map(|p| {
            let installed = p.get("Status").is_some_and(|s| s.ends_with(" installed"));
            let arch = p.get("Architecture").unwrap_or("");
            let name = p.get("Package")?;
            let name = if arch.is_empty() || arch == "all" { name.to_string() } else { format!("{name}:{arch}") };
            installed.then(|| (name, (p.get("Version").unwrap_or("").to_string(), None)))
        })
        .collect()
}

/// The packages of the topmost layer holding a dpkg status.
fn top_status(img: &OpenImage, path: &Path) -> Result<Versions, DiffError> {
    for d in img.manifest.layers().iter().rev() {
        let mut status = None;
        entries(img, d, path, &mut status)?;
        if let Some(s) = status {
            return Ok(status_versions(&s));
        }
    }
    Ok(Versions::new())
}
