//! The package version: `--version` verbatim, else the ROCm version the
//! artifacts record plus `.dev0` (a development version, as the reference
//! defaults to), and where it came from. ROCm records its version in
//! rocm-core's `.info/version` (`7.10.0-1234`; the `base_lib` artifact) and
//! `include/rocm-core/rocm_version.h`; a build without rocm-core (Debian's
//! packages) still has HIP's `include/hip/hip_version.h`, whose major and
//! minor are ROCm's. Last, as the reference: `rocm-version` of a
//! `version.json` at or above the artifact directory.

use super::PackageError;
use crate::rocm_artifacts::Artifacts;
use std::path::{Path, PathBuf};

/// A normalized PEP 440 version, as wheel file names need it.
pub fn valid_version(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit())
        && !v.ends_with(['.', '+'])
        && v.chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, '.' | '+' | '!'))
        && !v.contains("..")
}

/// The version and where it came from (`--version`, or a file).
pub fn resolve(explicit: Option<&str>, artifacts: &Artifacts) -> Result<(String, String), PackageError> {
    let (v, origin) = match explicit {
        Some(v) => (v.to_string(), "--version".to_string()),
        None => {
            let (rocm, path) = recorded(artifacts)
                .or_else(|| version_json(&artifacts.root))
                .ok_or_else(|| PackageError::NoVersion(artifacts.root.display().to_string()))?;
            (format!("{rocm}.dev0"), format!("the ROCm version {rocm} in {}, plus .dev0", path.display()))
        }
    };
    if !valid_version(&v) {
        return Err(PackageError::BadVersion { version: v, origin });
    }
    Ok((v, origin))
}

/// The first file of an artifact that records the ROCm version: every
/// artifact's prefixes are searched for `.info/version`, then
/// `rocm_version.h`, then `hip_version.h`.
fn recorded(artifacts: &Artifacts) -> Option<(String, PathBuf)> {
    type Reader = fn(&str) -> Option<String>;
    let kinds: [(&str, Reader); 3] = [
        (".info/version", info_version),
        ("include/rocm-core/rocm_version.h", |t| header_version(t, "ROCM_VERSION_", true)),
        ("include/hip/hip_version.h", |t| header_version(t, "HIP_VERSION_", false)),
    ];
    for (rel, read) in kinds {
        for a in &artifacts.artifacts {
            for prefix in &a.prefixes {
                let path = prefix.join(rel);
                if let Some(v) = std::fs::read_to_string(&path).ok().as_deref().and_then(read) {
                    return Some((v, path));
                }
            }
        }
    }
    None
}

/// `7.10.0-1234` (rocm-core's `.info/version`) -> `7.10.0`.
fn info_version(text: &str) -> Option<String> {
    let v = text.lines().next()?.trim().split(['-', '~', '+']).next()?.to_string();
    (v.split('.').count() >= 2 && v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
        .then_some(v)
}

/// `#define {prefix}MAJOR 7` ... as `MAJOR.MINOR[.PATCH]` (HIP's patch is a
/// build number, not ROCm's patch level: left out).
fn header_version(text: &str, prefix: &str, with_patch: bool) -> Option<String> {
    let get = |name: &str| {
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(&format!("{prefix}{name}")))
                .then(|| w.next().filter(|v| v.bytes().all(|b| b.is_ascii_digit())).map(str::to_string))
                .flatten()
        })
    };
    let mut parts = vec![get("MAJOR")?, get("MINOR")?];
    if with_patch {
        parts.push(get("PATCH")?);
    }
    Some(parts.join("."))
}

/// `rocm-version` of a `version.json` at or above `dir` (the reference's source).
fn version_json(dir: &Path) -> Option<(String, PathBuf)> {
    let start = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let path = start.ancestors().map(|d| d.join("version.json")).find(|p| p.is_file())?;
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    Some((json.get("rocm-version")?.as_str()?.to_string(), path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifacts(root: &Path, files: &[(&str, &str)]) -> Artifacts {
        for (rel, text) in files {
            let p = root.join("base_lib_generic/base/rocm-core/stage").join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::create_dir_all(root.join("base_lib_generic/base/rocm-core/stage")).unwrap();
        std::fs::write(root.join("base_lib_generic/artifact_manifest.txt"), "base/rocm-core/stage\n").unwrap();
        Artifacts {
            root: root.to_path_buf(),
            artifacts: vec![crate::rocm_artifacts::Artifact {
                name: crate::rocm_artifacts::ArtifactName::parse("base_lib_generic").unwrap(),
                dir: root.join("base_lib_generic"),
                prefixes: vec![root.join("base_lib_generic/base/rocm-core/stage")],
            }],
            therock: serde_json::Value::Null,
        }
    }

    #[test]
    fn versions() {
        for v in ["7.10.0", "7.10.0.dev0", "7.10.0a20260101", "7.10.0rc1", "7.10.0+local.1"] {
            assert!(valid_version(v), "{v}");
        }
        for v in ["", "v7", "7.10-0", "7..1", "7.10.", "7 1", "7.10.0RC1"] {
            assert!(!valid_version(v), "{v}");
        }
    }

    #[test]
    fn the_default_is_what_the_artifacts_record_plus_dev0() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("build/artifacts");
        let none = artifacts(&root, &[]);
        assert!(matches!(resolve(None, &none), Err(PackageError::NoVersion(_))));
        std::fs::write(t.path().join("version.json"), r#"{"rocm-version": "10.1.0"}"#).unwrap();
        let (v, from) = resolve(None, &none).unwrap();
        assert_eq!(v, "10.1.0.dev0");
        assert!(from.contains("version.json"), "{from}");
        let hip = "#define HIP_VERSION_MAJOR 5\n#define HIP_VERSION_MINOR 7\n#define HIP_VERSION_PATCH 31921\n";
        let (v, from) = resolve(None, &artifacts(&root, &[("include/hip/hip_version.h", hip)])).unwrap();
        assert_eq!((v.as_str(), from.contains("hip_version.h")), ("5.7.dev0", true), "{from}");
        let a = artifacts(&root, &[(".info/version", "7.10.0-20260101\n")]);
        let (v, from) = resolve(None, &a).unwrap();
        assert_eq!(v, "7.10.0.dev0");
        assert!(from.contains(".info/version") && from.contains("plus .dev0"), "{from}");
        assert_eq!(resolve(Some("7.10.0"), &a).unwrap(), ("7.10.0".into(), "--version".into()));
    }
}
