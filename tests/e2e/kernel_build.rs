//! `quarry kernel build` with the real compiler: tests/fixtures/hip/lib (a
//! HIP library with two kernels and a Makefile calling hipcc) built in the
//! shipped hip-builder-debian13 image (Debian 13, ROCm 5.7) for gfx90a,
//! gfx942 and gfx1100, network off and no GPU. The outputs are checked with
//! `quarry code-objects`; a build asking for a target its command does not
//! compile fails naming it; an unchanged rebuild comes from the cache; a
//! failing command exits with its code and leaves no container.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const THREE: &str = "gfx90a,gfx942,gfx1100";

fn source_copy(into: &Path) -> PathBuf {
    let src = into.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for f in ["vops.hip", "Makefile"] {
        std::fs::copy(repo().join("tests/fixtures/hip/lib").join(f), src.join(f)).unwrap();
    }
    src
}

fn kernel_build(builder: &Path, src: &Path, out: &Path, cache: &Path, flags: &[&str], cmd: &[&str]) -> Command {
    let mut c = quarry();
    c.args(["kernel", "build"]).arg(src).arg("--image").arg(builder).arg("-o").arg(out);
    c.arg("--cache-dir").arg(cache).args(["--gpu", "none"]).args(flags).arg("--").args(cmd);
    c
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

#[test]
fn hip_library_builds_for_three_targets_is_checked_and_cached() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let src = source_copy(work.path());
    // The build's environment is kept as an output to check what it saw.
    let make = ["sh", "-ec", "make; env | sort > build/env.txt"];

    let out = work.path().join("out");
    let cold = stdout_json(&run_expect(
        &mut kernel_build(&builder, &src, &out, &cache, &["--targets", THREE, "--json"], &make),
        0,
    ));
    assert_eq!(cold["cached"], false, "{cold:#}");
    assert!(cold["jobs"].as_u64().unwrap() >= 1, "{cold:#}");
    let lib = cold["outputs"].as_array().unwrap().iter().find(|o| o["file"] == "libvops.so").expect("libvops.so");
    assert_eq!(strings(&lib["targets"]), ["gfx1100", "gfx90a", "gfx942"]);
    assert_eq!(lib["size"].as_u64().unwrap(), std::fs::metadata(out.join("libvops.so")).unwrap().len());
    // Copied in, never mounted: the host source has no build directory.
    assert!(!src.join("build").exists());
    let env = std::fs::read_to_string(out.join("env.txt")).unwrap();
    let jobs = cold["jobs"].as_u64().unwrap();
    for want in [
        "PYTORCH_ROCM_ARCH=gfx90a;gfx942;gfx1100".to_string(),
        "GPU_ARCHS=gfx90a;gfx942;gfx1100".into(),
        "GPU_TARGETS=gfx90a;gfx942;gfx1100".into(),
        "AMDGPU_TARGETS=gfx90a;gfx942;gfx1100".into(),
        "HIP_OFFLOAD_ARCH=gfx90a;gfx942;gfx1100".into(),
        "HCC_AMDGPU_TARGET=gfx90a,gfx942,gfx1100".into(),
        "CMAKE_TOOLCHAIN_FILE=/quarry/targets.cmake".into(),
        format!("MAX_JOBS={jobs}"),
        format!("CMAKE_BUILD_PARALLEL_LEVEL={jobs}"),
    ] {
        assert!(env.lines().any(|l| l == want), "the build did not see {want}:\n{env}");
    }
    assert!(env.contains(&format!("MAKEFLAGS=-j{jobs}")), "{env}");
    // Nothing appended after hipcc's own list (a command's own --offload-arch stays alone).
    assert!(!env.contains("HIPCC_COMPILE_FLAGS_APPEND="), "{env}");

    // code-objects reads exactly the three targets from the library.
    let co = stdout_json(&run_expect(quarry().args(["code-objects", "--json"]).arg(out.join("libvops.so")), 0));
    assert_eq!(strings(&co[0]["targets"]), ["gfx1100", "gfx90a", "gfx942"]);

    // Unchanged: from the cache, well under a second, the same bytes.
    let again = work.path().join("again");
    let hit = stdout_json(&run_expect(
        &mut kernel_build(&builder, &src, &again, &cache, &["--targets", THREE, "--json"], &make),
        0,
    ));
    assert_eq!(hit["cached"], true, "{hit:#}");
    assert_eq!(hit["key"], cold["key"]);
    assert!(hit["seconds"].as_f64().unwrap() < 1.0, "{hit:#}");
    assert_eq!(std::fs::read(again.join("libvops.so")).unwrap(), std::fs::read(out.join("libvops.so")).unwrap());
    // The provenance: every output by sha256, the source tree and the
    // builder image as inputs, the same bytes from the cache as when built.
    let statement = std::fs::read(out.join("provenance.intoto.json")).unwrap();
    assert_eq!(cold["provenance"], out.join("provenance.intoto.json").to_str().unwrap(), "{cold:#}");
    assert!(
        statement == std::fs::read(again.join("provenance.intoto.json")).unwrap(),
        "a cache hit's provenance differs"
    );
    let doc: Value = serde_json::from_slice(&statement).unwrap();
    let subjects = doc["subject"].as_array().unwrap();
    assert_eq!(subjects.len(), cold["outputs"].as_array().unwrap().len(), "{doc:#}");
    for s in subjects {
        let f = out.join(s["name"].as_str().unwrap());
        assert_eq!(s["digest"]["sha256"], quarry::oci::digest::sha256_file(&f).unwrap(), "{}", f.display());
    }
    let inputs = common::provenance::inputs(&statement);
    assert_eq!(inputs[0].1, "quarryTreeSha256", "{inputs:?}");
    assert_eq!(format!("sha256:{}", inputs[1].2), cold["image"].as_str().unwrap(), "{inputs:?}");
    assert_eq!(
        doc["predicate"]["buildDefinition"]["externalParameters"]["targets"],
        serde_json::json!(["gfx90a", "gfx942", "gfx1100"])
    );
    common::provenance::check_with_in_toto_models(&statement, work.path());
    let human = run_expect(&mut kernel_build(&builder, &src, &again, &cache, &["--targets", THREE], &make), 0);
    assert!(String::from_utf8_lossy(&human.stdout).contains("cached: nothing changed"), "{human:?}");

    // A fourth target the command does not compile (it names its own
    // --offload-arch list, which hipcc takes alone): the build fails naming it.
    let own_list = [
        "sh",
        "-ec",
        "mkdir -p build; env | sort > build/env.txt
         hipcc --offload-arch=gfx90a --offload-arch=gfx942 --offload-arch=gfx1100 -O2 -fPIC -shared -o build/libvops.so vops.hip",
    ];
    let four = ["--targets", "gfx90a,gfx942,gfx1100,gfx908", "--jobs", "3"];
    let missing = work.path().join("missing");
    let failed = run_expect(&mut kernel_build(&builder, &src, &missing, &cache, &four, &own_list), 1);
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("`libvops.so` has no code for gfx908"), "{err}");
    assert!(!err.contains("for gfx90a") && !err.contains("for gfx942"), "{err}");
    let env = std::fs::read_to_string(missing.join("env.txt")).unwrap();
    assert!(env.contains("MAX_JOBS=3\n") && env.contains("MAKEFLAGS=-j3\n"), "{env}");
    // The same build (now cached) as a warning.
    let mut flags = four.to_vec();
    flags.extend(["--allow-missing-targets", "--json"]);
    let warned = stdout_json(&run_expect(&mut kernel_build(&builder, &src, &missing, &cache, &flags, &own_list), 0));
    assert_eq!(warned["cached"], true, "{warned:#}");
    assert_eq!(warned["missing"], serde_json::json!([{"file": "libvops.so", "target": "gfx908"}]));
    assert!(warned["warnings"].to_string().contains("gfx908"), "{warned:#}");
}

