//! The shipped `rocm-test-image`: the Debian test image (an `image` base)
//! plus a ROCm dist, a wheel installed into a virtualenv by a no-network
//! step, and smoke tests that its entrypoint runs; `quarry run` exits with
//! their status. Also the `image` base kind's bad input through the CLI and
//! its Dockerfile rendering.
use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// .debs and indexes shared with tests/e2e/packages_images.rs.
fn cache_dir() -> PathBuf {
    packages_cache()
}

fn image_def() -> PathBuf {
    repo().join("images/rocm-test-image.toml")
}

struct RemoveImage(String);
impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// A tiny pure-Python wheel, `tinypkg` 1.0, written with quarry's own
/// deterministic wheel writer (RECORD made for it).
fn tiny_wheel(dir: &Path) {
    let tree = dir.join("tree");
    write(&tree.join("tinypkg/__init__.py"), "VALUE = 42\n");
    write(&tree.join("tinypkg-1.0.dist-info/METADATA"), "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n");
    write(
        &tree.join("tinypkg-1.0.dist-info/WHEEL"),
        "Wheel-Version: 1.0\nGenerator: quarry-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    );
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    quarry::wheel::archive::pack_dir(
        &tree,
        "tinypkg-1.0.dist-info",
        &wheels.join("tinypkg-1.0-py3-none-any.whl"),
        quarry::wheel::archive::zip_time(0),
    )
    .unwrap();
    std::fs::remove_dir_all(&tree).unwrap();
}

const TEST_IMPORT: &str = "import os, tinypkg\n\
assert tinypkg.VALUE == 42\n\
assert tinypkg.__file__.startswith('/opt/venv/'), tinypkg.__file__\n\
rocm = os.environ['ROCM_PATH']\n\
assert rocm == '/opt/rocm' and os.path.isfile(os.path.join(rocm, 'lib/libamdhip64.so')), rocm\n\
print('tinypkg', tinypkg.VALUE, 'from', tinypkg.__file__)\n";

const TEST_LOADER: &str = "ldconfig -p | grep -q '/opt/rocm/lib/libamdhip64.so' || { echo 'libamdhip64 is not in the loader cache'; exit 1; }\n\
command -v hipinfo\n";

fn build(out: &Path, sets: &[(&str, &Path)]) -> serde_json::Value {
    let mut c = quarry();
    c.arg("build").arg(image_def()).arg("--cache-dir").arg(cache_dir()).arg("-o").arg(out).arg("--json");
    for (k, v) in sets {
        c.arg("--set").arg(format!("{k}={}", v.display()));
    }
    stdout_json(&run_expect(&mut c, 0))
}

fn run(layout: &Path, args: &[&str]) -> std::process::Output {
    let o = quarry()
        .arg("run")
        .arg(layout)
        .args(["--gpu", "none", "--cache-dir"])
        .arg(cache_dir())
        .arg("--")
        .args(args)
        .output()
        .unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    o
}

/// Containers of `tag` that are still there.
fn containers_of(tag: &str) -> String {
    let o = Command::new("docker").args(["ps", "-aq", "--filter", &format!("ancestor={tag}")]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn rocm_test_image_runs_its_smoke_tests_and_exits_with_their_status() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    tiny_wheel(w);
    let artifacts = rocm_artifacts("split", w);
    let dist = w.join("rocm-dist");
    run_expect(quarry().args(["rocm", "flatten", "--artifact-dir"]).arg(&artifacts).arg("--output").arg(&dist), 0);
    let passing = w.join("smoke-pass");
    write(&passing.join("test_import.py"), TEST_IMPORT);
    write(&passing.join("test_loader.sh"), TEST_LOADER);
    write(&passing.join("helper.txt"), "not a test\n");
    let failing = w.join("smoke-fail");
    write(&failing.join("test_import.py"), TEST_IMPORT);
    write(&failing.join("test_broken.sh"), "echo about to fail\nexit 3\n");
    let wheels = w.join("wheels");

    // Passing: every test runs, the container's status is 0.
    let pass_name = unique("rocm-test-pass");
    let pass_out = w.join(&pass_name);
    let _pass_image = RemoveImage(format!("{pass_name}:latest"));
    let j = build(&pass_out, &[("ROCM_DIST", &dist), ("WHEELS", &wheels), ("SMOKE_TESTS", &passing)]);
    let names: Vec<&str> = j["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["no_rocm_image_debian12/base", "rocm", "smoke-runner", "wheels", "venv", "smoke"],
        "the Debian test image's layers, then this image's: {j:#}"
    );
    let o = run(&pass_out, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("--- PASS test_import.py") && stdout.contains("--- PASS test_loader.sh"), "{stdout}");
    assert!(stdout.contains("tinypkg 42 from /opt/venv/") && stdout.contains("/opt/rocm/bin/hipinfo"), "{stdout}");
    assert!(stdout.contains("smoke tests: 2 passed") && !stdout.contains("helper"), "{stdout}");
    assert!(containers_of(&format!("{pass_name}:latest")).is_empty(), "no container is left");

    // Failing: only the smoke layer changes; the status is non-zero and the
    // output names the failing test.
    let fail_name = unique("rocm-test-fail");
    let fail_out = w.join(&fail_name);
    let fail_tag = format!("{fail_name}:latest");
    let _fail_image = RemoveImage(fail_tag.clone());
    let k = build(&fail_out, &[("ROCM_DIST", &dist), ("WHEELS", &wheels), ("SMOKE_TESTS", &failing)]);
    let digests = |j: &serde_json::Value| -> Vec<(String, String)> {
        j["layers"].as_array().unwrap().iter().map(|l| (l["name"].to_string(), l["digest"].to_string())).collect()
    };
    let (before, after) = (digests(&j), digests(&k));
    let changed: Vec<&str> =
        before.iter().zip(&after).filter(|(b, a)| b != a).map(|(b, _)| b.0.trim_matches('"')).collect();
    assert_eq!(changed, ["smoke"], "{j:#}\n{k:#}");
    assert!(k["layers"].as_array().unwrap()[..5].iter().all(|l| l["cached"] == true), "{k:#}");
    let o = run(&fail_out, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("about to fail\n--- FAIL test_broken.sh (exit 3)"), "{stdout}");
    assert!(stdout.contains("smoke tests: 1 passed, 1 failed: test_broken.sh"), "{stdout}");
    // Arguments pick tests; another command runs instead of them.
    let o = run(&fail_out, &["test_import.py"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("smoke tests: 1 passed"));
    let o = run(&fail_out, &["sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    assert!(containers_of(&fail_tag).is_empty(), "no container is left");

    // No wheels: the no-network step says what is missing and leaves nothing.
    let empty = w.join("no-wheels");
    std::fs::create_dir_all(&empty).unwrap();
    let mut c = quarry();
    c.arg("build").arg(image_def()).arg("--cache-dir").arg(cache_dir()).arg("-o").arg(w.join("never"));
    for (k, v) in [("ROCM_DIST", &dist), ("WHEELS", &empty), ("SMOKE_TESTS", &passing)] {
        c.arg("--set").arg(format!("{k}={}", v.display()));
    }
    let o = run_expect(&mut c, 1);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("no .whl files in /opt/wheelhouse") && stderr.contains("layer `venv`"), "{stderr}");
    assert!(!w.join("never").exists(), "no layout is written");
}

#[test]
fn image_base_bad_input_is_refused_naming_file_and_field() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    write(&w.join("missing.toml"), "name = \"m\"\nbase = { image = \"nowhere/base.toml\" }\n");
    let o = run_expect(quarry().arg("build").arg(w.join("missing.toml")).arg("-o").arg(w.join("out")), 1);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("missing.toml: field `base.image`") && e.contains("nowhere/base.toml"), "{e}");

    write(&w.join("a.toml"), "name = \"a\"\nbase = { image = \"${NEXT}\" }\n[params]\nNEXT = \"b.toml\"\n");
    write(&w.join("b.toml"), "name = \"b\"\nbase = { image = \"a.toml\" }\n");
    for cmd in ["build", "dockerfile"] {
        let o = run_expect(quarry().arg(cmd).arg(w.join("a.toml")), 1);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("b.toml: field `base.image`") && e.contains("cycle"), "{cmd}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    assert!(!w.join("out").exists(), "nothing is written");
    // A parameter may name the base: here the cycle is broken with --set.
    write(
        &w.join("c.toml"),
        "name = \"c\"\nbase = \"scratch\"\n[[layer]]\nname = \"x\"\n[[layer.source]]\nremove = [\"/x\"]\n",
    );
    run_expect(
        quarry()
            .arg("build")
            .arg(w.join("a.toml"))
            .args(["--set", "NEXT=c.toml", "-o"])
            .arg(w.join("out"))
            .arg("--cache-dir")
            .arg(w.join("cache")),
        0,
    );
    assert!(w.join("out/index.json").is_file());
}

#[test]
fn rocm_test_image_renders_and_locks_through_its_base() {
    let o = run_expect(quarry().current_dir(repo()).args(["dockerfile", "images/rocm-test-image.toml"]), 0);
    let d = String::from_utf8_lossy(&o.stdout);
    let base_from = d.find("FROM debian:bookworm AS no_rocm_image_debian12\n").expect(&d);
    let from = d.find("\nFROM no_rocm_image_debian12\n").expect(&d);
    assert!(base_from < from, "{d}");
    assert!(d.contains("COPY \"rocm-dist/\" \"/opt/rocm/\""), "{d}");
    assert!(
        d.ends_with("WORKDIR /home/tester\nUSER tester\nENTRYPOINT [\"/usr/local/bin/run-smoke-tests\"]\nCMD []\n"),
        "{d}"
    );

    // `quarry lock` pins the packages of the base definition, beside it.
    let o = run_expect(
        quarry().arg("lock").arg(image_def()).args([
            "--dry-run",
            "--json",
            "--set",
            "DEBIAN_MIRROR=http://mirror.invalid/debian",
        ]),
        0,
    );
    let plan = stdout_json(&o);
    assert_eq!(plan["release"], "http://mirror.invalid/debian/dists/bookworm/InRelease");
    assert!(plan["lock"].as_str().unwrap().ends_with("images/no_rocm_image_debian12.lock"), "{plan}");
}
