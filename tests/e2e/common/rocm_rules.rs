//! The reference packager's rules (ROCm/TheRock's `build_python_packages.py`;
//! §1 the package set, names and metadata, §3 what runtime wheels hold,
//! §4 the devel tar, §5 RPATHs, §7 device wheels),
//! checked one by one on a set of packages `quarry rocm package` wrote,
//! against the artifacts directory it was given: each expected value is
//! derived from the rule and the input (SONAMEs, link texts and RPATHs read
//! from the artifacts), never from a listing quarry made.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Runtime package directory -> the `_rocm_sdk_core/<sub>` entries §5 appends.
fn rpath_subs(platform_dir: &str, device: bool) -> &'static [&'static str] {
    match platform_dir {
        "_rocm_sdk_core" => &["lib/llvm/lib", "lib/rocm_sysdeps/lib"],
        "_rocm_profiler" => &["lib", "lib/llvm/lib", "lib/rocm_sysdeps/lib"],
        _ if device => &["lib", "lib/rocm_sysdeps/lib"],
        _ => &["lib", "lib/rocm_sysdeps/lib", "lib/host-math/lib", "lib/llvm/lib"],
    }
}

/// "../" once per component of `relpath` (from `<pkgdir>/<relpath>`'s
/// directory up to site-packages).
fn up(relpath: &str) -> String {
    "../".repeat(relpath.matches('/').count() + 1)
}

/// Every relpath of the artifacts directory (manifest prefixes merged) ->
/// its source path, per artifact directory name.
pub fn artifact_paths(arts: &Path) -> BTreeMap<String, Vec<(String, PathBuf)>> {
    let mut map: BTreeMap<String, Vec<(String, PathBuf)>> = BTreeMap::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(arts).unwrap().map(|e| e.unwrap().path()).collect();
    dirs.sort();
    for d in dirs {
        let Ok(manifest) = std::fs::read_to_string(d.join("artifact_manifest.txt")) else { continue };
        let art = d.file_name().unwrap().to_string_lossy().into_owned();
        for prefix in manifest.split_whitespace() {
            let root = d.join(prefix);
            for e in walkdir::WalkDir::new(&root).min_depth(1).into_iter().map(|e| e.unwrap()) {
                if e.file_type().is_dir() {
                    continue;
                }
                let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                map.entry(rel).or_default().push((art.clone(), e.path().to_path_buf()));
            }
        }
    }
    map
}

struct Wheel {
    path: PathBuf,
    names: Vec<String>,
}

impl Wheel {
    fn open(path: &Path) -> Wheel {
        let z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
        let names = (0..z.len()).map(|i| z.name_for_index(i).unwrap().unwrap().to_string()).collect();
        Wheel { path: path.to_path_buf(), names }
    }
    fn read(&self, name: &str) -> Vec<u8> {
        let mut z = zip::ZipArchive::new(std::fs::File::open(&self.path).unwrap()).unwrap();
        let mut f = z.by_name(name).unwrap_or_else(|_| panic!("{} has no {name}", self.path.display()));
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    }
    /// The member copied to a scratch file (large libraries: not held in memory).
    fn extract(&self, name: &str, to: &Path) {
        let mut z = zip::ZipArchive::new(std::fs::File::open(&self.path).unwrap()).unwrap();
        let mut f = z.by_name(name).unwrap();
        let mut out = std::fs::File::create(to).unwrap();
        std::io::copy(&mut f, &mut out).unwrap();
    }
    fn text(&self, suffix: &str) -> String {
        let n = self.names.iter().find(|n| n.ends_with(suffix)).unwrap_or_else(|| panic!("no *{suffix}"));
        String::from_utf8(self.read(n)).unwrap()
    }
}

/// The base target of an ISA (xnack suffix dropped).
fn base_target(t: &str) -> String {
    t.split(['-', ':']).next().unwrap().to_string()
}

