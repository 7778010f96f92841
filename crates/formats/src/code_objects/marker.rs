//! The marker of a device-split host binary (`.rocm_kpack_ref`: the
//! `.kpack` archives its code is in, relative to the binary, with
//! `@GFXARCH@` for the target, and the name of its kernels there) and,
//! for a binary on disk, the archives installed beside it: per
//! architecture, the archive the runtime would open and the size of each
//! wrapper's kernel in it (none where it lacks one).

use super::kpack;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What a marker says, and what is installed for it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KpackRef {
    pub kpack_search_paths: Vec<String>,
    pub kernel_name: String,
    /// `__CudaFatBinaryWrapper`s of the binary: kernel `{kernel_name}#i` each.
    pub wrappers: u64,
    /// Archives found beside the binary (files on disk only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub archives: Vec<ArchiveUse>,
}

/// One installed archive the marker leads to.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ArchiveUse {
    /// The architecture `@GFXARCH@` stands for.
    pub arch: String,
    pub archive: String,
    /// Per wrapper, the kernel's size; None where the archive lacks it.
    pub kernels: Vec<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Deserialize)]
struct Marker {
    kpack_search_paths: Vec<String>,
    kernel_name: String,
}

/// The marker of a parsed host ELF, if it has one.
pub fn read(elf: &object::File) -> Option<Result<KpackRef, String>> {
    use object::{Object, ObjectSection};
    let section = elf.section_by_name(".rocm_kpack_ref")?;
    let wrappers = elf.section_by_name(".hipFatBinSegment").map_or(0, |s| s.size() / 24);
    let parsed = section.data().map_err(|e| e.to_string()).and_then(|d| {
        rmp_serde::from_slice::<Marker>(d).map_err(|e| format!("its .rocm_kpack_ref does not parse: {e}"))
    });
    Some(parsed.map(|m| KpackRef {
        kpack_search_paths: m.kpack_search_paths,
        kernel_name: m.kernel_name,
        wrappers,
        archives: Vec::new(),
    }))
}

/// Put the marker of `elf` (if it has one) in its report.
pub(super) fn attach(r: &mut super::FileReport, elf: Option<&object::File>) {
    match elf.and_then(read) {
        Some(Ok(m)) => r.kpack_ref = Some(m),
        Some(Err(e)) => r.problems.push(e),
        None => {}
    }
}

/// For a binary on disk at `path`: the archives installed beside it.
pub(super) fn resolve_beside(r: &mut super::FileReport, path: &Path) {
    if let (Some(m), Some(dir)) = (r.kpack_ref.as_mut(), path.parent()) {
        resolve(m, dir);
    }
}

/// Fill `r.archives` from the files beside a binary in `dir`.
pub fn resolve(r: &mut KpackRef, dir: &Path) {
    for p in &r.kpack_search_paths {
        let Some((before, after)) = p.split_once("@GFXARCH@") else { continue };
        let pattern = dir.join(format!("{before}X"));
        let (Some(parent), Some(stem)) = (pattern.parent(), pattern.file_name()) else { continue };
        let stem = stem.to_string_lossy();
        let prefix = &stem[..stem.len() - 1];
        let Ok(entries) = std::fs::read_dir(parent) else { continue };
        let mut names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names {
            let Some(arch) = name.strip_prefix(prefix).and_then(|n| n.strip_suffix(after)) else { continue };
            if arch.contains('/') || arch.is_empty() {
                continue;
            }
            let path = parent.join(&name);
            let mut use_ = ArchiveUse {
                arch: arch.to_string(),
                archive: path.display().to_string(),
                kernels: Vec::new(),
                problem: None,
            };
            match read_sizes(&path, &r.kernel_name, arch, r.wrappers) {
                Ok(k) => use_.kernels = k,
                Err(e) => use_.problem = Some(e),
            }
            r.archives.push(use_);
        }
    }
}

fn read_sizes(path: &Path, kernel_name: &str, arch: &str, wrappers: u64) -> Result<Vec<Option<u64>>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // SAFETY: read-only, dropped before this returns.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
    if !kpack::arches(&map).map_err(|e| e.to_string())?.iter().any(|a| a == arch) {
        return Err(format!("its table of contents does not list {arch} (the runtime passes it over)"));
    }
    kpack::kernel_sizes(&map, kernel_name, arch, wrappers).map_err(|e| e.to_string())
}
