//! `quarry rocm package`: synthetic artifacts with real ELF files
//! -> wheels and the selector sdist, installed with pip into fresh
//! virtualenvs and exercised there.

use crate::common;

use common::venv::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "7.10.0.dev0";

/// The tools these tests need (a compiler for the fixtures, Python for pip).
fn can_package() -> bool {
    have_tool("python3") && have_tool("cc")
}

/// `quarry rocm package` as on a machine without patchelf: quarry uses its own.
fn package_cmd(arts: &Path, dest: &Path, extra: &[&str]) -> Command {
    let mut c = quarry();
    c.env("PATH", path_without_patchelf())
        .args(["rocm", "package", "--json", "--artifact-dir"])
        .arg(arts)
        .arg("--dest-dir")
        .arg(dest)
        .args(extra);
    c
}

/// quarry's pinned patchelf (the one it falls back to), fetched into the tests' cache.
fn pinned_patchelf() -> PathBuf {
    use quarry::tools::patchelf::pinned;
    let p = pinned::fetch(
        &quarry::cache::Cache::open(&packages_cache()).unwrap(),
        pinned::host_arch().expect("a patchelf is pinned for this host"),
    )
    .unwrap();
    p.path().to_path_buf()
}

fn package(arts: &Path, dest: &Path, extra: &[&str]) -> serde_json::Value {
    stdout_json(&run_expect(&mut package_cmd(arts, dest, extra), 0))
}

fn package_fails(arts: &Path, dest: &Path, extra: &[&str]) -> String {
    let out = run_expect(&mut package_cmd(arts, dest, extra), 1);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn package_dir(bin: &Path, name: &str) -> PathBuf {
    PathBuf::from(python(bin, &format!("import {name}, os; print(os.path.dirname({name}.__file__))")))
}

/// The packages in `dist` (not the provenance statements beside them).
fn dist_files(dist: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().contains(".intoto.json"))
        .collect();
    v.sort();
    v
}

/// Every entry of a wheel is a regular file (no symlink mode bits).
fn assert_no_symlinks(wheel: &Path) {
    let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    for i in 0..z.len() {
        let f = z.by_index(i).unwrap();
        let mode = f.unix_mode().unwrap_or(0o644);
        assert_ne!(mode & 0o170000, 0o120000, "{} holds a symlink: {}", wheel.display(), f.name().unwrap_or_default());
    }
}

fn host_elf_files(dir: &Path) -> Vec<(PathBuf, quarry::elf::ElfInfo)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file() && quarry::elf::is_elf(e.path()))
        .map(|e| {
            let info = quarry::elf::verify(e.path()).unwrap();
            (e.path().to_path_buf(), info)
        })
        .filter(|(_, i)| i.machine == 62)
        .collect()
}

fn rpath_entries(info: &quarry::elf::ElfInfo) -> Vec<String> {
    assert!(info.runpath.is_none(), "DT_RUNPATH set: {info:?}");
    info.rpath.clone().unwrap_or_default().split(':').map(str::to_string).collect()
}

/// The members of a zip, and one member's bytes.
fn zip_names(path: &Path) -> Vec<String> {
    let z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    (0..z.len()).map(|i| z.name_for_index(i).unwrap().unwrap().to_string()).collect()
}

fn zip_read(path: &Path, name: &str) -> Vec<u8> {
    use std::io::Read;
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut f = z.by_name(name).unwrap_or_else(|_| panic!("{} has no {name}", path.display()));
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// (member, symlink text or None for other entries) of the devel tar.
fn devel_tar_members(wheel: &Path) -> Vec<(String, Option<String>)> {
    let data = zip_read(wheel, "rocm_sdk_devel/_devel.tar");
    let mut a = tar::Archive::new(data.as_slice());
    a.entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().trim_end_matches('/').to_string();
            let link = e.link_name().unwrap().map(|l| l.to_string_lossy().into_owned());
            (name, link)
        })
        .collect()
}

fn pkg<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["packages"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no {name}: {j}"))
}

