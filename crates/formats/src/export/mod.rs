//! Turning an OCI layout into single files: an OCI archive (the layout as a
//! tar), and the "dual" docker-archive (the layout plus a `manifest.json`)
//! that Docker Engine 20.10 and later load with `docker load`.
//! Both are deterministic: sorted entries, fixed times, owners and modes.

use crate::oci::digest::VerifyingReader;
use crate::oci::layout::{open_image, LayoutError};
use crate::oci::Digest;
use ocidir::oci_spec::image::{Descriptor, ImageIndexBuilder, MediaType, SCHEMA_VERSION};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("exporting `{path}` failed: {err}")]
    Io { path: String, err: io::Error },
    #[error("`{0}` is not an image layout directory; `quarry export` takes the directory `quarry build` wrote")]
    NotADir(String),
}

/// The mode a new file of the user's gets: 0666 less the process umask (read
/// from /proc, as `umask(2)` cannot be read without setting it, which races
/// with other threads); 0644 where /proc does not say.
pub fn new_file_mode() -> u32 {
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022);
    0o666 & !umask
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> ExportError + '_ {
    move |err| ExportError::Io { path: path.display().to_string(), err }
}

fn header(name: &str, size: u64, dir: bool) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    let _ = h.set_path(name);
    h.set_size(size);
    h.set_mode(if dir { 0o755 } else { 0o644 });
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h.set_entry_type(if dir { tar::EntryType::Directory } else { tar::EntryType::Regular });
    h.set_cksum();
    h
}

fn add_bytes<W: Write>(b: &mut tar::Builder<W>, name: &str, data: &[u8]) -> io::Result<()> {
    b.append(&header(name, data.len() as u64, false), data)
}

fn add_file<W: Write>(b: &mut tar::Builder<W>, name: &str, path: &Path) -> io::Result<()> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    b.append(&header(name, len, false), io::BufReader::with_capacity(1 << 20, f))
}

/// A blob of `layout` into the archive, checked as it streams: a blob that
/// is not its digest (or size) stops the export, naming it.
fn add_blob<W: Write>(
    b: &mut tar::Builder<W>,
    name: &str,
    layout: &Path,
    path: &Path,
    digest: Digest,
    size: u64,
) -> io::Result<()> {
    let what = format!("layout `{}`", layout.display());
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    if len != size {
        return Err(crate::oci::digest::damaged(&what, &digest, size, &digest, len));
    }
    let r = VerifyingReader::new(io::BufReader::with_capacity(1 << 20, f), digest, size, what);
    b.append(&header(name, size, false), r)
}

/// The layout directory as an OCI archive (every file, sorted).
pub fn write_oci_archive(layout: &Path, out: impl Write) -> Result<(), ExportError> {
    if !layout.join("index.json").is_file() {
        return Err(ExportError::NotADir(layout.display().to_string()));
    }
    let mut b = tar::Builder::new(out);
    let err = io_at(layout);
    add_file(&mut b, "oci-layout", &layout.join("oci-layout")).map_err(&err)?;
    add_file(&mut b, "index.json", &layout.join("index.json")).map_err(&err)?;
    b.append(&header("blobs/", 0, true), io::empty()).map_err(&err)?;
    b.append(&header("blobs/sha256/", 0, true), io::empty()).map_err(&err)?;
    let mut blobs: Vec<String> = std::fs::read_dir(layout.join("blobs/sha256"))
        .map_err(&err)?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    blobs.sort();
    for hex in blobs {
        let path = layout.join("blobs/sha256").join(&hex);
        let digest = Digest::from_hex(&hex)
            .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, format!("blobs/sha256/{hex}: {e}"))))?;
        let size = std::fs::metadata(&path).map_err(&err)?.len();
        add_blob(&mut b, &format!("blobs/sha256/{hex}"), layout, &path, digest, size).map_err(&err)?;
    }
    b.into_inner().map_err(&err)?.flush().map_err(&err)?;
    Ok(())
}

/// What a docker-archive export wrote.
#[derive(Debug, Clone, Default)]
pub struct DockerExport {
    pub repo_tag: String,
    pub layers_sent: usize,
    pub layers_skipped: usize,
    pub config_digest: String,
    pub diff_ids: Vec<String>,
}

/// Name for `RepoTags`: `name:tag`, with `:latest` added when no tag is given.
pub fn normalize_repo_tag(t: &str) -> String {
    let last = t.rsplit('/').next().unwrap_or(t);
    if last.contains(':') || t.contains('@') {
        t.to_string()
    } else {
        format!("{t}:latest")
    }
}

