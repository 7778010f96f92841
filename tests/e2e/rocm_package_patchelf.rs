//! `quarry rocm package` on a machine without patchelf: quarry edits the
//! RPATHs itself (no patchelf fetched, none run), and a file its editor
//! refuses is patched by quarry's own pinned patchelf instead, named in the
//! report. Every packaged ELF file still passes the verifier.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn package(arts: &Path, dest: &Path, cache: Option<&Path>) -> serde_json::Value {
    let mut c = quarry();
    c.env("PATH", path_without_patchelf())
        .args(["rocm", "package", "--json", "--version", "7.10.0.dev0", "--artifact-dir"])
        .arg(arts)
        .arg("--dest-dir")
        .arg(dest);
    if let Some(cache) = cache {
        c.env("QUARRY_CACHE", cache);
    }
    stdout_json(&run_expect(&mut c, 0))
}

/// Every ELF member of every wheel: verified, and how many carry an $ORIGIN RPATH.
fn check_wheels(report: &serde_json::Value, scratch: &Path) -> usize {
    let mut patched = 0;
    let dist = PathBuf::from(report["dist_dir"].as_str().unwrap());
    for w in std::fs::read_dir(&dist).unwrap().map(|e| e.unwrap().path()) {
        if w.extension().is_none_or(|e| e != "whl") {
            continue;
        }
        let x = scratch.join(w.file_name().unwrap());
        zip::ZipArchive::new(std::fs::File::open(&w).unwrap()).unwrap().extract(&x).unwrap();
        for f in walkdir::WalkDir::new(&x).into_iter().map(|e| e.unwrap().into_path()) {
            if f.is_file() && quarry::elf::is_elf(&f) {
                let info = quarry::elf::verify(&f).unwrap_or_else(|e| panic!("{e}"));
                if info.rpath.as_deref().is_some_and(|r| r.contains("$ORIGIN")) {
                    patched += 1;
                }
            }
        }
    }
    patched
}

#[test]
fn packages_with_no_patchelf_on_path() {
    if !have_tool("python3") || !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let cache = t.path().join("cache");
    let report = package(&arts, &t.path().join("out"), Some(&cache));
    assert_eq!(report["elf_editor"], "native", "{report}");
    assert_eq!(report["patchelf_fallbacks"], serde_json::json!([]), "{report}");
    assert!(report["patchelf"].is_null(), "no patchelf ran: {report}");
    let fetched: Vec<PathBuf> = walkdir::WalkDir::new(&cache)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.into_path())
        .filter(|p| p.to_string_lossy().contains("patchelf"))
        .collect();
    assert!(fetched.is_empty(), "nothing needed patchelf, yet it was fetched: {fetched:?}");
    let native = report["native_edits"].as_u64().unwrap();
    let patched = check_wheels(&report, &t.path().join("x"));
    assert!(patched > 0 && native > 0, "{patched} patched ELF files, {native} native edits");

    // Two more libraries. One linked with no spare dynamic entries: the new
    // DT_RPATH moves `.dynamic` (quarry does it; patchelf 0.19.3 fails on
    // it). One carrying Nix's `.note.nixos.ldcache` (patchelf drops that
    // section when it sets an RPATH, so quarry leaves such files to it): the
    // pinned patchelf patches it and the report names the file and why.
    let lib_dir = arts.join("blas_lib_generic/math-libs/BLAS/stage/lib");
    let src = t.path().join("nospare.c");
    std::fs::write(&src, "int nospare_answer(void) { return 7; }\n").unwrap();
    for (name, extra) in [("libnospare.so.1", "-Wl,--spare-dynamic-tags=0"), ("libnix.so.1", "-Wl,--as-needed")] {
        run_expect(
            Command::new("cc")
                .args(["-shared", "-fPIC", &format!("-Wl,-soname,{name}"), extra, "-o"])
                .arg(lib_dir.join(name))
                .arg(&src),
            0,
        );
    }
    mark_nix_ldcache(&lib_dir.join("libnix.so.1"));
    let report = package(&arts, &t.path().join("out2"), None);
    let fallbacks = report["patchelf_fallbacks"].as_array().unwrap();
    assert_eq!(fallbacks.len(), 1, "{report}");
    assert!(fallbacks[0]["file"].as_str().unwrap().ends_with("libnix.so.1"), "{report}");
    assert!(fallbacks[0]["reason"].as_str().unwrap().contains("nixos"), "{report}");
    let pe = report["patchelf"].as_str().unwrap();
    assert!(pe.contains("0.19.3") && pe.contains("/tools/patchelf-"), "quarry's own patchelf: {report}");
    assert_eq!(report["native_edits"].as_u64().unwrap(), native + 1, "the others stay native: {report}");
    let x2 = t.path().join("x2");
    assert_eq!(check_wheels(&report, &x2), patched + 2);
    for name in ["libnospare.so.1", "libnix.so.1"] {
        let lib = walkdir::WalkDir::new(&x2)
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .find(|p| p.ends_with(format!("lib/{name}")))
            .unwrap_or_else(|| panic!("{name} is packaged"));
        let code = format!(
            "import ctypes, os; print(ctypes.CDLL({:?}, os.RTLD_NOW).nospare_answer())",
            lib.display().to_string()
        );
        let out = run_expect(Command::new("python3").arg("-c").arg(code), 0);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7", "{name}");
    }
}
