//! Files from Python package indexes, fetched with the user's own pip
//! (`python3 -m pip download`, so their index, mirrors, proxies and
//! certificates apply) into the cache's `pypi` bucket (an entry per
//! sha256, holding the file under its own name), and pinned by sha256: in the
//! definition (`sha256 = "..."`) and/or in the image's lock file. A pinned
//! file found in the cache is used without running pip (no network).

pub mod index;
pub mod metadata;
mod pip;
pub mod resolve;

use crate::definition::{PypiFormat, PypiRequest};

use crate::cache::{Bucket, Cache, CacheError, Sharing};
use std::path::PathBuf;

/// One file fetched with pip, as `IMAGE.lock` records it (`[[pypi]]`):
/// ```toml
/// [[pypi]]
/// requirement = "cmake==3.31.6"
/// format = "wheel"                        # or "sdist"
/// platform = "manylinux_2_28_x86_64"      # wheels: what pip chose for
/// file = "cmake-3.31.6-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
/// sha256 = "..."
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PypiPin {
    pub requirement: String,
    pub format: PypiFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    pub file: String,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PypiError {
    #[error("pypi `{requirement}`: the file served ({file}) has sha256 {actual}, but the pin says {expected}; if the new file is intended, update the pin (`sha256` in the definition, or run `quarry lock` again)")]
    Mismatch { requirement: String, file: String, expected: String, actual: String },
    #[error("pypi `{requirement}`: the package index has no such file ({detail}); check the package name and version, and the platform/python the wheel is chosen for")]
    NotFound { requirement: String, detail: String },
    #[error("pypi `{requirement}`: `{command}` failed (exit code {code}):\n{output}\ncheck your pip configuration (index-url, proxy) and network")]
    Pip { requirement: String, command: String, code: i32, output: String },
    #[error("pypi `{requirement}`: cannot run `{python} -m pip` ({err}); install pip, or point QUARRY_PYTHON at a Python that has it")]
    NoPip { requirement: String, python: String, err: std::io::Error },
    #[error("pypi `{requirement}`: {message}")]
    Other { requirement: String, message: String },
    #[error("pypi `{requirement}`: {source}")]
    Requirement { requirement: String, source: crate::definition::RequirementError },
    #[error(transparent)]
    Cache(#[from] CacheError),
}

pub use crate::definition::requirement_name;

/// pip's platform tag for wheels on an architecture: manylinux_2_28
/// (pip also takes the older manylinux tags it implies: 2_17, 2014, 1...).
pub fn default_platform(arch: crate::definition::Arch) -> String {
    format!("manylinux_2_28_{}", arch.machine())
}

/// A request with its platform filled in (what a lock entry records).
pub fn resolved(req: &PypiRequest, arch: crate::definition::Arch) -> PypiRequest {
    let mut r = req.clone();
    if r.format == PypiFormat::Wheel && r.platform.is_none() {
        r.platform = Some(default_platform(arch));
    }
    r
}

/// A fetched file, verified, in the download cache.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub path: PathBuf,
    pub file: String,
    pub sha256: String,
}

/// The lock entry for `req` (resolved), if the lock has one.
pub fn find_pin<'a>(pins: &'a [PypiPin], req: &PypiRequest) -> Option<&'a PypiPin> {
    pins.iter().find(|p| {
        p.requirement == req.requirement
            && p.format == req.format
            && p.platform == req.platform
            && p.python == req.python
    })
}

/// The pinned sha256 for a request: the definition's, else the lock's; both
/// given and different is an error.
pub fn pinned_sha(
    req: &PypiRequest,
    def_pin: Option<&str>,
    lock_pin: Option<&PypiPin>,
) -> Result<Option<String>, PypiError> {
    match (def_pin, lock_pin) {
        (Some(d), Some(l)) if d != l.sha256 => Err(PypiError::Other {
            requirement: req.requirement.clone(),
            message: format!(
                "the definition pins sha256 {d} but the lock pins {} ({}); run `quarry lock` again",
                l.sha256, l.file
            ),
        }),
        (Some(d), _) => Ok(Some(d.to_string())),
        (None, Some(l)) => Ok(Some(l.sha256.clone())),
        (None, None) => Ok(None),
    }
}

