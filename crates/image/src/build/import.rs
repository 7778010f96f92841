//! Bases whose layers are reused as they are: an OCI layout (its blobs
//! copied into the cache, each verified against its descriptor) and a
//! registry image (pulled by digest, verified as it streams). The base's
//! config and history are what the image continues from.

use super::{BuildError, Executor};
use crate::oci::{Digest, LayerBlob};
use crate::plan::{Plan, PlanError, Work};

pub(super) fn run(exec: &mut Executor, plan: &Plan, i: usize) -> Result<bool, BuildError> {
    let n = &plan.layers[i];
    let prefix = n.name.strip_suffix("base").unwrap_or("").to_string();
    let scope = n.scope;
    let platform = plan.scopes[scope].image.platform.clone();
    let file = plan.scopes[scope].image.file.display().to_string();
    let (layers, config) = match &n.work {
        Work::Oci { path, reference } => {
            let base_err =
                |message: String| BuildError::from(PlanError::Base { path: path.display().to_string(), message });
            let base =
                crate::oci::layout::open_image(path, reference.as_deref(), Some((&platform.os, platform.arch.oci())))?;
            let diff_ids = base.config.rootfs().diff_ids().clone();
            let descs = base.manifest.layers().clone();
            if diff_ids.len() != descs.len() {
                return Err(base_err(format!(
                    "manifest has {} layers but config lists {} diff_ids",
                    descs.len(),
                    diff_ids.len()
                )));
            }
            let mut layers = Vec::new();
            for (j, (d, diff_id)) in descs.iter().zip(diff_ids.iter()).enumerate() {
                let digest = Digest::try_from(d.digest()).map_err(|e| base_err(format!("layer {j}: {e}")))?;
                let diff_id = Digest::parse(diff_id).map_err(|e| base_err(format!("diff_id {j}: {e}")))?;
                let cached = exec.cache.has_blob(&digest, d.size());
                if !cached {
                    if exec.is_dry() {
                        return Ok(false);
                    }
                    import_blob(exec, &base, d, &digest, path)?;
                }
                let blob = LayerBlob { digest, diff_id, size: d.size(), media_type: d.media_type().to_string() };
                layers.push((blob, cached));
            }
            (layers, base.config)
        }
        Work::Registry { reference } => {
            use crate::registry::pull;
            let err = |err| BuildError::from(PlanError::Registry { file: file.clone(), err });
            let pulled = if exec.is_dry() {
                match pull::cached_layers(reference, &platform, exec.cache.blobs()) {
                    Some(p) => p,
                    None => return Ok(false),
                }
            } else {
                let r = pull::base_reference(reference).map_err(err)?;
                let opts = pull::PullOptions {
                    plain_http: pull::plain_http_default(&r),
                    progress: exec.opts.progress,
                    offline: false,
                };
                pull::pull_image(
                    &r,
                    (&platform.os, platform.arch.oci(), platform.variant.as_deref()),
                    exec.cache.registry_store(),
                    &opts,
                )
                .map_err(err)?
            };
            (pulled.layers.into_iter().map(|l| (l.blob, l.cached)).collect(), pulled.config)
        }
        _ => unreachable!("import nodes only"),
    };
    for (j, (blob, cached)) in layers.into_iter().enumerate() {
        exec.push(format!("{prefix}base[{j}]"), blob, cached.then_some(crate::cache::Tier::Local), 0);
    }
    exec.history = config.history().clone().unwrap_or_default();
    exec.imported[scope] = Some(config);
    Ok(true)
}

/// Copy a base blob into the cache, verifying it against its descriptor.
fn import_blob(
    exec: &Executor,
    base: &crate::oci::layout::OpenImage,
    d: &ocidir::oci_spec::image::Descriptor,
    digest: &Digest,
    path: &std::path::Path,
) -> Result<(), BuildError> {
    let base_err = |message: String| BuildError::from(PlanError::Base { path: path.display().to_string(), message });
    let mismatch = |e: crate::oci::BlobError| base_err(format!("blob {digest} does not match its descriptor: {e}"));
    if let Some(f) = base.source.blob_file(digest) {
        return match exec.cache.blobs().import_file(&f, digest, d.size()) {
            Ok(_) => Ok(()),
            Err(e @ crate::oci::BlobError::Mismatch { .. }) => Err(mismatch(e)),
            Err(e) => Err(base_err(e.to_string())),
        };
    }
    let mut r = base.source.blob_reader(d)?;
    let mut w = exec.cache.blobs().writer().map_err(|e| base_err(e.to_string()))?;
    std::io::copy(&mut r, &mut w).map_err(|e| base_err(format!("reading blob {digest}: {e}")))?;
    w.commit_verified(digest, Some(d.size())).map_err(mismatch)?;
    Ok(())
}