/// The reference packager's rules (ROCm/TheRock's `build_python_packages.py`),
/// one by one, on the synthetic split-mode artifacts.
#[test]
fn split_packages_follow_the_reference_rules() {
    if !can_package() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let dest = t.path().join("out");
    let j = package(&arts, &dest, &["--version", VERSION]);
    let dist = dest.join("dist");
    // The rules, one by one, over every package and member (below: spot
    // checks of named files, then the installed tree).
    let checks = common::rocm_rules::check(&arts, &dist, VERSION, true);
    assert!(checks > 40, "{checks} checks");
    // §1: the package set, V verbatim, py3-none-linux_x86_64, no symlinks.
    assert_eq!(j["version"], VERSION);
    let mut names: Vec<&str> = j["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "rocm",
            "rocm-profiler",
            "rocm-sdk-core",
            "rocm-sdk-devel",
            "rocm-sdk-device-gfx1100",
            "rocm-sdk-device-gfx942",
            "rocm-sdk-libraries"
        ]
    );
    let files: Vec<String> =
        dist_files(&dist).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert!(files.contains(&format!("rocm-{VERSION}.tar.gz")), "{files:?}");
    for p in dist_files(&dist) {
        if p.extension().is_some_and(|e| e == "whl") {
            assert!(p.to_string_lossy().ends_with(&format!("-{VERSION}-py3-none-linux_x86_64.whl")));
            assert_no_symlinks(&p);
            let di = zip_names(&p).into_iter().find(|n| n.ends_with(".dist-info/WHEEL")).unwrap();
            let wheel = String::from_utf8(zip_read(&p, &di)).unwrap();
            assert!(wheel.contains("Root-Is-Purelib: true") && wheel.contains("Tag: py3-none-linux_x86_64"), "{wheel}");
        }
    }
    // Requires-Dist: none but device -> libraries.
    for n in ["rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-devel", "rocm-profiler"] {
        assert_eq!(pkg(&j, n)["requires"], serde_json::json!([]), "{n}");
    }
    assert_eq!(
        pkg(&j, "rocm-sdk-device-gfx942")["requires"],
        serde_json::json!([format!("rocm-sdk-libraries=={VERSION}")])
    );

    // §3: SONAME-only libraries, aliases, launchers, copies, drops.
    let core = pkg(&j, "rocm-sdk-core");
    let core_files: Vec<&str> = core["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(core_files.contains(&"_rocm_sdk_core/lib/libamdhip64.so.7"));
    assert!(!core_files.iter().any(|f| f.ends_with("libamdhip64.so") || f.ends_with("libamdhip64.so.7.1.0")));
    assert_eq!(core["aliases"]["lib/libamdhip64.so"], "libamdhip64.so.7");
    assert_eq!(core["aliases"]["lib/libamdhip64.so.7.1.0"], "libamdhip64.so.7");
    assert_eq!(core["launchers"]["bin/hipinfo"], "hipinfo-real");
    assert_eq!(core["launchers"]["lib/llvm/bin/amdclang"], "clang", "one hop, the raw link text");
    assert!(core_files.contains(&"_rocm_sdk_core/bin/rocm-smi"), "a script behind a link is copied");
    assert!(core["launchers"].get("bin/rocm-smi").is_none());
    assert!(!core_files.contains(&"_rocm_sdk_core/bin/amdclang"), "its target is in another artifact: dropped");
    for init in [
        "_rocm_sdk_core/__init__.py",
        "rocm_sdk_core/__init__.py",
        "rocm_sdk_core/_cli.py",
        "rocm_sdk_core/_dist_info.py",
    ] {
        assert!(core_files.contains(&init), "{init}");
    }
    let core_whl = PathBuf::from(core["file"].as_str().unwrap());
    let ep =
        String::from_utf8(zip_read(&core_whl, &format!("rocm_sdk_core-{VERSION}.dist-info/entry_points.txt"))).unwrap();
    assert_eq!(ep.lines().filter(|l| l.contains(" = rocm_sdk_core._cli:")).count(), 28, "{ep}");
    assert!(ep.contains("amdclang++ = rocm_sdk_core._cli:amdclangpp") && ep.contains("rocm-smi = "), "{ep}");
    let rocm_smi = zip_read(&core_whl, "_rocm_sdk_core/bin/rocm-smi");
    assert!(rocm_smi.starts_with(b"#!/bin/sh"), "a copy of the script, not a launcher");

    // §5: RPATH strings, exactly.
    let up2 = "$ORIGIN/../../_rocm_sdk_core";
    assert_eq!(
        core["rpaths"]["_rocm_sdk_core/lib/libamdhip64.so.7"],
        format!("$ORIGIN:{up2}/lib/llvm/lib:{up2}/lib/rocm_sysdeps/lib")
    );
    let up4 = "$ORIGIN/../../../../_rocm_sdk_core";
    assert_eq!(
        core["rpaths"]["_rocm_sdk_core/lib/llvm/bin/clang-20"],
        format!("$ORIGIN:{up4}/lib/llvm/lib:{up4}/lib/rocm_sysdeps/lib")
    );
    assert!(core["rpaths"].get("_rocm_sdk_core/lib/llvm/bin/amdclang").is_none(), "launchers get no RPATH");
    let libs = pkg(&j, "rocm-sdk-libraries");
    assert_eq!(
        libs["rpaths"]["_rocm_sdk_libraries/lib/librocblas.so.5"],
        format!("$ORIGIN:{up2}/lib:{up2}/lib/rocm_sysdeps/lib:{up2}/lib/host-math/lib:{up2}/lib/llvm/lib")
    );
    let profiler = pkg(&j, "rocm-profiler");
    assert_eq!(
        profiler["rpaths"]["_rocm_profiler/lib/librocprof-sys.so.1"],
        format!("$ORIGIN:{up2}/lib:{up2}/lib/llvm/lib:{up2}/lib/rocm_sysdeps/lib")
    );

    // §6: rocm-profiler, its 8 console scripts, the unversioned second copy.
    let pfiles: Vec<&str> = profiler["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    for f in [
        "_rocm_profiler/bin/rocprof-compute",
        "_rocm_profiler/lib/librocprof-sys.so.1",
        "_rocm_profiler/lib/librocprof-sys.so",
        "rocm_profiler/_cli.py",
    ] {
        assert!(pfiles.contains(&f), "{f}: {pfiles:?}");
    }
    let pwhl = PathBuf::from(profiler["file"].as_str().unwrap());
    let pep =
        String::from_utf8(zip_read(&pwhl, &format!("rocm_profiler-{VERSION}.dist-info/entry_points.txt"))).unwrap();
    assert_eq!(pep.lines().filter(|l| l.contains(" = rocm_profiler._cli:")).count(), 8, "{pep}");
    assert!(!core_files.iter().any(|f| f.contains("rocprof-")), "profiler files stay out of core");

    // §7: device wheels overlay _rocm_sdk_libraries, with .devel_links/<T>.json.
    let dev = pkg(&j, "rocm-sdk-device-gfx942");
    let dfiles: Vec<&str> = dev["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(dfiles.contains(&"_rocm_sdk_libraries/__init__.py"));
    assert!(dfiles.contains(&"_rocm_sdk_libraries/lib/rocblas/library/Kernels_gfx942.co"));
    let json = zip_read(&PathBuf::from(dev["file"].as_str().unwrap()), "_rocm_sdk_libraries/.devel_links/gfx942.json");
    let json = String::from_utf8(json).unwrap();
    assert!(!json.ends_with('\n') && json.starts_with("{\n  \"version\": "), "indent 2, version first: {json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["version"], VERSION);
    assert!(
        v["links"].as_array().unwrap().contains(&serde_json::json!({
            "relpath": "lib/rocblas/library/Kernels_gfx942.co",
            "target": "../../../../_rocm_sdk_libraries/lib/rocblas/library/Kernels_gfx942.co"
        })),
        "{json}"
    );

    // §4: the devel wheel: pure package and tar, nothing under _rocm_sdk_devel/.
    let devel = pkg(&j, "rocm-sdk-devel");
    let devel_whl = PathBuf::from(devel["file"].as_str().unwrap());
    let dn = zip_names(&devel_whl);
    assert!(
        dn.contains(&"rocm_sdk_devel/_devel.tar".to_string()) && dn.contains(&"rocm_sdk_devel/_cli.py".to_string())
    );
    assert!(!dn.iter().any(|n| n.starts_with("_rocm_sdk_devel/")), "{dn:?}");
    let members = devel_tar_members(&devel_whl);
    assert!(members.iter().all(|(m, _)| m == "_rocm_sdk_devel" || m.starts_with("_rocm_sdk_devel/")), "{members:?}");
    let link = |m: &str| members.iter().find(|(n, _)| n == m).and_then(|(_, l)| l.clone());
    assert!(members.iter().any(|(m, l)| m == "_rocm_sdk_devel/__init__.py" && l.is_none()));
    assert_eq!(
        link("_rocm_sdk_devel/lib/libamdhip64.so.7").as_deref(),
        Some("../../_rocm_sdk_core/lib/libamdhip64.so.7")
    );
    assert_eq!(link("_rocm_sdk_devel/lib/libamdhip64.so").as_deref(), Some("libamdhip64.so.7"), "alias -> bare SONAME");
    assert_eq!(link("_rocm_sdk_devel/lib/libamdhip64.so.7.1.0").as_deref(), Some("libamdhip64.so.7"));
    assert_eq!(link("_rocm_sdk_devel/bin/rocm-smi").as_deref(), Some("../../_rocm_sdk_core/bin/rocm-smi"));
    assert_eq!(link("_rocm_sdk_devel/bin/amdclang").as_deref(), Some("../lib/llvm/bin/amdclang"), "verbatim");
    assert_eq!(
        link("_rocm_sdk_devel/lib/llvm/bin/amdclang").as_deref(),
        Some("../../../../_rocm_sdk_core/lib/llvm/bin/amdclang")
    );
    assert!(!members.iter().any(|(m, _)| m.contains("rocprof")), "no profiler files in devel");
    let pos = |m: &str| members.iter().position(|(n, _)| n == m).unwrap();
    assert!(pos("_rocm_sdk_devel/include") < pos("_rocm_sdk_devel/include/hip/hip_version.h"), "dirs first");

    // §1: the selector's extras, in the reference's order.
    let bin = venv(&t.path().join("venv"));
    pip_install(&bin, &dist, "rocm[libraries,devel]", &[]);
    let meta = python(&bin, "import importlib.metadata as m; print(m.metadata('rocm').get_all('Provides-Extra'))");
    assert_eq!(meta, "['libraries', 'device', 'devel', 'profiler', 'device-gfx1100', 'device-gfx942', 'device-all']");

    // The installed tree works: rocm-sdk test, version, path.
    let test = run_expect(in_venv(&bin, "rocm-sdk").arg("test"), 0);
    let report = String::from_utf8_lossy(&test.stdout);
    assert!(report.contains(" 0 failed"), "{report}");
    assert!(report.contains("PASS  loads _rocm_sdk_libraries/lib/librocblas.so.5"), "{report}");
    let version = run_expect(in_venv(&bin, "rocm-sdk").arg("version"), 0);
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), VERSION);
    let cmake = run_expect(in_venv(&bin, "rocm-sdk").args(["path", "--cmake"]), 0);
    let cmake = PathBuf::from(String::from_utf8_lossy(&cmake.stdout).trim());
    assert!(cmake.join("hip/hip-config.cmake").is_file(), "{}", cmake.display());

    // The reference's expansion marker: _rocm_sdk_devel/__init__.py, tar gone.
    let core_dir = package_dir(&bin, "_rocm_sdk_core");
    let libs_dir = package_dir(&bin, "_rocm_sdk_libraries");
    let site = core_dir.parent().unwrap().to_path_buf();
    let devel_dir = site.join("_rocm_sdk_devel");
    assert!(devel_dir.join("__init__.py").is_file());
    assert!(!site.join("rocm_sdk_devel/_devel.tar").exists());
    let launcher = core_dir.join("bin/hipinfo");
    let o = run_expect(Command::new(&launcher).args(["x", "y"]), 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hipinfo-real argc=3 first=x\n");

    // A libraries-package library loads after preloading amdhip64 only.
    let answer = python(
        &bin,
        &format!(
            "import ctypes, rocm_sdk\n\
             rocm_sdk.initialize_process(preload_shortnames=['amdhip64'])\n\
             print(ctypes.CDLL({:?}).rocblas_answer())",
            libs_dir.join("lib/librocblas.so.5").display().to_string()
        ),
    );
    assert_eq!(answer, "43");
    let lib_elves = host_elf_files(&libs_dir);
    assert_eq!(lib_elves.len(), 1);
    assert!(rpath_entries(&lib_elves[0].1).contains(&"$ORIGIN/../../_rocm_sdk_core/lib".to_string()));

    // Devel links into runtime packages became hardlinks; compiler driver links in bin/ stay.
    use std::os::unix::fs::MetadataExt;
    let hip = devel_dir.join("lib/libamdhip64.so.7");
    assert!(!hip.is_symlink());
    assert_eq!(
        std::fs::metadata(&hip).unwrap().ino(),
        std::fs::metadata(core_dir.join("lib/libamdhip64.so.7")).unwrap().ino()
    );
    assert!(devel_dir.join("bin/amdclang").is_symlink());
    assert!(devel_dir.join("include/rocblas/rocblas.h").is_file());

    // A device package overlays the libraries directory; `rocm-sdk init`
    // links its files into the devel tree and records them in its RECORD.
    assert!(!libs_dir.join("lib/rocblas/library/Kernels_gfx942.co").exists());
    pip_install(&bin, &dist, "rocm[device-gfx942]", &[]);
    assert!(libs_dir.join("lib/rocblas/library/Kernels_gfx942.co").is_file());
    assert!(libs_dir.join("lib/rocblas/library/TensileLibrary_gfx942.dat").is_file());
    assert!(!libs_dir.join("lib/rocblas/library/Kernels_gfx1100.co").exists());
    run_expect(in_venv(&bin, "rocm-sdk").args(["init", "--quiet"]), 0);
    let linked = devel_dir.join("lib/rocblas/library/Kernels_gfx942.co");
    assert_eq!(
        std::fs::metadata(&linked).unwrap().ino(),
        std::fs::metadata(libs_dir.join("lib/rocblas/library/Kernels_gfx942.co")).unwrap().ino()
    );
    run_expect(in_venv(&bin, "pip").args(["uninstall", "-y", "-q", "rocm-sdk-device-gfx942"]), 0);
    assert!(!linked.exists(), "the device RECORD lists the devel link");

    // Uninstalling devel removes what the expansion created.
    run_expect(in_venv(&bin, "pip").args(["uninstall", "-y", "-q", "rocm-sdk-devel"]), 0);
    let left: Vec<PathBuf> = walkdir::WalkDir::new(&devel_dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_type().is_dir())
        .map(|e| e.path().to_path_buf())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(core_dir.join("lib/libamdhip64.so.7").is_file());
}

/// Set every mtime under `dir` to `secs`.
fn touch_all(dir: &Path, secs: i64) {
    for e in walkdir::WalkDir::new(dir) {
        let e = e.unwrap();
        let t = filetime::FileTime::from_unix_time(secs, 0);
        filetime::set_symlink_file_times(e.path(), t, t).unwrap();
    }
}

#[test]
fn two_runs_give_identical_bytes() {
    if !can_package() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let a1 = rocm_artifacts("split", &t.path().join("one"));
    let a2 = rocm_artifacts("split", &t.path().join("two"));
    touch_all(&a1, 1_000_000_000);
    touch_all(&a2, 1_700_000_000);
    let d1 = t.path().join("out1");
    let d2 = t.path().join("out2");
    package(&a1, &d1, &["--version", VERSION]);
    // The second run on one thread: the bytes never depend on the thread count.
    run_expect(package_cmd(&a2, &d2, &["--version", VERSION]).env("RAYON_NUM_THREADS", "1"), 0);
    let f1 = dist_files(&d1.join("dist"));
    let f2 = dist_files(&d2.join("dist"));
    assert_eq!(f1.len(), 7);
    assert_eq!(
        f1.iter().map(|p| p.file_name().unwrap()).collect::<Vec<_>>(),
        f2.iter().map(|p| p.file_name().unwrap()).collect::<Vec<_>>()
    );
    for (a, b) in f1.iter().zip(&f2) {
        assert!(
            std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
            "{} differs between runs",
            a.file_name().unwrap().to_string_lossy()
        );
        // Its provenance beside it: the package by sha256, every artifact an
        // input by its tree (no times: the artifacts were touched at two
        // times, the statements are the same bytes).
        let (p1, p2) = (common::provenance::beside(a, t.path()), common::provenance::beside(b, t.path()));
        assert!(p1 == p2, "{}'s provenance differs between runs", a.display());
        let inputs = common::provenance::inputs(&p1);
        let artifacts = std::fs::read_dir(&a1).unwrap().filter(|e| e.as_ref().unwrap().path().is_dir()).count();
        assert_eq!(inputs.len(), artifacts, "{inputs:?}");
        assert!(inputs.iter().all(|(_, alg, hex)| alg == "quarryTreeSha256" && hex.len() == 64), "{inputs:?}");
        assert!(!String::from_utf8_lossy(&p1).contains(&*t.path().to_string_lossy()), "no machine path");
    }
    // No scratch left in the destination.
    let left: Vec<_> = std::fs::read_dir(&d1).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["dist"]);

    // `quarry verify` of the set packages the second artifact directory
    // (the same trees, touched at another time) again: every package the same.
    let verify = |target: &Path, arts: &Path, code: i32| {
        let mut c = quarry();
        c.env("PATH", path_without_patchelf()).arg("verify").arg(target).arg("--json");
        c.arg("--inputs").arg(arts).arg("--cache-dir").arg(packages_cache());
        run_expect(&mut c, code)
    };
    let v = stdout_json(&verify(&d1.join("dist"), &a2, 0));
    assert_eq!(v["reproduced"], true, "{v:#}");
    assert_eq!(v["files"].as_array().unwrap().len(), 7, "{v:#}");
    assert!(v["files"].as_array().unwrap().iter().all(|f| f["build_type"] == "urn:quarry:build-type:rocm-package:v1"));
    // An artifact changed since: its input is named, nothing is said reproduced.
    let changed = std::fs::read_dir(&a2).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir()).unwrap();
    std::fs::write(changed.join("added-later.txt"), "x").unwrap();
    let e = String::from_utf8_lossy(&verify(&f1[0], &a2, 1).stderr).to_string();
    let name = changed.file_name().unwrap().to_string_lossy().to_string();
    assert!(e.contains(&format!("its input `{name}` (quarryTreeSha256:")) && e.contains("--inputs"), "{e}");
}