/// The file for `req` (resolved): from the cache when pinned and present,
/// else downloaded with pip, checked against the pin, and stored.
pub fn fetch(cache: &Cache, req: &PypiRequest, pin: Option<&str>) -> Result<Fetched, PypiError> {
    if let Some(sha) = pin {
        if let Some(f) = cached(cache, sha) {
            return Ok(f);
        }
    }
    let name = requirement_name(&req.requirement)
        .map_err(|source| PypiError::Requirement { requirement: req.requirement.clone(), source })?;
    let tmp = cache.temp_dir("pypi-")?;
    let dl = tmp.path().join("dl");
    std::fs::create_dir(&dl).map_err(|e| other(req, format!("cannot create `{}`: {e}", dl.display())))?;
    pip::download(req, &name, pin, &dl, tmp.path())?;
    let files: Vec<PathBuf> = std::fs::read_dir(&dl)
        .map_err(|e| other(req, format!("cannot read `{}`: {e}", dl.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let [path] = files.as_slice() else {
        return Err(other(req, format!("pip downloaded {} files, expected one", files.len())));
    };
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let sha256 = crate::oci::digest::sha256_file(path).map_err(|e| other(req, format!("cannot read `{file}`: {e}")))?;
    if let Some(expected) = pin {
        if sha256 != expected {
            return Err(PypiError::Mismatch {
                requirement: req.requirement.clone(),
                file,
                expected: expected.to_string(),
                actual: sha256,
            });
        }
    }
    store(cache, path, &sha256, tmp.path()).map_err(|e| other(req, e.to_string()))
}

/// Move the downloaded `path` (its sha256 already measured, on the
/// cache's file system) into the cache as the `pypi` entry `<sha256>`,
/// committed whole, so a killed build never leaves an entry a later build
/// would trust. An entry already there is kept.
pub(crate) fn store(
    cache: &Cache,
    path: &std::path::Path,
    sha256: &str,
    _scratch: &std::path::Path,
) -> Result<Fetched, StoreError> {
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if cached(cache, sha256).is_none() {
        let staged = cache.stage()?;
        std::fs::rename(path, staged.files().join(&file))
            .map_err(|err| StoreError::Stage { file: file.clone(), err })?;
        cache.commit(Bucket::Pypi, sha256, staged, &Sharing::Shared)?;
    }
    cached(cache, sha256).ok_or(StoreError::Vanished(file))
}

/// Why a downloaded file could not be kept.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("cannot stage `{file}`: {err}")]
    Stage { file: String, err: std::io::Error },
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("`{0}` vanished from the cache (removed while it was stored)")]
    Vanished(String),
}

fn other(req: &PypiRequest, message: String) -> PypiError {
    PypiError::Other { requirement: req.requirement.clone(), message }
}

/// The cached file with this sha256, rehashed (a damaged entry is dropped).
pub fn cached(cache: &Cache, sha256: &str) -> Option<Fetched> {
    // The bucket is local only: a lookup never asks a registry.
    let entry = cache.entry(Bucket::Pypi, sha256, &Sharing::Shared).ok()??.value;
    let mut files = std::fs::read_dir(entry.files()).ok()?.filter_map(|e| e.ok());
    let e = files.next()?;
    let path = e.path();
    if files.next().is_some() || crate::oci::digest::sha256_file(&path).ok()? != sha256 {
        cache.forget_entry(Bucket::Pypi, sha256);
        return None;
    }
    Some(Fetched { file: e.file_name().to_string_lossy().into_owned(), path, sha256: sha256.to_string() })
}

/// Fetch `req` for a lock: pip is asked afresh unless the definition pins it.
pub fn lock_one(cache: &Cache, req: &PypiRequest, def_pin: Option<&str>) -> Result<PypiPin, PypiError> {
    let f = fetch(cache, req, def_pin)?;
    Ok(PypiPin {
        requirement: req.requirement.clone(),
        format: req.format,
        platform: req.platform.clone(),
        python: req.python.clone(),
        file: f.file,
        sha256: f.sha256,
    })
}

/// Where `python -m pip` comes from: `QUARRY_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("QUARRY_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into())
}

/// pip's own command line for a request (for messages and Dockerfiles),
/// downloading into `dir`.
pub fn pip_command_line(req: &PypiRequest, dir: &str) -> String {
    let name = requirement_name(&req.requirement).unwrap_or_default();
    let mut s = format!("pip download --no-deps -d {dir}");
    match req.format {
        PypiFormat::Wheel => {
            s.push_str(" --only-binary :all:");
            if let Some(p) = &req.platform {
                // pip before 23.3 does not imply the older manylinux tags: list them.
                for tag in pip::expand_platform(p).iter().filter(|t| *t == p || !t.starts_with("manylinux_")) {
                    s.push_str(&format!(" --platform {tag}"));
                }
            }
            if let Some(v) = &req.python {
                s.push_str(&format!(" --python-version {v} --implementation cp --abi cp{}", v.replace('.', "")));
            }
        }
        PypiFormat::Sdist => s.push_str(&format!(" --no-binary {name}")),
    }
    format!("{s} '{}'", req.requirement)
}

/// A glob matching the file pip saves for a request (`cmake-3.31.6-*.whl`).
pub fn file_glob(req: &PypiRequest) -> String {
    let name = requirement_name(&req.requirement).unwrap_or_default().replace('-', "_");
    let version =
        req.requirement.split_once("==").map(|(_, v)| v.trim().to_string()).filter(|v| !v.contains([',', '*', ' ']));
    match (req.format, version) {
        (PypiFormat::Wheel, Some(v)) => format!("{name}-{v}-*.whl"),
        (PypiFormat::Wheel, None) => format!("{name}-*.whl"),
        (PypiFormat::Sdist, Some(v)) => format!("{name}-{v}.*"),
        (PypiFormat::Sdist, None) => format!("{name}-*"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms() {
        let arch = |a| crate::definition::Arch::from_oci(a).unwrap();
        assert_eq!(default_platform(arch("amd64")), "manylinux_2_28_x86_64");
        assert_eq!(default_platform(arch("arm64")), "manylinux_2_28_aarch64");
    }
}
