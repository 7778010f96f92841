//! Cache entries as OCI artifacts, and back.
//!
//! A layer entry: config `{bucket, key, layer}` (the layer's record), one
//! file: the layer blob itself. A directory entry (kernel outputs, wheels,
//! a compiler cache): config `{bucket, key, meta}`, one file: the entry's
//! files as a deterministic tar (sorted, no times or owners) compressed
//! with zstd, so the same entry is the same blob on every machine.
//! Fetching checks every blob's digest and size as it streams, that the
//! config names the entry asked for, and unpacks with the same safe
//! extraction as archives (no member lands outside the entry).
//!
//! A layer is not decompressed on the way in: the trust chain is the
//! digests. The entry's config is named by its digest in the entry's
//! manifest, the layer's record (digest, size, diff_id) is in that config,
//! and the blob is checked against the record's digest as it streams, as
//! `skopeo copy` checks it. Rechecking the diff_id would decompress every
//! layer (most of a pull's time: 873 MB of tar for the main job's 313 MB
//! layer) and could only catch a writer that recorded it wrong, which could
//! as well have written any blob; a wrong diff_id still fails wherever the
//! layer is unpacked against its config (the engine's `load` checks it).

use crate::cache::{Bucket, Cache, Entry, Key, Staged};
use crate::oci::{BlobWriter, Digest, LayerBlob};
use crate::registry::artifact::{self, Artifact, ArtifactFile};
use crate::registry::{Client, RegistryError};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

const ARTIFACT_TYPE: &str = "application/vnd.quarry.cache.v1";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.quarry.cache.entry.v1+json";
const FILES_MEDIA_TYPE: &str = "application/vnd.quarry.cache.files.v1.tar+zstd";
const BUCKET_ANNOTATION: &str = "io.quarry.cache.bucket";
const KEY_ANNOTATION: &str = "io.quarry.cache.key";

#[derive(serde::Serialize, serde::Deserialize)]
struct Config {
    bucket: String,
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layer: Option<LayerBlob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: u64,
}

#[derive(serde::Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

fn protocol(client: &Client, what: &str, message: impl Into<String>) -> RegistryError {
    RegistryError::Protocol { registry: client.registry.clone(), what: what.to_string(), message: message.into() }
}

fn io_error(path: &Path, what: &str) -> impl FnOnce(io::Error) -> RegistryError {
    let (path, what) = (path.display().to_string(), what.to_string());
    move |err| RegistryError::Io { path, what, err }
}

fn cache_error(e: crate::cache::CacheError) -> RegistryError {
    RegistryError::Io { path: String::new(), what: e.to_string(), err: io::Error::other("the local cache") }
}

/// The entry's manifest and config, checked to be the entry asked for.
fn read_entry(
    client: &mut Client,
    repo: &str,
    tag: &str,
    bucket: Bucket,
    name: &str,
    scratch: &Path,
) -> Result<Option<(Manifest, Config)>, RegistryError> {
    let what = format!("entry {tag}");
    let Some((bytes, _)) = artifact::manifest(client, repo, tag)? else { return Ok(None) };
    let m: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| protocol(client, &what, format!("not an artifact manifest: {e}")))?;
    if m.config.media_type != CONFIG_MEDIA_TYPE || m.layers.len() != 1 {
        return Err(protocol(client, &what, "not a quarry cache entry (config or files unexpected)"));
    }
    let digest = Digest::parse(&m.config.digest).map_err(|e| protocol(client, &what, e.to_string()))?;
    let writer = || BlobWriter::into_dir(scratch, scratch).map_err(|e| crate::registry::pull::blob_err(e, &what));
    let hidden = indicatif::ProgressBar::hidden();
    let stored = artifact::download(client, repo, &digest, m.config.size, &format!("{what} config"), &writer, &hidden)?;
    let text = std::fs::read(&stored.path).map_err(io_error(&stored.path, "cannot read"))?;
    let c: Config = serde_json::from_slice(&text).map_err(|e| protocol(client, &what, format!("bad config: {e}")))?;
    if c.bucket != bucket.name() || c.key != name {
        return Err(protocol(client, &what, format!("the config names {} {}, not this entry", c.bucket, c.key)));
    }
    Ok(Some((m, c)))
}