/// Check the rules on `dist` (quarry's output for `arts`, version `v`).
/// `split`: kpack mode. Returns how many single checks passed. A legacy
/// multi-family set (§1: an sdist and a devel wheel per family in
/// `dist/<family>/`) is checked once per family, with the shared wheels.
pub fn check(arts: &Path, dist: &Path, v: &str, split: bool) -> usize {
    let mut top = Vec::new();
    let mut families = Vec::new();
    for e in std::fs::read_dir(dist).unwrap().map(|e| e.unwrap().path()) {
        if e.is_dir() {
            families.push(e);
        } else {
            top.push(e);
        }
    }
    if families.is_empty() {
        return check_set(arts, dist, top, v, split);
    }
    assert!(!split, "§1 family directories only in legacy mode");
    let mut n = 0;
    for f in families {
        // This family's libraries wheel, not the other families'.
        let family = f.file_name().unwrap().to_string_lossy().to_lowercase().replace('-', "_");
        let mut set: Vec<PathBuf> = top
            .iter()
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                !name.starts_with("rocm_sdk_libraries_") || name.starts_with(&format!("rocm_sdk_libraries_{family}-"))
            })
            .cloned()
            .collect();
        set.extend(std::fs::read_dir(&f).unwrap().map(|e| e.unwrap().path()));
        n += check_set(arts, &f, set, v, split);
    }
    n
}

