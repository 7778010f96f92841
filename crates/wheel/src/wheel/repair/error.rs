//! Why a repair cannot go on: what follows "cannot repair `WHEEL`" (see
//! `WheelError::CannotRepair`).

use crate::elf::ElfError;

#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("--plat `{plat}` names no manylinux policy for {arch}; known: {known}")]
    UnknownPlat { plat: String, arch: String, known: String },
    #[error("cannot reach `{policy}`: {why}; the highest reachable policy is {reachable}")]
    Unreachable { policy: String, why: &'static str, reachable: String },
    #[error("`{file}` has SONAME {found:?} after patching, not `{expected}`")]
    Soname { file: String, found: Option<String>, expected: String },
    #[error("`{file}` has RPATH {rpath:?} and RUNPATH {runpath:?} after patching, not RPATH `{expected}` alone")]
    Rpath { file: String, rpath: Option<String>, runpath: Option<String>, expected: String },
    #[error("`{file}` still has a search path after patching: {search_path:?}")]
    SearchPath { file: String, search_path: Option<String> },
    #[error("`{file}` still needs `{needed}` after patching")]
    StillNeeds { file: String, needed: String },
    #[error("{patchelf} produced a broken file: {source}")]
    Broken { patchelf: String, source: ElfError },
}