/// Write one image of `layout` as a dual docker-archive. Layer blobs for
/// which `omit(diff_id)` is true are left out (the engine already has them).
pub fn write_docker_archive(
    layout: &Path,
    reference: Option<&str>,
    repo_tag: &str,
    out: impl Write,
    omit: &dyn Fn(&str) -> bool,
) -> Result<DockerExport, ExportError> {
    let img = open_image(layout, reference, None)?;
    let blob_path = |d: &Descriptor| crate::oci::layout::blob_path_in(layout, d.digest());
    let err = io_at(layout);
    let repo_tag = normalize_repo_tag(repo_tag);
    let diff_ids = img.config.rootfs().diff_ids().clone();

    // index.json naming just this image, as Docker's own `docker save` does.
    let manifest_file = layout.join("blobs/sha256").join(img.manifest_digest.hex());
    let mut mdesc =
        Descriptor::new(MediaType::ImageManifest, 0, ocidir::oci_spec::image::Digest::from(img.manifest_digest));
    let manifest_bytes = std::fs::read(&manifest_file).map_err(&err)?;
    mdesc.set_size(manifest_bytes.len() as u64);
    let described = |d: &Descriptor| Digest::try_from(d.digest()).map(|g| (g, d.size()));
    let bad_digest = |e: crate::oci::digest::BadDigest| err(io::Error::new(io::ErrorKind::InvalidData, e.0));
    let tag_only = repo_tag.rsplit_once(':').map(|(_, t)| t.to_string()).unwrap_or_else(|| "latest".into());
    let annotations: HashMap<String, String> = [
        ("io.containerd.image.name".to_string(), repo_tag.clone()),
        ("org.opencontainers.image.ref.name".to_string(), tag_only),
    ]
    .into();
    mdesc.set_annotations(Some(annotations));
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![mdesc])
        .build()
        .map_err(|e| LayoutError::Bad { path: layout.display().to_string(), message: e.to_string() })?;
    let index_json = serde_json::to_vec(&index).map_err(|e| err(e.into()))?;

    let mut export = DockerExport {
        repo_tag: repo_tag.clone(),
        config_digest: img.config_digest.to_string(),
        diff_ids: diff_ids.clone(),
        ..Default::default()
    };
    let mut layer_paths = Vec::new();
    // (name in the archive, file, digest, size): each blob checked as it goes.
    type Blob = (String, std::path::PathBuf, Digest, u64);
    let mut files: Vec<Blob> = Vec::new();
    let (config_digest, config_size) = described(img.manifest.config()).map_err(bad_digest)?;
    files.push((
        format!("blobs/sha256/{}", config_digest.hex()),
        blob_path(img.manifest.config()),
        config_digest,
        config_size,
    ));
    let manifest_size = manifest_bytes.len() as u64;
    files.push((
        format!("blobs/sha256/{}", img.manifest_digest.hex()),
        manifest_file,
        img.manifest_digest,
        manifest_size,
    ));
    for (i, l) in img.manifest.layers().iter().enumerate() {
        let name = format!("blobs/{}/{}", l.digest().algorithm().as_ref(), l.digest().digest());
        layer_paths.push(name.clone());
        let diff = diff_ids.get(i).map(String::as_str).unwrap_or("");
        if omit(diff) {
            export.layers_skipped += 1;
        } else {
            export.layers_sent += 1;
            let (digest, size) = described(l).map_err(bad_digest)?;
            files.push((name, blob_path(l), digest, size));
        }
    }
    files.sort();
    files.dedup_by(|a, b| a.0 == b.0);
    let manifest_json = serde_json::json!([{
        "Config": format!("blobs/sha256/{}", img.config_digest.hex()),
        "RepoTags": [repo_tag],
        "Layers": layer_paths,
    }]);

    let mut b = tar::Builder::new(out);
    b.append(&header("blobs/", 0, true), io::empty()).map_err(&err)?;
    b.append(&header("blobs/sha256/", 0, true), io::empty()).map_err(&err)?;
    for (name, path, digest, size) in &files {
        add_blob(&mut b, name, layout, path, *digest, *size).map_err(&err)?;
    }
    add_bytes(&mut b, "index.json", &index_json).map_err(&err)?;
    add_bytes(&mut b, "manifest.json", manifest_json.to_string().as_bytes()).map_err(&err)?;
    add_bytes(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#).map_err(&err)?;
    b.into_inner().map_err(&err)?.flush().map_err(&err)?;
    Ok(export)
}
