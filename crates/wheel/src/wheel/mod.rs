//! Wheels: names, tags and local versions; reading and writing wheels
//! (over the zip engine in `crate::zip`); RECORD; WHEEL/METADATA; the manylinux policies; the native
//! check (what auditwheel's `show` reports) and repair (bundle external
//! libraries, retag, rewrite).
//!
//! Building wheels in containers (`quarry wheel build`) sits on top of this
//! and the engine module; it uses [`local_version::add_local_version`] and
//! [`repair::repair`] as library calls.

pub mod abi3;
pub mod analyze;
pub mod archive;
pub mod build;
pub mod check;
pub mod coverage;
pub mod image;
pub mod ldd;
pub mod local_version;
pub mod merge;
pub mod metadata;
pub mod name;
pub mod normalize;
pub mod policy;
pub mod provides;
pub mod record;
pub mod repair;
pub mod rocm_init;
pub mod rocm_packages;
pub mod rocm_preload;
pub mod source_epoch;
pub mod split;
pub mod unpack;
pub mod version;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WheelError {
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// Reading a wheel's zip (the `zip` crate's reader) failed.
    #[error("wheel `{wheel}`: {why}")]
    Zip { wheel: PathBuf, why: String },
    /// Writing a wheel through the zip engine failed.
    #[error("wheel `{wheel}`: {source}")]
    Write { wheel: PathBuf, source: crate::zip::ZipError },
    #[error("wheel `{wheel}`: {why}")]
    Layout { wheel: PathBuf, why: String },
    #[error("`{name}` is not a wheel file name: {why}")]
    BadName { name: String, why: String },
    #[error("local version `{label}` is not valid: {why} (PEP 440: letters and digits in segments separated by `.`)")]
    BadLocalVersion { label: String, why: String },
    #[error("`{record}` line {line}: {why}")]
    BadRecord { record: String, line: u64, why: String },
    #[error("{file}: {why}")]
    BadMetadata { file: String, why: String },
    #[error("SOURCE_DATE_EPOCH=`{value}` is not a whole number of seconds")]
    BadEpoch { value: String },
    #[error("manylinux policy data: {0}")]
    Policy(String),
    #[error("wheel `{wheel}`: RECORD is wrong:\n  {}", problems.join("\n  "))]
    Record { wheel: PathBuf, problems: Vec<String> },
    #[error("wheel `{wheel}`: {why}")]
    Unsupported { wheel: PathBuf, why: String },
    #[error("cannot repair `{wheel}`: {why}")]
    Repair { wheel: PathBuf, why: String },
    #[error("cannot write the SBOM of `{wheel}`: {source}")]
    Sbom { wheel: PathBuf, source: Box<crate::purl::PurlError> },
    #[error("cannot repair `{wheel}`: {source}")]
    CannotRepair { wheel: PathBuf, source: Box<repair::RepairError> },
    #[error(transparent)]
    Elf(#[from] crate::elf::ElfError),
    #[error(transparent)]
    Patchelf(#[from] crate::tools::patchelf::PatchelfError),
    #[error("image `{image}`: {what}: {source}")]
    Image { image: String, what: String, source: Box<crate::engine::EngineError> },
    #[error("image `{image}` cannot be used: {why}")]
    ImageUnusable { image: String, why: String },
}

impl WheelError {
    /// The exit status for the CLI: 130/143 when a signal stopped a
    /// container step, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            WheelError::Image { source, .. } => source.exit_code(),
            _ => 1,
        }
    }
}