#[test]
fn legacy_mode_picks_the_family_at_install_time() {
    if !can_package() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("legacy", t.path());
    let dest = t.path().join("out");
    let j = package(&arts, &dest, &["--version", VERSION]);
    assert_eq!(j["split"], false);
    // The reference's rules, one by one, over every package and member.
    let checks = common::rocm_rules::check(&arts, &dest.join("dist"), VERSION, false);
    assert!(checks > 20, "{checks} checks");
    let mut names: Vec<&str> = j["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "rocm",
            "rocm",
            "rocm-profiler",
            "rocm-sdk-core",
            "rocm-sdk-devel",
            "rocm-sdk-devel",
            "rocm-sdk-libraries-gfx110X-dgpu",
            "rocm-sdk-libraries-gfx94X-dcgpu",
        ]
    );
    // Several families: a selector sdist and a devel wheel per family in dist/<family>/.
    let dist = dest.join("dist");
    for fam in ["gfx110X-dgpu", "gfx94X-dcgpu"] {
        assert!(dist.join(fam).join(format!("rocm-{VERSION}.tar.gz")).is_file());
        assert!(dist.join(fam).join(format!("rocm_sdk_devel-{VERSION}-py3-none-linux_x86_64.whl")).is_file());
    }
    let bin = venv(&t.path().join("venv"));
    run_expect(
        in_venv(&bin, "pip")
            .env("ROCM_SDK_TARGET_FAMILY", "gfx110X-dgpu")
            .args(["install", "-q", "--no-index", "--find-links"])
            .arg(dist.join("gfx110X-dgpu"))
            .arg("--find-links")
            .arg(&dist)
            .arg("rocm[libraries]"),
        0,
    );
    let dist = dist.join("gfx94X-dcgpu");
    let listed = python(&bin, "import importlib.util as u; print(bool(u.find_spec('_rocm_sdk_libraries_gfx110X_dgpu')), bool(u.find_spec('_rocm_sdk_libraries_gfx94X_dcgpu')))");
    assert_eq!(listed, "True False");
    let libs = package_dir(&bin, "_rocm_sdk_libraries_gfx110X_dgpu");
    // The family's device code ships inside its libraries package.
    assert!(libs.join("lib/rocblas/library/Kernels_gfx110X-dgpu.co").is_file());
    let answer = Command::new(bin.join("python"))
        .env("ROCM_SDK_TARGET_FAMILY", "gfx110X-dgpu")
        .env_remove("LD_LIBRARY_PATH")
        .args([
            "-c",
            &format!(
                "import ctypes, rocm_sdk\n\
                 rocm_sdk.initialize_process(preload_shortnames=['amdhip64'])\n\
                 print(ctypes.CDLL({:?}).rocblas_answer())",
                libs.join("lib/librocblas.so.5").display().to_string()
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&answer.stdout).trim(), "43", "{}", String::from_utf8_lossy(&answer.stderr));
    // An unknown family is a clear error at install time.
    let bad = in_venv(&bin, "pip")
        .env("ROCM_SDK_TARGET_FAMILY", "gfx000X-none")
        .args(["install", "-q", "--no-index", "--force-reinstall", "--no-deps", "--find-links"])
        .arg(&dist)
        .arg("rocm")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("gfx000X-none") && err.contains("gfx94X-dcgpu"), "{err}");
}

