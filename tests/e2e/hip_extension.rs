//! A Python extension with a HIP kernel, end to end with the real compiler:
//! tests/fixtures/hip/pyext (C API, no torch, an in-tree PEP 517 backend
//! calling hipcc) built by `quarry wheel build` in hip-builder-debian13 for
//! the targets of a PYTORCH_ROCM_ARCH axis, repaired with
//! `--exclude 'libamdhip64.so*'` (nothing from ROCm bundled; `wheel check`
//! lists its gpu_targets), then imported in rocm-runtime-debian13, where
//! calling into the GPU says no device is present: without GPU nodes and
//! with simulated /dev/kfd and /dev/dri nodes passed through. Then
//! images/rocm-test-image.toml on rocm-runtime-debian13 with the wheel and
//! tests/fixtures/hip/smoke: its smoke tests run and report no device.

use crate::common;

use common::*;
use std::path::Path;
use std::process::Command;

/// Unpack the wheel (no pip in the runtime image needed), import, call.
const PROBE: &str = r#"python3 -m zipfile -e /tmp/w/*.whl /tmp/site && cd /tmp && PYTHONPATH=/tmp/site python3 -c '
import hipext
print("imported", hipext.__file__)
for name, call in (("device_count", hipext.device_count), ("scale", lambda: hipext.scale([1.0, 2.0], 3.0))):
    try:
        print(name, "returned", call())
    except RuntimeError as e:
        print(name, "raised", e)
'
id -G; ls /dev/kfd 2>&1 || true"#;

fn run_in_runtime(runtime: &Path, wheel: &Path, dev_root: Option<&Path>) -> String {
    let mut c = quarry();
    if let Some(d) = dev_root {
        c.env("QUARRY_DEV_ROOT", d);
    }
    c.arg("run").arg(runtime).args(["--gpu", if dev_root.is_some() { "amd" } else { "none" }]);
    c.arg("--cache-dir").arg(packages_cache());
    c.arg("--copy-in").arg(format!("{}:/tmp/w/", wheel.display())).args(["--", "sh", "-c", PROBE]);
    String::from_utf8_lossy(&run_expect(&mut c, 0).stdout).into_owned()
}

#[test]
fn hip_extension_wheel_builds_repairs_without_rocm_and_reports_no_device() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (runtime, builder) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("wheels");
    let built = stdout_json(&run_expect(
        quarry()
            .args(["wheel", "build"])
            .arg(repo().join("tests/fixtures/hip/pyext"))
            .arg("--image")
            .arg(&builder)
            .arg("-o")
            .arg(&out)
            .args(["--axis", "PYTORCH_ROCM_ARCH=gfx90a;gfx942;gfx1100", "--gpu", "none"])
            .args(["--repair", "--exclude", "libamdhip64.so*", "--json", "--cache-dir"])
            .arg(packages_cache())
            // The test is of the build: a wheel cached by an earlier run is not taken.
            .arg("--no-cache"),
        0,
    ));
    let wheels = built.as_array().unwrap_or_else(|| built["wheels"].as_array().expect("a list of wheels"));
    assert_eq!(wheels.len(), 1, "{built:#}");
    let wheel = std::path::PathBuf::from(wheels[0]["wheel"].as_str().unwrap());
    assert_eq!(wheels[0]["axes"]["PYTORCH_ROCM_ARCH"], "gfx90a;gfx942;gfx1100");

    // Nothing from ROCm is bundled; the targets of the axis, exactly.
    let check = stdout_json(&run_expect(quarry().args(["wheel", "check", "--json"]).arg(&wheel), 0));
    assert_eq!(check[0]["gpu_targets"], serde_json::json!(["gfx1100", "gfx90a", "gfx942"]), "{check:#}");
    assert!(check[0]["external_libs"].as_object().unwrap().contains_key("libamdhip64.so.5"), "{check:#}");
    let listing = Command::new("unzip").arg("-l").arg(&wheel).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(!listing.contains(".libs/"), "something was bundled:\n{listing}");

    // Imported in the runtime image: the GPU path says there is no device.
    for dev in [None, simulated_gpu_nodes(work.path())] {
        let text = run_in_runtime(&runtime, &wheel, dev.as_deref());
        assert!(text.contains("imported /tmp/site/hipext.cpython-313-x86_64-linux-gnu.so"), "{text}");
        assert!(text.contains("device_count raised hipGetDeviceCount: no ROCm-capable device is detected"), "{text}");
        assert!(text.contains("scale raised hipMalloc: no ROCm-capable device is detected"), "{text}");
        if dev.is_some() {
            // The nodes were there, owned by a gid the container was given.
            assert!(text.contains("/dev/kfd\n") && text.contains("4242"), "{text}");
        }
    }

    test_image_smoke_tests_report_no_device(&wheel, work.path());
}