#[test]
fn a_failing_command_exits_with_its_code_and_leaves_no_container() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let src = source_copy(work.path());
    let out = work.path().join("out");
    let cmd = ["sh", "-c", "echo compiling vops.hip; echo 'vops.hip:3: error: broken' >&2; exit 7"];
    for _ in 0..2 {
        let child = kernel_build(&builder, &src, &out, &work.path().join("cache"), &["--targets", "gfx942"], &cmd)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let r = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(7), "{err}");
        // Its output is shown (every time: a failure is never cached).
        assert!(err.contains("compiling vops.hip") && err.contains("vops.hip:3: error: broken"), "{err}");
        assert!(err.contains("exited with code 7"), "{err}");
        let left = Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!("label=io.quarry.pid={pid}"))
            .output()
            .unwrap();
        assert!(left.stdout.is_empty(), "containers left: {}", String::from_utf8_lossy(&left.stdout));
        assert!(!out.exists(), "a failed build wrote outputs");
    }
}

#[test]
fn the_command_runs_as_the_image_user_without_network_and_out_is_an_output() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    // rocm-runtime-debian13 runs as `tester`: the copied source is theirs.
    let (runtime, _) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(src.join("build")).unwrap();
    std::fs::write(src.join("a.txt"), "source\n").unwrap();
    // A host build/ is where outputs go, not an input: it is not copied in.
    std::fs::write(src.join("build/stale.o"), "stale").unwrap();
    // The output directory inside the source is not an input either.
    let out = src.join("dist");
    let script = "id -un > /out/user; ls /sys/class/net > /out/net; mkdir -p build/sub && cp a.txt build/sub/; ls build > /out/build-listing";
    let r = stdout_json(&run_expect(
        &mut kernel_build(&runtime, &src, &out, &work.path().join("cache"), &["--json"], &["sh", "-ec", script]),
        0,
    ));
    let mut files: Vec<String> =
        r["outputs"].as_array().unwrap().iter().map(|o| o["file"].as_str().unwrap().into()).collect();
    files.sort();
    assert_eq!(files, ["build-listing", "net", "sub/a.txt", "user"], "{r:#}");
    assert_eq!(std::fs::read_to_string(out.join("user")).unwrap(), "tester\n");
    assert_eq!(std::fs::read_to_string(out.join("net")).unwrap(), "lo\n");
    assert_eq!(std::fs::read_to_string(out.join("build-listing")).unwrap(), "sub\n");
    assert!(r["jobs"].as_u64().unwrap() >= 1 && r["resources"]["cores"].as_u64().unwrap() >= 1, "{r:#}");
    // No --targets: auto, from the environment, detected GPUs or the fallback list.
    assert!(["default", "detected", "PYTORCH_ROCM_ARCH", "GPU_ARCHS"].contains(&r["targets_source"].as_str().unwrap()));
    let again = stdout_json(&run_expect(
        &mut kernel_build(&runtime, &src, &out, &work.path().join("cache"), &["--json"], &["sh", "-ec", script]),
        0,
    ));
    assert_eq!((&again["cached"], &again["key"]), (&serde_json::json!(true), &r["key"]), "{again:#}");
}

