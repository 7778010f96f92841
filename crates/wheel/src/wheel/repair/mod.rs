//! `quarry wheel repair`: bundle the external libraries a wheel needs into
//! `<pkg>.libs/` under hashed names, point the wheel's ELF files at them
//! (SONAME, NEEDED, a forced `$ORIGIN` RPATH: edits planned as data and made
//! natively, see [`edits`]), verify every edited file, retag, describe the
//! bundled libraries in a CycloneDX SBOM (`.dist-info/sboms/quarry.cdx.json`), regenerate RECORD and write the
//! zip deterministically. Nothing is written to the output unless every
//! step succeeded.

mod edits;
mod error;
mod paths;
pub mod sbom;
mod tags;

pub use edits::Fallback;
use edits::{Editor, Planned};
pub use error::RepairError;
use paths::{library_name, relative_path, rpath_within};

use super::analyze::{self, Options};
use super::archive;
use super::check::arch_from_name;
use super::image::RepairImage;
use super::ldd::{is_libpython, SystemPaths};
use super::metadata;
use super::unpack::unpack;
use super::WheelError;
use crate::elf::edit::ElfEdits;
use crate::elf::{self};
use crate::tools::patchelf::{ContainerPatchelf, Patchelf};
use crate::zip::inflate_index::StreamIndex;
use crate::zip::reuse::Original;
use crate::zip::write::{EntrySource, ZipEntry};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the external libraries come from and who edits the files.
pub enum RepairIn<'e> {
    /// This machine's libraries. The files are edited by the user's
    /// patchelf when they named one, else natively, with quarry's pinned
    /// patchelf (fetched into `cache` when first needed) for the files
    /// the native editor refuses.
    Host { patchelf: Option<Patchelf>, cache: crate::cache::Cache },
    /// The libraries of an image (the one the wheel was built in), as its
    /// loader finds them; the files are edited by the user's patchelf here,
    /// or natively here, with quarry's own patchelf copied into the image
    /// for the files the native editor refuses (the image needs none).
    Image { image: RepairImage<'e>, patchelf: ContainerPatchelf },
}

/// How to repair.
pub struct RepairOptions<'e> {
    /// Globs of sonames (or resolved paths) never bundled; the libraries
    /// only an excluded one needs are not bundled either.
    pub exclude: Vec<String>,
    /// Target policy (`manylinux_2_28_x86_64`, `manylinux_2_28`, an alias);
    /// None or `auto` picks the highest reachable one.
    pub plat: Option<String>,
    /// Tag the wheel with the requested policy only, not also a higher one
    /// it satisfies.
    pub only_plat: bool,
    /// Strip symbols (`.symtab`, debug sections) from the bundled libraries
    /// and the wheel's ELF files.
    pub strip: bool,
    /// Rewrite the file name's and WHEEL's platform tags (false:
    /// `--no-update-tags`, the wheel keeps its name).
    pub update_tags: bool,
    pub within: RepairIn<'e>,
}

impl<'e> RepairOptions<'e> {
    /// auditwheel's defaults: `--plat auto`, tags updated, nothing stripped.
    pub fn new(within: RepairIn<'e>) -> RepairOptions<'e> {
        RepairOptions { exclude: Vec::new(), plat: None, only_plat: false, strip: false, update_tags: true, within }
    }
}

/// A library copied into the wheel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bundled {
    pub soname: String,
    /// Where it came from (a path in the image when repairing with one).
    pub source: PathBuf,
    /// Its path inside the repaired wheel.
    pub path: String,
    /// sha256 of the file as the repaired wheel holds it.
    pub sha256: String,
    /// The system package that installed it, when the package manager
    /// says (`libffi8` 3.4.4-1).
    pub package: Option<super::provides::Package>,
}

/// What a repair did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    pub input: PathBuf,
    pub output: PathBuf,
    /// The policy of the repaired wheel (`manylinux_2_17_x86_64`).
    pub policy: String,
    pub platform_tags: Vec<String>,
    pub bundled: Vec<Bundled>,
    pub excluded_libs: Vec<String>,
    /// The image the libraries were taken from, if any.
    pub image: Option<String>,
    /// Who edited the files: `native` (quarry, with patchelf for the files it
    /// refuses) or `patchelf` (the one the user named, for every file).
    pub elf_editor: &'static str,
    /// Files edited natively.
    pub native_edits: usize,
    /// Files the native editor refused, edited by quarry's pinned patchelf.
    pub patchelf_fallbacks: Vec<Fallback>,
    /// The patchelf that ran (`patchelf 0.19.3 (quarry's own ...)`); None
    /// when none did.
    pub patchelf: Option<String>,
    /// The SBOM's path inside the wheel, when libraries were bundled.
    pub sbom: Option<String>,
    pub stripped: bool,
    /// Edited members that kept the unchanged stretch of their original
    /// deflate stream: compressed bytes copied, by member.
    pub copied_from_input: BTreeMap<String, u64>,
}

