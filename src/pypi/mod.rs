//! Files from Python package indexes, fetched with the user's own pip
//! (`python3 -m pip download`, so their index, mirrors, proxies and
//! certificates apply) into a content-addressed download cache
//! (`CACHE/pypi/<sha256>/<file name>`), and pinned by sha256: in the
//! definition (`sha256 = "..."`) and/or in the image's lock file. A pinned
//! file found in the cache is used without running pip (no network).

pub mod install;
mod pip;

use crate::lockfile::PypiPin;
use crate::spec::{PypiFormat, PypiRequest};
use crate::store::cache::{Cache, CacheError};
use std::path::PathBuf;

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
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// The package name of a requirement (`cmake==3.31.6` -> `cmake`), or why it
/// is not one. Only `NAME[extras] SPECIFIERS` is taken (no URLs, no options:
/// the string is handed to pip).
pub fn requirement_name(req: &str) -> Result<String, String> {
    let bad = |why: &str| format!("`{req}` is not a requirement like \"cmake==3.31.6\": {why}");
    let name_end = req.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(req.len());
    let name = &req[..name_end];
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(bad("it must start with a package name"));
    }
    let mut rest = req[name_end..].trim_start();
    if let Some(r) = rest.strip_prefix('[') {
        let close = r.find(']').ok_or_else(|| bad("unclosed `[`"))?;
        if !r[..close].chars().all(|c| c.is_ascii_alphanumeric() || "._-, ".contains(c)) {
            return Err(bad("bad extras"));
        }
        rest = r[close + 1..].trim_start();
    }
    if !rest.is_empty()
        && (!rest.starts_with(['=', '<', '>', '!', '~'])
            || !rest.chars().all(|c| c.is_ascii_alphanumeric() || "=<>!~.,*+ ".contains(c)))
    {
        return Err(bad("only version specifiers (==, >=, ~=, ...) may follow the name"));
    }
    Ok(name.to_string())
}

/// pip's platform tag for wheels on an OCI architecture: manylinux_2_28
/// (pip also takes the older manylinux tags it implies: 2_17, 2014, 1...).
pub fn default_platform(oci_arch: &str) -> String {
    let arch = match oci_arch {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        "386" => "i686",
        other => other,
    };
    format!("manylinux_2_28_{arch}")
}

/// A request with its platform filled in (what a lock entry records).
pub fn resolved(req: &PypiRequest, oci_arch: &str) -> PypiRequest {
    let mut r = req.clone();
    if r.format == PypiFormat::Wheel && r.platform.is_none() {
        r.platform = Some(default_platform(oci_arch));
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
        .map_err(|message| PypiError::Other { requirement: req.requirement.clone(), message })?;
    let tmp = tempfile::Builder::new().prefix("pypi-").tempdir_in(cache.tmp_dir()).map_err(|err| CacheError {
        dir: cache.root().display().to_string(),
        what: "cannot create a download directory".into(),
        err,
    })?;
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
    let sha256 = crate::digest::sha256_file(path).map_err(|e| other(req, format!("cannot read `{file}`: {e}")))?;
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
    // Stored as `pypi/<sha256>/<file>`: renamed into place whole, so a
    // killed build never leaves an entry a later build would trust.
    let entry = cache.named_path("pypi", &sha256);
    if cached(cache, &sha256).is_none() {
        let staged = tmp.path().join("entry");
        std::fs::create_dir(&staged).map_err(|e| other(req, e.to_string()))?;
        std::fs::rename(path, staged.join(&file)).map_err(|e| other(req, e.to_string()))?;
        std::fs::create_dir_all(cache.root().join("pypi")).map_err(|e| other(req, e.to_string()))?;
        let _ = std::fs::remove_dir_all(&entry);
        if let Err(e) = std::fs::rename(&staged, &entry) {
            if cached(cache, &sha256).is_none() {
                return Err(other(req, format!("cannot store `{}`: {e}", entry.display())));
            }
        }
    }
    cached(cache, &sha256).ok_or_else(|| other(req, format!("`{}` vanished from the cache", entry.display())))
}

fn other(req: &PypiRequest, message: String) -> PypiError {
    PypiError::Other { requirement: req.requirement.clone(), message }
}

/// The cached file with this sha256, rehashed (a damaged entry is dropped).
fn cached(cache: &Cache, sha256: &str) -> Option<Fetched> {
    let dir = cache.named_path("pypi", sha256);
    let mut entries = std::fs::read_dir(&dir).ok()?.filter_map(|e| e.ok());
    let e = entries.next()?;
    let path = e.path();
    if entries.next().is_some() || crate::digest::sha256_file(&path).ok()? != sha256 {
        let _ = std::fs::remove_dir_all(&dir);
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

/// Every `pypi` source and input of an image: the request (platform
/// resolved for the image) and the definition's sha256 pin.
pub fn image_requests(image: &crate::spec::Image) -> Vec<(PypiRequest, Option<String>)> {
    let (_, arch, _) = image.platform();
    let mut out: Vec<(PypiRequest, Option<String>)> = Vec::new();
    for layer in &image.layers {
        for s in &layer.sources {
            if let crate::spec::SourceKind::Pypi { request, .. } = &s.kind {
                out.push((resolved(request, &arch), s.sha256.clone()));
            }
        }
        for i in &layer.inputs {
            if let crate::spec::InputKind::Pypi(request) = &i.kind {
                out.push((resolved(request, &arch), i.sha256.clone()));
            }
        }
    }
    out
}

/// `quarry lock`: fetch every PyPI file of the image and pin it.
pub fn lock_image(image: &crate::spec::Image, cache: &Cache) -> Result<Vec<PypiPin>, PypiError> {
    let mut pins: Vec<PypiPin> = Vec::new();
    for (req, def_pin) in image_requests(image) {
        if find_pin(&pins, &req).is_some() {
            continue;
        }
        pins.push(lock_one(cache, &req, def_pin.as_deref())?);
    }
    Ok(pins)
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
    fn requirement_names() {
        assert_eq!(requirement_name("cmake==3.31.6").unwrap(), "cmake");
        assert_eq!(requirement_name("Foo_bar.baz[x,y] >=1,<2").unwrap(), "Foo_bar.baz");
        assert_eq!(requirement_name("ninja").unwrap(), "ninja");
        for bad in ["", "-r x", "--index-url=http://x", "x @ https://y", "x; os_name=='nt'", "==1"] {
            assert!(requirement_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn platforms() {
        assert_eq!(default_platform("amd64"), "manylinux_2_28_x86_64");
        assert_eq!(default_platform("arm64"), "manylinux_2_28_aarch64");
    }
}