fn example_copy(into: &Path, kind: &str) -> PathBuf {
    let src = into.join(kind);
    std::fs::create_dir_all(&src).unwrap();
    for e in std::fs::read_dir(repo().join("tests/fixtures/hip/examples").join(kind)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), src.join(e.file_name())).unwrap();
    }
    src
}

/// The official examples'
/// conventions, unmodified, with real hipcc and CMake, for feature targets
/// mixed with a plain one: a Makefile whose compiler defaults to hipcc with
/// no --offload-arch (the image must not override it; hipcc takes
/// HCC_AMDGPU_TARGET and must add no bare id from rocm_agent_enumerator),
/// CMake's HIP language (CMAKE_HIP_ARCHITECTURES from quarry's toolchain
/// file: unset, CMake strips features from rocm_agent_enumerator's answer)
/// and ROCm's CMake package (hip::device's --offload-arch from GPU_TARGETS,
/// the same file). Each output holds exactly the requested ids.
#[test]
fn official_example_makefile_and_cmake_build_exactly_the_feature_targets() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let requested = ["gfx90a:xnack+", "gfx942:sramecc+:xnack-", "gfx1100"];
    let list = requested.join(",");
    let mut sorted = requested.map(String::from).to_vec();
    sorted.sort();
    let cmake = "cmake -B build -G Ninja && cmake --build build";
    let package = format!("CXX=clang++ {cmake}");
    for (kind, cmd, output) in [
        ("make", vec!["make"], "hip_saxpy"),
        ("cmake", vec!["sh", "-ec", cmake], "build/hip_saxpy"),
        ("package", vec!["sh", "-ec", package.as_str()], "build/hip_saxpy"),
    ] {
        let src = example_copy(work.path(), kind);
        let out = work.path().join(format!("out-{kind}"));
        let flags = ["--targets", list.as_str(), "--json", "--output", output];
        let r = stdout_json(&run_expect(&mut kernel_build(&builder, &src, &out, &cache, &flags, &cmd), 0));
        let exe = &r["outputs"][0];
        assert_eq!(exe["file"], "hip_saxpy", "{kind}: {r:#}");
        assert_eq!(strings(&exe["targets"]), sorted, "{kind}: exactly the requested targets: {r:#}");
        assert_eq!(exe["checked"], true, "{kind}: {r:#}");
        // code-objects reads the same ids, features included, once each.
        let co = stdout_json(&run_expect(quarry().args(["code-objects", "--json"]).arg(out.join("hip_saxpy")), 0));
        let mut ids: Vec<String> = co[0]["code_objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| std::iter::once(c["target"].clone()).chain(c["features"].as_array().unwrap().iter().cloned()))
            .map(|parts| parts.map(|p| p.as_str().unwrap().to_string()).collect::<Vec<_>>().join(":"))
            .collect();
        ids.sort();
        assert_eq!(ids, sorted, "{kind}: {co:#}");
    }
}