/// Repair `wheel` into `out_dir`. A failed repair leaves nothing: not even
/// `out_dir`, when this made it.
pub fn repair(wheel: &Path, out_dir: &Path, options: &RepairOptions) -> Result<RepairReport, WheelError> {
    let made = !out_dir.exists();
    let r = repair_into(wheel, out_dir, options);
    if r.is_err() && made {
        // Removes only an empty directory: the scratch inside is gone by now.
        let _ = std::fs::remove_dir(out_dir);
    }
    r
}

fn repair_into(wheel: &Path, out_dir: &Path, options: &RepairOptions) -> Result<RepairReport, WheelError> {
    let fail = |why: String| WheelError::Repair { wheel: wheel.to_path_buf(), why };
    let refuse =
        |source: RepairError| WheelError::CannotRepair { wheel: wheel.to_path_buf(), source: Box::new(source) };
    let mut u = unpack(wheel, out_dir, "repair")?;
    let (name, dist_info) = (&u.name, &u.dist_info);
    let elf_files: Vec<String> =
        u.scan.extracted.iter().filter(|f| !f.ends_with(".py") && elf::is_elf(&u.root.join(f))).cloned().collect();
    if elf_files.is_empty() {
        return Err(fail("it holds no ELF file: a pure wheel needs no repair".into()));
    }

    // Where libraries are looked up, and who edits the files.
    let mut image_packages = None;
    let (system_paths, editor, image_name) = match &options.within {
        RepairIn::Host { patchelf: Some(pe), .. } => (SystemPaths::from_host(), Editor::User(pe.clone()), None),
        RepairIn::Host { patchelf: None, cache } => {
            (SystemPaths::from_host(), Editor::Native { cache: cache.clone(), image: None }, None)
        }
        RepairIn::Image { image, patchelf } => {
            let mut found = image.libraries(&u.root, &elf_files, &u.work.path().join("image"))?;
            image_packages = Some(std::mem::take(&mut found.packages));
            let editor = match patchelf {
                ContainerPatchelf::Host(pe) => Editor::User(pe.clone()),
                ContainerPatchelf::Pinned { cache } => {
                    Editor::Native { cache: cache.clone(), image: Some((image, found.machine.clone())) }
                }
            };
            (found.system_paths, editor, Some(image.image.clone()))
        }
    };
    let not_found = |rel: &str, soname: &str| match &image_name {
        None => format!(
            "`{rel}` needs `{soname}`, which was not found on this machine; install it, \
             add its directory to LD_LIBRARY_PATH, or leave it out with --exclude '{soname}'"
        ),
        Some(image) => format!(
            "`{rel}` needs `{soname}`, which the loader of image `{image}` does not find; install it in the \
             image (or set LD_LIBRARY_PATH in its environment), or leave it out with --exclude '{soname}'"
        ),
    };

    let analyze_options = Options { exclude: options.exclude.clone(), system_paths: Some(system_paths.clone()) };
    let analysis = analyze::analyze(wheel, &u.root, &elf_files, arch_from_name(name), &analyze_options)?;
    let root = u.root.canonicalize().map_err(|source| WheelError::Io { path: u.root.clone(), source })?;
    let abis = tags::choose_tags(&analysis, options.plat.as_deref(), options.only_plat).map_err(refuse)?;
    let target = analysis.policies.find(&abis[0]).expect("chosen from the policies");

    // Bundle and rename the libraries, and plan every file's edits: they
    // depend only on the files as they are now.
    let libs_dir = format!("{}.libs", name.name);
    let mut soname_map: BTreeMap<String, (String, String)> = BTreeMap::new(); // old soname -> (new soname, path)
    let mut bundled = Vec::new();
    let mut plan: BTreeMap<String, Planned> = BTreeMap::new();
    let member = |rel: &str| -> Result<Planned, WheelError> {
        use std::os::unix::fs::PermissionsExt;
        let src = root.join(rel);
        let meta = std::fs::metadata(&src).map_err(|source| WheelError::Io { path: src.clone(), source })?;
        Ok(Planned { src, edits: ElfEdits::default(), executable: meta.permissions().mode() & 0o111 != 0 })
    };
    for (rel, refs) in &analysis.external_refs_by_file {
        let libs = &refs[target].libs;
        let file = root.join(rel);
        let mut replacements = Vec::new();
        let mut remove = Vec::new();
        for (soname, src) in libs {
            if is_libpython(soname) {
                remove.push(soname.clone());
                continue;
            }
            let Some(src) = src else {
                return Err(fail(not_found(rel, soname)));
            };
            let new_soname = match soname_map.get(soname) {
                Some((new_soname, _)) => new_soname.clone(),
                None => {
                    let (new_soname, new_rel) = library_name(src, &libs_dir)?;
                    if !plan.contains_key(&new_rel) {
                        let in_wheel = root.join(&new_rel);
                        let lib = if in_wheel.exists() {
                            member(&new_rel)?
                        } else {
                            bundled.push(Bundled {
                                soname: soname.clone(),
                                source: system_paths.display_path(src),
                                path: new_rel.clone(),
                                sha256: String::new(),
                                package: None,
                            });
                            let edits = ElfEdits { set_soname: Some(new_soname.clone()), ..ElfEdits::default() };
                            Planned { src: src.clone(), edits, executable: true }
                        };
                        plan.insert(new_rel.clone(), lib);
                    }
                    soname_map.insert(soname.clone(), (new_soname.clone(), new_rel));
                    new_soname
                }
            };
            replacements.push((soname.clone(), new_soname));
        }
        if libs.is_empty() && remove.is_empty() {
            continue;
        }
        let mut edits = ElfEdits { remove_needed: remove, replace_needed: replacements, ..ElfEdits::default() };
        if !libs.is_empty() {
            let parts: Vec<&str> = rel.split('/').collect();
            if parts.len() == 3 && parts[0].ends_with(".data") && parts[1] == "scripts" {
                return Err(fail(format!(
                    "`{rel}` is an executable in the scripts directory that needs bundled libraries; quarry does not support that yet"
                )));
            }
            let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
            let new_rpath = format!("$ORIGIN/{}", relative_path(parent, Path::new(&libs_dir)));
            // Removing or renaming NEEDED entries leaves the search path as it is.
            let info = elf::read(&file)?;
            let mut rpaths: Vec<String> = info
                .effective_search_path()
                .unwrap_or("")
                .split(':')
                .filter(|r| !r.is_empty() && rpath_within(r, &file, &root))
                .map(str::to_string)
                .collect();
            rpaths.push(new_rpath);
            let mut unique: Vec<String> = Vec::new();
            for r in rpaths {
                if !unique.contains(&r) {
                    unique.push(r);
                }
            }
            edits.set_rpath = Some(unique.join(":"));
        }
        let p = match plan.remove(rel) {
            Some(p) => p,
            None => member(rel)?,
        };
        let merged = ElfEdits { set_soname: p.edits.set_soname.clone(), ..edits };
        plan.insert(rel.clone(), Planned { edits: merged, ..p });
    }
    // Bundled libraries may need each other: rename those references too.
    for (_, rel) in soname_map.values() {
        let p = plan.get_mut(rel).expect("planned when bundled");
        let info = elf::read(&p.src)?;
        let replacements: Vec<(String, String)> =
            info.needed.iter().filter_map(|n| soname_map.get(n).map(|(new, _)| (n.clone(), new.clone()))).collect();
        if replacements.is_empty() {
            p.edits.remove_rpath = true;
        } else {
            p.edits.set_rpath = Some("$ORIGIN".into());
            p.edits.replace_needed = replacements;
        }
    }
    // Stripped before the edits, as auditwheel does: a stripped library is
    // a copy under the root (the edits then splice over that copy).
    if options.strip {
        let mut files: Vec<&String> = elf_files.iter().chain(soname_map.values().map(|(_, rel)| rel)).collect();
        files.sort();
        files.dedup();
        for rel in files {
            let dest = root.join(rel);
            if let Some(p) = plan.get_mut(rel.as_str()) {
                if p.src != dest {
                    paths::copy_library(&p.src, &dest)?;
                    p.src = dest.clone();
                }
            }
            elf::strip::strip_file(&dest)?;
        }
    }
    let applied = edits::apply(&root, &plan, &editor, &refuse)?;

    // Retag the file name and WHEEL (unless --no-update-tags).
    let new_name = if options.update_tags {
        let remove = metadata::replaced_platforms(&abis[0]);
        let wheel_file = root.join(dist_info).join("WHEEL");
        let text = std::fs::read_to_string(&wheel_file)
            .map_err(|source| WheelError::Io { path: wheel_file.clone(), source })?;
        let text =
            metadata::retag_wheel_file(&text, &abis, &remove).map_err(|e| fail(format!("{dist_info}/WHEEL: {e}")))?;
        std::fs::write(&wheel_file, text).map_err(|source| WheelError::Io { path: wheel_file.clone(), source })?;
        metadata::retag_name(name, &abis, &remove)
    } else {
        name.clone()
    };

    // The SBOM describes the files as the wheel holds them (patched).
    bundled.sort_by(|a, b| a.path.cmp(&b.path));
    let packages = match image_packages {
        Some(p) => p,
        None => super::provides::on_host(bundled.iter().map(|b| b.source.clone()).collect()),
    };
    for b in &mut bundled {
        let file = root.join(&b.path);
        let io = |source| WheelError::Io { path: file.clone(), source };
        b.sha256 = match applied.entries.iter().find(|e| e.name == b.path).map(|e| &e.source) {
            Some(EntrySource::Splice(s)) => crate::oci::digest::sha256_reader(s.reader()).map_err(io)?.0.hex(),
            _ => crate::oci::digest::sha256_file(&file).map_err(io)?,
        };
        b.package = packages.get(&b.source).cloned();
    }
    let sbom = if bundled.is_empty() {
        None
    } else {
        let rel = format!("{dist_info}/sboms/quarry.cdx.json");
        let doc = sbom::document(&new_name, &bundled)
            .map_err(|e| WheelError::Sbom { wheel: wheel.to_path_buf(), source: Box::new(e) })?;
        let path = root.join(&rel);
        std::fs::create_dir_all(path.parent().expect("in sboms/"))
            .map_err(|source| WheelError::Io { path: path.clone(), source })?;
        std::fs::write(&path, doc).map_err(|source| WheelError::Io { path: path.clone(), source })?;
        Some(rel)
    };

    let output = out_dir.join(new_name.to_string());
    let elf_editor = if matches!(editor, Editor::User(_)) { "patchelf" } else { "native" };
    let entries = reuse_original_streams(applied.entries, &root, &mut u.scan.streams);
    let copied_from_input = archive::pack_dir_with(&root, dist_info, &output, u.zip_time()?, entries)?;
    Ok(RepairReport {
        input: wheel.to_path_buf(),
        output,
        policy: abis[0].clone(),
        platform_tags: new_name.platform_tags.clone(),
        bundled,
        excluded_libs: analysis.excluded.iter().cloned().collect(),
        image: image_name,
        elf_editor,
        native_edits: applied.native_edits,
        patchelf_fallbacks: applied.fallbacks,
        patchelf: applied.patchelf,
        sbom,
        stripped: options.strip,
        copied_from_input,
    })
}