/// Compile a shared library needing libamdhip64 and give it the layout
/// split-mode libraries have: program headers in a trailing LOAD segment.
fn trailing_phdr_library(dir: &Path, hip_lib: &Path, name: &str, tight: bool) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("trail.c");
    std::fs::write(&src, "int hip_answer(void);\nint trail_answer(void) { return hip_answer() + 100; }\n").unwrap();
    let plain = dir.join(format!("{name}.plain"));
    run_expect(
        Command::new("cc")
            .args(["-shared", "-fPIC"])
            .arg(format!("-Wl,-soname,{name}"))
            .arg("-o")
            .arg(&plain)
            .arg(&src)
            .arg(format!("-L{}", hip_lib.display()))
            .arg("-lamdhip64"),
        0,
    );
    let out = dir.join(name);
    let mut c = Command::new("python3");
    c.arg(repo().join("tests/fixtures/elf-trailing-phdrs.py")).arg(&plain).arg(&out);
    if tight {
        c.arg("--tight");
    }
    run_expect(&mut c, 0);
    out
}

/// (e_phoff, end of the last LOAD in the file) of an ELF64 file.
fn phdr_layout(path: &Path) -> (u64, u64) {
    let d = std::fs::read(path).unwrap();
    let u64_at = |o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let phoff = u64_at(0x20);
    let phnum = u16::from_le_bytes(d[0x38..0x3a].try_into().unwrap()) as u64;
    let mut last_load = 0;
    for i in 0..phnum {
        let o = (phoff + i * 56) as usize;
        if u32::from_le_bytes(d[o..o + 4].try_into().unwrap()) == 1 {
            last_load = last_load.max(u64_at(o + 8));
        }
    }
    (phoff, last_load)
}

