//! Loading an OCI layout into the engine as a streamed docker-archive,
//! leaving out the layer blobs the engine already has.
//!
//! Which blobs may be left out: the engine looks a layer up by its *chain*
//! (the layer and everything below it), and opens the blob only when that
//! chain is missing. So the layers that may be omitted are the longest
//! prefix of the image's diff_ids that is also a prefix of some image the
//! engine holds (`RootFS.Layers` of `GET /images/{id}/json`).
//!
//! Engines older than Docker 23 (API < 1.42) cannot read zstd layers: the
//! zstd layers that must be sent are recompressed to gzip in a scratch copy
//! of the layout (same config, so the same image id).

use super::{describe, stream, Engine, EngineError};
use crate::export::{normalize_repo_tag, write_docker_archive};
use crate::layer::compress;
use crate::layer::stream::{Checks, Format};
use crate::oci::digest::HashingWriter;
use crate::oci::layout::{open_image, OpenImage};
use bollard::query_parameters::{ImportImageOptionsBuilder, ListImagesOptionsBuilder};
use futures_util::StreamExt;
use ocidir::oci_spec::image::{Descriptor, ImageIndexBuilder, ImageManifest, MediaType, SCHEMA_VERSION};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// What `quarry load` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    /// The engine's id for the image (`sha256:` of its config).
    pub image_id: String,
    /// The `NAME:TAG` it was loaded as.
    pub tag: String,
    pub layers_sent: usize,
    pub layers_skipped: usize,
    /// zstd layers recompressed to gzip for an engine that cannot read zstd.
    pub layers_recompressed: usize,
}

fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Engine {
    /// Load a layout (as `tag`), with `scratch` (on the layout's file
    /// system: the cache's `Cache::tmp_dir`) for recompressed copies.
    pub fn load_layout(&self, dir: &Path, tag: &str, scratch: &Path) -> Result<LoadReport, EngineError> {
        self.load(dir, None, tag, scratch)
    }

    /// How many leading layers of `diff_ids` the engine has as a chain.
    /// `hint` (the tag about to be loaded) is looked at first: reloading an
    /// image is the common case.
    pub fn known_prefix(&self, diff_ids: &[String], hint: Option<&str>) -> Result<usize, EngineError> {
        self.rt.block_on(self.known_prefix_async(diff_ids, hint))
    }

    pub async fn known_prefix_async(&self, diff_ids: &[String], hint: Option<&str>) -> Result<usize, EngineError> {
        if diff_ids.is_empty() {
            return Ok(0);
        }
        let mut best = 0;
        let mut candidates: Vec<String> = hint.map(|h| vec![h.to_string()]).unwrap_or_default();
        let listed = self
            .docker
            .list_images(Some(ListImagesOptionsBuilder::default().all(false).build()))
            .await
            .map_err(|e| EngineError::api("listing the engine's images", e))?;
        candidates.extend(listed.into_iter().map(|i| i.id));
        for c in candidates {
            let Ok(img) = self.docker.inspect_image(&c).await else {
                continue;
            };
            let layers = img.root_fs.and_then(|r| r.layers).unwrap_or_default();
            best = best.max(common_prefix(diff_ids, &layers));
            if best == diff_ids.len() {
                break;
            }
        }
        Ok(best)
    }

    /// Load one image of the OCI layout `layout` as `tag` (`NAME[:TAG]`).
    /// `scratch` is where recompressed layers go when the engine needs them.
    pub fn load(
        &self,
        layout: &Path,
        reference: Option<&str>,
        tag: &str,
        scratch: &Path,
    ) -> Result<LoadReport, EngineError> {
        self.rt.block_on(self.load_async(layout, reference, tag, scratch))
    }

    pub async fn load_async(
        &self,
        layout: &Path,
        reference: Option<&str>,
        tag: &str,
        scratch: &Path,
    ) -> Result<LoadReport, EngineError> {
        let tag = normalize_repo_tag(tag);
        check_tag(&tag)?;
        match self.load_once(layout, reference, &tag, scratch, true).await {
            // The layers left out were the engine's when checked, but an
            // image removed meanwhile (`docker rmi`, a concurrent gc) can
            // take them away before the engine reads the archive: send all.
            (Err(EngineError::Api { .. }), elided) if elided > 0 => {
                self.load_once(layout, reference, &tag, scratch, false).await.0
            }
            (result, _) => result,
        }
    }

    /// One load; `elide`: leave out the layers the engine already has.
    /// Returns how many were left out with the result.
    async fn load_once(
        &self,
        layout: &Path,
        reference: Option<&str>,
        tag: &str,
        scratch: &Path,
        elide: bool,
    ) -> (Result<LoadReport, EngineError>, usize) {
        let mut known = 0;
        let result = async {
            let img = open_image(layout, reference, None)?;
            let diff_ids = img.config.rootfs().diff_ids().clone();
            if elide {
                known = self.known_prefix_async(&diff_ids, Some(tag)).await?;
            }
            self.send_layout(layout, reference, tag, scratch, &img, known).await
        }
        .await;
        (result, known)
    }

    /// Stream `layout` as a docker-archive leaving out its first `known`
    /// layers, and check that the engine has `tag` afterwards.
    async fn send_layout(
        &self,
        layout: &Path,
        reference: Option<&str>,
        tag: &str,
        scratch: &Path,
        img: &crate::oci::layout::OpenImage,
        known: usize,
    ) -> Result<LoadReport, EngineError> {
        let tag = tag.to_string();

        // zstd layers that will be sent, for an engine that cannot read them.
        let needs_gzip: Vec<usize> = img
            .manifest
            .layers()
            .iter()
            .enumerate()
            .filter(|(i, d)| *i >= known && d.media_type().to_string().ends_with("+zstd"))
            .map(|(i, _)| i)
            .collect();
        let mut _scratch_dir = None;
        let (src, src_ref) = if !needs_gzip.is_empty() && !self.reads_zstd() {
            std::fs::create_dir_all(scratch)
                .map_err(|e| EngineError::io("cannot create the scratch directory", scratch, e))?;
            let dir = tempfile::Builder::new()
                .prefix("load-gzip-")
                .tempdir_in(scratch)
                .map_err(|e| EngineError::io("cannot create a scratch directory in", scratch, e))?;
            recompress_layout(layout, img, &needs_gzip, dir.path())?;
            let p = dir.path().to_path_buf();
            _scratch_dir = Some(dir);
            (p, None)
        } else {
            (layout.to_path_buf(), reference.map(String::from))
        };

        let tag_for_export = tag.clone();
        let (body, producer) = stream::from_writer(move |w| {
            let mut n = 0usize;
            let omit = move |_d: &str| {
                // Layers are visited in order: omit exactly the known prefix.
                n += 1;
                n <= known
            };
            let omit = std::cell::RefCell::new(omit);
            write_docker_archive(&src, src_ref.as_deref(), &tag_for_export, w, &|d| (omit.borrow_mut())(d))
        });
        let mut replies =
            self.docker.import_image_stream(ImportImageOptionsBuilder::default().quiet(true).build(), body, None);
        let mut failure = None;
        while let Some(r) = replies.next().await {
            match r {
                Ok(info) => {
                    if let Some(e) = info.error_detail.and_then(|d| d.message) {
                        failure.get_or_insert(e);
                    }
                }
                Err(e) => {
                    failure.get_or_insert(describe(&e));
                }
            }
        }
        let export = producer.await.map_err(|e| EngineError::Invalid(format!("the archive writer failed: {e}")))?;
        let export = match (export, failure) {
            (Err(e), _) => return Err(e.into()),
            (Ok(_), Some(msg)) => {
                return Err(EngineError::Api {
                    what: format!("loading `{}` into the engine as `{tag}`", layout.display()),
                    detail: msg,
                })
            }
            (Ok(x), None) => x,
        };
        let inspect = self
            .docker
            .inspect_image(&tag)
            .await
            .map_err(|e| EngineError::api(format!("the engine did not keep `{tag}` after loading it"), e))?;
        Ok(LoadReport {
            image_id: inspect.id.unwrap_or_default(),
            tag,
            layers_sent: export.layers_sent,
            layers_skipped: export.layers_skipped,
            layers_recompressed: needs_gzip.len() * usize::from(!self.reads_zstd()),
        })
    }
}

/// Docker refuses upper-case repository names with an obscure message; say it plainly.
fn check_tag(tag: &str) -> Result<(), EngineError> {
    let (repo, _) = match tag.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (tag, ""),
    };
    if repo.is_empty() || repo.chars().any(|c| c.is_ascii_uppercase() || c.is_whitespace()) {
        return Err(EngineError::Invalid(format!(
            "`{tag}` is not a valid engine image name: use lower-case NAME[:TAG], e.g. `my-image:1.0`"
        )));
    }
    Ok(())
}

