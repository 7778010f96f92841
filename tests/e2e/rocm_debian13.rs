//! The shipped Debian 13 ROCm runtime image, built from its lock through
//! the shared cache (tests/e2e/code_objects.rs compiles with the builder): it
//! runs as `tester` in video/render, has the HIP, HSA, rocBLAS and hipBLAS
//! libraries, python3 and the ROCm tools, and on this GPU-less machine
//! `rocminfo` says the kernel driver is missing.
use crate::common;

use common::*;

#[test]
fn rocm_runtime_image_runs_as_tester_with_the_rocm_libraries_and_tools() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (runtime, _) = debian13_rocm_images();
    let script = r#"
        id; echo "ROCM_PATH=$ROCM_PATH"; python3 -c 'import sys; print("python", sys.version_info[:2])'
        for l in libamdhip64.so.5 libhsa-runtime64.so.1 librocblas.so.0 libhipblas.so.0; do
            ldconfig -p | grep -q "$l " && echo "found $l"
        done
        rocminfo; echo "rocminfo exit $?"
        command -v rocm-smi
    "#;
    let out = run_expect(
        quarry()
            .arg("run")
            .arg(&runtime)
            .args(["--gpu", "none", "--cache-dir"])
            .arg(packages_cache())
            .args(["--", "sh", "-c", script]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("uid=1000(tester)") && text.contains("(video)") && text.contains("(render)"), "{text}");
    assert!(text.contains("ROCM_PATH=/usr") && text.contains("python (3, 13)"), "{text}");
    for l in ["libamdhip64.so.5", "libhsa-runtime64.so.1", "librocblas.so.0", "libhipblas.so.0"] {
        assert!(text.contains(&format!("found {l}")), "{l} is not in the loader cache:\n{text}");
    }
    assert!(text.contains("ROCk module is NOT loaded") && text.contains("rocminfo exit 1"), "{text}");
    assert!(text.contains("/usr/bin/rocm-smi"), "{text}");
}
