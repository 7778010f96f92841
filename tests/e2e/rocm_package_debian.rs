//! `quarry rocm package` on real ROCm libraries: Debian 13's ROCm 5.7
//! packages laid out as ROCm artifacts (tests/fixtures/debian-rocm-artifacts.sh),
//! packaged, then installed with pip in a Debian 13 container (its glibc and
//! libstdc++ are the ones these libraries were built against): `rocm-sdk
//! test`, the real librocblas loaded with ctypes, a device package's Tensile
//! files overlaid on the libraries package. No `--version`: the version is
//! the one Debian's HIP records (hip_version.h, 5.7) plus `.dev0`, and the
//! reference's `rocm_sdk` API holds on these real libraries.

use crate::common;

use common::*;
use std::path::Path;
use std::process::Command;

/// What the artifacts record (HIP 5.7 in Debian 13) plus `.dev0`.
const VERSION: &str = "5.7.dev0";

fn fixture(script: &str, out: &Path, args: &[&str]) {
    with_lock(script, || {
        let st =
            Command::new("sh").arg(repo().join("tests/fixtures").join(script)).arg(out).args(args).status().unwrap();
        assert!(st.success(), "tests/fixtures/{script} failed");
    });
}

/// Run `cmd` (it must exit `code`); also the bytes it and its children
/// wrote, from its own rusage: `wait4` on its pid, so the other tests'
/// children, running in this process at the same time, are not counted.
#[expect(clippy::zombie_processes, reason = "reaped by wait4 on its pid, which also gives its rusage")]
fn run_counting_writes(cmd: &mut Command, code: i32) -> (std::process::Output, u64) {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let child = cmd
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: wait4 fills the status and the struct it is given, for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4: {}", std::io::Error::last_os_error());
    let out = std::process::Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read(&err_path).unwrap(),
    };
    assert_eq!(out.status.code(), Some(code), "{cmd:?}\n{}", String::from_utf8_lossy(&out.stderr));
    (out, usage.ru_oublock as u64 * 512)
}

