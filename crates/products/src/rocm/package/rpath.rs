//! Writing DT_RPATH into copies of ELF files with patchelf (the user's, or
//! quarry's pinned one for files the native editor refuses, see
//! the `edits` module): each (source, RPATH) pair is
//! written once into the scratch directory. A large file is written by its
//! own patchelf run (`--output`: read once, written once, no copy made
//! first); small files are copied, and copies that get the same RPATH are
//! patched by one patchelf run ([`crate::tools::patchelf::batch`]: a process per small
//! file costs more than its edit). Runs go in parallel, and every result is checked with `elf::verify` (a file the
//! loader might reject, or one without exactly that DT_RPATH, stops the
//! packaging).
//!
//! DT_RPATH rather than DT_RUNPATH: it applies to the whole dependency
//! chain and LD_LIBRARY_PATH cannot override it, so a library of
//! `_rocm_sdk_libraries` always finds `_rocm_sdk_core`'s libamdhip64.

use super::PackageError;
use crate::tools::patchelf::Patchelf;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Files of at least this size get a patchelf run of their own.
const LARGE: u64 = 8 << 20;

/// The patched copy of every (source, RPATH) pair asked for.
#[derive(Debug, Default)]
pub struct Patched {
    copies: HashMap<(PathBuf, String), PathBuf>,
}

impl Patched {
    pub fn get(&self, src: &Path, rpath: &str) -> Option<&PathBuf> {
        self.copies.get(&(src.to_path_buf(), rpath.to_string()))
    }
}

/// Copy and patch every job of `jobs` under `scratch`.
pub fn patch_all(patchelf: &Patchelf, jobs: Vec<(PathBuf, String)>, scratch: &Path) -> Result<Patched, PackageError> {
    let dir = scratch.join("patched");
    std::fs::create_dir_all(&dir).map_err(|source| PackageError::Io { path: dir.clone(), source })?;
    let mut unique: Vec<(PathBuf, String)> = jobs;
    unique.sort();
    unique.dedup();
    let copies: Vec<PathBuf> = (0..unique.len()).map(|i| dir.join(format!("{i}"))).collect();
    let large: Vec<bool> =
        unique.iter().map(|(src, _)| std::fs::metadata(src).map(|m| m.len() >= LARGE).unwrap_or(false)).collect();
    let fail_run = |src: &Path, e: crate::tools::patchelf::PatchelfError| match e {
        crate::tools::patchelf::PatchelfError::Failed { stderr, .. } => PackageError::Patch {
            member: String::new(),
            src: src.to_path_buf(),
            why: format!("patchelf {} failed: {stderr}", patchelf.version()),
        },
        other => PackageError::Patchelf(other),
    };
    unique.par_iter().zip(&copies).zip(&large).try_for_each(|(((src, rpath), copy), &large)| {
        if large {
            return crate::tools::patchelf::batch::set_rpath_into(patchelf, rpath, src, copy)
                .map_err(|e| fail_run(src, e));
        }
        std::fs::copy(src, copy).map_err(|source| PackageError::Io { path: src.clone(), source })?;
        // patchelf opens files for writing; sources may be read-only.
        std::fs::set_permissions(copy, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(|source| PackageError::Io { path: copy.clone(), source })
    })?;
    let mut by_rpath: BTreeMap<&str, Vec<PathBuf>> = BTreeMap::new();
    for (((_, rpath), copy), _) in unique.iter().zip(&copies).zip(&large).filter(|(_, &l)| !l) {
        by_rpath.entry(rpath.as_str()).or_default().push(copy.clone());
    }
    let batches: Vec<(&str, &[PathBuf])> = by_rpath
        .iter()
        .flat_map(|(r, files)| files.chunks(crate::tools::patchelf::batch::BATCH).map(move |c| (*r, c)))
        .collect();
    let source_of = |copy: &Path| -> PathBuf {
        copies.iter().position(|c| c == copy).map(|i| unique[i].0.clone()).unwrap_or_else(|| copy.to_path_buf())
    };
    batches.par_iter().try_for_each(|(rpath, files)| {
        crate::tools::patchelf::batch::set_rpath_many(patchelf, rpath, files).map_err(|e| match e {
            crate::tools::patchelf::PatchelfError::Failed { file, stderr, .. } => PackageError::Patch {
                member: String::new(),
                src: source_of(&file),
                why: format!("patchelf {} failed: {stderr}", patchelf.version()),
            },
            other => PackageError::Patchelf(other),
        })
    })?;
    unique.par_iter().zip(&copies).try_for_each(|((src, rpath), copy)| {
        let fail = |why: String| PackageError::Patch { member: String::new(), src: src.clone(), why };
        let info = crate::elf::verify(copy).map_err(|e| {
            fail(format!(
                "{e}; patchelf {} wrote a file the loader may reject, so nothing was packaged \
                 (try another patchelf release and report the input file)",
                patchelf.version()
            ))
        })?;
        check_rpath(src, rpath, &info)
    })?;
    Ok(Patched { copies: unique.into_iter().zip(copies).collect() })
}

/// The RPATH check every edit passes, native or not.
pub fn check_rpath(src: &Path, rpath: &str, info: &crate::elf::ElfInfo) -> Result<(), PackageError> {
    if info.rpath.as_deref() == Some(rpath) && info.runpath.is_none() {
        return Ok(());
    }
    Err(PackageError::RpathNotSet {
        file: src.to_path_buf(),
        expected: rpath.to_string(),
        found: format!(
            "DT_RPATH {:?}, DT_RUNPATH {:?}",
            info.rpath.clone().unwrap_or_default(),
            info.runpath.clone().unwrap_or_default()
        ),
    })
}
