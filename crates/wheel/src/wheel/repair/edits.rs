//! How `wheel repair` makes its ELF edits, given as data (one [`ElfEdits`]
//! per wheel member): natively ([`crate::elf::edit`]), each edited file a
//! splice over its source (a bundled library's system file, or the
//! unpacked member) that is streamed into the zip, never copied; a file the
//! native editor refuses goes to quarry's pinned patchelf, fetched at the
//! first such file, on a copy (in the image when repairing against one).
//! A patchelf the user named does every edit, as it always did. Every
//! edited file is verified and checked against what was asked.

use super::super::image::RepairImage;
use super::super::WheelError;
use super::RepairError;
use crate::elf::edit::{edit, EditError, ElfEdits};
use crate::elf::{self, ElfInfo};
use crate::tools::patchelf::{args, pinned, Patchelf, PatchelfError};
use crate::zip::write::ZipEntry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The edits of one wheel member and where its bytes come from.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    /// The file edited: a library on this machine (bundled) or the
    /// unpacked member under the root.
    pub src: PathBuf,
    pub edits: ElfEdits,
    pub executable: bool,
}

/// A file the native editor refused, handed to patchelf.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fallback {
    /// Its path inside the wheel.
    pub file: String,
    pub reason: String,
}

/// Who edits the files.
pub(super) enum Editor<'a> {
    /// The user's patchelf (`--patchelf`, `QUARRY_PATCHELF`), every edit, here.
    User(Patchelf),
    /// Native edits; fallbacks by quarry's pinned patchelf, here (fetched
    /// into `cache`) or in `image` (for the image's `machine`).
    Native { cache: crate::cache::Cache, image: Option<(&'a RepairImage<'a>, String)> },
}

/// What the edits produced.
pub(super) struct Applied {
    /// The natively edited members, as splices (written instead of the
    /// files under the root); members patched by patchelf are files there.
    pub entries: Vec<ZipEntry>,
    /// The verified facts of every edited member.
    pub infos: BTreeMap<String, ElfInfo>,
    pub native_edits: usize,
    pub fallbacks: Vec<Fallback>,
    /// The patchelf that ran, named (None when none did).
    pub patchelf: Option<String>,
}

/// Make every planned edit; `root` is the unpacked wheel.
pub(super) fn apply(
    root: &Path,
    plan: &BTreeMap<String, Planned>,
    editor: &Editor,
    fail: &dyn Fn(RepairError) -> WheelError,
) -> Result<Applied, WheelError> {
    let mut applied =
        Applied { entries: Vec::new(), infos: BTreeMap::new(), native_edits: 0, fallbacks: Vec::new(), patchelf: None };
    let mut pending: Vec<&String> = Vec::new();
    match editor {
        Editor::User(_) => pending.extend(plan.keys()),
        Editor::Native { .. } => {
            for (rel, p) in plan {
                match edit(&p.src, &p.edits) {
                    Ok(done) => {
                        check(rel, &p.edits, &done.info).map_err(fail)?;
                        applied.infos.insert(rel.clone(), done.info);
                        applied.entries.push(ZipEntry::splice(rel.clone(), Arc::new(done.splice), p.executable));
                        applied.native_edits += 1;
                    }
                    Err(EditError::Unsupported { reason, .. }) => {
                        applied.fallbacks.push(Fallback { file: rel.clone(), reason });
                        pending.push(rel);
                    }
                    Err(EditError::Elf(e)) => return Err(e.into()),
                }
            }
        }
    }
    if pending.is_empty() {
        return Ok(applied);
    }
    // patchelf edits files in place: copies under the root.
    for rel in &pending {
        materialize(root, rel, &plan[*rel])?;
    }
    let name = match editor {
        Editor::User(pe) => {
            run_here(root, &pending, plan, pe)?;
            named(pe)
        }
        Editor::Native { cache, image: None } => {
            let arch = pinned::host_arch().ok_or(PatchelfError::UnsupportedHost)?;
            let pe = pinned::fetch(cache, arch)?;
            run_here(root, &pending, plan, &pe)?;
            named(&pe)
        }
        Editor::Native { cache, image: Some((image, machine)) } => {
            let arch = pinned::arch_from_uname(machine).ok_or_else(|| PatchelfError::NoPin {
                arch: format!("`{machine}` (uname -m in image `{}`)", image.image),
            })?;
            let pe = pinned::fetch(cache, arch)?;
            let edits: Vec<(String, Vec<String>)> =
                pending.iter().map(|rel| ((*rel).clone(), args::for_edits(&plan[*rel].edits))).collect();
            image.patch(root, &edits, pe.path())?;
            format!("{}, run in image `{}`", named(&pe), image.image)
        }
    };
    for rel in pending {
        let info = elf::verify(&root.join(rel))
            .map_err(|source| fail(RepairError::Broken { patchelf: name.clone(), source }))?;
        check(rel, &plan[rel].edits, &info).map_err(fail)?;
        applied.infos.insert(rel.clone(), info);
    }
    applied.patchelf = Some(name);
    Ok(applied)
}

