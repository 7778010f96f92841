//! A project's `[build-system]` (PEP 517/518), read on the host from its
//! directory or straight out of its sdist: the requirements to install
//! before building, the backend and where an in-tree backend lives. A
//! project without `pyproject.toml`, or without the table, gets setuptools'
//! legacy default, as pip gives it.

use crate::layer::stream::{decoder, Checks, Format};
use std::io::Read;
use std::path::Path;

/// Why a project's build system could not be read. `file` names the
/// `pyproject.toml` or the sdist.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    #[error("{file}: not valid TOML: {source}")]
    Toml { file: String, source: Box<toml::de::Error> },
    #[error("{file}: `build-system` must be a table")]
    NotATable { file: String },
    #[error("{file}: `build-system.{key}` must be a list of strings")]
    NotStrings { file: String, key: String },
    #[error("{file}: `[build-system]` has no `requires`; list the build requirements (PEP 518)")]
    NoRequires { file: String },
    #[error("{file}: `build-system.build-backend` must be a string like \"setuptools.build_meta\"")]
    Backend { file: String },
    #[error("{file}: `build-system.backend-path` entry `{path}` must stay inside the project")]
    BackendPath { file: String, path: String },
    #[error("{file}: {source}")]
    Io { file: String, source: std::io::Error },
    #[error("{file}: not a zip archive: {source}")]
    NotAZip { file: String, source: zip::result::ZipError },
    #[error("{file}: {source}")]
    Zip { file: String, source: zip::result::ZipError },
    #[error("{file}: quarry reads sdists as .tar.gz, .tgz, .tar.xz, .tar or .zip; repack it, or build with --no-build-isolation")]
    Format { file: String },
    #[error("{file}: damaged archive: {source}")]
    Damaged { file: String, source: std::io::Error },
    #[error("{file}: {member}: {source}")]
    Member { file: String, member: String, source: std::io::Error },
}

/// What pip assumes when a project says nothing.
pub const LEGACY_REQUIRES: [&str; 2] = ["setuptools>=40.8.0", "wheel"];
pub const LEGACY_BACKEND: &str = "setuptools.build_meta:__legacy__";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildSystem {
    /// `requires`, as written.
    pub requires: Vec<String>,
    /// `module:object` (`setuptools.build_meta`).
    pub backend: String,
    /// `backend-path`: directories of the project put first on sys.path.
    pub backend_path: Vec<String>,
}

impl BuildSystem {
    pub fn legacy() -> BuildSystem {
        BuildSystem {
            requires: LEGACY_REQUIRES.iter().map(|s| s.to_string()).collect(),
            backend: LEGACY_BACKEND.into(),
            backend_path: Vec::new(),
        }
    }
}

/// Parse `pyproject.toml`'s text; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<BuildSystem, SystemError> {
    let file = || source.to_string();
    let doc: toml::Table = toml::from_str(text).map_err(|e| SystemError::Toml { file: file(), source: Box::new(e) })?;
    let Some(bs) = doc.get("build-system") else { return Ok(BuildSystem::legacy()) };
    let bs = bs.as_table().ok_or_else(|| SystemError::NotATable { file: file() })?;
    let strings = |key: &str| -> Result<Option<Vec<String>>, SystemError> {
        let Some(v) = bs.get(key) else { return Ok(None) };
        let bad = || SystemError::NotStrings { file: file(), key: key.to_string() };
        v.as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|x| x.as_str().map(|s| s.trim().to_string()).ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    };
    // PEP 518: a table without `requires` is an error, as pip says.
    let requires = strings("requires")?.ok_or_else(|| SystemError::NoRequires { file: file() })?;
    let backend = match bs.get("build-backend") {
        None => LEGACY_BACKEND.to_string(),
        Some(v) => v
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| SystemError::Backend { file: file() })?
            .trim()
            .to_string(),
    };
    let backend_path = strings("backend-path")?.unwrap_or_default();
    for p in &backend_path {
        if p.starts_with('/') || p.split('/').any(|c| c == "..") {
            return Err(SystemError::BackendPath { file: file(), path: p.clone() });
        }
    }
    Ok(BuildSystem { requires, backend, backend_path })
}

/// The build system of a project directory.
pub fn of_dir(dir: &Path) -> Result<BuildSystem, SystemError> {
    let p = dir.join("pyproject.toml");
    match std::fs::read_to_string(&p) {
        Ok(text) => parse(&text, &p.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BuildSystem::legacy()),
        Err(e) => Err(SystemError::Io { file: p.display().to_string(), source: e }),
    }
}

