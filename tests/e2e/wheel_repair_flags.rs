//! auditwheel 6.x parity of `quarry wheel repair`'s options, each compared
//! with auditwheel 6.8.2 itself where it decides the same thing: `--exclude`
//! also leaves out what only the excluded library needs, by soname or by
//! path; `--only-plat`; `--no-update-tags`; `--plat auto` and
//! `AUDITWHEEL_PLAT`; `--strip`; the CycloneDX SBOM of the bundled
//! libraries (parsed: names and sha256 checked against the files).
//! Every repair here runs with no patchelf on PATH.

use crate::common;
use crate::wheel_fixtures;

use common::{have_tool, path_without_patchelf, quarry, run_expect, stdout_json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use wheel_fixtures::{cc_shared, fixtures, make_wheel, only_wheel, zip_names, Fixtures};

fn repair_cmd(wheel: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = quarry();
    c.env("PATH", path_without_patchelf()).args(["wheel", "repair", "--json", "-o"]).arg(out).arg(wheel).args(extra);
    c
}

/// A repair that edits every file natively (no patchelf fallback).
fn repair(wheel: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let r = stdout_json(&run_expect(&mut repair_cmd(wheel, out, extra), 0));
    assert!(r["elf_editor"] == "native" && r["patchelf_fallbacks"] == serde_json::json!([]), "{r}");
    r
}

/// `auditwheel repair` into `out`; the wheel it wrote.
fn auditwheel_repair(fx: &Fixtures, wheel: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> PathBuf {
    let o = Command::new(fx.bin.join("auditwheel"))
        .env("PATH", fx.path_env())
        .envs(env.iter().copied())
        .args(["repair", "-w"])
        .arg(out)
        .args(extra)
        .arg(wheel)
        .output()
        .unwrap();
    assert!(o.status.success(), "auditwheel repair failed: {}", String::from_utf8_lossy(&o.stderr));
    only_wheel(out)
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn bundled_sonames(report: &serde_json::Value) -> Vec<String> {
    report["bundled"].as_array().unwrap().iter().map(|b| b["soname"].as_str().unwrap().to_string()).collect()
}

/// Files under `<name>.libs/` in a wheel.
fn libs_in(wheel: &Path) -> Vec<String> {
    zip_names(wheel).into_iter().filter(|n| n.contains(".libs/") && !n.ends_with('/')).collect()
}

/// `libb.so.1`, `liba.so.1` (needs libb) in `dir/lib`, and two wheels: one
/// whose extension needs liba only, one whose extension needs both.
fn chained_libraries(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let lib = dir.join("lib");
    cc_shared(&lib.join("libb.so.1"), "int b_answer(void) { return 41; }\n", &["-Wl,-soname,libb.so.1"]);
    let l = format!("-L{}", lib.display());
    std::os::unix::fs::symlink("libb.so.1", lib.join("libb.so")).unwrap();
    cc_shared(
        &lib.join("liba.so.1"),
        "int b_answer(void);\nint a_answer(void) { return b_answer() + 1; }\n",
        &["-Wl,-soname,liba.so.1", &l, "-lb"],
    );
    std::os::unix::fs::symlink("liba.so.1", lib.join("liba.so")).unwrap();
    let build = dir.join("build");
    let ext = build.join("_ext.cpython-311-x86_64-linux-gnu.so");
    cc_shared(&ext, "int a_answer(void);\nint PyInit__ext(void) { return a_answer(); }\n", &[&l, "-la"]);
    let ext2 = build.join("_ext2.cpython-311-x86_64-linux-gnu.so");
    cc_shared(
        &ext2,
        "int a_answer(void);\nint b_answer(void);\nint PyInit__ext2(void) { return a_answer() + b_answer(); }\n",
        &[&l, "-la", "-lb", "-Wl,--no-as-needed"],
    );
    let one = make_wheel(
        &dir.join("in1"),
        "demo-1.0-cp311-cp311-linux_x86_64.whl",
        &[("demo/_ext.cpython-311-x86_64-linux-gnu.so", &ext)],
    );
    let both = make_wheel(
        &dir.join("in2"),
        "demo-1.0-cp311-cp311-linux_x86_64.whl",
        &[("demo/_ext2.cpython-311-x86_64-linux-gnu.so", &ext2)],
    );
    (lib, one, both)
}

#[test]
fn excluding_a_library_also_leaves_out_what_only_it_needs() {
    let Some(fx) = fixtures() else { return };
    if !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (lib, one, both) = chained_libraries(t.path());
    let ld = lib.display().to_string();
    let run = |wheel: &Path, out: &str, extra: &[&str]| {
        stdout_json(&run_expect(repair_cmd(wheel, &t.path().join(out), extra).env("LD_LIBRARY_PATH", &ld), 0))
    };
    let reference = |wheel: &Path, out: &str, extra: &[&str]| {
        libs_in(&auditwheel_repair(&fx, wheel, &t.path().join(out), extra, &[("LD_LIBRARY_PATH", &ld)])).len()
    };

    // Nothing excluded: both are bundled, by both tools.
    let r = run(&one, "a", &[]);
    assert_eq!(bundled_sonames(&r), ["liba.so.1", "libb.so.1"], "{r}");
    assert_eq!(reference(&one, "ref-a", &[]), 2);

    // liba excluded by soname or by path: libb, which only liba needs, goes too.
    let path_glob = format!("{ld}/liba*");
    for (n, pattern) in [("b", "liba.so.1"), ("c", path_glob.as_str())] {
        let r = run(&one, n, &["--exclude", pattern]);
        assert_eq!(r["bundled"], serde_json::json!([]), "--exclude {pattern}: {r}");
        assert_eq!(r["excluded_libs"], serde_json::json!(["liba.so.1"]), "{r}");
        assert!(r["sbom"].is_null(), "nothing bundled, no SBOM: {r}");
        assert!(libs_in(&only_wheel(&t.path().join(n))).is_empty());
        assert_eq!(reference(&one, &format!("ref-{n}"), &["--exclude", pattern]), 0, "auditwheel --exclude {pattern}");
    }

    // An extension that needs libb itself still gets it.
    let r = run(&both, "d", &["--exclude", "liba.so.1"]);
    assert_eq!(bundled_sonames(&r), ["libb.so.1"], "{r}");
    assert_eq!(reference(&both, "ref-d", &["--exclude", "liba.so.1"]), 1);
}

#[test]
fn only_plat_and_no_update_tags_name_the_wheel_as_auditwheel_does() {
    let Some(fx) = fixtures() else { return };
    let t = tempfile::tempdir().unwrap();
    let cffi = fx.wheel("cffi-");
    // cffi reaches manylinux_2_34 here; asking for 2_39 also tags the more
    // compatible 2_34...
    let r = repair(&cffi, &t.path().join("a"), &["--plat", "manylinux_2_39_x86_64"]);
    let tags = r["platform_tags"].to_string();
    assert!(tags.contains("manylinux_2_39_x86_64") && tags.contains("manylinux_2_34_x86_64"), "{tags}");
    let reference = auditwheel_repair(&fx, &cffi, &t.path().join("ref-a"), &["--plat", "manylinux_2_39_x86_64"], &[]);
    assert_eq!(file_name(&only_wheel(&t.path().join("a"))), file_name(&reference));

    // ...unless --only-plat.
    let r = repair(&cffi, &t.path().join("b"), &["--plat", "manylinux_2_39_x86_64", "--only-plat"]);
    assert_eq!(r["platform_tags"], serde_json::json!(["manylinux_2_39_x86_64"]), "{r}");
    let reference = auditwheel_repair(
        &fx,
        &cffi,
        &t.path().join("ref-b"),
        &["--plat", "manylinux_2_39_x86_64", "--only-plat"],
        &[],
    );
    assert_eq!(file_name(&only_wheel(&t.path().join("b"))), file_name(&reference));

    // --no-update-tags: libffi bundled, the name and WHEEL tags untouched.
    let r = repair(&cffi, &t.path().join("c"), &["--no-update-tags"]);
    assert_eq!(bundled_sonames(&r), ["libffi.so.8"]);
    let out = only_wheel(&t.path().join("c"));
    assert_eq!(file_name(&out), file_name(&cffi));
    let mut z = zip::ZipArchive::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut wheel_meta = String::new();
    std::io::Read::read_to_string(&mut z.by_name("cffi-1.17.1.dist-info/WHEEL").unwrap(), &mut wheel_meta).unwrap();
    assert!(wheel_meta.contains("Tag: cp311-cp311-linux_x86_64") && !wheel_meta.contains("manylinux"), "{wheel_meta}");
    let reference = auditwheel_repair(&fx, &cffi, &t.path().join("ref-c"), &["--no-update-tags"], &[]);
    assert_eq!(file_name(&out), file_name(&reference));
}

#[test]
fn plat_auto_and_auditwheel_plat() {
    let Some(fx) = fixtures() else { return };
    let t = tempfile::tempdir().unwrap();
    let cffi = fx.wheel("cffi-");
    let default = repair(&cffi, &t.path().join("a"), &[]);
    let auto = repair(&cffi, &t.path().join("b"), &["--plat", "auto"]);
    assert_eq!(default["policy"], "manylinux_2_34_x86_64");
    assert_eq!(default["platform_tags"], auto["platform_tags"]);

    // AUDITWHEEL_PLAT is the default for --plat; --plat wins over it.
    let env = run_expect(
        repair_cmd(&cffi, &t.path().join("c"), &["--only-plat"]).env("AUDITWHEEL_PLAT", "manylinux_2_39_x86_64"),
        0,
    );
    assert_eq!(stdout_json(&env)["platform_tags"], serde_json::json!(["manylinux_2_39_x86_64"]));
    let reference = auditwheel_repair(
        &fx,
        &cffi,
        &t.path().join("ref-c"),
        &["--only-plat"],
        &[("AUDITWHEEL_PLAT", "manylinux_2_39_x86_64")],
    );
    assert_eq!(file_name(&only_wheel(&t.path().join("c"))), file_name(&reference));
    let wins = run_expect(
        repair_cmd(&cffi, &t.path().join("d"), &["--plat", "auto"]).env("AUDITWHEEL_PLAT", "manylinux_2_39_x86_64"),
        0,
    );
    assert_eq!(stdout_json(&wins)["policy"], "manylinux_2_34_x86_64");
    let bad =
        run_expect(repair_cmd(&cffi, &t.path().join("e"), &[]).env("AUDITWHEEL_PLAT", "manylinux_9_99_x86_64"), 1);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("manylinux_9_99"));
}

fn section_names(file: &Path) -> String {
    let o = Command::new("readelf").arg("-SW").arg(file).output().unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn strip_removes_symbols_and_the_wheel_still_imports() {
    let Some(fx) = fixtures() else { return };
    if !have_tool("readelf") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let cffi = fx.wheel("cffi-");
    let plain = repair(&cffi, &t.path().join("a"), &[]);
    let stripped = repair(&cffi, &t.path().join("b"), &["--strip"]);
    assert_eq!(stripped["stripped"], true);
    for (report, dir, has_symtab) in [(&plain, "a", true), (&stripped, "b", false)] {
        let x = t.path().join(format!("x-{dir}"));
        zip::ZipArchive::new(std::fs::File::open(only_wheel(&t.path().join(dir))).unwrap())
            .unwrap()
            .extract(&x)
            .unwrap();
        let lib = x.join(report["bundled"][0]["path"].as_str().unwrap());
        let ext = std::fs::read_dir(&x)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| file_name(p).starts_with("_cffi_backend"))
            .unwrap();
        // The extension was built with symbols and debug information (the
        // system's libffi comes without).
        let s = section_names(&ext);
        assert_eq!(s.contains(" .symtab "), has_symtab, "{}: {s}", ext.display());
        assert_eq!(s.contains(" .debug_info "), has_symtab, "{}: {s}", ext.display());
        for f in [&ext, &lib] {
            let s = section_names(f);
            assert!(has_symtab || !(s.contains(" .symtab ") || s.contains(" .debug_")), "{}: {s}", f.display());
            quarry::elf::verify(f).unwrap();
        }
        // The stripped extension and library still load and work.
        let o = Command::new(fx.bin.join("python"))
            .env("PYTHONPATH", &x)
            .args(["-c", "import cffi; f = cffi.FFI(); f.cdef('int abs(int);'); print(f.dlopen(None).abs(-42))"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "42", "{}", String::from_utf8_lossy(&o.stderr));
    }
    let size = |d: &str| std::fs::metadata(only_wheel(&t.path().join(d))).unwrap().len();
    assert!(size("b") < size("a"), "stripping makes the wheel smaller");
}

#[test]
fn sbom_lists_bundled_libraries_with_their_sha256() {
    let Some(fx) = fixtures() else { return };
    let t = tempfile::tempdir().unwrap();
    let report = repair(&fx.wheel("cffi-"), &t.path().join("a"), &[]);
    let wheel = only_wheel(&t.path().join("a"));
    let sbom_path = "cffi-1.17.1.dist-info/sboms/quarry.cdx.json";
    assert_eq!(report["sbom"], sbom_path);
    let mut z = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
    let read = |z: &mut zip::ZipArchive<std::fs::File>, name: &str| {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut z.by_name(name).unwrap(), &mut v).unwrap();
        v
    };
    let doc: serde_json::Value = serde_json::from_slice(&read(&mut z, sbom_path)).unwrap();
    assert_eq!(doc["bomFormat"], "CycloneDX");
    let spec: f64 = doc["specVersion"].as_str().unwrap().parse().unwrap();
    assert!(spec >= 1.4, "{doc}");
    let name = file_name(&wheel);
    assert_eq!(doc["metadata"]["component"]["purl"], format!("pkg:pypi/cffi@1.17.1?file_name={name}"));
    let libs: Vec<&serde_json::Value> =
        doc["components"].as_array().unwrap().iter().filter(|c| c["name"] != "cffi").collect();
    assert_eq!(libs.len(), 1, "{doc}");
    assert_eq!(libs[0]["name"], "libffi.so.8");
    let bundled = report["bundled"][0]["path"].as_str().unwrap();
    let actual = hex::encode(Sha256::digest(read(&mut z, bundled)));
    assert_eq!(libs[0]["hashes"][0]["alg"], "SHA-256");
    assert_eq!(libs[0]["hashes"][0]["content"], actual.as_str(), "the hash of the file the wheel holds");
    assert!(libs[0]["purl"].as_str().unwrap().starts_with("pkg:deb/"), "dpkg names the package: {doc}");
    let deps = &doc["dependencies"][0];
    assert_eq!(deps["ref"], doc["metadata"]["component"]["bom-ref"]);
    assert_eq!(deps["dependsOn"][0], libs[0]["bom-ref"]);
    // Listed in RECORD with its hash (`wheel check` verifies RECORD).
    let record = String::from_utf8(read(&mut z, "cffi-1.17.1.dist-info/RECORD")).unwrap();
    assert!(record.lines().any(|l| l.starts_with(&format!("{sbom_path},sha256="))), "{record}");
    let check = run_expect(quarry().args(["wheel", "check", "--json"]).arg(&wheel), 0);
    assert_eq!(stdout_json(&check)[0]["record_ok"], true);

    // auditwheel describes the same system package.
    let reference = auditwheel_repair(&fx, &fx.wheel("cffi-"), &t.path().join("ref"), &[], &[]);
    let mut rz = zip::ZipArchive::new(std::fs::File::open(&reference).unwrap()).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_slice(&read(&mut rz, "cffi-1.17.1.dist-info/sboms/auditwheel.cdx.json")).unwrap();
    let their_purls: Vec<&str> =
        theirs["components"].as_array().unwrap().iter().filter_map(|c| c["purl"].as_str()).collect();
    // Ours adds the arch and distro qualifiers to the same package URL.
    let ours = libs[0]["purl"].as_str().unwrap().split('?').next().unwrap();
    assert!(their_purls.contains(&ours), "ours {} vs auditwheel {their_purls:?}", libs[0]);

    // Nothing bundled: no SBOM.
    let r = repair(&fx.wheel("msgpack-"), &t.path().join("b"), &[]);
    assert!(r["sbom"].is_null());
    assert!(!zip_names(&only_wheel(&t.path().join("b"))).iter().any(|n| n.contains("sboms/")));
}

/// A file the native editor refuses (a Nix `.note.nixos.ldcache` section,
/// which patchelf drops on RPATH edits) is edited by quarry's pinned patchelf; the
/// report names the file and why; the other files are still edited
/// natively, the output is the same bytes twice and the extension loads
/// its bundled libraries with no search path set.
#[test]
fn a_file_the_native_editor_refuses_falls_back_to_patchelf() {
    if !have_tool("cc") || !have_tool("python3") || !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (lib, _, _) = chained_libraries(t.path());
    let ext = t.path().join("full/_ext.cpython-311-x86_64-linux-gnu.so");
    let l = format!("-L{}", lib.display());
    cc_shared(&ext, "int a_answer(void);\nint PyInit__ext(void) { return a_answer(); }\n", &[&l, "-la"]);
    common::mark_nix_ldcache(&ext);
    let member = "demo/_ext.cpython-311-x86_64-linux-gnu.so";
    let wheel = make_wheel(&t.path().join("in"), "demo-1.0-cp311-cp311-linux_x86_64.whl", &[(member, &ext)]);
    let ld = lib.display().to_string();
    let mut wheels = Vec::new();
    for out in ["a", "b"] {
        let mut cmd = repair_cmd(&wheel, &t.path().join(out), &[]);
        cmd.env("LD_LIBRARY_PATH", &ld).env("SOURCE_DATE_EPOCH", "1700000000");
        let r = stdout_json(&run_expect(&mut cmd, 0));
        assert_eq!(r["elf_editor"], "native", "{r}");
        assert_eq!(r["native_edits"], 2, "liba and libb, natively: {r}");
        let fallbacks = r["patchelf_fallbacks"].as_array().unwrap();
        assert_eq!(fallbacks.len(), 1, "{r}");
        assert_eq!(fallbacks[0]["file"], member, "{r}");
        assert!(fallbacks[0]["reason"].as_str().unwrap().contains("nixos"), "{r}");
        let pe = r["patchelf"].as_str().unwrap();
        assert!(pe.contains("0.19.3") && pe.contains("quarry's own"), "{pe}");
        wheels.push(only_wheel(&t.path().join(out)));
    }
    assert!(std::fs::read(&wheels[0]).unwrap() == std::fs::read(&wheels[1]).unwrap(), "two repairs differ");

    let x = t.path().join("x");
    zip::ZipArchive::new(std::fs::File::open(&wheels[0]).unwrap()).unwrap().extract(&x).unwrap();
    let o = Command::new("python3")
        .env_remove("LD_LIBRARY_PATH")
        .args(["-c", "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).PyInit__ext())"])
        .arg(x.join(member))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "42", "{}", String::from_utf8_lossy(&o.stderr));
}
