//! The abi3 audit of `quarry wheel check`: two tiny extension modules
//! compiled with `cc` against this machine's Python headers, one with
//! `Py_LIMITED_API` (keeps to the Stable ABI: passes) and one without
//! (uses `PyUnicode_AsUTF8`, outside it: reported), each packed as a
//! `cp38-abi3` wheel; and one built for the 3.10 limited API but tagged for
//! 3.8 (reported with the version that added the symbol). abi3audit (the
//! reference tool, in a virtualenv in the test fixtures) gives the same
//! verdict on each wheel.

use crate::common;
use crate::wheel_fixtures;

use common::{have_tool, quarry, run_expect, stdout_json};
use std::path::{Path, PathBuf};
use std::process::Command;
use wheel_fixtures::{cc_shared, make_wheel};

/// The include directory of this machine's python3 (python3-dev).
fn python_include() -> Option<PathBuf> {
    if !have_tool("python3") || !have_tool("cc") {
        return None;
    }
    let o = Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
        .output()
        .unwrap();
    let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    if dir.join("Python.h").is_file() {
        Some(dir)
    } else {
        assert!(!common::in_ci(), "CI is set but Python.h is missing (python3-dev)");
        None
    }
}

/// An extension module `name` from `body` (the module's one function),
/// with `limited` as Py_LIMITED_API when given, as `name.abi3.so` in a
/// `name-1.0-TAG-abi3-linux_x86_64.whl`.
fn abi3_wheel(dir: &Path, include: &Path, name: &str, limited: Option<&str>, tag: &str, body: &str) -> PathBuf {
    let src = format!(
        "{}#include <Python.h>\n\
         static PyObject *f(PyObject *self, PyObject *arg) {{ {body} }}\n\
         static PyMethodDef methods[] = {{{{\"f\", f, METH_O, NULL}}, {{NULL, NULL, 0, NULL}}}};\n\
         static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, \"{name}\", NULL, -1, methods}};\n\
         PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&mod); }}\n",
        limited.map(|v| format!("#define Py_LIMITED_API {v}\n")).unwrap_or_default()
    );
    let so = dir.join("build").join(format!("{name}.abi3.so"));
    cc_shared(&so, &src, &[&format!("-I{}", include.display())]);
    let file = format!("{name}-1.0-{tag}-abi3-linux_x86_64.whl");
    make_wheel(&dir.join("wheels"), &file, &[(&format!("{name}.abi3.so"), &so)])
}

/// abi3audit 0.0.26 in a virtualenv in the fixtures (made once);
/// None outside CI when pip cannot install it.
fn abi3audit() -> Option<PathBuf> {
    let venv = common::fixtures_dir().join("abi3audit-venv");
    let bin = venv.join("bin/abi3audit");
    common::with_lock("abi3audit-venv", || {
        if bin.exists() {
            return;
        }
        let ok = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "--disable-pip-version-check", "abi3audit==0.0.26"])
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir_all(&venv);
        }
    });
    if bin.exists() {
        Some(bin)
    } else {
        assert!(!common::in_ci(), "CI is set but `pip install abi3audit` failed");
        None
    }
}

/// abi3audit's verdict on a wheel: true when it finds nothing wrong.
fn abi3audit_ok(tool: &Path, wheel: &Path) -> bool {
    let o = Command::new(tool).arg(wheel).output().unwrap();
    o.status.success()
}

fn check(wheel: &Path, code: i32) -> (serde_json::Value, String) {
    let o = run_expect(quarry().args(["wheel", "check", "--json"]).arg(wheel), code);
    (stdout_json(&o)[0].clone(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn limited_api_wheels_pass_and_others_are_reported() {
    let Some(include) = python_include() else { return };
    let t = tempfile::tempdir().unwrap();

    // Keeps to the 3.8 limited API.
    let good = abi3_wheel(
        t.path(),
        &include,
        "good",
        Some("0x03080000"),
        "cp38",
        "return PyLong_FromLong(PyLong_AsLong(arg) + 1);",
    );
    let (v, err) = check(&good, 0);
    assert_eq!(v["abi3_ok"], true, "{v}\n{err}");
    assert_eq!(v["abi3"]["minimum"], "3.8");
    assert_eq!(v["abi3"]["violations"], serde_json::json!([]));
    assert_eq!(v["gpu_targets"], serde_json::json!([]));
    let human = run_expect(quarry().args(["wheel", "check"]).arg(&good), 0);
    assert!(String::from_utf8_lossy(&human.stdout).contains("abi3        ok (Stable ABI of Python 3.8)"));

    // The full API: PyUnicode_AsUTF8 is not in the Stable ABI.
    let bad = abi3_wheel(
        t.path(),
        &include,
        "bad",
        None,
        "cp38",
        "const char *s = PyUnicode_AsUTF8(arg); return PyLong_FromLong(s ? s[0] : 0);",
    );
    let (v, err) = check(&bad, 1);
    assert_eq!(v["abi3_ok"], false, "{v}");
    let violations = v["abi3"]["violations"].as_array().unwrap();
    assert!(
        violations
            .iter()
            .any(|x| x["symbol"] == "PyUnicode_AsUTF8" && x["added"].is_null() && x["file"] == "bad.abi3.so"),
        "{v}"
    );
    assert!(err.contains("bad-1.0-cp38-abi3") && err.contains("PyUnicode_AsUTF8 is not in the Stable ABI"), "{err}");

    // Built for the 3.10 limited API but tagged cp38: the symbol is too new.
    let newer = abi3_wheel(
        t.path(),
        &include,
        "newer",
        Some("0x030A0000"),
        "cp38",
        "Py_ssize_t n; const char *s = PyUnicode_AsUTF8AndSize(arg, &n); return PyLong_FromSsize_t(s ? n : -1);",
    );
    let (v, err) = check(&newer, 1);
    assert_eq!(v["abi3_ok"], false);
    assert!(err.contains("PyUnicode_AsUTF8AndSize joined the Stable ABI in Python 3.10"), "{err}");
    // The same file tagged cp310 keeps its promise.
    let dir = t.path().join("cp310");
    let so = t.path().join("build/newer.abi3.so");
    let retagged = make_wheel(&dir, "newer-1.0-cp310-abi3-linux_x86_64.whl", &[("newer.abi3.so", &so)]);
    assert_eq!(check(&retagged, 0).0["abi3_ok"], true);

    // The reference tool agrees on every wheel.
    if let Some(tool) = abi3audit() {
        for (wheel, ok) in [(&good, true), (&bad, false), (&newer, false), (&retagged, true)] {
            assert_eq!(abi3audit_ok(&tool, wheel), ok, "abi3audit on {}", wheel.display());
        }
    }

    // A wheel not tagged abi3 is not audited.
    let plain = make_wheel(
        &t.path().join("plain"),
        "bad-1.0-cp311-cp311-linux_x86_64.whl",
        &[("bad.so", &t.path().join("build/bad.abi3.so"))],
    );
    assert!(check(&plain, 0).0["abi3_ok"].is_null());
}