/// The build system of an sdist (`.tar.gz`, `.tgz`, `.tar`, `.tar.xz`,
/// `.zip`): its `TOP/pyproject.toml`, TOP being the one top-level directory.
pub fn of_sdist(sdist: &Path) -> Result<BuildSystem, SystemError> {
    let shown = sdist.display().to_string();
    let name = sdist.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let io = |source: std::io::Error| SystemError::Io { file: shown.clone(), source };
    let text = if name.ends_with(".zip") {
        let mut z = zip::ZipArchive::new(std::fs::File::open(sdist).map_err(io)?)
            .map_err(|source| SystemError::NotAZip { file: shown.clone(), source })?;
        let member = (0..z.len())
            .filter_map(|i| z.name_for_index(i)?.ok().map(|n| n.to_string()))
            .find(|n: &String| is_top_pyproject(n));
        match member {
            None => None,
            Some(m) => {
                let mut s = String::new();
                z.by_name(&m)
                    .map_err(|source| SystemError::Zip { file: shown.clone(), source })?
                    .read_to_string(&mut s)
                    .map_err(io)?;
                Some(s)
            }
        }
    } else {
        let f = std::io::BufReader::new(std::fs::File::open(sdist).map_err(io)?);
        let is_tar = [".tar.gz", ".tgz", ".tar.xz", ".tar"].iter().any(|e| name.ends_with(e));
        let reader = match Format::of_name(&name) {
            Some(format) if is_tar => decoder(format, f, Checks::Verify).map_err(io)?,
            _ => return Err(SystemError::Format { file: shown }),
        };
        let mut a = tar::Archive::new(reader);
        let mut found = None;
        for e in a.entries().map_err(io)? {
            let mut e = e.map_err(|source| SystemError::Damaged { file: shown.clone(), source })?;
            let path = e.path().map_err(io)?.to_string_lossy().into_owned();
            if is_top_pyproject(&path) {
                let mut s = String::new();
                e.read_to_string(&mut s).map_err(|source| SystemError::Member {
                    file: shown.clone(),
                    member: path.clone(),
                    source,
                })?;
                found = Some(s);
                break;
            }
        }
        found
    };
    match text {
        Some(t) => parse(&t, &format!("{shown}: pyproject.toml")),
        None => Ok(BuildSystem::legacy()),
    }
}

/// `TOP/pyproject.toml` (also `./TOP/pyproject.toml`).
fn is_top_pyproject(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_start_matches("./").split('/').collect();
    parts.len() == 2 && parts[1] == "pyproject.toml"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_defaults() {
        let b = parse(
            "[build-system]\nrequires = [\"expandvars\", \"setuptools >= 47\"]\nbackend-path = [\"packaging\"]\nbuild-backend = \"pep517_backend.hooks\"\n",
            "p",
        )
        .unwrap();
        assert_eq!(b.requires, ["expandvars", "setuptools >= 47"]);
        assert_eq!(b.backend, "pep517_backend.hooks");
        assert_eq!(b.backend_path, ["packaging"]);
        assert_eq!(parse("[project]\nname = \"x\"\n", "p").unwrap(), BuildSystem::legacy());
        let no_backend = parse("[build-system]\nrequires = [\"setuptools\"]\n", "p").unwrap();
        assert_eq!(no_backend.backend, LEGACY_BACKEND);
        for (bad, word) in [
            ("[build-system]\nbuild-backend = \"x\"\n", "no `requires`"),
            ("[build-system]\nrequires = \"setuptools\"\n", "build-system.requires"),
            ("[build-system]\nrequires = []\nbackend-path = [\"../x\"]\n", "backend-path"),
            ("[build-system\n", "not valid TOML"),
        ] {
            let e = parse(bad, "proj/pyproject.toml").unwrap_err().to_string();
            assert!(e.contains(word) && e.contains("proj/pyproject.toml"), "{e}");
        }
    }

    #[test]
    fn read_from_sdists_and_dirs() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("demo-1.0");
        std::fs::create_dir_all(&top).unwrap();
        assert_eq!(of_dir(&top).unwrap(), BuildSystem::legacy());
        std::fs::write(
            top.join("pyproject.toml"),
            "[build-system]\nrequires = [\"hatchling\"]\nbuild-backend = \"hatchling.build\"\n",
        )
        .unwrap();
        std::fs::create_dir_all(top.join("sub")).unwrap();
        std::fs::write(top.join("sub/pyproject.toml"), "[build-system]\nrequires = [\"wrong\"]\n").unwrap();
        assert_eq!(of_dir(&top).unwrap().requires, ["hatchling"]);
        let sdist = d.path().join("demo-1.0.tar.gz");
        let st = std::process::Command::new("tar")
            .arg("czf")
            .arg(&sdist)
            .arg("-C")
            .arg(d.path())
            .args(["demo-1.0/sub", "demo-1.0/pyproject.toml"])
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(of_sdist(&sdist).unwrap().backend, "hatchling.build");
        let e = of_sdist(&d.path().join("demo-1.0.tar.bz2")).unwrap_err().to_string();
        assert!(e.contains("demo-1.0.tar.bz2"), "{e}");
    }
}