#[test]
fn trailing_load_segment_survives_patching_and_corruption_is_caught() {
    if !can_package() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let hip_lib = arts.join("core-hip_lib_generic/core/clr/stage/lib");
    let blas_lib = arts.join("blas_lib_generic/math-libs/BLAS/stage/lib");
    let lib = trailing_phdr_library(&blas_lib, &hip_lib, "libtrail.so.1", false);
    std::fs::remove_file(blas_lib.join("libtrail.so.1.plain")).unwrap();
    std::fs::remove_file(blas_lib.join("trail.c")).unwrap();
    let (phoff, last_load) = phdr_layout(&lib);
    assert_eq!(phoff, last_load, "the program headers open the last LOAD segment");
    quarry::elf::verify(&lib).unwrap();

    let dest = t.path().join("out");
    let j = package(&arts, &dest, &["--version", VERSION]);
    let libs = pkg(&j, "rocm-sdk-libraries");
    let up2 = "$ORIGIN/../../_rocm_sdk_core";
    assert_eq!(
        libs["rpaths"]["_rocm_sdk_libraries/lib/libtrail.so.1"],
        format!("$ORIGIN:{up2}/lib:{up2}/lib/rocm_sysdeps/lib:{up2}/lib/host-math/lib:{up2}/lib/llvm/lib")
    );
    let bin = venv(&t.path().join("venv"));
    pip_install(&bin, &dest.join("dist"), "rocm[libraries]", &[]);
    let libs_dir = package_dir(&bin, "_rocm_sdk_libraries");
    let patched = libs_dir.join("lib/libtrail.so.1");
    let info = quarry::elf::verify(&patched).unwrap();
    assert!(rpath_entries(&info).contains(&"$ORIGIN/../../_rocm_sdk_core/lib".to_string()));
    // Loads through its RPATH alone: no preload, no LD_LIBRARY_PATH.
    let answer =
        python(&bin, &format!("import ctypes; print(ctypes.CDLL({:?}).trail_answer())", patched.display().to_string()));
    assert_eq!(answer, "142");

    assert_eq!(j["elf_editor"], "native", "{j}");
    assert_eq!(j["patchelf_fallbacks"], serde_json::json!([]), "{j}");
    assert!(j["patchelf"].is_null(), "no patchelf ran: {j}");

    // With no room left in that segment, patchelf 0.19.3 grows the table
    // past it: PT_PHDR outside every LOAD. quarry's own edit moves the
    // table into its new segment instead: the library packages and loads.
    let arts2 = rocm_artifacts("split", &t.path().join("tight"));
    let blas_lib2 = arts2.join("blas_lib_generic/math-libs/BLAS/stage/lib");
    let hip_lib2 = arts2.join("core-hip_lib_generic/core/clr/stage/lib");
    let scratch = t.path().join("tight-src");
    let tight = trailing_phdr_library(&scratch, &hip_lib2, "libtight.so.1", true);
    quarry::elf::verify(&tight).unwrap();
    std::fs::copy(&tight, blas_lib2.join("libtight.so.1")).unwrap();
    let dest_tight = t.path().join("out-tight");
    let j2 = package(&arts2, &dest_tight, &["--version", VERSION]);
    assert_eq!(j2["patchelf_fallbacks"], serde_json::json!([]), "{j2}");
    let bin2 = venv(&t.path().join("venv-tight"));
    pip_install(&bin2, &dest_tight.join("dist"), "rocm[libraries]", &[]);
    let tight_installed = package_dir(&bin2, "_rocm_sdk_libraries").join("lib/libtight.so.1");
    quarry::elf::verify(&tight_installed).unwrap();
    let answer = python(
        &bin2,
        &format!("import ctypes; print(ctypes.CDLL({:?}).trail_answer())", tight_installed.display().to_string()),
    );
    assert_eq!(answer, "142");

    // patchelf 0.19.3 itself (named with QUARRY_PATCHELF) breaks that file:
    // the verifier must stop it.
    let patched_by_hand = scratch.join("by-hand.so");
    std::fs::copy(&tight, &patched_by_hand).unwrap();
    let pinned = pinned_patchelf();
    run_expect(
        Command::new(&pinned)
            .args(["--force-rpath", "--set-rpath", "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib"])
            .arg(&patched_by_hand),
        0,
    );
    let err = quarry::elf::verify(&patched_by_hand).err().map(|e| e.to_string()).unwrap_or_default();
    if err.is_empty() {
        // A later patchelf may keep this layout sound: nothing to catch then.
        eprintln!("note: this patchelf kept the tight layout sound");
        return;
    }
    let out2 = t.path().join("out2");
    let stderr = String::from_utf8_lossy(
        &run_expect(package_cmd(&arts2, &out2, &["--version", VERSION]).env("QUARRY_PATCHELF", &pinned), 1).stderr,
    )
    .into_owned();
    assert!(stderr.contains("libtight.so.1") && stderr.contains("corrupted ELF"), "{stderr}");
    // No partial set of packages, no scratch left behind.
    let left: Vec<PathBuf> =
        walkdir::WalkDir::new(&out2).min_depth(1).into_iter().map(|e| e.unwrap().path().to_path_buf()).collect();
    assert_eq!(left, [out2.join("dist")], "{left:?}");
}

