//! `quarry wheel repair`: bundle the external libraries a wheel needs into
//! `<pkg>.libs/` under hashed names, point the wheel's ELF files at them
//! (SONAME, NEEDED, a forced `$ORIGIN` RPATH, through patchelf), verify every
//! patched file, retag, regenerate RECORD and write the zip
//! deterministically. Nothing is written to the output unless every step
//! succeeded.

use super::analyze::{self, Analysis, Options};
use super::archive;
use super::check::arch_from_name;
use super::image::RepairImage;
use super::ldd::{is_libpython, SystemPaths};
use super::metadata;
use super::policy::Policies;
use super::unpack::unpack;
use super::WheelError;
use crate::elf::patchelf::{args, Patchelf};
use crate::elf::{self};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Where the external libraries come from and where patchelf runs.
pub enum RepairIn<'e> {
    /// This machine's libraries, this patchelf.
    Host(Patchelf),
    /// The libraries of an image (the one the wheel was built in), as its
    /// loader finds them. `patchelf` runs here when given, else the
    /// image's runs there (`host_has_none`: this machine has none, for the
    /// message when the image has none either).
    Image { image: RepairImage<'e>, patchelf: Option<Patchelf>, host_has_none: bool },
}

/// How to repair.
pub struct RepairOptions<'e> {
    /// Globs of sonames (or resolved paths) never bundled.
    pub exclude: Vec<String>,
    /// Target policy (`manylinux_2_28_x86_64`, `manylinux_2_28`, an alias);
    /// None or `auto` picks the highest reachable one.
    pub plat: Option<String>,
    pub within: RepairIn<'e>,
}

/// A library copied into the wheel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bundled {
    pub soname: String,
    /// Where it came from (a path in the image when repairing with one).
    pub source: PathBuf,
    /// Its path inside the repaired wheel.
    pub path: String,
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
}

/// One patchelf run: the file (inside the wheel) and its options.
type Edit = (String, Vec<String>);

