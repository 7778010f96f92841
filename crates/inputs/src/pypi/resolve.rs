//! Sets of wheels for another interpreter: a wheel build's requirements,
//! resolved with the user's pip (`pip download` with dependencies, wheels
//! only, for the target's Python version, ABI and platforms) and stored in
//! the download cache by sha256; or, once pinned, taken from the cache and
//! fetched by sha256 only when missing.

use super::{cached, pip, store, Fetched, PypiError};
use crate::cache::Cache;
use std::path::{Path, PathBuf};

/// The interpreter and platform wheels are chosen for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `3.11`.
    pub python_version: String,
    /// `cp311` (with ABI flags where the interpreter has them).
    pub abi: String,
    /// pip `--platform` tags, most specific first.
    pub platforms: Vec<String>,
}

impl Target {
    /// A glibc Linux target: `manylinux_2_N_ARCH` and every older
    /// manylinux tag it implies, then `linux_ARCH` (wheels built locally,
    /// as a `--find-links` wheelhouse may hold).
    pub fn glibc(python_version: &str, abi: &str, glibc_minor: u32, arch: &str) -> Target {
        let mut platforms = pip::expand_platform(&format!("manylinux_2_{glibc_minor}_{arch}"));
        platforms.push(format!("linux_{arch}"));
        Target { python_version: python_version.to_string(), abi: abi.to_string(), platforms }
    }

    /// pip's options selecting wheels for this target.
    fn pip_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec!["--only-binary".into(), ":all:".into()];
        for p in &self.platforms {
            a.extend(["--platform".into(), p.clone()]);
        }
        a.extend(["--python-version".into(), self.python_version.clone(), "--implementation".into(), "cp".into()]);
        a.extend(["--abi".into(), self.abi.clone()]);
        a
    }
}

/// One wheel of a resolved set.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The distribution name as the file name writes it (`setuptools_scm`).
    pub name: String,
    pub version: String,
    pub fetched: Fetched,
}

/// A pinned wheel: what a lock records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub name: String,
    pub version: String,
    pub file: String,
    pub sha256: String,
}

fn base_args(dest: &Path, find_links: &[PathBuf]) -> Vec<String> {
    let mut a: Vec<String> = ["download", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["--dest".into(), dest.display().to_string()]);
    for f in find_links {
        a.extend(["--find-links".into(), f.display().to_string()]);
    }
    a
}

fn scratch(cache: &Cache) -> Result<tempfile::TempDir, PypiError> {
    Ok(cache.temp_dir("pypi-")?)
}

/// `name` and `version` of a wheel file name.
fn name_version(file: &str) -> Option<(String, String)> {
    let stem = file.strip_suffix(".whl")?;
    let mut parts = stem.split('-');
    Some((parts.next()?.to_string(), parts.next()?.to_string()))
}

/// Resolve `requirements` and their dependencies for `target` with pip
/// (its index and `find_links`), store every wheel in the cache; sorted by
/// file name. `label` names the set in errors.
pub fn resolve(
    cache: &Cache,
    target: &Target,
    requirements: &[String],
    find_links: &[PathBuf],
    label: &str,
) -> Result<Vec<Resolved>, PypiError> {
    let tmp = scratch(cache)?;
    let dl = tmp.path().join("dl");
    let other = |message: String| PypiError::Other { requirement: label.to_string(), message };
    std::fs::create_dir(&dl).map_err(|e| other(format!("cannot create `{}`: {e}", dl.display())))?;
    let mut args = base_args(&dl, find_links);
    args.extend(target.pip_args());
    args.push("--".into());
    args.extend(requirements.iter().cloned());
    pip::run(label, &args, tmp.path(), None)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dl)
        .map_err(|e| other(format!("cannot read `{}`: {e}", dl.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (name, version) =
            name_version(&file).ok_or_else(|| other(format!("pip downloaded `{file}`, which is not a wheel")))?;
        let sha256 = crate::oci::digest::sha256_file(&path).map_err(|e| other(format!("cannot read `{file}`: {e}")))?;
        let fetched = store(cache, &path, &sha256, tmp.path()).map_err(|e| other(e.to_string()))?;
        out.push(Resolved { name, version, fetched });
    }
    Ok(out)
}

/// The pinned wheels, from the cache; those missing are fetched with pip
/// (`name==version --hash=sha256:...`, no dependencies) and checked.
pub fn fetch_pinned(
    cache: &Cache,
    target: &Target,
    pins: &[Pin],
    find_links: &[PathBuf],
    label: &str,
) -> Result<Vec<Fetched>, PypiError> {
    let missing: Vec<&Pin> = pins.iter().filter(|p| cached(cache, &p.sha256).is_none()).collect();
    if !missing.is_empty() {
        let tmp = scratch(cache)?;
        let dl = tmp.path().join("dl");
        let other = |message: String| PypiError::Other { requirement: label.to_string(), message };
        std::fs::create_dir(&dl).map_err(|e| other(format!("cannot create `{}`: {e}", dl.display())))?;
        let reqfile = tmp.path().join("requirements.txt");
        let text: String =
            missing.iter().map(|p| format!("{}=={} --hash=sha256:{}\n", p.name, p.version, p.sha256)).collect();
        std::fs::write(&reqfile, text).map_err(|e| other(e.to_string()))?;
        let mut args = base_args(&dl, find_links);
        args.push("--no-deps".into());
        args.extend(target.pip_args());
        args.extend(["--requirement".into(), reqfile.display().to_string()]);
        pip::run(label, &args, tmp.path(), None)?;
        for e in std::fs::read_dir(&dl).map_err(|e| other(e.to_string()))? {
            let path = e.map_err(|e| other(e.to_string()))?.path();
            let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let sha256 =
                crate::oci::digest::sha256_file(&path).map_err(|e| other(format!("cannot read `{file}`: {e}")))?;
            // pip checked the hashes; a file no pin names is left out.
            if missing.iter().any(|p| p.sha256 == sha256) {
                store(cache, &path, &sha256, tmp.path()).map_err(|e| other(e.to_string()))?;
            }
        }
    }
    pins.iter()
        .map(|p| {
            cached(cache, &p.sha256).ok_or_else(|| PypiError::NotFound {
                requirement: format!("{}=={}", p.name, p.version),
                detail: format!("pip did not download `{}` (sha256 {})", p.file, p.sha256),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_names() {
        let t = Target::glibc("3.11", "cp311", 36, "x86_64");
        assert_eq!(t.platforms[0], "manylinux_2_36_x86_64");
        assert!(t.platforms.contains(&"manylinux2014_x86_64".to_string()));
        assert_eq!(t.platforms.last().unwrap(), "linux_x86_64");
        let a = t.pip_args();
        assert!(a.windows(2).any(|w| w == ["--abi", "cp311"]));
        assert!(a.windows(2).any(|w| w == ["--python-version", "3.11"]));
        assert_eq!(
            name_version("setuptools_scm-8.1.0-py3-none-any.whl"),
            Some(("setuptools_scm".into(), "8.1.0".into()))
        );
        assert_eq!(name_version("x.tar.gz"), None);
    }
}
