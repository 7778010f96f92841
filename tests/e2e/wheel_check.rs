//! `quarry wheel check` on real wheels: the same policy as auditwheel,
//! before and after repair; RECORD problems named; truncated zips refused.

use crate::common;
use crate::wheel_fixtures;

use common::{quarry, run_expect, stdout_json};
use std::io::{Read, Write};
use std::path::Path;
use wheel_fixtures::{fixtures, only_wheel};

fn check_json(wheel: &Path, extra: &[&str]) -> serde_json::Value {
    let out = run_expect(quarry().args(["wheel", "check", "--json"]).args(extra).arg(wheel), 0);
    let v = stdout_json(&out);
    let arr = v.as_array().expect("a JSON array");
    assert_eq!(arr.len(), 1);
    for key in ["wheel", "policy", "symbol_versions", "external_libs", "excluded_libs", "record_ok"] {
        assert!(arr[0].get(key).is_some(), "field `{key}` missing: {v}");
    }
    arr[0].clone()
}

#[test]
fn policy_matches_auditwheel_before_and_after_repair() {
    let Some(fx) = fixtures() else { return };
    let out_dir = tempfile::tempdir().unwrap();
    for wheel in &fx.wheels {
        let ours = check_json(wheel, &[]);
        let reference = fx.auditwheel_policy(wheel);
        assert_eq!(
            ours["policy"],
            reference.as_str(),
            "{}: quarry {} vs auditwheel {reference}",
            wheel.display(),
            ours["policy"]
        );
        assert_eq!(ours["record_ok"], true);
        assert!(ours["symbol_versions"]["libc.so.6"].as_array().is_some_and(|a| !a.is_empty()), "{ours}");

        let dest = out_dir.path().join(wheel.file_name().unwrap());
        run_expect(
            quarry()
                .env("PATH", common::path_without_patchelf())
                .args(["wheel", "repair", "--output"])
                .arg(&dest)
                .arg(wheel),
            0,
        );
        let repaired = only_wheel(&dest);
        let ours = check_json(&repaired, &[]);
        let reference = fx.auditwheel_policy(&repaired);
        assert_eq!(
            ours["policy"],
            reference.as_str(),
            "repaired {}: quarry {} vs auditwheel {reference}",
            repaired.display(),
            ours["policy"]
        );
        assert!(reference.starts_with("manylinux_"), "{reference}");
        assert_eq!(ours["external_libs"], serde_json::json!({}));
        assert!(repaired.file_name().unwrap().to_string_lossy().contains(&reference), "{}", repaired.display());
    }
}

#[test]
fn cffi_needs_libffi_unless_excluded() {
    let Some(fx) = fixtures() else { return };
    let cffi = fx.wheel("cffi-");
    let v = check_json(&cffi, &[]);
    assert!(v["policy"].as_str().unwrap().starts_with("linux_"), "{v}");
    let ext = v["external_libs"].as_object().unwrap();
    assert_eq!(ext.keys().collect::<Vec<_>>(), ["libffi.so.8"], "{v}");
    assert!(ext["libffi.so.8"].as_str().is_some_and(|p| p.contains("libffi")), "{v}");
    // What bundling libffi brings in (its own glibc needs), as auditwheel shows:
    // why the repairable policy is what it is.
    let needs = &v["external_symbol_versions"]["libffi.so.8"]["libc.so.6"];
    assert!(needs.as_array().is_some_and(|a| a.iter().any(|s| s.as_str().unwrap().starts_with("GLIBC_2."))), "{v}");
    let human = run_expect(quarry().args(["wheel", "check"]).arg(&cffi), 0);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains("external    libffi.so.8 => ") && human.contains("    needs     libc.so.6: GLIBC_2."),
        "{human}"
    );

    // The versioned soname matches `libffi.so*`; the unversioned name does not.
    let v = check_json(&cffi, &["--exclude", "libffi.so*"]);
    assert_eq!(v["external_libs"], serde_json::json!({}));
    assert_eq!(v["excluded_libs"], serde_json::json!(["libffi.so.8"]));
    assert!(v["policy"].as_str().unwrap().starts_with("manylinux_"), "{v}");
    assert_eq!(v["policy"], v["symbol_policy"]);
    let v = check_json(&cffi, &["--exclude", "libffi.so"]);
    assert_eq!(v["excluded_libs"], serde_json::json!([]));
}

