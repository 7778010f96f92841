//! `quarry wheel repair`: bundle the external libraries a wheel needs into
//! `<pkg>.libs/` under hashed names, point the wheel's ELF files at them
//! (SONAME, NEEDED, a forced `$ORIGIN` RPATH, through patchelf), verify every
//! patched file, retag, regenerate RECORD and write the zip
//! deterministically. Nothing is written to the output unless every step
//! succeeded.

use super::analyze::{self, Analysis, Options};
use super::archive::{self, WheelZip};
use super::check::{arch_from_name, record_problems};
use super::ldd::{is_libpython, SystemPaths};
use super::metadata;
use super::name::WheelName;
use super::policy::Policies;
use super::WheelError;
use crate::elf::patchelf::Patchelf;
use crate::elf::{self};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// How to repair.
pub struct RepairOptions {
    /// Globs of sonames (or resolved paths) never bundled.
    pub exclude: Vec<String>,
    /// Target policy (`manylinux_2_28_x86_64`, `manylinux_2_28`, an alias);
    /// None or `auto` picks the highest reachable one.
    pub plat: Option<String>,
    pub patchelf: Patchelf,
    pub system_paths: Option<SystemPaths>,
}

/// A library copied into the wheel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bundled {
    pub soname: String,
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
}

/// Repair `wheel` into `out_dir`.
pub fn repair(wheel: &Path, out_dir: &Path, options: &RepairOptions) -> Result<RepairReport, WheelError> {
    let fail = |why: String| WheelError::Repair { wheel: wheel.to_path_buf(), why };
    let file_name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = WheelName::parse(&file_name)?;
    std::fs::create_dir_all(out_dir).map_err(|source| WheelError::Io { path: out_dir.to_path_buf(), source })?;
    let work = tempfile::Builder::new()
        .prefix(".quarry-repair-")
        .tempdir_in(out_dir)
        .map_err(|source| WheelError::Io { path: out_dir.to_path_buf(), source })?;
    let root = work.path().join("wheel");

    let mut zip = WheelZip::open(wheel)?;
    let dist_info = zip.dist_info_dir()?;
    let scan = zip.scan(Some(&root), |_, _| true)?;
    let problems = record_problems(&mut zip, &dist_info, &scan)?;
    if !problems.is_empty() {
        return Err(WheelError::Record { wheel: wheel.to_path_buf(), problems });
    }
    let elf_files: Vec<String> =
        scan.extracted.iter().filter(|f| !f.ends_with(".py") && elf::is_elf(&root.join(f))).cloned().collect();
    if elf_files.is_empty() {
        return Err(fail("it holds no ELF file: a pure wheel needs no repair".into()));
    }
    let analyze_options = Options { exclude: options.exclude.clone(), system_paths: options.system_paths.clone() };
    let analysis = analyze::analyze(wheel, &root, &elf_files, arch_from_name(&name), &analyze_options)?;
    let root = root.canonicalize().map_err(|source| WheelError::Io { path: root.clone(), source })?;
    let abis = choose_tags(&analysis, options.plat.as_deref()).map_err(fail)?;
    let target = analysis.policies.find(&abis[0]).expect("chosen from the policies");

    // Bundle, rename, point every file at its bundled libraries.
    let libs_dir = format!("{}.libs", name.name);
    let pe = &options.patchelf;
    let mut soname_map: BTreeMap<String, (String, String)> = BTreeMap::new(); // old soname -> (new soname, path)
    let mut bundled = Vec::new();
    let mut patched: Vec<String> = Vec::new();
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
                return Err(fail(format!(
                    "`{rel}` needs `{soname}`, which was not found on this machine; install it, \
                     add its directory to LD_LIBRARY_PATH, or leave it out with --exclude '{soname}'"
                )));
            };
            let (new_soname, new_rel) = match soname_map.get(soname) {
                Some(done) => done.clone(),
                None => {
                    let (new_soname, new_rel, copied) = copy_library(src, &root, &libs_dir, pe)?;
                    if copied {
                        bundled.push(Bundled { soname: soname.clone(), source: src.clone(), path: new_rel.clone() });
                    }
                    soname_map.insert(soname.clone(), (new_soname.clone(), new_rel.clone()));
                    (new_soname, new_rel)
                }
            };
            let _ = new_rel;
            replacements.push((soname.clone(), new_soname));
        }
        pe.remove_needed(&file, &remove)?;
        pe.replace_needed(&file, &replacements)?;
        if !libs.is_empty() {
            let parts: Vec<&str> = rel.split('/').collect();
            if parts.len() == 3 && parts[0].ends_with(".data") && parts[1] == "scripts" {
                return Err(fail(format!(
                    "`{rel}` is an executable in the scripts directory that needs bundled libraries; quarry does not support that yet"
                )));
            }
            let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
            let new_rpath = format!("$ORIGIN/{}", relative_path(parent, Path::new(&libs_dir)));
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
            pe.set_rpath(&file, &unique.join(":"))?;
        }
        if !libs.is_empty() || !remove.is_empty() {
            patched.push(rel.clone());
        }
    }
    // Bundled libraries may need each other: rename those references too.
    for (new_soname, rel) in soname_map.values() {
        let file = root.join(rel);
        let info = elf::read(&file)?;
        let replacements: Vec<(String, String)> =
            info.needed.iter().filter_map(|n| soname_map.get(n).map(|(new, _)| (n.clone(), new.clone()))).collect();
        if replacements.is_empty() {
            pe.remove_rpath(&file)?;
        } else {
            pe.set_rpath(&file, "$ORIGIN")?;
            pe.replace_needed(&file, &replacements)?;
        }
        let _ = new_soname;
        patched.push(rel.clone());
    }

    // Every patched file must be sound and say what was asked.
    for rel in &patched {
        let file = root.join(rel);
        let info =
            elf::verify(&file).map_err(|e| fail(format!("patchelf {} produced a broken file: {e}", pe.version())))?;
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
    let new_name = metadata::retag_name(&name, &abis, &remove);
    let wheel_file = root.join(&dist_info).join("WHEEL");
    let text =
        std::fs::read_to_string(&wheel_file).map_err(|source| WheelError::Io { path: wheel_file.clone(), source })?;
    let text =
        metadata::retag_wheel_file(&text, &abis, &remove).map_err(|e| fail(format!("{dist_info}/WHEEL: {e}")))?;
    std::fs::write(&wheel_file, text).map_err(|source| WheelError::Io { path: wheel_file.clone(), source })?;

    let time = match archive::source_date_epoch()? {
        Some(epoch) => archive::zip_time(epoch),
        None => scan.latest_time.unwrap_or_default(),
    };
    let output = out_dir.join(new_name.to_string());
    archive::pack_dir(&root, &dist_info, &output, time)?;
    bundled.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(RepairReport {
        input: wheel.to_path_buf(),
        output,
        policy: abis[0].clone(),
        platform_tags: new_name.platform_tags.clone(),
        bundled,
        excluded_libs: analysis.excluded.iter().cloned().collect(),
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
/// and set its SONAME to that name. Returns (new soname, path inside the
/// wheel, whether it was copied now).
fn copy_library(src: &Path, root: &Path, libs_dir: &str, pe: &Patchelf) -> Result<(String, String, bool), WheelError> {
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
    pe.set_soname(&dest, &new_name)?;
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
