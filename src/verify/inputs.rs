//! Finding the inputs a provenance records: files by sha256 among the
//! wheels, sdists and locks of the input directories (the recorded name
//! first); directories by quarry's tree digest (a project, a wheelhouse,
//! the artifacts of `rocm package` as the subdirectories of one artifact
//! directory). Each input missing is named with where it was looked for.

use super::{bad, VerifyError};
use crate::provenance::image::TREE_DIGEST;
use crate::provenance::ResourceDescriptor;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, serde::Serialize)]
pub struct FoundInput {
    pub name: String,
    /// `sha256:HEX`, or quarry's tree digest of a directory.
    pub digest: String,
    pub path: PathBuf,
}

/// Files hashed when looking for an input by sha256 (wheels, sdists, locks).
fn may_be_input(p: &Path) -> bool {
    let n = p.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    [".whl", ".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".lock"].iter().any(|e| n.ends_with(e))
}

/// The directory in `dirs` (one of them, or a subdirectory of one named as
/// the input) whose tree digest of `kind` is the input's.
pub(super) fn find_tree(
    target: &Path,
    d: &ResourceDescriptor,
    dirs: &[PathBuf],
    kind: &str,
) -> Result<FoundInput, VerifyError> {
    let name = d.name.clone().unwrap_or_default();
    let want = d.digest.get(TREE_DIGEST).cloned().unwrap_or_default();
    let key = |dir: &Path| match kind {
        "wheel-source" => crate::wheel::build::key::source_key(dir, &[]).ok(),
        _ => crate::cache::key::tree_key(kind, dir, &[]).ok(),
    };
    for dir in dirs {
        for c in [dir.clone(), dir.join(&name)] {
            if c.is_dir() && key(&c).is_some_and(|k| k.hex() == want) {
                return Ok(FoundInput { name, digest: format!("{TREE_DIGEST}:{want}"), path: c });
            }
        }
    }
    Err(missing(target, &name, &format!("{TREE_DIGEST}:{want}"), dirs))
}

/// The file in `dirs` whose sha256 is the input's.
pub(super) fn find_file(target: &Path, d: &ResourceDescriptor, dirs: &[PathBuf]) -> Result<FoundInput, VerifyError> {
    let name = d.name.clone().unwrap_or_default();
    let Some(want) = d.sha256_hex() else {
        return Err(bad(target, format!("the input `{name}` has no sha256 in the provenance")));
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        // The recorded name first: most inputs are where they were.
        candidates.push(dir.join(&name));
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut more: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| may_be_input(p)).collect();
            more.sort();
            candidates.extend(more);
        }
    }
    for c in candidates {
        if c.is_file() && crate::oci::digest::sha256_file(&c).is_ok_and(|h| h == want) {
            return Ok(FoundInput { name, digest: format!("sha256:{want}"), path: c });
        }
    }
    Err(missing(target, &name, &format!("sha256:{want}"), dirs))
}

fn missing(target: &Path, name: &str, digest: &str, dirs: &[PathBuf]) -> VerifyError {
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    bad(
        target,
        format!(
            "its input `{name}` ({digest}) is in none of {}; give the directory that holds it with --inputs DIR",
            looked.join(", ")
        ),
    )
}

/// The artifact directory among `dirs` that holds every recorded artifact
/// (a subdirectory of that name with that tree digest) and no other.
pub(super) fn find_artifacts(
    target: &Path,
    recorded: &[ResourceDescriptor],
    dirs: &[PathBuf],
) -> Result<(PathBuf, Vec<FoundInput>), VerifyError> {
    let mut first_missing = None;
    for dir in dirs {
        let mut found = Vec::new();
        for d in recorded {
            let name = d.name.clone().unwrap_or_default();
            let want = d.digest.get(TREE_DIGEST).cloned().unwrap_or_default();
            let sub = dir.join(&name);
            let got = sub.is_dir().then(|| crate::cache::key::tree_key("rocm-artifact", &sub, &[]).ok()).flatten();
            if got.is_some_and(|k| k.hex() == want) {
                found.push(FoundInput { name, digest: format!("{TREE_DIGEST}:{want}"), path: sub });
            } else {
                first_missing.get_or_insert((name, format!("{TREE_DIGEST}:{want}")));
                break;
            }
        }
        if found.len() == recorded.len() {
            // The package set is made of every artifact there: one more is another set.
            let there = crate::rocm_artifacts::read(dir).map(|a| a.artifacts.len()).unwrap_or(0);
            if there != recorded.len() {
                return Err(bad(
                    target,
                    format!(
                        "{} holds {there} artifacts, the provenance records {}; give a directory with exactly those",
                        dir.display(),
                        recorded.len()
                    ),
                ));
            }
            return Ok((dir.clone(), found));
        }
    }
    let (name, digest) = first_missing.unwrap_or_default();
    Err(missing(target, &name, &digest, dirs))
}
