//! Which AMD GPU targets a file has code for, read natively (no ROCm):
//! host ELF files with a `.hip_fatbin` section or an embedded offload
//! bundle, bare code objects (`.co`, `.hsaco`), offload bundles
//! (compressed `CCOB` ones too), `.kpack` archives, wheels (every member)
//! and directories (recursively).
//!
//! Every code object's target is read from its own ELF header (EM_AMDGPU,
//! `e_flags`) and must agree with the bundle entry id or kpack architecture
//! that names it; a disagreement, a truncated or corrupt bundle is reported
//! as a problem of that file, never a panic. `quarry code-objects` prints
//! these reports; `quarry wheel check` takes a wheel's targets from them.

pub mod amdgpu;
pub mod bundle;
pub mod compressed;
pub mod kpack;
pub mod kpack_writer;
pub mod marker;
pub mod packaging_chain;
mod scan;
pub mod target_id;
pub mod target_list;

use serde::Serialize;
use std::path::Path;

pub use scan::{inspect_bytes, inspect_wheel};

/// What one file holds. `file` names it as given (a wheel's members as
/// `WHEEL/MEMBER`, the way Python's zipimport names them).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileReport {
    pub file: String,
    /// The processors with code, sorted and unique (`gfx90a`, `gfx942`).
    pub targets: Vec<String>,
    pub code_objects: Vec<CodeObject>,
    /// What could not be read or does not agree, one sentence each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// A device-split host binary's marker: where its code is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kpack_ref: Option<marker::KpackRef>,
}

/// One code object.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CodeObject {
    /// The processor, from the code object's ELF header (from the bundle id
    /// for LLVM bitcode and SPIR-V entries, which have no such header).
    pub target: String,
    /// Target features as in a target id (`sramecc+`, `xnack-`), sorted;
    /// a feature built for "any" setting is not listed.
    pub features: Vec<String>,
    /// Bytes of code (uncompressed).
    pub size: u64,
    /// `code-object` (the file itself), `offload-bundle`,
    /// `compressed-offload-bundle` or `kpack`.
    pub container: String,
    /// `elf`, `bitcode`, `spirv` or `unknown`.
    pub format: String,
    /// The bundle entry id that names it, when in a bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_id: Option<String>,
    /// `zstd` or `zlib`, when stored compressed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// In a kpack archive: the host binary the kernel belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// The code object version (2 to 6) of ELF code objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_object_version: Option<u8>,
}

/// Why a path could not be inspected at all (problems inside a file are
/// in its report instead).
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("`{path}`: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("`{path}`: not a readable zip/wheel: {message}")]
    Zip { path: String, message: String },
    #[error("`{path}`: walking the directory: {message}")]
    Walk { path: String, message: String },
}

impl InspectError {
    pub(crate) fn io(path: &Path, err: std::io::Error) -> InspectError {
        InspectError::Io { path: path.display().to_string(), err }
    }
}

/// Inspect a file, a wheel or a directory. A file named directly always
/// gets a report (with no targets when it holds no GPU code); in a
/// directory or a wheel only the files that hold GPU code (or problems)
/// are reported, in path order.
pub fn inspect_path(path: &Path) -> Result<Vec<FileReport>, InspectError> {
    scan::inspect_path(path)
}

impl FileReport {
    pub(crate) fn new(file: String) -> FileReport {
        FileReport { file, targets: Vec::new(), code_objects: Vec::new(), problems: Vec::new(), kpack_ref: None }
    }

    /// Sort `targets` out of the code objects.
    pub(crate) fn finish(mut self) -> FileReport {
        let mut t: Vec<String> = self.code_objects.iter().map(|c| c.target.clone()).filter(|t| !t.is_empty()).collect();
        t.sort();
        t.dedup();
        self.targets = t;
        self
    }

    pub(crate) fn is_interesting(&self) -> bool {
        !self.code_objects.is_empty() || !self.problems.is_empty() || self.kpack_ref.is_some()
    }
}

/// The targets of many reports together, sorted and unique (a wheel's
/// `gpu_targets`).
pub fn all_targets(reports: &[FileReport]) -> Vec<String> {
    let mut t: Vec<String> = reports.iter().flat_map(|r| r.targets.iter().cloned()).collect();
    t.sort();
    t.dedup();
    t
}
