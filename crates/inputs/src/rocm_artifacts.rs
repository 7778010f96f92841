//! ROCm build artifact directories: one subdirectory per artifact, named
//! `{name}_{component}_{target}`, each with an `artifact_manifest.txt` that
//! lists build-tree prefixes whose contents overlay into the install tree.

use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "artifact_manifest.txt";
/// Where the build's own description lives, relative to the artifacts dir.
pub const THEROCK_MANIFEST: &str = "base_lib_generic/base/aux-overlay/stage/share/therock/therock_manifest.json";

pub const COMPONENTS: [&str; 6] = ["lib", "run", "dev", "doc", "dbg", "test"];

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("artifact directory `{0}` does not exist or is not a directory")]
    NoDir(String),
    #[error("`{path}`: cannot read: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("artifact `{0}`: the name is not `NAME_COMPONENT_TARGET` (NAME uses hyphens, COMPONENT is one of lib, run, dev, doc, dbg, test); rename it or remove it from the artifact directory")]
    BadName(String),
    #[error("artifact `{artifact}`: no {MANIFEST}; every artifact lists its prefixes there")]
    NoManifest { artifact: String },
    #[error("artifact `{artifact}`: {MANIFEST} names the prefix `{prefix}`, which does not exist under the artifact; the artifact is incomplete")]
    MissingPrefix { artifact: String, prefix: String },
    #[error("artifact `{artifact}`: {MANIFEST} line `{line}` is not a relative path inside the artifact")]
    BadPrefix { artifact: String, line: String },
    #[error("`{0}` is missing: the artifacts do not come from a complete build (base_lib_generic carries it)")]
    NoTherockManifest(String),
    #[error("`{path}`: not valid JSON: {err}")]
    BadJson { path: String, err: String },
}

/// `{name}_{component}_{target}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ArtifactName {
    pub name: String,
    pub component: String,
    pub target: String,
}

impl ArtifactName {
    pub fn parse(dir_name: &str) -> Option<ArtifactName> {
        let mut parts = dir_name.splitn(3, '_');
        let name = parts.next()?;
        let component = parts.next()?;
        let target = parts.next()?;
        let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        let target_ok = !target.is_empty()
            && target.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '_' | ':'));
        if !name_ok || !COMPONENTS.contains(&component) || !target_ok {
            return None;
        }
        Some(ArtifactName { name: name.into(), component: component.into(), target: target.into() })
    }

    pub fn is_generic(&self) -> bool {
        self.target == "generic"
    }
}

#[derive(Debug, Clone)]
pub struct Artifact {
    pub name: ArtifactName,
    pub dir: PathBuf,
    /// Prefix directories (absolute), in manifest order.
    pub prefixes: Vec<PathBuf>,
}

/// Everything read from an artifacts directory.
#[derive(Debug, Clone)]
pub struct Artifacts {
    pub root: PathBuf,
    pub artifacts: Vec<Artifact>,
    /// The parsed therock_manifest.json.
    pub therock: serde_json::Value,
}

impl Artifacts {
    /// `flags.KPACK_SPLIT_ARTIFACTS` (default true, as in current builds).
    pub fn split_flag(&self) -> bool {
        self.therock.get("flags").and_then(|f| f.get("KPACK_SPLIT_ARTIFACTS")).and_then(|v| v.as_bool()).unwrap_or(true)
    }

    /// The targets (gfx names or families) artifacts were built for.
    pub fn targets(&self) -> Vec<String> {
        let mut t: Vec<String> =
            self.artifacts.iter().filter(|a| !a.name.is_generic()).map(|a| a.name.target.clone()).collect();
        t.sort();
        t.dedup();
        t
    }
}

/// Which artifacts to take: components (empty = all) and targets (empty =
/// all; `generic` artifacts are always taken).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub components: Vec<String>,
    pub targets: Vec<String>,
}

impl Selection {
    pub fn takes(&self, n: &ArtifactName) -> bool {
        let comp = self.components.is_empty() || self.components.iter().any(|c| c == &n.component);
        let target = n.is_generic() || self.targets.is_empty() || self.targets.iter().any(|t| t == &n.target);
        comp && target
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArtifactError + '_ {
    move |err| ArtifactError::Io { path: path.display().to_string(), err }
}

/// Read every artifact under `root`, checking names, manifests and prefixes.
pub fn read(root: &Path) -> Result<Artifacts, ArtifactError> {
    if !root.is_dir() {
        return Err(ArtifactError::NoDir(root.display().to_string()));
    }
    let mut artifacts = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(root).map_err(io(root))?.collect::<Result<_, _>>().map_err(io(root))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if !e.file_type().map_err(io(&e.path()))?.is_dir() {
            continue; // stray files (checksums, logs) are not artifacts
        }
        let dir_name = e.file_name().to_string_lossy().into_owned();
        let name = ArtifactName::parse(&dir_name).ok_or_else(|| ArtifactError::BadName(dir_name.clone()))?;
        let manifest = e.path().join(MANIFEST);
        if !manifest.is_file() {
            return Err(ArtifactError::NoManifest { artifact: dir_name });
        }
        let text = std::fs::read_to_string(&manifest).map_err(io(&manifest))?;
        let mut prefixes = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let ok = crate::layer::path::normalize_member(line.as_bytes()).map(|p| !p.is_empty()).unwrap_or(false);
            if !ok {
                return Err(ArtifactError::BadPrefix { artifact: dir_name, line: line.into() });
            }
            let p = e.path().join(line);
            if !p.is_dir() {
                return Err(ArtifactError::MissingPrefix { artifact: dir_name, prefix: line.into() });
            }
            prefixes.push(p);
        }
        artifacts.push(Artifact { name, dir: e.path(), prefixes });
    }
    let tm = root.join(THEROCK_MANIFEST);
    if !tm.is_file() {
        return Err(ArtifactError::NoTherockManifest(tm.display().to_string()));
    }
    let text = std::fs::read_to_string(&tm).map_err(io(&tm))?;
    let therock = serde_json::from_str(&text)
        .map_err(|e| ArtifactError::BadJson { path: tm.display().to_string(), err: e.to_string() })?;
    Ok(Artifacts { root: root.to_path_buf(), artifacts, therock })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = ArtifactName::parse("core-runtime_lib_generic").unwrap();
        assert_eq!((n.name.as_str(), n.component.as_str(), n.target.as_str()), ("core-runtime", "lib", "generic"));
        let n = ArtifactName::parse("blas_lib_gfx94X-dcgpu").unwrap();
        assert_eq!(n.target, "gfx94X-dcgpu");
        assert!(ArtifactName::parse("blas_library_generic").is_none());
        assert!(ArtifactName::parse("noseparators").is_none());
        assert!(ArtifactName::parse("_lib_generic").is_none());
    }
}