fn named(pe: &Patchelf) -> String {
    format!("patchelf {} ({})", pe.version(), pe.origin())
}

fn run_here(root: &Path, files: &[&String], plan: &BTreeMap<String, Planned>, pe: &Patchelf) -> Result<(), WheelError> {
    for rel in files {
        pe.run(&root.join(rel), &args::for_edits(&plan[*rel].edits))?;
    }
    Ok(())
}

/// Put a copy of a bundled library at its place under the root (a member
/// of the wheel is there already).
fn materialize(root: &Path, rel: &str, p: &Planned) -> Result<(), WheelError> {
    let dest = root.join(rel);
    if p.src == dest {
        return Ok(());
    }
    super::paths::copy_library(&p.src, &dest)
}

/// The edited file says what was asked: SONAME, RPATH (and no RUNPATH),
/// no renamed or removed NEEDED left.
fn check(rel: &str, edits: &ElfEdits, info: &ElfInfo) -> Result<(), RepairError> {
    let file = || rel.to_string();
    if let Some(soname) = &edits.set_soname {
        if info.soname.as_deref() != Some(soname.as_str()) {
            return Err(RepairError::Soname { file: file(), found: info.soname.clone(), expected: soname.clone() });
        }
    }
    if let Some(rpath) = &edits.set_rpath {
        if info.rpath.as_deref() != Some(rpath.as_str()) || info.runpath.is_some() {
            return Err(RepairError::Rpath {
                file: file(),
                rpath: info.rpath.clone(),
                runpath: info.runpath.clone(),
                expected: rpath.clone(),
            });
        }
    }
    if edits.remove_rpath && (info.rpath.is_some() || info.runpath.is_some()) {
        let search_path = info.effective_search_path().map(str::to_string);
        return Err(RepairError::SearchPath { file: file(), search_path });
    }
    let gone = edits.replace_needed.iter().map(|(old, _)| old).chain(&edits.remove_needed);
    for old in gone {
        if info.needed.contains(old) {
            return Err(RepairError::StillNeeds { file: file(), needed: old.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(soname: Option<&str>, rpath: Option<&str>, runpath: Option<&str>, needed: &[&str]) -> ElfInfo {
        let mut i = elf::read(Path::new("/proc/self/exe")).unwrap();
        i.soname = soname.map(str::to_string);
        i.rpath = rpath.map(str::to_string);
        i.runpath = runpath.map(str::to_string);
        i.needed = needed.iter().map(|s| s.to_string()).collect();
        i
    }

    #[test]
    fn checks_name_what_is_wrong() {
        let edits = ElfEdits {
            set_soname: Some("libffi-1.so.8".into()),
            set_rpath: Some("$ORIGIN".into()),
            replace_needed: vec![("libffi.so.8".into(), "libffi-1.so.8".into())],
            ..ElfEdits::default()
        };
        let ok = info(Some("libffi-1.so.8"), Some("$ORIGIN"), None, &["libffi-1.so.8"]);
        assert!(check("a.so", &edits, &ok).is_ok());
        let runpath = info(Some("libffi-1.so.8"), Some("$ORIGIN"), Some("$ORIGIN"), &[]);
        assert!(check("a.so", &edits, &runpath).unwrap_err().to_string().contains("RUNPATH"));
        let old = info(Some("libffi-1.so.8"), Some("$ORIGIN"), None, &["libffi.so.8"]);
        assert!(check("a.so", &edits, &old).unwrap_err().to_string().contains("still needs `libffi.so.8`"));
        let soname = info(Some("libffi.so.8"), Some("$ORIGIN"), None, &[]);
        assert!(check("a.so", &edits, &soname).unwrap_err().to_string().contains("SONAME"));
        let removed = ElfEdits { remove_rpath: true, ..ElfEdits::default() };
        assert!(check("a.so", &removed, &info(None, Some("/x"), None, &[]))
            .unwrap_err()
            .to_string()
            .contains("search path"));
    }
}
