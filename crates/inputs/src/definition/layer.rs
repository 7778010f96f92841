//! A validated layer: files, packages or a step, each holding only what
//! applies to it. Which keys go together was settled when the definition
//! was loaded; code downstream matches on kinds and never re-checks.

use super::packages::PackageSet;
use crate::oci::Digest;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use super::raw::RunDef;

/// One layer, named (from `layers/NAME.toml`) or inline (`[[layer]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// The file that defined it (for messages and relative paths).
    pub file: PathBuf,
    /// How the definition names this layer's tables: `""` in a layer file,
    /// `layer[2].` inline in an image (so messages say `layer[2].source[0].dir`).
    pub field_prefix: String,
    pub kind: LayerKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LayerKind {
    /// Content from host files, archives, wheels, ROCm trees, and removals.
    Files(FilesLayer),
    /// Debian/Ubuntu packages installed over the layers below.
    Packages(PackageSet),
    /// A script run in a container of the image built so far.
    Step(StepLayer),
}

#[derive(Debug, Clone, PartialEq)]
pub struct FilesLayer {
    pub sources: Vec<Source>,
    /// Deletions of lower layers' files (whiteouts), after every source.
    pub remove: Vec<String>,
}

/// One `[[source]]` of a files layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub kind: SourceKind,
    /// Where the content lands in the image (`/` when not given; `pypi`: `/usr/local`).
    pub dest: String,
    /// `uid:gid` of everything the source adds (`0:0` when not given).
    pub owner: Option<(u64, u64)>,
    /// Whiteouts applied after this source.
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SourceKind {
    Dir(DirSource),
    File(FileSource),
    Archive(ArchiveSource),
    /// ROCm build artifacts flattened into a dist tree (see `rocm::flatten`).
    RocmArtifacts(RocmSource),
    /// A ROCm dist tree (copied like a `dir`) or an artifacts directory
    /// (flattened like `rocm_artifacts`), whichever the directory holds.
    Rocm(RocmSource),
    /// A wheel fetched with pip and installed under `dest` (see `source::wheel_install`).
    Pypi(PypiSource),
    /// The host set of a wheelhouse, or what one device extra adds to it
    /// (see `source::wheelhouse`), installed like `pypi` wheels.
    Wheels(WheelsSource),
    /// Only whiteouts (`remove`).
    Remove,
}

/// A host directory (symlinks never followed).
#[derive(Debug, Clone, PartialEq)]
pub struct DirSource {
    pub path: PathBuf,
    /// Globs relative to the directory; empty: everything.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Keep device nodes (dropped otherwise).
    pub devices: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FileSource {
    pub path: PathBuf,
    /// Permission bits; the host file's when absent.
    pub mode: Option<u32>,
    pub sha256: Option<Digest>,
}

/// A tar (plain or compressed), zip or wheel, read safely.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveSource {
    pub path: PathBuf,
    pub sha256: Option<Digest>,
    pub strip_components: usize,
    /// Parts of the archive placed elsewhere (unmapped parts dropped when given).
    pub map: BTreeMap<String, String>,
    pub devices: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RocmSource {
    pub dir: PathBuf,
    /// Artifact components to take (`lib`, `run`, ...); empty: all.
    pub components: Vec<String>,
    /// GPU targets besides `generic`; empty: all.
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PypiSource {
    pub request: PypiRequest,
    pub sha256: Option<Digest>,
    /// Where the package files go: relative to `dest`, or absolute.
    pub site_packages: String,
    /// `NAME` -> path inside the wheel, linked as `DEST/bin/NAME`.
    pub bin: BTreeMap<String, String>,
}

/// A wheelhouse source: the directory, and the extra whose wheels it installs.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelsSource {
    pub dir: PathBuf,
    /// `device-gfx942`: the wheels that extra adds; absent: the host set.
    pub extra: Option<String>,
    pub site_packages: String,
    pub bin: BTreeMap<String, String>,
}

/// Which kind of file pip fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PypiFormat {
    Wheel,
    Sdist,
}

impl PypiFormat {
    pub fn as_str(&self) -> &'static str {
        match self {
            PypiFormat::Wheel => "wheel",
            PypiFormat::Sdist => "sdist",
        }
    }
}

/// A file to fetch from the package index with the user's pip.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PypiRequest {
    /// As written: `cmake==3.31.6`.
    pub requirement: String,
    pub format: PypiFormat,
    /// pip's `--platform` for wheels; derived from the image's platform when absent.
    pub platform: Option<String>,
    /// pip's `--python-version` for wheels (`3.12`); pip's own when absent.
    pub python: Option<String>,
}

/// A requirement that is not `NAME[extras] SPECIFIERS`, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{requirement}` is not a requirement like \"cmake==3.31.6\": {why}")]
pub struct RequirementError {
    pub requirement: String,
    pub why: &'static str,
}

/// The package name of a requirement (`cmake==3.31.6` -> `cmake`), or why it
/// is not one. Only `NAME[extras] SPECIFIERS` is taken (no URLs, no options:
/// the string is handed to pip).
pub fn requirement_name(req: &str) -> Result<String, RequirementError> {
    let bad = |why: &'static str| RequirementError { requirement: req.to_string(), why };
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

/// Where a `pypi` source puts package files when `site_packages` is not given.
pub const DEFAULT_SITE_PACKAGES: &str = "lib/python3/site-packages";
/// Where a `pypi` source installs when `dest` is not given.
pub const DEFAULT_PYPI_DEST: &str = "/usr/local";

#[derive(Debug, Clone, PartialEq)]
pub struct StepLayer {
    pub run: RunDef,
    /// Files copied into the container before the script runs.
    pub inputs: Vec<Input>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InputKind {
    File(PathBuf),
    Pypi(PypiRequest),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub kind: InputKind,
    pub sha256: Option<Digest>,
    /// In the container; a trailing `/` keeps the file's own name.
    pub dest: String,
}

impl Layer {
    /// The packages this layer installs, if it is a packages layer.
    pub fn packages(&self) -> Option<&PackageSet> {
        match &self.kind {
            LayerKind::Packages(p) => Some(p),
            _ => None,
        }
    }

    /// Every PyPI file the layer needs, with its definition pin.
    pub fn pypi_requests(&self) -> Vec<(&PypiRequest, Option<&Digest>)> {
        match &self.kind {
            LayerKind::Files(f) => f
                .sources
                .iter()
                .filter_map(|s| match &s.kind {
                    SourceKind::Pypi(p) => Some((&p.request, p.sha256.as_ref())),
                    _ => None,
                })
                .collect(),
            LayerKind::Step(s) => s
                .inputs
                .iter()
                .filter_map(|i| match &i.kind {
                    InputKind::Pypi(r) => Some((r, i.sha256.as_ref())),
                    InputKind::File(_) => None,
                })
                .collect(),
            LayerKind::Packages(_) => Vec::new(),
        }
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
}
