//! An install set as pip would resolve it, without installing it: `pip
//! download` of the requirements (extras included) and everything they
//! pull, wheels only, for this machine's interpreter, from a directory of
//! wheels (offline: `--no-index --find-links DIR`) or a PEP 503 index
//! (`--index-url URL`). pip is the resolver, so what is checked is what
//! `pip install` would install.

use super::{pip, PypiError};
use std::path::{Path, PathBuf};

/// Where the set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Index {
    /// A wheelhouse directory (`--find-links`), read offline.
    Dir(PathBuf),
    /// A PEP 503 simple index.
    Url(String),
}

impl Index {
    /// A URL when it has a scheme (`https://`, `file://`), else a directory.
    pub fn parse(s: &str) -> Index {
        if s.contains("://") {
            Index::Url(s.to_string())
        } else {
            Index::Dir(PathBuf::from(s))
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Index::Dir(d) => vec!["--no-index".into(), "--find-links".into(), d.display().to_string()],
            Index::Url(u) => vec!["--index-url".into(), u.clone()],
        }
    }
}

/// The wheels `pip install REQUIREMENTS` would take from `index`, downloaded into `dest`.
pub fn download(index: &Index, requirements: &[String], dest: &Path) -> Result<Vec<PathBuf>, PypiError> {
    let label = requirements.join(" ");
    let other = |message: String| PypiError::Other { requirement: label.clone(), message };
    if let Index::Dir(d) = index {
        if !d.is_dir() {
            return Err(other(format!("--index `{}` is not a directory (a wheelhouse) nor a URL", d.display())));
        }
    }
    std::fs::create_dir_all(dest).map_err(|e| other(format!("cannot create `{}`: {e}", dest.display())))?;
    let mut args: Vec<String> = ["download", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--only-binary".into(), ":all:".into(), "--dest".into(), dest.display().to_string()]);
    args.extend(index.args());
    args.push("--".into());
    args.extend(requirements.iter().cloned());
    pip::run(&label, &args, dest, None)?;
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dest)
        .map_err(|e| other(format!("cannot read `{}`: {e}", dest.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    wheels.sort();
    Ok(wheels)
}
