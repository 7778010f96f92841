//! OCI image layouts: writing a built image with `ocidir` (canonical JSON
//! config, manifest and index), and reading images from layout directories
//! or OCI archives (for `oci` bases, `inspect`, `export`).

use super::blob::BlobDir;
use super::digest::Digest;
use super::{LayerBlob, BLOBS_DIR};
use ocidir::cap_std::{ambient_authority, fs::Dir};
use ocidir::oci_spec::image::{
    Descriptor, DescriptorBuilder, ImageConfiguration, ImageIndex, ImageManifest, ImageManifestBuilder, MediaType,
    Platform, SCHEMA_VERSION,
};
use ocidir::{OciArchive, OciDir, OciRead};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("`{path}`: {what}: {err}")]
    Io { path: String, what: String, err: io::Error },
    #[error("`{path}`: {message}")]
    Bad { path: String, message: String },
}

fn io_err(path: &Path, what: impl Into<String>) -> impl FnOnce(io::Error) -> LayoutError {
    let path = path.display().to_string();
    let what = what.into();
    move |err| LayoutError::Io { path, what, err }
}

fn bad(path: &Path, message: impl std::fmt::Display) -> LayoutError {
    LayoutError::Bad { path: path.display().to_string(), message: message.to_string() }
}

/// What `write_image` produced.
#[derive(Debug, Clone)]
pub struct Written {
    pub manifest_digest: Digest,
    pub config_digest: Digest,
}

/// Where a layout directory keeps the blob a descriptor names.
pub fn blob_path_in(layout: &Path, digest: &ocidir::oci_spec::image::Digest) -> PathBuf {
    layout.join("blobs").join(digest.algorithm().as_ref()).join(digest.digest())
}

pub fn media_type(s: &str) -> MediaType {
    MediaType::from(s)
}

pub fn parse_platform(os: &str, arch: &str, variant: Option<&str>) -> Platform {
    let mut p = Platform::default();
    p.set_os(os.into());
    p.set_architecture(arch.into());
    if let Some(v) = variant {
        p.set_variant(Some(v.to_string()));
    }
    p
}

/// Place a blob file: a hardlink when the filesystem allows, else a copy.
pub fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    if to.exists() {
        return Ok(());
    }
    match std::fs::hard_link(from, to) {
        Ok(()) => Ok(()),
        Err(_) => std::fs::copy(from, to).map(|_| ()),
    }
}

/// Check that `out` may be replaced (absent, empty or an OCI layout) and
/// make a staging directory beside it, on the same filesystem for the rename.
pub fn stage_output(out: &Path, prefix: &str) -> Result<tempfile::TempDir, LayoutError> {
    if out.exists() {
        let is_layout = out.join("oci-layout").is_file();
        let is_empty = std::fs::read_dir(out).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !is_layout && !is_empty {
            return Err(bad(out, "exists and is not an OCI layout; choose another output with -o or remove it"));
        }
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent, "cannot create the output's parent"))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(io_err(parent, "cannot create a staging directory"))
}

/// Move a finished staging directory over `out`; a previous layout is
/// replaced only once the new one is in place. Two processes writing the
/// same output at once (two `quarry run` of one definition) both succeed:
/// whichever moves last wins, and the layouts are the same image. Where
/// `out` exists the two directories are exchanged atomically
/// (`renameat2(RENAME_EXCHANGE)`: never a moment without an output, and no
/// race to lose), then the old one is removed; a file system without
/// exchange moves the old one aside first.
pub fn replace_output(staging: tempfile::TempDir, out: &Path) -> Result<(), LayoutError> {
    let staged = staging.keep();
    let fail = |what: &str, e: io::Error| {
        let _ = std::fs::remove_dir_all(&staged);
        io_err(out, what.to_string())(e)
    };
    // Each turn fails only when another writer changed `out` in between.
    for _ in 0..64 {
        match std::fs::rename(&staged, out) {
            Ok(()) => return Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {}
            Err(e) => return Err(fail("cannot move the new output in place", e)),
        }
        match exchange(&staged, out) {
            // `staged` now holds the previous output.
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&staged);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return move_aside_then_replace(&staged, out),
            Err(e) => return Err(fail("cannot move the new output in place", e)),
        }
    }
    Err(fail("cannot move the new output in place", io::Error::other("other writers keep replacing it")))
}