fn check_set(arts: &Path, dist: &Path, files: Vec<PathBuf>, v: &str, split: bool) -> usize {
    let mut n = 0usize;
    let paths = artifact_paths(arts);
    let scratch = tempfile::tempdir().unwrap();
    let mut wheels: BTreeMap<String, Wheel> = BTreeMap::new();
    let mut sdists = Vec::new();
    for e in files {
        let f = e.file_name().unwrap().to_string_lossy().into_owned();
        if f.ends_with(".whl") {
            // §1: py3-none-<plat>, V verbatim.
            let (dist_name, rest) = f.split_once('-').unwrap();
            assert_eq!(rest, format!("{v}-py3-none-linux_x86_64.whl"), "§1 wheel name {f}");
            wheels.insert(dist_name.to_string(), Wheel::open(&e));
            n += 1;
        } else if f.ends_with(".tar.gz") {
            assert_eq!(f, format!("rocm-{v}.tar.gz"), "§1 the selector sdist");
            sdists.push(f);
            n += 1;
        }
    }
    assert_eq!(sdists.len(), 1, "§1 one `rocm` sdist in {}", dist.display());

    // §1: the package set. Targets: the per-target lib artifacts.
    let targets: BTreeSet<String> = std::fs::read_dir(arts)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let mut parts = name.rsplitn(3, '_');
            let (t, comp) = (parts.next()?, parts.next()?);
            (comp == "lib" && t.starts_with("gfx")).then(|| base_target(t))
        })
        .collect();
    let mut expected: BTreeSet<String> = ["rocm_sdk_core", "rocm_sdk_devel"].map(String::from).into();
    if split {
        expected.insert("rocm_sdk_libraries".into());
        for t in &targets {
            expected.insert(format!("rocm_sdk_device_{t}"));
        }
    }
    let got: BTreeSet<String> = wheels.keys().filter(|k| *k != "rocm_profiler").cloned().collect();
    if split {
        assert_eq!(got, expected, "§1 package set (targets {targets:?})");
    } else {
        assert!(expected.is_subset(&got), "§1 package set: {got:?}");
        assert!(got.iter().any(|k| k.starts_with("rocm_sdk_libraries_")), "§1 legacy libraries-<family>: {got:?}");
        assert!(!got.iter().any(|k| k.starts_with("rocm_sdk_device_")), "§1 no device wheels in legacy mode");
    }
    n += 1;

    for (name, w) in &wheels {
        // §1: Root-Is-Purelib, tag; Requires-Dist only device -> libraries.
        let wheel = w.text(".dist-info/WHEEL");
        assert!(wheel.contains("Root-Is-Purelib: true\n") && wheel.contains("Tag: py3-none-linux_x86_64\n"), "{name}");
        let meta = w.text(".dist-info/METADATA");
        let req: Vec<&str> = meta.lines().filter_map(|l| l.strip_prefix("Requires-Dist: ")).collect();
        if name.starts_with("rocm_sdk_device_") {
            assert_eq!(req, [format!("rocm-sdk-libraries=={v}")], "§1 {name} Requires-Dist");
        } else {
            assert!(req.is_empty(), "§1 {name} has no Requires-Dist: {req:?}");
        }
        n += 2;
    }

    // §3, §5, §7: the runtime and device wheels.
    // relpath -> (package dir, wheel) in the reference's order: core, profiler, libraries, device.
    let mut shipped: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<&String> = wheels.keys().filter(|k| *k != "rocm_sdk_devel").collect();
    let rank = |k: &str| match k {
        "rocm_sdk_core" => 0,
        "rocm_profiler" => 1,
        k if k.starts_with("rocm_sdk_libraries") => 2,
        _ => 3,
    };
    order.sort_by_key(|k| rank(k));
    for name in order {
        let w = &wheels[name];
        let device = name.starts_with("rocm_sdk_device_");
        // The platform package: the one top-level `_` directory.
        let tops: BTreeSet<&str> =
            w.names.iter().filter_map(|m| m.split_once('/').map(|(t, _)| t)).filter(|t| t.starts_with('_')).collect();
        assert_eq!(tops.len(), 1, "§1 {name}: one platform package: {tops:?}");
        let platform_dir = tops.into_iter().next().unwrap().to_string();
        if device {
            assert_eq!(platform_dir, "_rocm_sdk_libraries", "§7 device wheels overlay _rocm_sdk_libraries");
        }
        assert!(w.names.contains(&format!("{platform_dir}/__init__.py")), "§3 {name}: {platform_dir}/__init__.py");
        n += 1;
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&w.path).unwrap()).unwrap();
        for i in 0..zip.len() {
            let f = zip.by_index(i).unwrap();
            let mode = f.unix_mode().unwrap_or(0o644);
            assert_ne!(mode & 0o170000, 0o120000, "§3 {name}: no symlinks ({})", f.name().unwrap());
        }
        let payload: Vec<&String> = w
            .names
            .iter()
            .filter(|m| m.starts_with(&format!("{platform_dir}/")) && !m.ends_with("/__init__.py"))
            .filter(|m| !m.contains("/.devel_links/") && !m.contains("/.kpack/"))
            .collect();
        for m in &payload {
            let rel = m[platform_dir.len() + 1..].to_string();
            shipped.entry(rel.clone()).or_insert_with(|| platform_dir.clone());
            if device {
                // §7: the files of this target's lib artifacts (rpp's aside).
                let t = name.trim_start_matches("rocm_sdk_device_");
                let from = paths.get(&rel).map(|v| v.as_slice()).unwrap_or_default();
                let ok = from.iter().any(|(art, _)| {
                    let mut parts = art.rsplitn(3, '_');
                    let (at, comp, an) = (parts.next(), parts.next(), parts.next());
                    comp == Some("lib") && an != Some("rpp") && at.map(base_target).as_deref() == Some(t)
                });
                assert!(ok, "§7 {name}: {rel} is from no `*_lib_{t}` artifact: {from:?}");
                n += 1;
            }
            let Some(srcs) = paths.get(&rel) else { continue };
            let link = &srcs.last().unwrap().1;
            let src = std::fs::canonicalize(link).unwrap();
            if rel.ends_with(".co") || rel.ends_with(".hsaco") || !quarry::elf::is_elf(&src) {
                continue;
            }
            let built = quarry::elf::read(&src).unwrap();
            if built.e_type != 2 && built.e_type != 3 {
                continue;
            }
            let tmp = scratch.path().join("member");
            w.extract(m, &tmp);
            let info = quarry::elf::verify(&tmp).unwrap_or_else(|e| panic!("{name}: {m}: {e}"));
            std::fs::remove_file(&tmp).unwrap();
            let file_name = rel.rsplit('/').next().unwrap();
            if link.is_symlink() && built.soname.as_deref() != Some(file_name) && platform_dir != "_rocm_profiler" {
                // §3: a link to an ELF program is a launcher; §5: not patched.
                assert_eq!(info.rpath, None, "§5 {name}: launcher {rel} gets no RPATH");
                n += 1;
                continue;
            }
            // §3: a shared library ships under its SONAME only (the
            // profiler's added unversioned names aside, §3).
            if let Some(soname) = &built.soname {
                if built.e_type == 3 && rel.contains(".so") && platform_dir != "_rocm_profiler" {
                    assert_eq!(rel.rsplit('/').next().unwrap(), soname, "§3 {name}: {rel} is not its SONAME");
                    n += 1;
                }
            }
            // §5: existing entries kept in order (quarry: `$ORIGIN` when the
            // file was built with none, see docs/rocm-packaging.md), then one per sub, as DT_RPATH.
            let old = built.rpath.clone().or(built.runpath.clone()).filter(|s| !s.is_empty());
            let mut want = vec![old.unwrap_or_else(|| "$ORIGIN".into())];
            let upd = up(&rel);
            for s in rpath_subs(&platform_dir, device) {
                want.push(format!("$ORIGIN/{upd}_rocm_sdk_core/{s}"));
            }
            assert_eq!(info.rpath.as_deref(), Some(want.join(":").as_str()), "§5 {name}: {rel}");
            assert_eq!(info.runpath, None, "§5 {name}: {rel}: DT_RPATH forced, no DT_RUNPATH");
            n += 2;
        }
        // §7: .devel_links/<T>.json: one link per payload file.
        if device && split {
            let t = name.trim_start_matches("rocm_sdk_device_");
            let json = String::from_utf8(w.read(&format!("_rocm_sdk_libraries/.devel_links/{t}.json"))).unwrap();
            assert!(!json.ends_with('\n') && json.starts_with("{\n  \"version\": "), "§4 indent 2: {json}");
            let j: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(j["version"], v);
            let links: BTreeSet<(String, String)> = j["links"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| (l["relpath"].as_str().unwrap().into(), l["target"].as_str().unwrap().into()))
                .collect();
            let want: BTreeSet<(String, String)> = payload
                .iter()
                .map(|m| {
                    let r = m["_rocm_sdk_libraries/".len()..].to_string();
                    let t = format!("{}_rocm_sdk_libraries/{r}", up(&r));
                    (r, t)
                })
                .collect();
            assert_eq!(links, want, "§4 {name}: .devel_links");
            n += 1;
        }
    }

    // §4: the devel wheel and its tar.
    let devel = &wheels["rocm_sdk_devel"];
    assert!(devel.names.contains(&"rocm_sdk_devel/_devel.tar".to_string()), "§4 tar location");
    assert!(!devel.names.iter().any(|m| m.starts_with("_rocm_sdk_devel/")), "§4 nothing under _rocm_sdk_devel/");
    let tar_bytes = devel.read("rocm_sdk_devel/_devel.tar");
    let mut a = tar::Archive::new(tar_bytes.as_slice());
    let mut seen_dirs: BTreeSet<String> = BTreeSet::new();
    let mut members = 0;
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let m = e.path().unwrap().to_string_lossy().trim_end_matches('/').to_string();
        assert!(m == "_rocm_sdk_devel" || m.starts_with("_rocm_sdk_devel/"), "§4 member prefix: {m}");
        if let Some((parent, _)) = m.rsplit_once('/') {
            assert!(seen_dirs.contains(parent), "§4 a dir entry before its contents: {m}");
        }
        let kind = e.header().entry_type();
        if kind.is_dir() {
            seen_dirs.insert(m);
            continue;
        }
        members += 1;
        let rel = m.strip_prefix("_rocm_sdk_devel/").unwrap().to_string();
        if rel == "__init__.py" {
            continue;
        }
        let src = paths.get(&rel).map(|s| s.last().unwrap().1.clone());
        // §3: an ELF library under a name other than its SONAME, not shipped.
        let alias = src.as_ref().and_then(|s| {
            let target = std::fs::canonicalize(s).ok()?;
            if !quarry::elf::is_elf(&target) {
                return None;
            }
            let soname = quarry::elf::read(&target).ok()?.soname?;
            (soname != rel.rsplit('/').next().unwrap() && !shipped.contains_key(&rel)).then_some(soname)
        });
        let link = e.link_name().unwrap().map(|l| l.to_string_lossy().into_owned());
        if let Some(soname) = alias {
            // SONAME alias -> link to the bare SONAME.
            assert_eq!(link.as_deref(), Some(soname.as_str()), "§4 alias {rel}");
        } else if let Some(pkgdir) = shipped.get(&rel) {
            assert_eq!(link, Some(format!("{}{pkgdir}/{rel}", up(&rel))), "§4 shipped by {pkgdir}: {rel}");
        } else if let Some(s) = src.as_ref().filter(|s| s.is_symlink()) {
            let text = std::fs::read_link(s).unwrap().to_string_lossy().into_owned();
            assert_eq!(link, Some(text), "§4 a source link is kept verbatim: {rel}");
        } else {
            assert!(kind.is_file(), "§4 {rel}: a copy");
            let mut head = [0u8; 4];
            if e.read_exact(&mut head).is_ok() && &head == b"\x7fELF" {
                let tmp = scratch.path().join("devel-member");
                let mut rest = Vec::new();
                e.read_to_end(&mut rest).unwrap();
                std::fs::write(&tmp, [&head[..], &rest].concat()).unwrap();
                let info = quarry::elf::read(&tmp).unwrap();
                assert_eq!(info.runpath, None, "§4 devel ELF copies: RUNPATH -> RPATH ({rel})");
            }
        }
        n += 1;
    }
    assert!(members > 0 && seen_dirs.contains("_rocm_sdk_devel"));
    n
}