/// Members extracted with a block index keep what they can of their
/// original stream (see [`crate::zip::reuse`]): the edited ones around their
/// edits, the others (as extracted) almost whole.
fn reuse_original_streams(
    entries: Vec<ZipEntry>,
    root: &Path,
    streams: &mut BTreeMap<String, StreamIndex>,
) -> Vec<ZipEntry> {
    let mut out: Vec<ZipEntry> = entries
        .into_iter()
        .map(|e| match (e.source, streams.remove(&e.name)) {
            (EntrySource::Splice(splice), Some(index)) => {
                let original = Original { index, extracted: root.join(&e.name) };
                ZipEntry { source: EntrySource::Reused(splice, Arc::new(original)), ..e }
            }
            (source, _) => ZipEntry { source, ..e },
        })
        .collect();
    for (name, index) in std::mem::take(streams) {
        use std::os::unix::fs::PermissionsExt;
        let extracted = root.join(&name);
        // Only files still as extracted (`zip::reuse` checks again when writing).
        let (Ok(meta), Ok(splice)) = (std::fs::metadata(&extracted), crate::splice::Splice::file(&extracted)) else {
            continue;
        };
        let executable = meta.permissions().mode() & 0o111 != 0;
        let original = Arc::new(Original { index, extracted });
        out.push(ZipEntry { name, source: EntrySource::Reused(Arc::new(splice), original), executable, stored: false });
    }
    out
}
