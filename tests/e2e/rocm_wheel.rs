//! A framework-style wheel built on ROCm's own Python packages, end to end:
//! Debian 13's ROCm 5.7 laid out as ROCm artifacts (the shared fixture of
//! tests/e2e/rocm_package_debian.rs; the core, HIP, comgr and rocFFT artifacts,
//! so packaging takes seconds) packaged by `quarry rocm package`, then
//! examples/rocm-wheel (a HIP kernel behind a C-API module in a package)
//! built by `quarry wheel build --rocm-packages` in a Debian 13 image with
//! no ROCm at all: only Debian's clang 17 (and its AMDGPU device bitcode)
//! as the compiler; HIP's headers and libamdhip64 come from the
//! `rocm[libraries,devel]` installed from quarry's packages. The wheel
//! holds code for both targets, requires `rocm[libraries]==5.7.dev0`,
//! carries `_rocm_init.py`, bundles nothing from ROCm; `--test` in a clean
//! Debian 13 image (no ROCm, no compiler) installs it with the packages
//! offline, and the import maps libamdhip64 from the installed
//! `_rocm_sdk_core`. Then what goes wrong: packages absent, a ROCm of
//! another version (a warning; an error with the fail flag).

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "5.7.dev0";
/// The build image's compiler: clang (with clang-offload-bundler, llvm-objcopy, lld)
/// and the device bitcode it links; Python's headers. Nothing of HIP.
const COMPILER: &str = "clang-17,clang-tools-17,lld-17,llvm-17,rocm-device-libs-17,python3-dev";
/// The artifacts packaged: enough for `rocm[libraries,devel]`.
const ARTIFACTS: [&str; 4] = ["base_", "core-", "amd-llvm_", "fft_"];

/// Engine images imported for the test, removed when it ends.
struct Images(Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for i in &self.0 {
            let _ = Command::new("docker").args(["rmi", "-f", i]).output();
        }
    }
}

/// A Debian 13 rootfs (tests/fixtures/trixie-rootfs.sh, with `extra`
/// packages) imported as an engine image with `env`.
fn trixie_image(images: &mut Images, name: &str, extra: &str, env: &[&str]) -> String {
    let tag = script_tag("trixie-rootfs.sh");
    let rootfs = match extra {
        "" => fixtures_dir().join(format!("trixie-rocm-rootfs-{tag}.tar")),
        e => fixtures_dir()
            .join(format!("trixie-clang-rootfs-{tag}-{}.tar", &quarry::oci::digest::sha256_hex(e.as_bytes())[..12])),
    };
    let lock = if extra.is_empty() { "trixie-rootfs.sh".to_string() } else { "trixie-clang-rootfs".to_string() };
    with_lock(&lock, || {
        let st = Command::new("sh")
            .arg(repo().join("tests/fixtures/trixie-rootfs.sh"))
            .arg(&rootfs)
            .arg(extra)
            .status()
            .unwrap();
        assert!(st.success(), "tests/fixtures/trixie-rootfs.sh failed");
    });
    let image = format!("{}:{}", unique(name), std::process::id());
    let mut c = Command::new("docker");
    c.args(["import", "--change", "CMD [\"/bin/sh\"]"]);
    for e in env {
        c.arg("--change").arg(format!("ENV {e}"));
    }
    run_expect(c.arg(&rootfs).arg(&image), 0);
    images.0.push(image.clone());
    image
}

/// ROCm packages of `version` from the Debian artifacts' subset.
fn rocm_packages(work: &Path, version: Option<&str>) -> PathBuf {
    let cache = fixtures_dir().join(format!("debian-rocm-{}", script_tag("debian-rocm-artifacts.sh")));
    with_lock("debian-rocm-artifacts.sh", || {
        let st = Command::new("sh")
            .arg(repo().join("tests/fixtures/debian-rocm-artifacts.sh"))
            .arg(&cache)
            .arg("split")
            .status()
            .unwrap();
        assert!(st.success(), "tests/fixtures/debian-rocm-artifacts.sh failed");
    });
    let arts = work.join(format!("artifacts-{}", version.unwrap_or("default")));
    std::fs::create_dir_all(&arts).unwrap();
    for e in std::fs::read_dir(cache.join("artifacts-split")).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        if ARTIFACTS.iter().any(|a| n.starts_with(a)) {
            // Hard links: the fixture is read, never changed.
            assert!(Command::new("cp").arg("-al").arg(&p).arg(&arts).status().unwrap().success());
        }
    }
    let dest = work.join(format!("rocm-{}", version.unwrap_or("default")));
    let mut c = quarry();
    c.args(["rocm", "package", "--json", "--artifact-dir"]).arg(&arts).arg("--dest-dir").arg(&dest);
    if let Some(v) = version {
        c.args(["--version", v]);
    }
    let j = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(j["version"], version.unwrap_or(VERSION), "{j:#}");
    dest.join("dist")
}

