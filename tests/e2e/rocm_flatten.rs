//! `quarry rocm flatten` and the `rocm_artifacts` layer source: ROCm
//! artifact directories overlaid into the `/opt/rocm` dist tree.

use crate::common;

use common::*;
use std::path::Path;
use std::process::Command;

fn flatten(arts: &Path, out: &Path, extra: &[&str], code: i32) -> std::process::Output {
    run_expect(
        quarry().args(["rocm", "flatten", "--json", "--artifact-dir"]).arg(arts).arg("--output").arg(out).args(extra),
        code,
    )
}

#[test]
fn flatten_overlays_every_prefix() {
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("split", t.path());
    let out = t.path().join("dist");
    let j = stdout_json(&flatten(&arts, &out, &[], 0));
    assert_eq!(j["split"], true);
    assert_eq!(j["targets"], serde_json::json!(["gfx1100", "gfx942"]));
    for f in [
        "lib/libamdhip64.so.7.1.0",
        "lib/librocblas.so.5.0",
        "bin/hipinfo-real",
        "include/hip/hip_version.h",
        "lib/cmake/hip/hip-config.cmake",
        "lib/rocblas/library/Kernels_gfx942.co",
        "lib/rocblas/library/TensileLibrary_gfx1100.dat",
        "share/therock/therock_manifest.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    assert_eq!(std::fs::read_link(out.join("lib/libamdhip64.so.7")).unwrap(), Path::new("libamdhip64.so.7.1.0"));
    assert_eq!(std::fs::read_link(out.join("bin/hipinfo")).unwrap(), Path::new("hipinfo-real"));
    let o = Command::new(out.join("bin/hipinfo")).arg("x").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hipinfo-real argc=2 first=x\n");

    // Selections: one target, runtime components only.
    let sel = t.path().join("sel");
    flatten(&arts, &sel, &["--targets", "gfx942", "--components", "lib,run"], 0);
    assert!(sel.join("lib/rocblas/library/Kernels_gfx942.co").is_file());
    assert!(!sel.join("lib/rocblas/library/Kernels_gfx1100.co").exists());
    assert!(!sel.join("include").exists(), "dev artifacts were not selected");
    assert!(sel.join("bin/hipinfo-real").is_file());
}

#[test]
fn rocm_artifacts_layer_source_places_the_dist_tree() {
    let t = tempfile::tempdir().unwrap();
    let arts = rocm_artifacts("legacy", t.path());
    write(
        &t.path().join("images/rocm.toml"),
        &format!(
            "name = \"rocm\"\nbase = \"scratch\"\n[[layer]]\nname = \"rocm-dist\"\n[[layer.source]]\nrocm_artifacts = \"{}\"\ndest = \"/opt/rocm\"\ncomponents = [\"lib\"]\n",
            arts.display()
        ),
    );
    let out = t.path().join("out");
    let j = stdout_json(&run_expect(
        quarry()
            .args(["build", "--json", "--cache-dir"])
            .arg(t.path().join("cache"))
            .arg("-o")
            .arg(&out)
            .arg(t.path().join("images/rocm.toml")),
        0,
    ));
    let digest = j["layers"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:").to_string();
    let list = Command::new("tar").arg("-tzf").arg(out.join("blobs/sha256").join(digest)).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.contains("opt/rocm/lib/libamdhip64.so.7.1.0"), "{list}");
    assert!(list.contains("opt/rocm/lib/rocblas/library/rocblas_gfx94X-dcgpu.kpack"), "{list}");
    assert!(!list.contains("opt/rocm/bin/"), "only lib components: {list}");
}

#[test]
fn bad_artifacts_get_clear_errors() {
    let t = tempfile::tempdir().unwrap();
    let stderr = |o: std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    let a = rocm_artifacts("split", &t.path().join("a"));
    std::fs::remove_file(a.join("base_lib_generic/base/aux-overlay/stage/share/therock/therock_manifest.json"))
        .unwrap();
    let e = stderr(flatten(&a, &t.path().join("o1"), &[], 1));
    assert!(e.contains("therock_manifest.json"), "{e}");

    let b = rocm_artifacts("split", &t.path().join("b"));
    std::fs::rename(b.join("blas_lib_gfx942"), b.join("blas-lib-gfx942")).unwrap();
    let e = stderr(flatten(&b, &t.path().join("o2"), &[], 1));
    assert!(e.contains("blas-lib-gfx942") && e.contains("NAME_COMPONENT_TARGET"), "{e}");

    let c = rocm_artifacts("split", &t.path().join("c"));
    std::fs::write(c.join("blas_lib_generic/artifact_manifest.txt"), "math-libs/BLAS/stage\nmath-libs/gone/stage\n")
        .unwrap();
    let e = stderr(flatten(&c, &t.path().join("o3"), &[], 1));
    assert!(e.contains("blas_lib_generic") && e.contains("math-libs/gone/stage"), "{e}");

    // A dangling symlink is kept verbatim in the dist tree (it is data, not followed).
    let d = rocm_artifacts("split", &t.path().join("d"));
    std::os::unix::fs::symlink("missing.so.1", d.join("core-hip_lib_generic/core/clr/stage/lib/libdangling.so"))
        .unwrap();
    flatten(&d, &t.path().join("o4"), &[], 0);
    assert_eq!(std::fs::read_link(t.path().join("o4/lib/libdangling.so")).unwrap(), Path::new("missing.so.1"));

    // The output must be empty or new: nothing is overwritten.
    let e = stderr(flatten(&d, &t.path().join("o4"), &[], 1));
    assert!(e.contains("not empty"), "{e}");
}