/// Repair `wheel` into `out_dir`.
pub fn repair(wheel: &Path, out_dir: &Path, options: &RepairOptions) -> Result<RepairReport, WheelError> {
    let fail = |why: String| WheelError::Repair { wheel: wheel.to_path_buf(), why };
    let u = unpack(wheel, out_dir, "repair")?;
    let (name, dist_info) = (&u.name, &u.dist_info);
    let elf_files: Vec<String> =
        u.scan.extracted.iter().filter(|f| !f.ends_with(".py") && elf::is_elf(&u.root.join(f))).cloned().collect();
    if elf_files.is_empty() {
        return Err(fail("it holds no ELF file: a pure wheel needs no repair".into()));
    }

    // Where libraries are looked up, and which patchelf edits the files.
    let (system_paths, patchelf_name, image_name) = match &options.within {
        RepairIn::Host(pe) => (SystemPaths::from_host(), format!("patchelf {}", pe.version()), None),
        RepairIn::Image { image, patchelf, host_has_none } => {
            let ask = patchelf.is_none().then_some(*host_has_none);
            let found = image.libraries(&u.root, &elf_files, &u.work.path().join("image"), ask)?;
            let pe_name = match (patchelf, &found.patchelf_version) {
                (Some(pe), _) => format!("patchelf {}", pe.version()),
                (None, v) => format!("patchelf {} in image `{}`", v.as_deref().unwrap_or("?"), image.image),
            };
            (found.system_paths, pe_name, Some(image.image.clone()))
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
    let abis = choose_tags(&analysis, options.plat.as_deref()).map_err(fail)?;
    let target = analysis.policies.find(&abis[0]).expect("chosen from the policies");

    // Bundle and rename the libraries, and plan every file's edits: they
    // depend only on the files as they are now, so they can run here one
    // by one or in the image in one go.
    let libs_dir = format!("{}.libs", name.name);
    let mut soname_map: BTreeMap<String, (String, String)> = BTreeMap::new(); // old soname -> (new soname, path)
    let mut bundled = Vec::new();
    let mut patched: Vec<String> = Vec::new();
    let mut edits: Vec<Edit> = Vec::new();
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
                    let (new_soname, new_rel, copied) = copy_library(src, &root, &libs_dir)?;
                    if copied {
                        bundled.push(Bundled {
                            soname: soname.clone(),
                            source: system_paths.display_path(src),
                            path: new_rel.clone(),
                        });
                        edits.push((new_rel.clone(), args::set_soname(&new_soname)));
                    }
                    soname_map.insert(soname.clone(), (new_soname.clone(), new_rel));
                    new_soname
                }
            };
            replacements.push((soname.clone(), new_soname));
        }
        if !remove.is_empty() {
            edits.push((rel.clone(), args::remove_needed(&remove)));
        }
        if !replacements.is_empty() {
            edits.push((rel.clone(), args::replace_needed(&replacements)));
        }
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
            edits.push((rel.clone(), args::set_rpath(&unique.join(":"))));
        }
        if !libs.is_empty() || !remove.is_empty() {
            patched.push(rel.clone());
        }
    }
    // Bundled libraries may need each other: rename those references too.
    for (_, rel) in soname_map.values() {
        let info = elf::read(&root.join(rel))?;
        let replacements: Vec<(String, String)> =
            info.needed.iter().filter_map(|n| soname_map.get(n).map(|(new, _)| (n.clone(), new.clone()))).collect();
        if replacements.is_empty() {
            edits.push((rel.clone(), args::remove_rpath()));
        } else {
            edits.push((rel.clone(), args::set_rpath("$ORIGIN")));
            edits.push((rel.clone(), args::replace_needed(&replacements)));
        }
        patched.push(rel.clone());
    }
    match &options.within {
        RepairIn::Host(pe) | RepairIn::Image { patchelf: Some(pe), .. } => {
            for (rel, a) in &edits {
                pe.run(&root.join(rel), a)?;
            }
        }
        RepairIn::Image { image, patchelf: None, .. } => image.patch(&root, &edits)?,
    }

    // Every patched file must be sound and say what was asked.
    for rel in &patched {
        let file = root.join(rel);
        let info = elf::verify(&file).map_err(|e| fail(format!("{patchelf_name} produced a broken file: {e}")))?;
        if let Some(old) = info.needed.iter().find(|n| soname_map.contains_key(*n)) {
            return Err(fail(format!("`{rel}` still needs `{old}` after patching")));
        }
    }
    for (old, (new_soname, rel)) in &soname_map {
        let info = elf::read(&root.join(rel))?;
        if info.soname.as_deref() != Some(new_soname.as_str()) {
            return Err(fail(format!(
                "bundled `{old}` at `{rel}` has SONAME {:?} after patching, not `{new_soname}`",
                info.soname
            )));
        }
    }

    // Retag the file name and WHEEL.
    let remove = metadata::replaced_platforms(&abis[0]);
    let new_name = metadata::retag_name(name, &abis, &remove);
    let wheel_file = root.join(dist_info).join("WHEEL");
    let text =
        std::fs::read_to_string(&wheel_file).map_err(|source| WheelError::Io { path: wheel_file.clone(), source })?;
    let text =
        metadata::retag_wheel_file(&text, &abis, &remove).map_err(|e| fail(format!("{dist_info}/WHEEL: {e}")))?;
    std::fs::write(&wheel_file, text).map_err(|source| WheelError::Io { path: wheel_file.clone(), source })?;

    let output = out_dir.join(new_name.to_string());
    archive::pack_dir(&root, dist_info, &output, u.zip_time()?)?;
    bundled.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(RepairReport {
        input: wheel.to_path_buf(),
        output,
        policy: abis[0].clone(),
        platform_tags: new_name.platform_tags.clone(),
        bundled,
        excluded_libs: analysis.excluded.iter().cloned().collect(),
        image: image_name,
    })
}