/// A copy of the image in `dst` whose layers at `indexes` are gzip instead
/// of zstd. Other blobs are hardlinked (or copied); the config is kept
/// byte for byte, so the image id does not change.
fn recompress_layout(layout: &Path, img: &OpenImage, indexes: &[usize], dst: &Path) -> Result<(), EngineError> {
    let blobs = dst.join(crate::oci::BLOBS_DIR);
    std::fs::create_dir_all(&blobs).map_err(|e| EngineError::io("cannot create", &blobs, e))?;
    let src_blob = |d: &Descriptor| -> PathBuf { crate::oci::layout::blob_path_in(layout, d.digest()) };
    let place = |from: &Path, hex: &str| -> Result<(), EngineError> {
        let to = blobs.join(hex);
        if to.exists() {
            return Ok(());
        }
        std::fs::hard_link(from, &to)
            .or_else(|_| std::fs::copy(from, &to).map(|_| ()))
            .map_err(|e| EngineError::io("cannot copy blob", from, e))
    };
    let mut manifest: ImageManifest = img.manifest.clone();
    let mut layers = manifest.layers().clone();
    for (i, d) in layers.iter_mut().enumerate() {
        if !indexes.contains(&i) {
            if src_blob(d).exists() {
                place(&src_blob(d), d.digest().digest())?;
            }
            continue;
        }
        let from = src_blob(d);
        let input = std::fs::File::open(&from).map_err(|e| EngineError::io("cannot read layer", &from, e))?;
        let input = BufReader::with_capacity(1 << 20, input);
        let mut dec = crate::layer::stream::decoder(Format::Zstd, input, Checks::Verify)
            .map_err(|e| EngineError::io("cannot decompress layer", &from, e))?;
        let tmp =
            tempfile::NamedTempFile::new_in(dst).map_err(|e| EngineError::io("cannot create a file in", dst, e))?;
        let out = HashingWriter::new(BufWriter::with_capacity(
            1 << 20,
            tmp.reopen().map_err(|e| EngineError::io("cannot open", tmp.path(), e))?,
        ));
        let mut enc = compress::encoder(compress::LayerCodec::default(), compress::default_threads(), out)
            .map_err(|e| EngineError::io("cannot start gzip for", &from, e))?;
        std::io::copy(&mut dec, &mut enc).map_err(|e| EngineError::io("recompressing layer", &from, e))?;
        let out = enc.finish().map_err(|e| EngineError::io("recompressing layer", &from, e))?;
        let (mut file, digest, size) = out.finish();
        file.flush().map_err(|e| EngineError::io("recompressing layer", &from, e))?;
        let at = blobs.join(digest.hex());
        tmp.persist(&at).map_err(|e| EngineError::io("cannot store", &at, e.error))?;
        d.set_digest(digest.into());
        d.set_size(size);
        d.set_media_type(MediaType::ImageLayerGzip);
    }
    manifest.set_layers(layers);
    place(&src_blob(manifest.config()), manifest.config().digest().digest())?;
    let mbytes = serde_json::to_vec(&manifest).map_err(|e| EngineError::Invalid(e.to_string()))?;
    let mdigest = crate::oci::Digest::of_bytes(&mbytes);
    let at = blobs.join(mdigest.hex());
    std::fs::write(&at, &mbytes).map_err(|e| EngineError::io("cannot write", &at, e))?;
    let mut mdesc =
        Descriptor::new(MediaType::ImageManifest, mbytes.len() as u64, oci_spec::image::Digest::from(mdigest));
    if let Some(t) = &img.tag {
        mdesc.set_annotations(Some(HashMap::from([("org.opencontainers.image.ref.name".to_string(), t.clone())])));
    }
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![mdesc])
        .build()
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
    let ijson = serde_json::to_vec(&index).map_err(|e| EngineError::Invalid(e.to_string()))?;
    std::fs::write(dst.join("index.json"), ijson)
        .map_err(|e| EngineError::io("cannot write", dst.join("index.json"), e))?;
    std::fs::write(dst.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)
        .map_err(|e| EngineError::io("cannot write", dst.join("oci-layout"), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_tags() {
        let a: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
        let b: Vec<String> = ["x", "y", "q", "z"].iter().map(|s| s.to_string()).collect();
        assert_eq!(common_prefix(&a, &b), 2);
        assert!(check_tag("ok-name:1.0").is_ok());
        assert!(check_tag("localhost:5000/x:1").is_ok());
        assert!(check_tag("Bad:1").is_err());
    }
}