/// images/rocm-test-image.toml with rocm-runtime-debian13 as its test image
/// (ROCm from Debian's packages: an empty ROCM_DIST, ROCM_PATH=/usr), the
/// wheel installed into its virtualenv by Debian's pip (which needs the CA
/// bundle) and tests/fixtures/hip/smoke: the import test passes, the GPU
/// test says no device is present, and the run exits 1 as the smoke tests do.
fn test_image_smoke_tests_report_no_device(wheel: &Path, work: &Path) {
    let (wheels, empty) = (work.join("test-image-wheels"), work.join("empty-rocm-dist"));
    std::fs::create_dir_all(&wheels).unwrap();
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::copy(wheel, wheels.join(wheel.file_name().unwrap())).unwrap();
    let layout = work.join("rocm-test-image");
    let mut c = quarry();
    c.arg("build").arg(repo().join("images/rocm-test-image.toml"));
    c.arg("--cache-dir").arg(packages_cache()).arg("-o").arg(&layout).arg("--json");
    for (k, v) in [
        ("TEST_IMAGE", "rocm-runtime-debian13.toml".into()),
        ("ROCM_DIST", empty.display().to_string()),
        ("ROCM_PATH", "/usr".into()),
        ("WHEELS", wheels.display().to_string()),
        ("SMOKE_TESTS", repo().join("tests/fixtures/hip/smoke").display().to_string()),
    ] {
        c.arg("--set").arg(format!("{k}={v}"));
    }
    let built = stdout_json(&run_expect(&mut c, 0));
    let names: Vec<&str> = built["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "rocm-runtime-debian13/base",
            "rocm-runtime-debian13/rocm-debian",
            "rocm",
            "smoke-runner",
            "wheels",
            "venv",
            "smoke"
        ],
        "{built:#}"
    );
    let o =
        quarry().arg("run").arg(&layout).args(["--gpu", "none", "--cache-dir"]).arg(packages_cache()).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("hipext from /opt/venv/lib/python3.13/site-packages/hipext"), "{all}");
    assert!(stdout.contains("/usr/lib/x86_64-linux-gnu/libamdhip64.so") && stdout.contains("ROCM_PATH=/usr"), "{all}");
    assert!(stdout.contains("--- PASS test_hipext_import.py"), "{all}");
    assert!(
        stdout.contains("no ROCm device present: hipGetDeviceCount: no ROCm-capable device is detected\n--- FAIL test_hipext_gpu.py (exit 1)"),
        "{all}"
    );
    assert!(stdout.contains("smoke tests: 1 passed, 1 failed: test_hipext_gpu.py"), "{all}");
    assert_eq!(o.status.code(), Some(1), "the smoke tests' status: {all}");
}

/// /dev/kfd and /dev/dri/renderD128 stand-ins (the null device's numbers)
/// owned by gid 4242; None when mknod is refused (outside CI).
fn simulated_gpu_nodes(dir: &Path) -> Option<std::path::PathBuf> {
    let dev = dir.join("dev");
    std::fs::create_dir_all(dev.join("dri")).unwrap();
    for node in ["kfd", "dri/renderD128"] {
        let p = dev.join(node);
        if !Command::new("mknod").arg(&p).args(["c", "1", "3"]).status().unwrap().success() {
            assert!(!in_ci(), "CI is set but mknod is not permitted: the GPU tests need root");
            eprintln!("skipping the simulated nodes: mknod is not permitted here");
            return None;
        }
        std::os::unix::fs::chown(&p, None, Some(4242)).unwrap();
    }
    Some(dev)
}