#[test]
fn debian_rocm_packages_install_and_load_in_trixie() {
    if !have_tool("python3") || !have_tool("mmdebstrap") || !have_tool("dpkg-deb") || !have_docker() {
        return;
    }
    let cache = fixtures_dir().join(format!("debian-rocm-{}", script_tag("debian-rocm-artifacts.sh")));
    fixture("debian-rocm-artifacts.sh", &cache, &["split"]);
    let arts = cache.join("artifacts-split");
    let rootfs = fixtures_dir().join(format!("trixie-rocm-rootfs-{}.tar", script_tag("trixie-rootfs.sh")));
    fixture("trixie-rootfs.sh", &rootfs, &[]);

    let t = tempfile::tempdir().unwrap();
    let dest = t.path().join("out");
    let (out, written) = run_counting_writes(
        quarry()
            // quarry brings its own patchelf: none on PATH, so none can be picked up.
            .env("PATH", path_without_patchelf())
            .args(["rocm", "package", "--json", "--artifact-dir"])
            .arg(&arts)
            .arg("--dest-dir")
            .arg(&dest),
        0,
    );
    let j = stdout_json(&out);
    assert_eq!(j["version"], VERSION, "{j:#}");
    // Every ELF file edited by quarry itself, none handed to patchelf.
    assert_eq!(j["elf_editor"], "native", "{j:#}");
    assert_eq!(j["patchelf_fallbacks"], serde_json::json!([]), "{j:#}");
    assert!(j["patchelf"].is_null(), "{j:#}");
    assert!(j["native_edits"].as_u64().unwrap() >= 15, "{j:#}");
    // No scratch copies: what quarry wrote is about the packages' size
    // (the kernel counts every page dirtied, scratch files later deleted too).
    let dist_bytes: u64 = j["packages"].as_array().unwrap().iter().map(|p| p["size"].as_u64().unwrap()).sum();
    assert!(
        written <= dist_bytes + (64 << 20),
        "quarry wrote {written} bytes for {dist_bytes} bytes of packages: scratch copies?"
    );
    let from = j["version_from"].as_str().unwrap();
    assert!(from.contains("include/hip/hip_version.h") && from.contains("core-hip_dev_generic"), "{from}");
    let names: Vec<&str> = j["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for n in [
        "rocm",
        "rocm-sdk-core",
        "rocm-sdk-libraries",
        "rocm-sdk-device-gfx90a",
        "rocm-sdk-device-gfx1100",
        "rocm-sdk-devel",
    ] {
        assert!(names.contains(&n), "{n}: {names:?}");
    }
    // The reference's rules, one by one, on every package and member.
    let checks = common::rocm_rules::check(&arts, &dest.join("dist"), VERSION, true);
    assert!(checks > 40, "{checks} checks");
    let pkg = |n: &str| j["packages"].as_array().unwrap().iter().find(|p| p["name"] == n).unwrap().clone();
    // The rules on real libraries: SONAME-only, aliases, RPATH strings.
    let libs = pkg("rocm-sdk-libraries");
    let up2 = "$ORIGIN/../../_rocm_sdk_core";
    assert_eq!(
        libs["rpaths"]["_rocm_sdk_libraries/lib/librocblas.so.0"],
        format!("$ORIGIN:{up2}/lib:{up2}/lib/rocm_sysdeps/lib:{up2}/lib/host-math/lib:{up2}/lib/llvm/lib")
    );
    assert_eq!(libs["aliases"]["lib/librocblas.so.0.1"], "librocblas.so.0");
    let core = pkg("rocm-sdk-core");
    assert!(core["files"].as_array().unwrap().iter().any(|f| f == "_rocm_sdk_core/lib/libamdhip64.so.5"));
    let dev = pkg("rocm-sdk-device-gfx90a");
    assert!(dev["files"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().ends_with("TensileLibrary_gfx90a.co")));
    assert!(!dev["files"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().contains("gfx1100")));

    // Install and use them in Debian 13.
    let image = format!("quarry-test-trixie-rocm:{}", std::process::id());
    run_expect(Command::new("docker").args(["import", "--change", "CMD [\"/bin/sh\"]"]).arg(&rootfs).arg(&image), 0);
    let script = r#"set -e
python3 -m venv /v
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/dist PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
/v/bin/pip install -q 'rocm[libraries,devel]'
/v/bin/rocm-sdk test
/v/bin/python - <<'PY'
import ctypes, os, rocm_sdk, _rocm_sdk_libraries
rocm_sdk.initialize_process(preload_shortnames=["amdhip64"])
lib = os.path.join(os.path.dirname(_rocm_sdk_libraries.__file__), "lib", "librocblas.so.0")
h = ctypes.CDLL(lib)
h.rocblas_get_version_string_size.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
n = ctypes.c_size_t()
assert h.rocblas_get_version_string_size(ctypes.byref(n)) == 0
buf = ctypes.create_string_buffer(n.value)
h.rocblas_get_version_string(buf, n)
print("ROCBLAS", buf.value.decode())
# The reference's contract: paths as pathlib.Path, unknown names a ModuleNotFoundError.
import pathlib
assert all(isinstance(p, pathlib.Path) for p in rocm_sdk.find_libraries("amdhip64", "hipblas"))
try:
    rocm_sdk.find_libraries("rocblas")
    raise SystemExit("rocblas is not one of the reference's short names")
except ModuleNotFoundError:
    print("CONTRACT-OK")
PY
libs=$(/v/bin/python -c 'import os, _rocm_sdk_libraries; print(os.path.dirname(_rocm_sdk_libraries.__file__))')
test ! -e "$libs/lib/rocblas/2.47.0/library/TensileLibrary_gfx90a.co"
/v/bin/pip install -q 'rocm[device-gfx90a]'
test -f "$libs/lib/rocblas/2.47.0/library/TensileLibrary_gfx90a.co"
test -f "$libs/lib/librocblas.so.0"
test ! -e "$libs/lib/rocblas/2.47.0/library/TensileLibrary_gfx1100.co"
echo OVERLAY-OK
"#;
    let mut mount = dest.join("dist").into_os_string();
    mount.push(":/dist:ro");
    let run = Command::new("docker")
        .args(["run", "--rm", "--label", "quarry.test=rocm-package-debian", "-v"])
        .arg(mount)
        .arg(&image)
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &image]).output();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    assert!(stdout.contains("PASS  loads _rocm_sdk_libraries/lib/librocblas.so.0"), "{stdout}");
    assert!(stdout.contains("ROCBLAS 2.47"), "{stdout}");
    assert!(stdout.contains("CONTRACT-OK"), "{stdout}");
    assert!(stdout.contains("OVERLAY-OK"), "{stdout}");
}