#[test]
fn verifier_rejects_a_corrupted_elf() {
    if !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("a.c");
    std::fs::write(&src, "int f(void) { return 1; }\n").unwrap();
    let lib = t.path().join("liba.so");
    run_expect(Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&lib).arg(&src), 0);
    quarry::elf::verify(&lib).unwrap();
    // Point the program header table past the end of the file.
    let mut d = std::fs::read(&lib).unwrap();
    let len = d.len() as u64;
    d[0x20..0x28].copy_from_slice(&(len + 64).to_le_bytes());
    std::fs::write(&lib, &d).unwrap();
    let err = quarry::elf::verify(&lib).unwrap_err().to_string();
    assert!(err.contains("liba.so"), "{err}");
}

#[test]
fn old_patchelf_is_refused() {
    if !have_tool("python3") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let fake = t.path().join("fakebin");
    std::fs::create_dir_all(&fake).unwrap();
    write(&fake.join("patchelf"), "#!/bin/sh\necho 'patchelf 0.14.5'\n");
    std::fs::set_permissions(fake.join("patchelf"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A patchelf on PATH is never used; one chosen with QUARRY_PATCHELF is checked.
    let out = run_expect(
        package_cmd(&arts, &t.path().join("out"), &["--version", VERSION])
            .env("PATH", format!("{}:{}", fake.display(), path_without_patchelf()))
            .env("QUARRY_PATCHELF", fake.join("patchelf")),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0.14.5") && err.contains("0.19") && err.contains("QUARRY_PATCHELF"), "{err}");
}

#[test]
fn bad_input_is_a_clear_error_or_a_documented_drop() {
    if !can_package() {
        return;
    }
    let t = tempfile::tempdir().unwrap();

    // No therock_manifest.json.
    let arts = rocm_artifacts("split", &t.path().join("a"));
    std::fs::remove_file(arts.join("base_lib_generic/base/aux-overlay/stage/share/therock/therock_manifest.json"))
        .unwrap();
    let err = package_fails(&arts, &t.path().join("o1"), &["--version", VERSION]);
    assert!(err.contains("therock_manifest.json"), "{err}");

    // A malformed artifact directory name.
    let arts = rocm_artifacts("split", &t.path().join("b"));
    std::fs::create_dir_all(arts.join("blas-library-generic")).unwrap();
    let err = package_fails(&arts, &t.path().join("o2"), &["--version", VERSION]);
    assert!(err.contains("blas-library-generic"), "{err}");

    // A manifest prefix that does not exist.
    let arts = rocm_artifacts("split", &t.path().join("c"));
    let m = arts.join("blas_dev_generic/artifact_manifest.txt");
    let mut text = std::fs::read_to_string(&m).unwrap();
    text.push_str("math-libs/NOPE/stage\n");
    std::fs::write(&m, text).unwrap();
    let err = package_fails(&arts, &t.path().join("o3"), &["--version", VERSION]);
    assert!(err.contains("math-libs/NOPE/stage") && err.contains("blas_dev_generic"), "{err}");

    // No version anywhere; a bad version; then version.json's rocm-version + .dev0
    // (as the reference; the manifest's version is not used).
    let arts = rocm_artifacts("split", &t.path().join("d"));
    let err = package_fails(&arts, &t.path().join("o4"), &[]);
    assert!(err.contains("--version"), "{err}");
    let err = package_fails(&arts, &t.path().join("o4"), &["--version", "7.10-beta"]);
    assert!(err.contains("7.10-beta") && err.contains("PEP 440"), "{err}");
    std::fs::write(t.path().join("d/version.json"), r#"{"rocm-version": "7.10.0rc1"}"#).unwrap();

    // Dangling symlinks and directory symlinks are dropped and reported.
    let lib = arts.join("core-hip_lib_generic/core/clr/stage/lib");
    std::os::unix::fs::symlink("libgone.so.1", lib.join("libgone.so")).unwrap();
    std::os::unix::fs::symlink(".", lib.join("self-dir")).unwrap();
    let j = package(&arts, &t.path().join("o5"), &[]);
    assert_eq!(j["version"], "7.10.0rc1.dev0");
    let dropped = j["dropped"].as_array().unwrap();
    let has = |pkg: &str, path: &str, why: &str| {
        dropped.iter().any(|d| d["package"] == pkg && d["path"] == path && d["reason"].as_str().unwrap().contains(why))
    };
    assert!(has("rocm-sdk-core", "lib/libgone.so", "dangling"), "{dropped:?}");
    assert!(has("rocm-sdk-core", "lib/self-dir", "directory"), "{dropped:?}");
    let devel = &j["packages"].as_array().unwrap().iter().find(|p| p["name"] == "rocm-sdk-devel").unwrap();
    assert_eq!(devel["links"]["_rocm_sdk_devel/lib/libgone.so"], "libgone.so.1", "devel keeps symlinks verbatim");
    assert!(dist_files(&t.path().join("o5/dist")).iter().any(|p| p.to_string_lossy().contains("7.10.0rc1")));
}