/// Swap two paths atomically (Linux `renameat2` with `RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two valid NUL-terminated paths, relative to the working directory.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Without an atomic exchange: move `out` aside, then `staged` in place.
fn move_aside_then_replace(staged: &Path, out: &Path) -> Result<(), LayoutError> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut moved_aside = Vec::new();
    let mut result = Err(io::Error::other("other writers keep replacing it"));
    for _ in 0..64 {
        // Unique across processes (pid) and across threads of this one (counter).
        static ASIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = ASIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let old = parent.join(format!(".quarry-old-{}-{n}", std::process::id()));
        match std::fs::rename(out, &old) {
            Ok(()) => moved_aside.push(old),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        match std::fs::rename(staged, out) {
            Ok(()) => {
                result = Ok(());
                break;
            }
            // Another writer put its output in place meanwhile: move that aside too.
            Err(e) if out.exists() => result = Err(e),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    for old in moved_aside {
        let _ = std::fs::remove_dir_all(old);
    }
    result.map_err(|e| {
        let _ = std::fs::remove_dir_all(staged);
        io_err(out, "cannot move the new output in place")(e)
    })
}

/// Write an image (its blobs already in `blobs`, the cache's) as an OCI
/// layout at `out`, atomically: built beside `out` and renamed over it.
/// Refuses to replace a directory that is neither empty nor an OCI layout.
pub fn write_image(
    out: &Path,
    blobs: &BlobDir,
    layers: &[LayerBlob],
    config: &ImageConfiguration,
    tag: &str,
    platform: Platform,
) -> Result<Written, LayoutError> {
    let staging = stage_output(out, ".quarry-out-")?;
    let dir =
        Dir::open_ambient_dir(staging.path(), ambient_authority()).map_err(io_err(staging.path(), "cannot open"))?;
    let oci = OciDir::ensure(dir).map_err(|e| bad(staging.path(), e))?;

    let staged_blobs = staging.path().join(BLOBS_DIR);
    let mut descs: Vec<Descriptor> = Vec::new();
    for l in layers {
        let from = blobs.path(&l.digest);
        link_or_copy(&from, &staged_blobs.join(l.hex())).map_err(io_err(&from, "cannot place layer blob"))?;
        let d = DescriptorBuilder::default()
            .media_type(media_type(&l.media_type))
            .digest(ocidir::oci_spec::image::Digest::from(l.digest))
            .size(l.size)
            .build()
            .map_err(|e| bad(out, e))?;
        descs.push(d);
    }
    let config_desc = oci.write_config(config.clone()).map_err(|e| bad(out, e))?;
    let manifest: ImageManifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(config_desc.clone())
        .layers(descs)
        .build()
        .map_err(|e| bad(out, e))?;
    let mdesc = oci.insert_manifest(manifest, Some(tag), platform).map_err(|e| bad(out, e))?;

    replace_output(staging, out)?;
    let digest = |d: &Descriptor| Digest::try_from(d.digest()).map_err(|e| bad(out, e));
    Ok(Written { manifest_digest: digest(&mdesc)?, config_digest: digest(&config_desc)? })
}

/// True for an index entry that is an artifact, not an image: it carries
/// `artifactType`. Readers looking for "the image" of a layout skip these.
pub fn is_artifact(d: &Descriptor) -> bool {
    d.artifact_type().is_some()
}

/// Blob access to an image source, a layout directory or an OCI archive.
pub enum ImageSource {
    Dir(OciDir, PathBuf),
    Archive(OciArchive, PathBuf),
}

/// An image resolved from a source: manifest, config and where it came from.
pub struct OpenImage {
    pub source: ImageSource,
    pub manifest: ImageManifest,
    pub manifest_digest: Digest,
    pub config: ImageConfiguration,
    pub config_digest: Digest,
    /// The tag annotation on the index entry, if any.
    pub tag: Option<String>,
}

impl ImageSource {
    pub fn open(path: &Path) -> Result<ImageSource, LayoutError> {
        let meta = std::fs::metadata(path).map_err(io_err(path, "cannot open image"))?;
        if meta.is_dir() {
            if !path.join("index.json").is_file() {
                return Err(bad(path, "is not an OCI image layout (no index.json)"));
            }
            let dir = Dir::open_ambient_dir(path, ambient_authority()).map_err(io_err(path, "cannot open"))?;
            let oci = OciDir::open(dir).map_err(|e| bad(path, format!("not an OCI layout: {e}")))?;
            Ok(ImageSource::Dir(oci, path.to_path_buf()))
        } else {
            let a = OciArchive::open(path).map_err(|e| bad(path, format!("not an OCI archive: {e}")))?;
            Ok(ImageSource::Archive(a, path.to_path_buf()))
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ImageSource::Dir(_, p) | ImageSource::Archive(_, p) => p,
        }
    }

    pub fn read_index(&self) -> Result<ImageIndex, LayoutError> {
        match self {
            ImageSource::Dir(o, _) => o.read_index(),
            ImageSource::Archive(a, _) => a.read_index(),
        }
        .map_err(|e| bad(self.path(), format!("cannot read index.json: {e}")))
    }

    pub fn blob_reader(&self, desc: &Descriptor) -> Result<Box<dyn Read + Send>, LayoutError> {
        let r: Result<Box<dyn Read + Send>, ocidir::Error> = match self {
            ImageSource::Dir(o, _) => o.read_blob(desc).map(|f| Box::new(f) as Box<dyn Read + Send>),
            ImageSource::Archive(a, _) => a.read_blob(desc).map(|f| Box::new(f) as Box<dyn Read + Send>),
        };
        r.map_err(|e| bad(self.path(), format!("blob {}: {e}", desc.digest())))
    }

    pub fn read_json<T: serde::de::DeserializeOwned>(&self, desc: &Descriptor) -> Result<T, LayoutError> {
        let r = self.blob_reader(desc)?;
        serde_json::from_reader(io::BufReader::new(r))
            .map_err(|e| bad(self.path(), format!("blob {}: {e}", desc.digest())))
    }

    /// For a layout directory, the file holding a blob (to hardlink it).
    pub fn blob_file(&self, digest: &Digest) -> Option<PathBuf> {
        match self {
            ImageSource::Dir(_, p) => Some(p.join(BLOBS_DIR).join(digest.hex())),
            ImageSource::Archive(..) => None,
        }
    }
}

fn tag_of(d: &Descriptor) -> Option<String> {
    d.annotations().as_ref().and_then(|a| a.get("org.opencontainers.image.ref.name")).cloned()
}

/// Open the image `reference` (a tag or `sha256:` digest; optional when the
/// source holds one image) for the platform `(os, arch)`.
pub fn open_image(
    path: &Path,
    reference: Option<&str>,
    platform: Option<(&str, &str)>,
) -> Result<OpenImage, LayoutError> {
    let source = ImageSource::open(path)?;
    let index = source.read_index()?;
    // Artifacts attached to an image (an SBOM) are listed beside it: skip them.
    let (artifacts, all): (Vec<Descriptor>, Vec<Descriptor>) = index.manifests().iter().cloned().partition(is_artifact);
    if let Some(a) = reference.and_then(|r| artifacts.iter().find(|d| d.digest().to_string() == r)) {
        let kind = a.artifact_type().as_ref().map(|t| t.to_string()).unwrap_or_default();
        return Err(bad(path, format!("{} is an artifact ({kind}) attached to an image, not an image", a.digest())));
    }
    let chosen: Vec<&Descriptor> = match reference {
        Some(r) if r.starts_with("sha256:") => all.iter().filter(|d| d.digest().to_string() == r).collect(),
        Some(r) => all.iter().filter(|d| tag_of(d).as_deref() == Some(r)).collect(),
        None => all.iter().collect(),
    };
    let tags: Vec<String> = all.iter().filter_map(tag_of).collect();
    let desc = match chosen.as_slice() {
        [] => {
            return Err(bad(
                path,
                format!(
                    "no image `{}` here; tags present: {}",
                    reference.unwrap_or("(any)"),
                    if tags.is_empty() { "none".to_string() } else { tags.join(", ") }
                ),
            ))
        }
        [one] => (*one).clone(),
        many if reference.is_none() => {
            return Err(bad(path, format!("holds {} images; name one with a tag ({})", many.len(), tags.join(", "))))
        }
        many => many[0].clone(),
    };
    let tag = tag_of(&desc);
    let desc = if *desc.media_type() == MediaType::ImageIndex {
        let nested: ImageIndex = source.read_json(&desc)?;
        let (os, arch) = platform.unwrap_or(("linux", "amd64"));
        nested
            .manifests()
            .iter()
            .find(|d| {
                d.platform()
                    .as_ref()
                    .map(|p| p.os().to_string() == os && p.architecture().to_string() == arch)
                    .unwrap_or(false)
            })
            .cloned()
            .ok_or_else(|| bad(path, format!("the image index has no manifest for {os}/{arch}")))?
    } else {
        desc
    };
    let manifest: ImageManifest = source.read_json(&desc)?;
    let config: ImageConfiguration = source.read_json(manifest.config())?;
    let sha256 = |d: &Descriptor| {
        Digest::try_from(d.digest()).map_err(|e| bad(path, format!("{e}: quarry reads sha256 digests only")))
    };
    Ok(OpenImage {
        manifest_digest: sha256(&desc)?,
        config_digest: sha256(manifest.config())?,
        source,
        manifest,
        config,
        tag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several writers of one output at once all succeed and leave one whole
    /// layout and nothing else behind (two `quarry run` of one definition).
    #[test]
    fn concurrent_writers_of_one_output_all_succeed() {
        writers_all_succeed(|staging, out| replace_output(staging, out));
    }

    /// The same where the file system cannot exchange two directories.
    #[test]
    fn concurrent_writers_succeed_without_an_exchange() {
        writers_all_succeed(|staging, out| {
            let staged = staging.keep();
            match std::fs::rename(&staged, out) {
                Ok(()) => Ok(()),
                Err(_) => move_aside_then_replace(&staged, out),
            }
        });
    }

    fn writers_all_succeed(replace: impl Fn(tempfile::TempDir, &Path) -> Result<(), LayoutError> + Sync) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("image");
        let ready = std::sync::Barrier::new(8);
        std::thread::scope(|scope| {
            for i in 0..8 {
                let (out, ready, replace) = (out.clone(), &ready, &replace);
                scope.spawn(move || {
                    let staging = stage_output(&out, ".quarry-new-").unwrap();
                    std::fs::write(staging.path().join("oci-layout"), format!("{i}")).unwrap();
                    ready.wait();
                    replace(staging, &out).unwrap();
                });
            }
        });
        assert!(out.join("oci-layout").is_file());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("image")], "{left:?}");
    }
}