/// Copy a wheel, replacing one member's bytes but keeping RECORD as it was.
fn tamper(src: &Path, dest: &Path, member: &str) {
    let mut z = zip::ZipArchive::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut w = zip::ZipWriter::new(std::fs::File::create(dest).unwrap());
    for i in 0..z.len() {
        let mut e = z.by_index(i).unwrap();
        let name = e.name().unwrap().into_owned();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        if name == member {
            data.extend_from_slice(b"\n# tampered\n");
        }
        w.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
        w.write_all(&data).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn wrong_record_hash_fails_naming_the_file() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let src = fx.wheel("markupsafe-");
    let bad = dir.path().join(src.file_name().unwrap());
    tamper(&src, &bad, "markupsafe/__init__.py");

    let out = run_expect(quarry().args(["wheel", "check"]).arg(&bad), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("markupsafe/__init__.py") && err.contains("RECORD"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // --json still prints the report, with record_ok false, and exits 1.
    let out = run_expect(quarry().args(["wheel", "check", "--json"]).arg(&bad), 1);
    let v = stdout_json(&out);
    assert_eq!(v[0]["record_ok"], false);
    assert!(v[0]["record_problems"].to_string().contains("markupsafe/__init__.py"), "{v}");

    // Repair refuses it too, writing nothing.
    let out_dir = dir.path().join("out");
    let out = run_expect(
        quarry().args(["wheel", "repair", "-o"]).arg(&out_dir).arg(&bad).arg("--patchelf").arg(fx.patchelf()),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("markupsafe/__init__.py"));
    assert!(wheel_fixtures::dir_entries(&out_dir).is_empty(), "{:?}", wheel_fixtures::dir_entries(&out_dir));
}

#[test]
fn truncated_zip_gets_a_clear_error() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let src = fx.wheel("msgpack-");
    let data = std::fs::read(&src).unwrap();
    let bad = dir.path().join(src.file_name().unwrap());
    std::fs::write(&bad, &data[..data.len() * 2 / 3]).unwrap();
    let out = run_expect(quarry().args(["wheel", "check"]).arg(&bad), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&*bad.to_string_lossy()) && err.contains("truncated"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let not_a_wheel = dir.path().join("notes.txt");
    std::fs::write(&not_a_wheel, "hello").unwrap();
    let out = run_expect(quarry().args(["wheel", "check"]).arg(&not_a_wheel), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a wheel file name"));
}

#[test]
fn local_version_relabel_installs_with_pip() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let vars = [("ROCM_VERSION", "6.2"), ("TORCH_VERSION", "2.5")].map(|(k, v)| (k.to_string(), v.to_string())).into();
    let label = quarry::wheel::version::expand_template("rocm{ROCM_VERSION}torch{TORCH_VERSION}", &vars).unwrap();
    let out = quarry::wheel::local_version::add_local_version(&fx.wheel("msgpack-"), &label, dir.path()).unwrap();
    assert_eq!(
        out.file_name().unwrap(),
        fx.wheel("msgpack-")
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace("msgpack-1.1.0-", "msgpack-1.1.0+rocm6.2torch2.5-")
            .as_str()
    );
    let v = check_json(&out, &[]);
    assert_eq!(v["record_ok"], true);

    let target = dir.path().join("site");
    let st = std::process::Command::new(fx.bin.join("python"))
        .args(["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target"])
        .arg(&target)
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "pip refused the relabelled wheel");
    assert!(target.join("msgpack-1.1.0+rocm6.2torch2.5.dist-info/METADATA").exists());
    let meta = std::fs::read_to_string(target.join("msgpack-1.1.0+rocm6.2torch2.5.dist-info/METADATA")).unwrap();
    assert!(meta.contains("\nVersion: 1.1.0+rocm6.2torch2.5\n"), "{meta}");
}

#[test]
fn several_wheels_one_broken() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken-1.0-py3-none-any.whl");
    std::fs::write(&broken, b"PK\x03\x04 not really").unwrap();
    let missing = dir.path().join("missing-1.0-py3-none-any.whl");
    let out =
        run_expect(quarry().args(["wheel", "check", "--json"]).arg(&broken).arg(fx.wheel("msgpack-")).arg(&missing), 1);
    let v = stdout_json(&out);
    let all = v.as_array().unwrap();
    // Every wheel has an entry: the unreadable ones with their error.
    assert_eq!(all.len(), 3, "{v}");
    assert_eq!(all[0]["wheel"], broken.display().to_string(), "{v}");
    assert!(all[0]["error"].as_str().unwrap().contains("broken-1.0-py3-none-any.whl"), "{v}");
    assert!(all[1]["policy"].is_string() && all[1].get("error").is_none(), "{v}");
    let err = all[2]["error"].as_str().unwrap();
    assert!(err.contains("missing-1.0-py3-none-any.whl"), "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken-1.0-py3-none-any.whl"), "{stderr}");
    // The cause is said once.
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}
