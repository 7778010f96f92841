//! Rebuilding an image from its claim: the checkout must hold every
//! definition, layer and lock file with the sha256 the provenance records
//! (else the first one that differs is named and nothing is built); the
//! build runs in a private cache that starts empty (no shared tier), so
//! every input is fetched again and checked against the lock's digests,
//! with the provenance's `--set` values, layer format and
//! `SOURCE_DATE_EPOCH`.

use super::claim::Claim;
use super::VerifyError;
use crate::build::{build, BuildOptions};
use crate::cache::Cache;
use crate::progress::Progress;
use std::path::{Path, PathBuf};

/// Check the checkout at `root` against the claim's files.
pub fn check_checkout(claim: &Claim, root: &Path) -> Result<(), VerifyError> {
    for f in &claim.files {
        let (Some(name), Some(want)) = (f.name.as_deref(), f.sha256_hex()) else { continue };
        let path = root.join(name);
        let found = match crate::oci::digest::sha256_file(&path) {
            Ok(hex) => hex,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "missing".to_string(),
            Err(err) => {
                return Err(VerifyError::Io { path: path.display().to_string(), what: "cannot read".into(), err })
            }
        };
        if found != want {
            return Err(VerifyError::Checkout {
                path: path.display().to_string(),
                recorded: format!("sha256:{want}"),
                found: if found == "missing" { found } else { format!("sha256:{found}") },
            });
        }
    }
    Ok(())
}

/// Build the claim's image from the checkout at `root`, with the cache at
/// `cache`, into `output`.
pub fn rebuild(
    claim: &Claim,
    root: &Path,
    cache: &Cache,
    output: &Path,
    progress: Progress,
) -> Result<crate::build::BuildResult, VerifyError> {
    let cache = cache.clone();
    // A private cache is trusted no more than the registry: recheck its blobs.
    cache.rehash_blobs(true);
    let opts = BuildOptions {
        sets: claim.sets.clone(),
        output: Some(output.to_path_buf()),
        compression: claim.codec,
        cache,
        no_cache: false,
        verify: true,
        threads: crate::layer::compress::default_threads(),
        source_date_epoch: claim.source_date_epoch,
        progress,
        sbom: false,
    };
    let definition: PathBuf = root.join(&claim.definition);
    build(&definition, &opts).map_err(|source| match input_gone(claim, &source) {
        Some(gone) => gone,
        None => VerifyError::Rebuild { image: claim.image_name.clone(), source: Box::new(source) },
    })
}

/// A pinned .deb the archive no longer serves, named as the provenance
/// records it (its URI and sha256), not as the lock's advice to re-lock:
/// re-locking would verify another image.
fn input_gone(claim: &Claim, e: &crate::build::BuildError) -> Option<VerifyError> {
    use crate::distro::DistroError;
    use crate::plan::PlanError;
    let crate::build::BuildError::Plan(plan) = e else { return None };
    let (PlanError::Distro { err, .. } | PlanError::DistroLayer { err, .. }) = &**plan else { return None };
    let DistroError::PinGone { package, version, file, url, status, .. } = &**err else { return None };
    let recorded = claim.statement.predicate.build_definition.resolved_dependencies.iter().find(|d| {
        d.uri.as_deref().is_some_and(|u| u.strip_suffix(file.as_str()).is_some_and(|rest| rest.ends_with('/')))
    });
    let uri = recorded.and_then(|d| d.uri.clone()).unwrap_or_else(|| url.clone());
    let answer = if uri == *url {
        format!("which answers HTTP {status}")
    } else {
        format!("and {url} (where the rebuild looked) answers HTTP {status}")
    };
    let sha256 =
        recorded.and_then(|d| d.sha256_hex()).map_or_else(|| "(not recorded)".into(), |h| format!("sha256:{h}"));
    Some(VerifyError::InputGone {
        image: claim.image_name.clone(),
        input: format!("{package} {version}"),
        uri,
        sha256,
        answer,
    })
}