fn build(build_image: &str, out: &Path, dist: &Path, extra: &[&str]) -> (PathBuf, String) {
    let mut c = quarry();
    c.args(["wheel", "build"]).arg(repo().join("examples/rocm-wheel"));
    c.args(["--image", build_image, "-o"]).arg(out).arg("--rocm-packages").arg(dist);
    // No --preload: the default is every ROCm library the wheel's binaries
    // need (libamdhip64.so.5, as hipcc links it), which `_rocm_init.py` loads first.
    c.args(["--axis", "PYTORCH_ROCM_ARCH=gfx90a;gfx1100", "--gpu", "none", "--repair"]);
    c.args(["--json", "--no-cache", "--cache-dir"]).arg(packages_cache()).args(extra);
    let o = run_expect(&mut c, 0);
    let built = stdout_json(&o);
    let wheels = built.as_array().expect("a list of wheels");
    assert_eq!(wheels.len(), 1, "{built:#}");
    assert_eq!(wheels[0]["rocm_requirement"], format!("rocm[libraries]=={VERSION}"), "{built:#}");
    assert_eq!(wheels[0]["rocm_init"], serde_json::json!(["hipscale"]), "{built:#}");
    assert_eq!(wheels[0]["rocm_excluded"], serde_json::json!(["libamdhip64.so.5"]), "{built:#}");
    (PathBuf::from(wheels[0]["wheel"].as_str().unwrap()), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn read_member(wheel: &Path, member: &str) -> String {
    let mut z = quarry::wheel::archive::WheelZip::open(wheel).unwrap();
    String::from_utf8(z.read_file(member).unwrap()).unwrap()
}

/// Imports in the runtime image, with the packages absent, then with
/// another ROCm version installed (the wheel of the fail flag in /f).
const WRONG: &str = r#"set -e
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
python3 -m venv /a
/a/bin/pip install -q --no-deps /w/*.whl
/a/bin/python -c 'import hipscale' 2>/tmp/err && exit 9 || echo "ABSENT: $(tail -n1 /tmp/err)"
/a/bin/pip install -q --find-links /dist 'rocm[libraries]'
/a/bin/pip uninstall -q -y rocm-sdk-core
/a/bin/python -c 'import hipscale' 2>/tmp/err && exit 9 || echo "NO-CORE: $(tail -n1 /tmp/err)"
python3 -m venv /b
/b/bin/pip install -q --find-links /other 'rocm[libraries]'
/b/bin/pip install -q --no-deps /w/*.whl
/b/bin/python -c 'import hipscale; print("IMPORTED", hipscale.__file__)' 2>&1 | sed 's/^/WARN: /'
/b/bin/pip install -q --no-deps --force-reinstall /f/*.whl
/b/bin/python -c 'import hipscale' 2>/tmp/err && exit 9 || echo "FAIL: $(tail -n1 /tmp/err)"
"#;

#[test]
fn hip_extension_on_rocm_packages_builds_without_rocm_and_loads_them() {
    if !have_docker() || !have_tool("mmdebstrap") || !have_tool("dpkg-deb") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let dist = rocm_packages(work.path(), None);
    let mut images = Images(Vec::new());
    let builder = trixie_image(
        &mut images,
        "clang-trixie",
        COMPILER,
        &["HIPCXX=/usr/lib/llvm-17/bin/clang++", "HIP_DEVICE_LIB_PATH=/usr/lib/llvm-17/lib/clang/17/amdgcn/bitcode"],
    );
    let runtime = trixie_image(&mut images, "clean-trixie", "", &[]);
    // No ROCm in the build image: HIP comes from the packages only.
    let probe = run_expect(
        Command::new("docker").args(["run", "--rm", &builder, "sh", "-c"]).arg(
            "ls /usr/include/hip /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 /usr/bin/hipcc 2>&1; \
             dpkg -l | grep -c -E 'libamdhip|hipcc|rocm-core' || true",
        ),
        0,
    );
    let text = String::from_utf8_lossy(&probe.stdout);
    assert_eq!(text.matches("No such file").count(), 3, "{text}");
    assert!(text.trim_end().ends_with("\n0"), "{text}");

    // Build, repair, test in the clean image.
    let test = r#"python -c '
import hipscale
maps = open("/proc/self/maps").read()
print("HIP-MAPPED", sorted({l.split()[-1] for l in maps.splitlines() if "libamdhip64" in l}))
try:
    hipscale.device_count()
except RuntimeError as e:
    print("DEVICE", e)
'"#;
    let out = work.path().join("wheels");
    let (wheel, stderr) = build(&builder, &out, &dist, &["--test", test, "--test-image", &runtime]);
    let site = "/tmp/quarry-venv/lib/python3.13/site-packages";
    assert!(stderr.contains(&format!("HIP-MAPPED ['{site}/_rocm_sdk_core/lib/libamdhip64.so.5']")), "{stderr}");
    assert!(stderr.contains("DEVICE hipGetDeviceCount: no ROCm-capable device is detected"), "{stderr}");
    // With --json the notes are not printed: the JSON says the same
    // (rocm_requirement, rocm_init, rocm_excluded, checked in `build`), and
    // stderr holds only the build's and the test's own output.
    assert!(!stderr.contains("_rocm_init.py in hipscale"), "{stderr}");
    assert!(!stderr.contains("left out 1 libraries the ROCm packages provide"), "{stderr}");
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("hipscale-1.0-cp313-cp313-"), "{name}");

    // What the wheel holds.
    let meta = read_member(&wheel, "hipscale-1.0.dist-info/METADATA");
    assert!(meta.contains(&format!("Requires-Dist: rocm[libraries]=={VERSION}\n")), "{meta}");
    let init = read_member(&wheel, "hipscale/_rocm_init.py");
    assert!(init.contains("PRELOAD_SHORTNAMES = [\"amdhip64\"]") && init.contains("CHECK_VERSION = \"5.7.dev0\""));
    let pkg_init = read_member(&wheel, "hipscale/__init__.py");
    let hook = pkg_init.find("_quarry_rocm_init.initialize()").expect("the hook");
    assert!(hook < pkg_init.find("from ._native import").unwrap(), "{pkg_init}");
    let listing = quarry::wheel::archive::WheelZip::open(&wheel).unwrap().file_names().unwrap();
    assert!(!listing.iter().any(|f| f.contains(".libs/")), "something was bundled: {listing:?}");

    // Every target; nothing of ROCm external once the packages are named.
    let check = |rocm: bool| {
        let mut c = quarry();
        c.args(["wheel", "check", "--json"]).arg(&wheel);
        if rocm {
            c.arg("--rocm-packages").arg(&dist);
        }
        stdout_json(&run_expect(&mut c, 0))
    };
    let plain = check(false);
    assert!(plain[0]["external_libs"].as_object().unwrap().contains_key("libamdhip64.so.5"), "{plain:#}");
    let c = check(true);
    assert_eq!(c[0]["gpu_targets"], serde_json::json!(["gfx1100", "gfx90a"]), "{c:#}");
    assert_eq!(c[0]["excluded_libs"], serde_json::json!(["libamdhip64.so.5"]), "{c:#}");
    let external: Vec<&String> = c[0]["external_libs"].as_object().unwrap().keys().collect();
    assert!(external.is_empty(), "{external:?}");

    // `wheel repair` of it on its own says the same.
    let o = run_expect(
        quarry()
            .args(["wheel", "repair", "--json", "--image", &builder, "--cache-dir"])
            .arg(packages_cache())
            .arg(&wheel)
            .arg("-o")
            .arg(work.path().join("repaired"))
            .arg("--rocm-packages")
            .arg(&dist),
        0,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("left out 1 libraries the ROCm packages in `"), "{stderr}");
    assert!(stderr.contains("provide (rocm_sdk loads them): libamdhip64.so.5"), "{stderr}");
    assert_eq!(stdout_json(&o)["excluded_libs"], serde_json::json!(["libamdhip64.so.5"]));

    // The same inputs again: the same bytes.
    let (again, _) = build(&builder, &work.path().join("again"), &dist, &[]);
    assert_eq!(std::fs::read(&wheel).unwrap(), std::fs::read(&again).unwrap(), "the rebuild differs");

    // With the fail flag; and ROCm packages of another version.
    let fail_dir = work.path().join("fail");
    let (fail, _) = build(&builder, &fail_dir, &dist, &["--rocm-fail-on-version-mismatch"]);
    assert!(read_member(&fail, "hipscale/_rocm_init.py").contains("FAIL_ON_VERSION_MISMATCH = True"));
    let other = rocm_packages(work.path(), Some("5.8.0.dev0"));
    let mut c = Command::new("docker");
    c.args(["run", "--rm", "--network", "none", "--label", "quarry.test=rocm-wheel"]);
    for (host, at) in [(&dist, "/dist"), (&other, "/other"), (&out, "/w"), (&fail_dir, "/f")] {
        c.arg("-v").arg(format!("{}:{at}:ro", host.display()));
    }
    let o = c.arg(&runtime).args(["sh", "-c", WRONG]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    assert!(!text.contains("cannot open shared object file"), "a loader error:\n{text}");
    assert!(
        text.contains("ABSENT: ImportError: hipscale needs ROCm's Python packages, which are not installed: pip install 'rocm[libraries]==5.7.dev0'"),
        "{text}"
    );
    assert!(text.contains("NO-CORE: ModuleNotFoundError: Missing required rocm libraries."), "{text}");
    // The pattern as the idiom shows it: escaped for a regular expression.
    let mismatch = "The program was compiled against a ROCm version matching '5\\.7\\.dev0' but the installed \
                    ROCm version in this Python environment is 5.8.0.dev0.";
    assert!(text.contains(&format!("UserWarning: {mismatch} This incompatibility")), "{text}");
    assert!(text.contains("WARN: IMPORTED /b/lib/python3.13/site-packages/hipscale/__init__.py"), "{text}");
    assert!(text.contains(&format!("FAIL: RuntimeError: {mismatch}")), "{text}");
}