/// Target features count, as the HIP runtime matches them.
#[test]
fn target_features_are_matched_as_the_hip_runtime_does() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let src = source_copy(work.path());
    // The command names its own targets; hipcc adds none of quarry's beside them.
    let hipcc = |archs: &str| format!("mkdir -p build; hipcc {archs} -O2 -fPIC -shared -o build/libvops.so vops.hip");
    let run = |name: &str, targets: &str, archs: &str, code: i32| {
        let script = hipcc(archs);
        let cmd = ["sh", "-ec", script.as_str()];
        let out = work.path().join(name);
        run_expect(&mut kernel_build(&builder, &src, &out, &cache, &["--targets", targets, "--json"], &cmd), code)
    };
    // The wrong modes for both requested ids: refused, each named.
    let wrong = "--offload-arch=gfx90a:xnack- --offload-arch=gfx942:sramecc-:xnack+";
    let failed = run("wrong", "gfx90a:xnack+,gfx942:sramecc+:xnack-", wrong, 1);
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("`libvops.so` has no code for gfx90a:xnack+ (only for gfx90a:xnack-)"), "{err}");
    assert!(err.contains("has no code for gfx942:sramecc+:xnack- (only for gfx942:sramecc-:xnack+)"), "{err}");
    // No feature requested: the GPU may run either way, so xnack+-only code is refused.
    let failed = run("plus-only", "gfx90a", "--offload-arch=gfx90a:xnack+", 1);
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("has no code for gfx90a:xnack- (only for gfx90a:xnack+)"), "{err}");
    // The right modes: accepted, full target ids in the JSON.
    let right = "--offload-arch=gfx90a:xnack+ --offload-arch=gfx942:sramecc+:xnack-";
    let ok = stdout_json(&run("right", "gfx90a:xnack+,gfx942:sramecc+:xnack-", right, 0));
    let lib = ok["outputs"].as_array().unwrap().iter().find(|o| o["file"] == "libvops.so").unwrap();
    assert_eq!(strings(&lib["targets"]), ["gfx90a:xnack+", "gfx942:sramecc+:xnack-"], "{ok:#}");
    // Code built for either mode ("any") runs where a feature is requested.
    let any = stdout_json(&run(
        "any",
        "gfx90a:xnack+,gfx942:sramecc+:xnack-",
        "--offload-arch=gfx90a --offload-arch=gfx942",
        0,
    ));
    assert_eq!(any["missing"], serde_json::json!([]), "{any:#}");
}
