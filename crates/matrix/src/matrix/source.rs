//! Where a wheel or kernel job's project comes from: a path beside the
//! matrix (it may name axes: `sdists/flash_attn-{flash_attn}.tar.gz`), or
//! an sdist from the package index pinned by its sha256. The requirement
//! may name axes (`flash-attn=={flash_attn}`, a version axis);
//! then `sha256` is a table with one hash per requirement it becomes.

use super::template::{fill, placeholders};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a wheel or kernel job's project comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSource {
    /// A directory or an sdist on this machine.
    Path(PathBuf),
    /// An sdist from the package index: the requirement (maybe a template)
    /// and the sha256 of each requirement it becomes.
    Pypi { requirement: String, sha256: BTreeMap<String, String> },
}

/// A package-index source without the sha256 of a requirement it becomes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no sha256 for `{requirement}`: add `\"{requirement}\" = \"...\"` (pip hash shows it)")]
pub struct NoSha256 {
    pub requirement: String,
}

/// `source` as written.
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub(super) enum RawSource {
    Path(String),
    Pypi { pypi: String, sha256: RawSha256 },
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
pub(super) enum RawSha256 {
    One(String),
    /// Requirement (filled) -> hash.
    Each(BTreeMap<String, String>),
}

fn is_sha256(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

impl RawSource {
    /// The source, paths relative to `dir`; or the field and what is wrong.
    pub(super) fn resolve(self, dir: &Path) -> Result<JobSource, (&'static str, String)> {
        let (pypi, sha256) = match self {
            RawSource::Path(p) => return Ok(JobSource::Path(dir.join(p))),
            RawSource::Pypi { pypi, sha256 } => (pypi, sha256),
        };
        let hashes = match sha256 {
            RawSha256::One(h) if placeholders(&pypi).is_empty() => BTreeMap::from([(pypi.clone(), h)]),
            RawSha256::One(_) => {
                return Err((
                    "job.source.sha256",
                    format!("`{pypi}` names axes: give a table, one sha256 per requirement it becomes"),
                ))
            }
            RawSha256::Each(m) => m,
        };
        if let Some(req) = hashes.iter().find(|(_, h)| !is_sha256(h)).map(|(r, _)| r) {
            return Err(("job.source.sha256", format!("{req}: 64 hex digits: the sdist's sha256 (pip hash shows it)")));
        }
        let sha256 = hashes.into_iter().map(|(r, h)| (r, h.to_ascii_lowercase())).collect();
        Ok(JobSource::Pypi { requirement: pypi, sha256 })
    }
}

impl JobSource {
    /// A package-index source's requirement for a cell with these values,
    /// and its sha256; None for a path.
    pub fn sha256_for(&self, values: &BTreeMap<String, String>) -> Result<Option<(String, String)>, NoSha256> {
        match self {
            JobSource::Path(_) => Ok(None),
            JobSource::Pypi { requirement, sha256 } => {
                let req = fill(requirement, values);
                match sha256.get(&req) {
                    Some(h) => Ok(Some((req, h.clone()))),
                    None => Err(NoSha256 { requirement: req }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requirement_template_takes_one_hash_per_requirement() {
        let h = "a".repeat(64);
        let one = RawSource::Pypi { pypi: "p=={v}".into(), sha256: RawSha256::One(h.clone()) };
        assert_eq!(one.resolve(Path::new(".")).unwrap_err().0, "job.source.sha256");
        let each = RawSource::Pypi {
            pypi: "p=={v}".into(),
            sha256: RawSha256::Each(BTreeMap::from([("p==1".to_string(), h.to_uppercase())])),
        };
        let s = each.resolve(Path::new(".")).unwrap();
        let v = |x: &str| BTreeMap::from([("v".to_string(), x.to_string())]);
        assert_eq!(s.sha256_for(&v("1")).unwrap(), Some(("p==1".to_string(), h)));
        assert!(s.sha256_for(&v("2")).unwrap_err().to_string().contains("p==2"));
    }
}