/// Pull a layer entry: the blob into the cache's blob directory, checked
/// against its digest and size as it streams (see the module's note on the
/// diff_id).
pub(super) fn fetch_layer(
    client: &mut Client,
    repo: &str,
    tag: &str,
    key: &Key,
    cache: &Cache,
) -> Result<Option<LayerBlob>, RegistryError> {
    let scratch = cache.temp_dir("remote-").map_err(cache_error)?;
    let Some((m, c)) = read_entry(client, repo, tag, Bucket::Layers, &key.hex(), scratch.path())? else {
        return Ok(None);
    };
    let what = format!("layer entry {tag}");
    let layer = c.layer.ok_or_else(|| protocol(client, &what, "the config has no layer record"))?;
    let d = &m.layers[0];
    if d.digest != layer.digest.to_string() || d.size != layer.size || d.media_type != layer.media_type {
        return Err(protocol(client, &what, "the record and the manifest disagree"));
    }
    let blobs = cache.blobs();
    if !blobs.has(&layer.digest, layer.size) {
        let bar = indicatif::ProgressBar::hidden();
        // Straight into the blob directory: the writer hashes as it writes
        // and names the file by its digest only once it matches.
        let writer = || blobs.writer().map_err(|e| crate::registry::pull::blob_err(e, &what));
        artifact::download(client, repo, &layer.digest, layer.size, &what, &writer, &bar)?;
    }
    Ok(Some(layer))
}

/// Pull a directory entry into a staging directory; returns it and the bytes pulled.
pub(super) fn fetch_dir(
    client: &mut Client,
    repo: &str,
    tag: &str,
    bucket: Bucket,
    name: &str,
    cache: &Cache,
) -> Result<Option<(Staged, u64)>, RegistryError> {
    let scratch = cache.temp_dir("remote-").map_err(cache_error)?;
    let Some((m, c)) = read_entry(client, repo, tag, bucket, name, scratch.path())? else { return Ok(None) };
    let what = format!("{bucket} entry {tag}");
    let d = &m.layers[0];
    if d.media_type != FILES_MEDIA_TYPE {
        return Err(protocol(client, &what, format!("unexpected files media type `{}`", d.media_type)));
    }
    let digest = Digest::parse(&d.digest).map_err(|e| protocol(client, &what, e.to_string()))?;
    let writer =
        || BlobWriter::into_dir(scratch.path(), scratch.path()).map_err(|e| crate::registry::pull::blob_err(e, &what));
    let bar = indicatif::ProgressBar::hidden();
    let stored = artifact::download(client, repo, &digest, d.size, &what, &writer, &bar)?;
    let staged = cache.stage().map_err(cache_error)?;
    unpack(&stored.path, &staged.files(), scratch.path()).map_err(|e| protocol(client, &what, e.to_string()))?;
    if let Some(meta) = &c.meta {
        let bytes = serde_json::to_vec(meta).map_err(|e| protocol(client, &what, e.to_string()))?;
        staged.set_meta(&bytes).map_err(io_error(&staged.files(), "cannot write meta.json"))?;
    }
    Ok(Some((staged, d.size)))
}

/// Why an entry's files could not be unpacked.
#[derive(Debug, thiserror::Error)]
enum UnpackError {
    #[error(transparent)]
    Read(#[from] crate::layer::archive::ArchiveError),
    #[error(transparent)]
    Extract(#[from] crate::layer::extract::ExtractError),
}

/// Unpack an entry's files (safely: nothing lands outside `dest`).
fn unpack(archive: &Path, dest: &Path, spool: &Path) -> Result<(), UnpackError> {
    let mut tree = crate::layer::Tree::new();
    let place = crate::layer::archive::Placement::default();
    crate::layer::archive::read_into(archive, &mut tree, &place, spool)?;
    Ok(crate::layer::extract::extract_tree(&tree, dest)?)
}

/// Pack `files` as a deterministic tar compressed with zstd, into `scratch`.
fn pack(files: &Path, scratch: &Path) -> io::Result<crate::oci::blob::Stored> {
    let w = BlobWriter::into_dir(scratch, scratch).map_err(io::Error::other)?;
    let enc = zstd::stream::write::Encoder::new(w, 3)?;
    let mut tar = tar::Builder::new(enc);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    for e in walkdir::WalkDir::new(files).follow_links(false).sort_by_file_name().min_depth(1) {
        let e = e.map_err(io::Error::other)?;
        let rel = e.path().strip_prefix(files).map_err(io::Error::other)?;
        tar.append_path_with_name(e.path(), rel)?;
    }
    let w = tar.into_inner()?.finish()?;
    w.commit().map_err(io::Error::other)
}

fn annotations(bucket: Bucket, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (BUCKET_ANNOTATION.to_string(), bucket.name().to_string()),
        (KEY_ANNOTATION.to_string(), name.to_string()),
    ])
}

