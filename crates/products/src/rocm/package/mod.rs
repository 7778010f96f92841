//! ROCm artifacts -> pip-installable packages (`quarry rocm package`), the
//! same set and payloads ROCm's own packager (`build_python_packages.py`)
//! makes: the `rocm` selector sdist, `rocm-sdk-core`, `rocm-profiler`,
//! `rocm-sdk-libraries` (legacy: one `rocm-sdk-libraries-<family>` per
//! family), one `rocm-sdk-device-<T>` per target in split mode, and
//! `rocm-sdk-devel`.
//!
//! One concern per module: `roles` (which artifact goes where, the
//! reference's tables), `collect` (overlaying artifacts), `classify` (file
//! kinds), `runtime` (SONAME-only libraries, aliases, launchers, RPATH
//! strings), `launcher` (the native launcher), `edits` (native RPATH
//! edits, streamed), `rpath` (batched patchelf for what the native editor
//! refuses + verification), `devel` (the devel tar), `plan` (every package's layout),
//! `wheels` (writing them with `wheel::archive::write_wheel`), `sdist`.

pub mod classify;
pub mod collect;
pub mod devel;
pub mod edits;
pub mod launcher;
pub mod plan;
pub mod provenance;
pub mod roles;
pub mod rpath;
pub mod runtime;
pub mod sdist;
pub mod version;
pub mod wheels;

use crate::elf::ElfError;
use crate::rocm_artifacts::ArtifactError;
use crate::tools::patchelf::PatchelfError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const CORE_DIST: &str = "rocm-sdk-core";
pub const LIBRARIES_DIST: &str = "rocm-sdk-libraries";
pub const DEVICE_DIST: &str = "rocm-sdk-device";
pub const DEVEL_DIST: &str = "rocm-sdk-devel";
pub const PROFILER_DIST: &str = "rocm-profiler";

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error(transparent)]
    Artifacts(#[from] ArtifactError),
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{0}`: the path is not UTF-8; wheels need UTF-8 names (rename it in the artifact)")]
    NonUtf8Path(PathBuf),
    #[error("`{0}` is not a regular file, directory or symlink; artifacts hold only those")]
    SpecialFile(PathBuf),
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error(transparent)]
    Patchelf(#[from] PatchelfError),
    #[error(transparent)]
    Provenance(#[from] crate::provenance::ProvenanceError),
    #[error("`{src}`: {why}")]
    Patch { member: String, src: PathBuf, why: String },
    #[error("`{file}`: after patching, the RPATH is {found}, not DT_RPATH `{expected}`")]
    RpathNotSet { file: PathBuf, expected: String, found: String },
    #[error("cannot build the native launcher with `{cc}`: {why}")]
    Compiler { cc: String, why: String },
    #[error("launcher target `{0}` is too long or holds a NUL byte")]
    LauncherTarget(String),
    #[error("the devel tree: {0}")]
    DevelTree(String),
    #[error("no version: pass --version (for example --version 7.10.0.dev0); the artifacts in `{0}` record none (no rocm-core `.info/version`, `rocm_version.h` or `hip_version.h`) and no version.json with `rocm-version` is at or above it")]
    NoVersion(String),
    #[error("version `{version}` ({origin}) is not a normalized PEP 440 version like 7.10.0, 7.10.0rc1, 7.10.0a20260101 or 7.10.0.dev0")]
    BadVersion { version: String, origin: String },
    #[error("--version-suffix `{0}` may hold only letters, digits and `_` (it ends Python package names)")]
    BadSuffix(String),
    #[error("legacy mode (KPACK_SPLIT_ARTIFACTS false or --split off) needs per-family artifacts (`blas_lib_gfx94X-dcgpu`), and `{0}` has none; use --split on or add them")]
    NoFamilies(String),
    #[error(transparent)]
    Wheel(#[from] crate::wheel::WheelError),
}

/// `--split auto|on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitMode {
    /// `flags.KPACK_SPLIT_ARTIFACTS` of therock_manifest.json (default true).
    #[default]
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub artifact_dir: PathBuf,
    /// Packages go to `<dest_dir>/dist/`.
    pub dest_dir: PathBuf,
    /// Default: the ROCm version the artifacts record, plus `.dev0` (see [`version`]).
    pub version: Option<String>,
    /// Appended to every `_`-package name (`--version-suffix`, default empty).
    pub version_suffix: String,
    pub split: SplitMode,
    /// The cache quarry's own patchelf comes from, when an edit needs it.
    pub cache: crate::cache::Cache,
}

/// One package written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PackageEntry {
    /// The distribution name (`rocm-sdk-core`).
    pub name: String,
    /// selector, core, profiler, libraries, device, devel.
    pub kind: String,
    /// The import package directory its platform files go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub file: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub requires: Vec<String>,
    /// Members of the wheel or sdist, in archive order.
    pub files: Vec<String>,
    /// Paths not shipped (another name of a shared library) -> the SONAME.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub aliases: BTreeMap<String, String>,
    /// Launcher -> the link text it execs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub launchers: BTreeMap<String, String>,
    /// Members given an RPATH -> that DT_RPATH.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rpaths: BTreeMap<String, String>,
    /// Devel only: tar members -> their symlink text.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DroppedEntry {
    pub package: String,
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PackageReport {
    pub version: String,
    /// Where the version came from: `--version`, or the file that records it.
    pub version_from: String,
    pub split: bool,
    pub targets: Vec<String>,
    pub dist_dir: PathBuf,
    /// The patchelf that ran and its version; null when none ran.
    pub patchelf: Option<String>,
    /// `native` (quarry's own ELF edits) or `patchelf` (QUARRY_PATCHELF named one).
    pub elf_editor: String,
    /// ELF files whose RPATH quarry set itself.
    pub native_edits: usize,
    /// Files the native editor refused, each patched by patchelf instead.
    pub patchelf_fallbacks: Vec<edits::Fallback>,
    pub packages: Vec<PackageEntry>,
    /// Symlinks left out of runtime packages (dangling, or to directories).
    pub dropped: Vec<DroppedEntry>,
    /// What was decided where the input lacks something (no profiler...).
    pub notes: Vec<String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackageError + '_ {
    move |source| PackageError::Io { path: path.to_path_buf(), source }
}

/// The platform tag: `$ROCM_SDK_WHEEL_PLATFORM_TAG`, else `linux_x86_64`.
pub fn platform_tag() -> String {
    std::env::var("ROCM_SDK_WHEEL_PLATFORM_TAG").ok().filter(|t| !t.is_empty()).unwrap_or_else(|| "linux_x86_64".into())
}

/// Package the artifacts under `opts.artifact_dir` into `<dest_dir>/dist/`.
pub fn package(opts: &Options) -> Result<PackageReport, PackageError> {
    if !opts.version_suffix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(PackageError::BadSuffix(opts.version_suffix.clone()));
    }
    let artifacts = crate::rocm_artifacts::read(&opts.artifact_dir)?;
    let (version, version_from) = version::resolve(opts.version.as_deref(), &artifacts)?;
    let plan = plan::plan(opts, &version)?;
    let mut report = wheels::write_all(opts, plan)?;
    report.version_from = version_from;
    Ok(report)
}
