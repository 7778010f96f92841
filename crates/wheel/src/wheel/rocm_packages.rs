//! A directory of ROCm's Python packages (what `quarry rocm package`
//! writes into `DEST/dist`, or the reference's own): the `rocm-<V>.tar.gz`
//! selector sdist, the `rocm_sdk_*` wheels. Read for a framework build on
//! them: the version to pin, and every shared library the runtime wheels
//! provide (each under its SONAME), which a wheel built against them must
//! never bundle: `rocm_sdk` finds and loads them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PackagesDirError {
    #[error("--rocm-packages `{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "--rocm-packages `{0}` holds no `rocm-<version>.tar.gz` (the selector sdist); give the `dist` directory \
         `quarry rocm package --dest-dir DIR` wrote (DIR/dist)"
    )]
    NoSelector(PathBuf),
    #[error("--rocm-packages `{dir}` holds ROCm packages of several versions ({versions}); keep one version in it")]
    Versions { dir: PathBuf, versions: String },
    #[error("--rocm-packages `{dir}`: no `rocm_sdk_core` wheel of version {version}; the packages are incomplete")]
    NoCore { dir: PathBuf, version: String },
    #[error("--rocm-packages: wheel `{path}` cannot be read ({why})")]
    Wheel { path: PathBuf, why: String },
}

/// The packages found in the directory.
#[derive(Debug, Clone)]
pub struct RocmPackages {
    /// The directory holding them (DIR, or DIR/dist).
    pub dir: PathBuf,
    /// Their version (`5.7.dev0`).
    pub version: String,
    /// File names of the packages.
    pub files: Vec<String>,
    /// Every shared library the `rocm_sdk_*` wheels hold (`libamdhip64.so.5`).
    pub libraries: BTreeSet<String>,
}

/// `libfoo.so` or `libfoo.so.1.2`.
fn is_shared_library(name: &str) -> bool {
    name.ends_with(".so") || name.contains(".so.")
}

fn wheel_libraries(path: &Path, into: &mut BTreeSet<String>) -> Result<(), PackagesDirError> {
    let bad = |why: String| PackagesDirError::Wheel { path: path.to_path_buf(), why };
    let names = super::archive::WheelZip::open(path).and_then(|z| z.file_names()).map_err(|e| bad(e.to_string()))?;
    for name in &names {
        let base = name.rsplit('/').next().unwrap_or(name);
        if !name.contains(".dist-info/") && is_shared_library(base) {
            into.insert(base.to_string());
        }
    }
    Ok(())
}

impl RocmPackages {
    /// Read `dir` (or `dir/dist` when `dir` has no selector sdist).
    pub fn read(dir: &Path) -> Result<RocmPackages, PackagesDirError> {
        let list = |d: &Path| -> Result<Vec<String>, PackagesDirError> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .map_err(|source| PackagesDirError::Io { path: d.to_path_buf(), source })?
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            Ok(v)
        };
        let selector = |files: &[String]| -> Vec<String> {
            files
                .iter()
                .filter_map(|f| f.strip_prefix("rocm-").and_then(|r| r.strip_suffix(".tar.gz")).map(str::to_string))
                .collect()
        };
        let mut dir = dir.to_path_buf();
        let mut files = list(&dir)?;
        if selector(&files).is_empty() && dir.join("dist").is_dir() {
            dir = dir.join("dist");
            files = list(&dir)?;
        }
        let versions = selector(&files);
        let version = match versions.as_slice() {
            [] => return Err(PackagesDirError::NoSelector(dir)),
            [v] => v.clone(),
            _ => return Err(PackagesDirError::Versions { dir, versions: versions.join(", ") }),
        };
        let mut libraries = BTreeSet::new();
        let mut core = false;
        for f in files.iter().filter(|f| f.starts_with("rocm_sdk_") && f.ends_with(".whl")) {
            let name = super::name::WheelName::parse(f)
                .map_err(|e| PackagesDirError::Wheel { path: dir.join(f), why: e.to_string() })?;
            if name.version != version {
                return Err(PackagesDirError::Versions { dir, versions: format!("{version}, {}", name.version) });
            }
            core |= name.name == "rocm_sdk_core";
            // The devel package's libraries are links to these; it holds a tar, not libraries.
            if name.name != "rocm_sdk_devel" {
                wheel_libraries(&dir.join(f), &mut libraries)?;
            }
        }
        if !core {
            return Err(PackagesDirError::NoCore { dir, version });
        }
        Ok(RocmPackages { dir, version, files, libraries })
    }

    /// `--exclude` globs for every library the packages provide.
    pub fn exclude_globs(&self) -> Vec<String> {
        self.libraries.iter().map(|l| glob_escape(l)).collect()
    }
}

/// A file name as a glob matching only itself.
fn glob_escape(name: &str) -> String {
    name.chars().map(|c| if "*?[]".contains(c) { format!("[{c}]") } else { c.to_string() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn wheel(path: &Path, members: &[&str]) {
        let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        for m in members {
            z.start_file(*m, zip::write::SimpleFileOptions::default()).unwrap();
            z.write_all(b"x").unwrap();
        }
        z.finish().unwrap();
    }

    #[test]
    fn reads_version_and_libraries() {
        let d = tempfile::tempdir().unwrap();
        let dist = d.path().join("dist");
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::write(dist.join("rocm-5.7.dev0.tar.gz"), b"").unwrap();
        wheel(
            &dist.join("rocm_sdk_core-5.7.dev0-py3-none-linux_x86_64.whl"),
            &["_rocm_sdk_core/lib/libamdhip64.so.5", "_rocm_sdk_core/bin/hipcc", "x.dist-info/RECORD"],
        );
        wheel(&dist.join("rocm_sdk_libraries-5.7.dev0-py3-none-linux_x86_64.whl"), &["_l/lib/librocblas.so.0"]);
        // The parent (quarry's --dest-dir) is taken for its dist directory.
        let p = RocmPackages::read(d.path()).unwrap();
        assert_eq!((p.version.as_str(), p.dir.as_path()), ("5.7.dev0", dist.as_path()));
        assert_eq!(p.libraries.iter().collect::<Vec<_>>(), ["libamdhip64.so.5", "librocblas.so.0"]);
        assert_eq!(glob_escape("lib[x]*.so"), "lib[[]x[]][*].so");

        std::fs::write(dist.join("rocm-5.8.0.tar.gz"), b"").unwrap();
        let e = RocmPackages::read(&dist).unwrap_err().to_string();
        assert!(e.contains("5.7.dev0, 5.8.0"), "{e}");
        let e = RocmPackages::read(&d.path().join("nowhere")).unwrap_err().to_string();
        assert!(e.contains("--rocm-packages") && e.contains("nowhere"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        let e = RocmPackages::read(empty.path()).unwrap_err().to_string();
        assert!(e.contains("rocm-<version>.tar.gz"), "{e}");
    }
}