/// Push a layer entry unless the registry has it; returns the bytes uploaded.
pub(super) fn push_layer(
    client: &mut Client,
    repo: &str,
    tag: &str,
    key: &Key,
    layer: &LayerBlob,
    cache: &Cache,
) -> Result<u64, RegistryError> {
    if artifact::has_manifest(client, repo, tag)? {
        return Ok(0);
    }
    let config =
        Config { bucket: Bucket::Layers.name().into(), key: key.hex(), layer: Some(layer.clone()), meta: None };
    let a = Artifact {
        artifact_type: ARTIFACT_TYPE.into(),
        config_media_type: CONFIG_MEDIA_TYPE.into(),
        config: serde_json::to_vec(&config).expect("a config serializes"),
        files: vec![ArtifactFile {
            path: cache.blobs().path(&layer.digest),
            digest: layer.digest,
            size: layer.size,
            media_type: layer.media_type.clone(),
            title: None,
        }],
        annotations: annotations(Bucket::Layers, &key.hex()),
    };
    let bar = indicatif::ProgressBar::hidden();
    Ok(artifact::push(client, repo, tag, &a, &cache.tmp_dir(), &bar)?.bytes_uploaded)
}

/// Push a directory entry (always, for buckets whose entries grow; else
/// unless the registry has it); returns the bytes uploaded.
pub(super) fn push_dir(
    client: &mut Client,
    repo: &str,
    tag: &str,
    bucket: Bucket,
    name: &str,
    e: &Entry,
    cache: &Cache,
) -> Result<u64, RegistryError> {
    if !bucket.mutable() && artifact::has_manifest(client, repo, tag)? {
        return Ok(0);
    }
    let scratch = cache.temp_dir("remote-").map_err(cache_error)?;
    let packed = pack(&e.files(), scratch.path()).map_err(io_error(&e.files(), "cannot pack the entry"))?;
    let meta = e.meta().and_then(|m| serde_json::from_slice(&m).ok());
    let config = Config { bucket: bucket.name().into(), key: name.into(), layer: None, meta };
    let a = Artifact {
        artifact_type: ARTIFACT_TYPE.into(),
        config_media_type: CONFIG_MEDIA_TYPE.into(),
        config: serde_json::to_vec(&config).expect("a config serializes"),
        files: vec![ArtifactFile {
            path: packed.path.clone(),
            digest: packed.digest,
            size: packed.size,
            media_type: FILES_MEDIA_TYPE.into(),
            title: Some(format!("{tag}.tar.zst")),
        }],
        annotations: annotations(bucket, name),
    };
    let bar = indicatif::ProgressBar::hidden();
    Ok(artifact::push(client, repo, tag, &a, scratch.path(), &bar)?.bytes_uploaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_entry_is_the_same_bytes_wherever_made_and_unpacks_whole() {
        let t = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let d = t.path().join(name);
            std::fs::create_dir_all(d.join("lib")).unwrap();
            std::fs::write(d.join("lib/libk.so.1"), "elf").unwrap();
            std::os::unix::fs::symlink("libk.so.1", d.join("lib/libk.so")).unwrap();
            std::fs::write(d.join("a.whl"), "zip").unwrap();
            d
        };
        let (a, b) = (make("a"), make("b"));
        filetime::set_file_mtime(b.join("a.whl"), filetime::FileTime::from_unix_time(12345, 0)).unwrap();
        let scratch = t.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let pa = pack(&a, &scratch).unwrap();
        let pb = pack(&b, &scratch).unwrap();
        assert_eq!(pa.digest, pb.digest, "times do not count");
        let out = t.path().join("out");
        unpack(&pa.path, &out, &scratch).unwrap();
        assert_eq!(std::fs::read(out.join("lib/libk.so.1")).unwrap(), b"elf");
        assert_eq!(std::fs::read_link(out.join("lib/libk.so")).unwrap(), Path::new("libk.so.1"));
    }
}
