//! `quarry wheel build` with build isolation on a corpus of real sdists, one
//! per build backend, in a Debian 12 image made by quarry from the Debian
//! archive that has only Python, its venv module, gcc/g++ and the -dev
//! libraries the corpus links (tests/wheel_corpus/build-image.toml): no
//! setuptools, Cython, CMake, meson or patchelf. Each sdist is built twice
//! (the same bytes), checked against auditwheel, repaired, and installed
//! and imported in a fresh container of an image without compilers or -dev
//! libraries. Offline: with the lock and a
//! warm cache a build needs no index; without a lock an unreachable index
//! is an error naming the requirement.

use crate::common;
use crate::wheel_fixtures;

use common::{have_docker, quarry, run_expect, stdout_json, with_lock};
use std::path::{Path, PathBuf};
use std::process::Command;
use wheel_fixtures::{fixtures, Fixtures};

/// The corpus's fixtures: sdists, the images, the cache, the locks.
fn dir() -> PathBuf {
    let d = common::fixtures_dir().join("wheelcorpus");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cache() -> PathBuf {
    dir().join("cache")
}

/// The corpus (tests/fixtures/wheel-corpus.sh), fetched once.
fn corpus() -> PathBuf {
    common::wheel_corpus()
}

fn sdist(prefix: &str) -> PathBuf {
    let d = corpus().join("sdists");
    std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no sdist {prefix}* in {}", d.display()))
}

/// An image definition of tests/wheel_corpus/ built once into an OCI
/// layout under target/ (named by the definition's hash).
fn image(def: &str) -> PathBuf {
    let def = common::repo().join("tests/wheel_corpus").join(def);
    let text = std::fs::read_to_string(&def).unwrap();
    let stem = def.file_stem().unwrap().to_string_lossy().into_owned();
    let layout = dir().join(format!("{stem}-{}", &quarry::oci::digest::sha256_hex(text.as_bytes())[..12]));
    with_lock(&format!("wheelcorpus-{stem}"), || {
        if !layout.join("index.json").is_file() {
            let tmp = dir().join(format!("{stem}.tmp"));
            let _ = std::fs::remove_dir_all(&tmp);
            run_expect(
                quarry().arg("build").arg(&def).arg("-o").arg(&tmp).arg("--cache-dir").arg(cache()).arg("--quiet"),
                0,
            );
            std::fs::rename(&tmp, &layout).unwrap();
        }
    });
    layout
}

fn ready() -> Option<Fixtures> {
    if !have_docker() || !common::have_tool("gpgv") {
        return None;
    }
    fixtures()
}

/// `quarry wheel build --json` of `src` into `out` with the corpus lock of
/// `lock_name`; the wheels it reports. `again` builds even though the cache
/// has the wheels (`--no-cache`): a second build must give the same bytes.
fn build(src: &Path, out: &Path, lock: &Path, env: &[(&str, &str)], again: bool) -> Vec<serde_json::Value> {
    let mut cmd = quarry();
    cmd.args(["wheel", "build", "--json", "--gpu", "none", "--image"])
        .arg(image("build-image.toml"))
        .arg("--cache-dir")
        .arg(cache())
        .arg("--lock")
        .arg(lock)
        .arg("-o")
        .arg(out)
        .arg(src);
    if again {
        cmd.arg("--no-cache");
    }
    set_env(&mut cmd, env);
    let o = run_expect(&mut cmd, 0);
    let v = stdout_json(&o);
    let list = v.as_array().expect("a JSON list").clone();
    assert_eq!(list.len(), 1, "one Python in the image, one wheel: {v}");
    for w in &list {
        assert_eq!(w["isolated"], true, "{w}");
        let p = Path::new(w["wheel"].as_str().unwrap());
        assert_eq!(w["sha256"].as_str().unwrap(), quarry::oci::digest::sha256_file(p).unwrap());
    }
    list
}

/// Set (or, for an empty value, remove) environment variables.
fn set_env(cmd: &mut Command, env: &[(&str, &str)]) {
    for (k, v) in env {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
}

fn lock_for(prefix: &str) -> PathBuf {
    dir().join("locks").join(format!("{prefix}.lock"))
}

/// `wheel check` and `auditwheel show` agree on a platform wheel; the policy.
fn same_policy_as_auditwheel(fx: &Fixtures, wheel: &Path) -> String {
    let v = stdout_json(&run_expect(quarry().args(["wheel", "check", "--json"]).arg(wheel), 0));
    let ours = v[0]["policy"].as_str().unwrap().to_string();
    assert_eq!(v[0]["record_ok"], true, "{v}");
    let reference = fx.auditwheel_policy(wheel);
    assert_eq!(ours, reference, "{}: quarry {ours} vs auditwheel {reference}", wheel.display());
    ours
}

/// Install `wheel` (its dependencies from the corpus' runtime wheelhouse)
/// into a fresh virtualenv in a fresh container of the run image, then run
/// `script` there from /tmp; `before` runs first as root (e.g. removes a library).
fn install_and_run(wheel: &Path, before: &str, script: &str) -> std::process::Output {
    let body = format!(
        "set -e\n{before}\npython3 -m venv /v\n\
         /v/bin/pip install --disable-pip-version-check --no-index --find-links /runtime -q /wheels/{}\n\
         cd /tmp\n/v/bin/python -c '{script}'\n",
        wheel.file_name().unwrap().to_string_lossy()
    );
    quarry()
        .arg("run")
        .arg(image("run-image.toml"))
        .arg("--copy-in")
        .arg(format!("{}:/wheels", wheel.parent().unwrap().display()))
        .arg("--copy-in")
        .arg(format!("{}:/runtime", corpus().join("runtime").display()))
        .args(["--", "sh", "-c", &body])
        .output()
        .unwrap()
}

/// Build twice (same bytes), check, repair, install and import where no
/// compiler or -dev library exists.
fn corpus_case(prefix: &str, import: &str, before: &str) {
    let Some(fx) = ready() else { return };
    let src = sdist(prefix);
    let lock = lock_for(prefix);
    let work = tempfile::tempdir().unwrap();
    let a = build(&src, &work.path().join("a"), &lock, &[], false);
    let b = build(&src, &work.path().join("b"), &lock, &[], true);
    assert_eq!(a[0]["sha256"], b[0]["sha256"], "two builds of {prefix} differ:\n{a:?}\n{b:?}");
    assert_eq!(
        Path::new(a[0]["wheel"].as_str().unwrap()).file_name(),
        Path::new(b[0]["wheel"].as_str().unwrap()).file_name()
    );
    let lock_text = std::fs::read_to_string(&lock).unwrap();
    assert!(lock_text.contains("for = \"installer\"") && lock_text.contains("sha256 = "), "{lock_text}");

    let wheel = PathBuf::from(a[0]["wheel"].as_str().unwrap());
    let installed = if a[0]["pure"] == true {
        wheel
    } else {
        assert!(a[0]["tag"].as_str().unwrap().ends_with("-linux_x86_64"), "{a:?}");
        same_policy_as_auditwheel(&fx, &wheel);
        // Repaired on this machine (Debian 12, as the image).
        let o = run_expect(
            quarry()
                .args(["wheel", "repair", "--json", "-o"])
                .arg(work.path().join("repaired"))
                .arg(&wheel)
                .env("PATH", fx.path_env()),
            0,
        );
        let r = stdout_json(&o);
        // Edited natively, every file (a patchelf on PATH is never used).
        assert_eq!(r["elf_editor"], "native", "{r}");
        assert_eq!(r["patchelf_fallbacks"], serde_json::json!([]), "{r}");
        let repaired = PathBuf::from(r["output"].as_str().unwrap());
        let policy = same_policy_as_auditwheel(&fx, &repaired);
        assert!(policy.starts_with("manylinux_"), "{}: {policy}", repaired.display());
        repaired
    };
    let script = format!("import {import} as m; print(\"IMPORTED\", m.__name__, m.__file__)");
    let out = install_and_run(&installed, before, &script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("IMPORTED") && stdout.contains("/v/lib/"),
        "installing {} failed:\nstdout:\n{stdout}\nstderr:\n{}",
        installed.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// setuptools + setuptools-scm, C and C++ (the failing case).
#[test]
fn ujson_setuptools_scm() {
    corpus_case("ujson-", "ujson", "");
}

/// setuptools, C (the case of different bytes from the same sdist).
#[test]
fn xxhash_setuptools() {
    corpus_case("xxhash-", "xxhash", "");
}

/// An in-tree backend (`backend-path`) that asks for Cython at build time.
#[test]
fn frozenlist_cython_in_tree_backend() {
    corpus_case("frozenlist-", "frozenlist._frozenlist", "");
}

/// scikit-build-core + nanobind, C++ with CMake (cmake and ninja asked for by the backend).
#[test]
fn mapbox_earcut_scikit_build_core_nanobind() {
    corpus_case("mapbox_earcut-", "mapbox_earcut", "");
}

/// meson-python building itself (in-tree backend; ninja asked for by the backend).
#[test]
fn meson_python_mesonpy() {
    corpus_case("meson_python-", "mesonpy", "");
}

/// cffi links libffi: the repaired wheel works where the system has none.
#[test]
fn cffi_bundles_libffi() {
    corpus_case("cffi-", "_cffi_backend", "rm -f /usr/lib/*/libffi.so* /lib/*/libffi.so*");
}

/// hatchling + hatch-vcs, pure Python.
#[test]
fn platformdirs_hatchling() {
    corpus_case("platformdirs-", "platformdirs", "");
}

/// No pyproject.toml: setuptools' legacy default (`setuptools>=40.8.0`, `wheel`).
#[test]
fn crcmod_setup_py_only() {
    corpus_case("crcmod-", "crcmod._crcfunext", "");
}

/// With the lock and a warm cache no index is needed; without a lock an
/// unreachable index is an error that names the requirement.
#[test]
fn offline_with_a_lock_and_an_error_without() {
    let Some(_fx) = ready() else { return };
    let src = sdist("crcmod-");
    let work = tempfile::tempdir().unwrap();
    let lock = work.path().join("crcmod.lock");
    let first = build(&src, &work.path().join("a"), &lock, &[], false);
    // A closed port on this machine: pip cannot reach any index.
    let offline = [
        ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
        ("PIP_FIND_LINKS", ""),
        ("PIP_RETRIES", "1"),
        ("PIP_DEFAULT_TIMEOUT", "5"),
    ];
    let again = build(&src, &work.path().join("b"), &lock, &offline, true);
    assert_eq!(first[0]["sha256"], again[0]["sha256"]);

    let mut cmd = quarry();
    cmd.args(["wheel", "build", "--gpu", "none", "--image"])
        .arg(image("build-image.toml"))
        .arg("--cache-dir")
        .arg(cache())
        .arg("-o")
        .arg(work.path().join("c"))
        .arg(&src);
    set_env(&mut cmd, &offline);
    let o = run_expect(&mut cmd, 1);
    let err = String::from_utf8_lossy(&o.stderr);
    // pip names the first requirement it could not find a wheel for.
    let named =
        ["setuptools>=40.8.0", "wheel", "pip"].iter().any(|r| err.contains(&format!("build requirement `{r}`")));
    assert!(named && err.contains("--find-links"), "the error names the requirement and what to do: {err}");
    assert!(err.contains("could not reach the package index"), "{err}");
    assert!(!work.path().join("c/quarry-wheel.lock").exists(), "no lock from a failed resolution");
    assert_eq!(common::leaked_quarry_containers(), Vec::<String>::new());
}