/// The platform tags to give the repaired wheel (first = the policy whose
/// whitelist decides what is bundled), as auditwheel chooses them.
fn choose_tags(a: &Analysis, plat: Option<&str>) -> Result<Vec<String>, String> {
    let p = &a.policies;
    let requested_base = plat.filter(|s| *s != "auto");
    let mut overall = a.graftable_policy();
    // Do not pick a higher policy that would bundle more libraries than the
    // requested one needs.
    let graft_count = |filter: &dyn Fn(usize) -> bool| {
        (1..p.len()).filter(|&i| filter(i)).map(|i| a.external_refs[i].libs.len()).min().unwrap_or(0)
    };
    let requested = match requested_base {
        None => {
            let count = graft_count(&|_| true);
            let graft = (0..p.len()).rev().find(|&i| a.external_refs[i].libs.len() <= count).unwrap_or(Policies::LINUX);
            overall = overall.min(graft);
            if overall == Policies::LINUX {
                p.lowest()
            } else {
                overall
            }
        }
        Some(name) => {
            let idx = p.find(name).filter(|&i| i != Policies::LINUX).ok_or_else(|| {
                format!("--plat `{name}` names no manylinux policy for {}; known: {}", p.arch, p.names().join(", "))
            })?;
            let base = format!("{}_", p.get(idx).base);
            let count = graft_count(&|i| p.get(i).name.starts_with(&base));
            let graft = (0..p.len()).rev().find(|&i| a.external_refs[i].libs.len() <= count).unwrap_or(Policies::LINUX);
            overall = overall.min(graft);
            idx
        }
    };
    let name = &p.get(requested).name;
    let limits = [
        (
            a.symbol_policy,
            "it uses symbol versions too recent for it (rebuild on an older toolchain, e.g. a manylinux image)",
        ),
        (a.blacklist_policy, "it uses blacklisted symbols"),
        (a.machine_policy, "it needs CPU instructions above the x86-64 baseline"),
        (a.pyfpe_policy, "it uses the PyFPE_jbuf function"),
    ];
    for (limit, why) in limits {
        if requested > limit {
            let best = a.graftable_policy();
            let reachable =
                if best == Policies::LINUX { "none".to_string() } else { format!("`{}`", p.get(best).name) };
            return Err(format!("cannot reach `{name}`: {why}; the highest reachable policy is {reachable}"));
        }
    }
    let mut abis: Vec<String> = std::iter::once(name.clone()).chain(p.get(requested).aliases.iter().cloned()).collect();
    if requested < overall {
        let higher = p.get(overall);
        abis = std::iter::once(higher.name.clone()).chain(higher.aliases.iter().cloned()).chain(abis).collect();
    }
    Ok(abis)
}

/// Copy a library into `<root>/<libs_dir>/` as `{stem}-{sha256[..8]}.{rest}`
/// (its SONAME is set to that name by an edit). Returns (new soname, path
/// inside the wheel, whether it was copied now).
fn copy_library(src: &Path, root: &Path, libs_dir: &str) -> Result<(String, String, bool), WheelError> {
    let hash = crate::digest::sha256_file(src).map_err(|source| WheelError::Io { path: src.to_path_buf(), source })?;
    let short = &hash[..8];
    let src_name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let new_name = match src_name.split_once('.') {
        Some((stem, _)) if stem.ends_with(&format!("-{short}")) => src_name.clone(),
        Some((stem, rest)) => format!("{stem}-{short}.{rest}"),
        None => format!("{src_name}-{short}"),
    };
    let rel = format!("{libs_dir}/{new_name}");
    let dest = root.join(&rel);
    if dest.exists() {
        return Ok((new_name, rel, false));
    }
    std::fs::create_dir_all(root.join(libs_dir))
        .map_err(|source| WheelError::Io { path: root.join(libs_dir), source })?;
    std::fs::copy(src, &dest).map_err(|source| WheelError::Io { path: src.to_path_buf(), source })?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|source| WheelError::Io { path: dest.clone(), source })?;
    Ok((new_name, rel, true))
}

/// `to` relative to `from`, both relative to the same root (`a/b`, `c` -> `../../c`).
fn relative_path(from: &Path, to: &Path) -> String {
    let f: Vec<Component> = from.components().filter(|c| matches!(c, Component::Normal(_))).collect();
    let t: Vec<Component> = to.components().filter(|c| matches!(c, Component::Normal(_))).collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); f.len() - common];
    parts.extend(t[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// True when an existing RPATH entry of `file` points inside the wheel
/// (such entries are kept; others would leak the build machine's paths).
fn rpath_within(entry: &str, file: &Path, root: &Path) -> bool {
    let dir = file.parent().unwrap_or(root).to_string_lossy().into_owned();
    let lib = if cfg!(target_pointer_width = "64") { "lib64" } else { "lib" };
    let mut e = entry.to_string();
    for (token, value) in [("ORIGIN", dir.as_str()), ("LIB", lib), ("PLATFORM", std::env::consts::ARCH)] {
        e = e.replace(&format!("${{{token}}}"), value).replace(&format!("${token}"), value);
    }
    let p = Path::new(&e);
    if !p.is_absolute() {
        return false;
    }
    let resolved = p.canonicalize().unwrap_or_else(|_| super::ldd::normpath(p));
    resolved.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(relative_path(Path::new(""), Path::new("cffi.libs")), "cffi.libs");
        assert_eq!(relative_path(Path::new("pkg/sub"), Path::new("pkg.libs")), "../../pkg.libs");
        assert_eq!(relative_path(Path::new("pkg"), Path::new("pkg")), ".");
    }
}
