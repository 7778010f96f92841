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

pub use super::layout_error::LayoutError;
use super::layout_error::{bad, io_err};
pub use super::output::{replace_output, stage_output};

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

/// The index annotation that names the image (its definition's `name`):
/// what an engine calls it (`NAME:TAG`), whatever directory the layout is in.
pub const NAME_ANNOTATION: &str = "io.quarry.image.name";

/// Write an image (its blobs already in `blobs`, the cache's) as an OCI
/// layout at `out`, atomically: built beside `out` and renamed over it;
/// the index names it `name` and tags it `tag`. Refuses to replace a
/// directory that is neither empty nor an OCI layout.
pub fn write_image(
    out: &Path,
    blobs: &BlobDir,
    layers: &[LayerBlob],
    config: &ImageConfiguration,
    name_tag: (&str, &str),
    platform: Platform,
) -> Result<Written, LayoutError> {
    stage_image(out, blobs, layers, config, name_tag, platform)?.commit()
}

/// An image layout written beside its output, not yet in place: documents
/// attached to it now (`oci::referrer::attach` on [`StagedImage::path`])
/// appear with the image in one rename, never after it.
pub struct StagedImage {
    staging: tempfile::TempDir,
    out: PathBuf,
    pub written: Written,
}

impl StagedImage {
    /// The staged layout's directory.
    pub fn path(&self) -> &Path {
        self.staging.path()
    }

    /// Put the layout in place at its output (replacing what was there).
    pub fn commit(self) -> Result<Written, LayoutError> {
        replace_output(self.staging, &self.out)?;
        Ok(self.written)
    }
}

/// [`write_image`] up to the rename: the layout staged beside `out`.
pub fn stage_image(
    out: &Path,
    blobs: &BlobDir,
    layers: &[LayerBlob],
    config: &ImageConfiguration,
    (name, tag): (&str, &str),
    platform: Platform,
) -> Result<StagedImage, LayoutError> {
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
    annotate_index(staging.path(), &mdesc, NAME_ANNOTATION, name)?;

    let digest = |d: &Descriptor| Digest::try_from(d.digest()).map_err(|e| bad(out, e));
    let written = Written { manifest_digest: digest(&mdesc)?, config_digest: digest(&config_desc)? };
    Ok(StagedImage { staging, out: out.to_path_buf(), written })
}

/// Add an annotation to the index entry of `desc`, keeping index.json in
/// the canonical form ocidir writes (sorted keys, no spaces: serde_json's
/// maps are sorted).
fn annotate_index(dir: &Path, desc: &Descriptor, key: &str, value: &str) -> Result<(), LayoutError> {
    let path = dir.join("index.json");
    let text = std::fs::read(&path).map_err(io_err(&path, "cannot read"))?;
    let mut index: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(&path, e))?;
    let digest = desc.digest().to_string();
    let entry = index["manifests"]
        .as_array_mut()
        .and_then(|m| m.iter_mut().find(|d| d["digest"].as_str() == Some(digest.as_str())))
        .ok_or_else(|| bad(&path, format!("has no entry for {digest}")))?;
    entry["annotations"][key] = value.into();
    let bytes = serde_json::to_vec(&index).map_err(|e| bad(&path, e))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_err(dir, "cannot create a temporary file"))?;
    std::io::Write::write_all(&mut tmp, &bytes).map_err(io_err(&path, "cannot write"))?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(io_err(&path, "cannot write"))?;
    tmp.persist(&path).map_err(|e| io_err(&path, "cannot write")(e.error))?;
    Ok(())
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
    /// The image's name ([`NAME_ANNOTATION`]), when quarry wrote the layout.
    pub name: Option<String>,
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
            // Read here rather than by ocidir, whose error says only "i/o error".
            ImageSource::Dir(_, p) => {
                let file = p.join("index.json");
                let bytes = std::fs::read(&file).map_err(io_err(&file, "cannot read"))?;
                serde_json::from_slice(&bytes).map_err(|e| {
                    bad(
                        &file,
                        format!("is not an OCI image index ({e}); the layout is damaged: build or pull it again"),
                    )
                })
            }
            ImageSource::Archive(a, _) => {
                a.read_index().map_err(|e| bad(self.path(), format!("cannot read index.json: {e}")))
            }
        }
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
    let name = desc.annotations().as_ref().and_then(|a| a.get(NAME_ANNOTATION)).cloned();
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
        name,
    })
}
