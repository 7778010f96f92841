//! `quarry wheel merge` on real HIP libraries compiled with Debian 13's
//! hipcc in hip-builder-debian13 (cached in the fixtures): `libvec.so` (one
//! unit), `libtwo.so` (two units, two wrappers) and `librdc.so`
//! (`-fgpu-rdc`), with a rocBLAS Tensile database for gfx90a, built fat for
//! gfx90a, gfx942 and gfx1100 and as three shards of one target each, all
//! linked as `wheel build` links split builds (`.hip_fatbin` last). The
//! merge of the shards must be the split of the fat build, byte for byte; a
//! shard whose host code differs (built at another optimization level),
//! shards linked the usual way (the device code's size moves the host's
//! addresses) and two shards with code for one target are refused, naming
//! what differs, writing nothing.

use crate::common;
use crate::wheel_fixtures;

use common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const TARGETS: [&str; 3] = ["gfx90a", "gfx942", "gfx1100"];
const LIBS: [(&str, &str); 3] =
    [("libvec.so", "hipmerge/lib/libvec.so"), ("libtwo.so", "hipmerge/libtwo.so"), ("librdc.so", "hipmerge/librdc.so")];

/// The libraries: `fat/`, `s-<target>/` (linked with the split link
/// script), `o0/` (gfx942, its host code at -O0), `plain-<target>/`
/// (linked as usual).
fn built() -> PathBuf {
    let mut script =
        format!("cd /work/src\ncat > /tmp/last.ld <<'EOF'\n{}EOF\n", quarry::elf::kpack_ref::FATBIN_LAST_LINK_SCRIPT);
    script.push_str(
        r#"
libs() {
    d=/work/out/$1; opt=$2; link=$3; shift 3; mkdir -p $d
    hipcc "$@" -shared -fPIC $opt $link -o $d/libvec.so split_a.hip
    hipcc "$@" -shared -fPIC $opt $link -o $d/libtwo.so split_a.hip split_b.hip
    hipcc -fgpu-rdc "$@" -shared -fPIC $opt $link -o $d/librdc.so split_a.hip split_b.hip
}
L=-Wl,-T,/tmp/last.ld
libs fat -O2 $L --offload-arch=gfx90a --offload-arch=gfx942 --offload-arch=gfx1100
for t in gfx90a gfx942 gfx1100; do libs s-$t -O2 $L --offload-arch=$t; done
libs o0 "-O2 -Xarch_host -O0" $L --offload-arch=gfx942
for t in gfx90a gfx942; do libs plain-$t -O2 "" --offload-arch=$t; done
lib=$(echo /usr/lib/x86_64-linux-gnu/rocblas/*/library)
cp "$lib"/Kernels.so-000-gfx90a-xnack+.hsaco /work/out/
"#,
    );
    hip_outputs("hip-merge", &script, &["split_a.hip", "split_b.hip"])
}

/// A rocBLAS Tensile code object: a kernel database, which goes to the
/// gfx90a device wheel; the fat wheel and the gfx90a shards carry it.
const TENSILE: &str = "hipmerge/lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco";

/// A wheel of the libraries in `built()/<set>`, the same members every time
/// (and the Tensile database when the set has code for gfx90a).
fn wheel_of(set: &str, into: &Path) -> PathBuf {
    let b = built().join(set);
    let init = into.join("__init__.py");
    std::fs::create_dir_all(into).unwrap();
    std::fs::write(&init, "").unwrap();
    let mut files: Vec<(&str, PathBuf)> = vec![("hipmerge/__init__.py", init)];
    files.extend(LIBS.iter().map(|(file, member)| (*member, b.join(file))));
    if ["fat", "s-gfx90a", "plain-gfx90a"].contains(&set) {
        files.push((TENSILE, built().join("Kernels.so-000-gfx90a-xnack+.hsaco")));
    }
    let files: Vec<(&str, &Path)> = files.iter().map(|(a, b)| (*a, b.as_path())).collect();
    wheel_fixtures::make_wheel(into, "hipmerge-1.0-cp311-cp311-linux_x86_64.whl", &files)
}

fn merge(shards: &[PathBuf], out: &Path, code: i32) -> std::process::Output {
    let mut c = quarry();
    c.args(["wheel", "merge", "--json", "-o"]).arg(out).args(shards);
    run_expect(&mut c, code)
}

fn nothing_in(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn merged_shards_are_the_split_of_the_fat_build_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fat = wheel_of("fat", &t.join("fat"));
    let shards: Vec<PathBuf> = TARGETS.iter().map(|x| wheel_of(&format!("s-{x}"), &t.join(x))).collect();

    let split_out = t.join("split");
    run_expect(quarry().args(["wheel", "split", "-o"]).arg(&split_out).arg(&fat), 0);
    let merged_out = t.join("merged");
    let report = stdout_json(&merge(&shards, &merged_out, 0));
    let expected = wheels_in(&split_out);
    assert_eq!(expected.len(), 4, "a host wheel and three device wheels");
    let got = wheels_in(&merged_out);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&got), names(&expected), "{report:#}");
    for ((name, a), (_, b)) in got.iter().zip(&expected) {
        assert!(a == b, "{name}: the merge differs from the split of the fat build");
    }
    let targets: Vec<&str> =
        report["shards"].as_array().unwrap().iter().map(|s| s["targets"][0].as_str().unwrap()).collect();
    assert_eq!(targets, TARGETS, "{report:#}");
    let gfx90a = report["device"].as_array().unwrap().iter().find(|d| d["key"] == "gfx90a").unwrap();
    assert_eq!(gfx90a["databases"], serde_json::json!([TENSILE]), "{report:#}");

    // The shards in another order give the same wheels; with `--variants`
    // the same variant wheels and `-variants.json` as the split's.
    let again = t.join("again");
    let reordered = [shards[2].clone(), shards[0].clone(), shards[1].clone()];
    merge(&reordered, &again, 0);
    assert_eq!(wheels_in(&again), got);
    let (split_v, merged_v) = (t.join("split-v"), t.join("merged-v"));
    run_expect(quarry().args(["wheel", "split", "--variants", "-o"]).arg(&split_v).arg(&fat), 0);
    run_expect(quarry().args(["wheel", "merge", "--variants", "-o"]).arg(&merged_v).args(&reordered), 0);
    let variants = wheels_in(&merged_v);
    assert_eq!(variants.len(), 7, "four wheels and a variant host wheel per target");
    assert!(variants == wheels_in(&split_v), "the merge's variant wheels are the split's");
    let index = "hipmerge-1.0-variants.json";
    assert_eq!(std::fs::read(merged_v.join(index)).unwrap(), std::fs::read(split_v.join(index)).unwrap());

    // `quarry verify` merges the shards the provenance names (found by
    // sha256: all three have one file name) again and compares.
    let mut c = quarry();
    c.arg("verify").arg(merged_out.join("hipmerge-1.0-cp311-cp311-linux_x86_64.whl")).arg("--json");
    for x in TARGETS {
        c.arg("--inputs").arg(t.join(x));
    }
    let v = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(v["reproduced"], true, "{v:#}");
    assert_eq!(v["build_type"], "urn:quarry:build-type:wheel-merge:v1", "{v:#}");
    let found: Vec<&str> = v["inputs"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!(found.len(), 3, "{v:#}");
    assert!(found.iter().zip(&shards).all(|(f, s)| Path::new(f) == s.as_path()), "{v:#}");

    // The merged set is a complete install for every target, and its host
    // libraries load in Debian 13 beside their archives.
    let set: Vec<PathBuf> = std::fs::read_dir(&merged_out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    let mut c = quarry();
    c.args(["wheel", "check", "--targets", &TARGETS.join(",")]).args(&set);
    run_expect(&mut c, 0);
    let site = t.join("site");
    for w in &set {
        zip::ZipArchive::new(std::fs::File::open(w).unwrap()).unwrap().extract(&site).unwrap();
    }
    let (_, builder) = debian13_rocm_images();
    let script = "import ctypes\nfor p in ['lib/libvec.so', 'libtwo.so', 'librdc.so']:\n    ctypes.CDLL('/work/site/hipmerge/' + p)\nprint('loaded')";
    let o = run_expect(in_image(&builder, &[(&site, "/work/site")]).args(["--", "python3", "-c", script]), 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("loaded"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn shards_that_differ_in_host_code_or_overlap_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let s90a = wheel_of("s-gfx90a", &t.join("a"));
    let s1100 = wheel_of("s-gfx1100", &t.join("c"));

    // gfx942 with its host code built at -O0: every library's host code differs.
    let o0 = wheel_of("o0", &t.join("o0"));
    let out = t.join("out-o0");
    let o = merge(&[s90a.clone(), o0.clone(), s1100.clone()], &out, 1);
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("{err}");
    assert!(err.contains("differ in host code") && err.contains(".text"), "{err}");
    assert!(err.contains(&o0.display().to_string()) && err.contains("build key"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    nothing_in(&out);

    // Linked the usual way, `.hip_fatbin` sits before the data: its size
    // (each target's code is another size) moves every later address.
    let p90a = wheel_of("plain-gfx90a", &t.join("p90a"));
    let p942 = wheel_of("plain-gfx942", &t.join("p942"));
    let out = t.join("out-plain");
    let err = String::from_utf8_lossy(&merge(&[p90a, p942], &out, 1).stderr).into_owned();
    assert!(err.contains("differ in host code") && err.contains("hipmerge/"), "{err}");
    nothing_in(&out);

    // Two shards with code for gfx90a.
    let twice = wheel_of("s-gfx90a", &t.join("a2"));
    let out = t.join("out-twice");
    let err = String::from_utf8_lossy(&merge(&[s90a, twice], &out, 1).stderr).into_owned();
    assert!(err.contains("both hold code for gfx90a"), "{err}");
    nothing_in(&out);
}

/// The layer files' names of the gzip tar blob `digest` in the layout `dir`.
fn layer_files(dir: &Path, digest: &str) -> Vec<String> {
    let blob = dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let mut t = tar::Archive::new(flate2::read::MultiGzDecoder::new(std::fs::File::open(blob).unwrap()));
    t.entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect()
}

/// A family of per-target test images from the split wheels: one
/// definition with `[family]` over the GPU target gives three images whose
/// layers are digest-equal but the device layer (`wheels` with the
/// target's device extra); each device layer holds exactly its target's
/// wheel, and each image's installed set passes `wheel check --targets`
/// for its target. Pushed to one repository, the second target's image
/// sends one layer.
#[test]
fn a_family_of_target_images_shares_all_but_the_device_layer() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fat = wheel_of("fat", &t.join("fat"));
    let house = t.join("def/house");
    run_expect(quarry().args(["wheel", "split", "-o"]).arg(&house).arg(&fat), 0);
    write(&t.join("def/motd"), "a ROCm test image\n");
    let def = t.join("def/family.toml");
    write(
        &def,
        &format!(
            "name = \"hipmerge-test\"\ntag = \"${{GPU_TARGET}}\"\nbase = \"scratch\"\n\
             [params]\nGPU_TARGET = \"gfx942\"\n\
             [family]\nparam = \"GPU_TARGET\"\nvalues = {TARGETS:?}\n\
             [[layer]]\nname = \"runtime\"\n[[layer.source]]\nfile = \"motd\"\ndest = \"/etc/motd\"\n\
             [[layer]]\nname = \"host\"\n[[layer.source]]\nwheels = \"house\"\n\
             [[layer]]\nname = \"device\"\n[[layer.source]]\nwheels = \"house\"\nextra = \"device-${{GPU_TARGET}}\"\n"
        ),
    );
    let (out, cache) = (t.join("out"), t.join("cache"));
    let built = stdout_json(&run_expect(
        quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--json").arg("--cache-dir").arg(&cache),
        0,
    ));
    let images = built["images"].as_array().unwrap();
    assert_eq!(images.len(), 3, "{built:#}");
    let digests = |i: usize| -> Vec<String> {
        images[i]["layers"].as_array().unwrap().iter().map(|l| l["digest"].as_str().unwrap().to_string()).collect()
    };
    for i in 1..3 {
        assert_eq!(digests(i)[..2], digests(0)[..2], "host layers digest-equal: {built:#}");
        assert_ne!(digests(i)[2], digests(0)[2]);
    }
    for (i, target) in TARGETS.iter().enumerate() {
        assert_eq!(images[i]["tag"], *target, "{built:#}");
        let layout = out.join(target);
        let dist_infos = |layer: usize| -> BTreeSet<String> {
            layer_files(&layout, &digests(i)[layer])
                .iter()
                .filter_map(|f| f.split('/').find(|c| c.ends_with(".dist-info")).map(str::to_string))
                .collect()
        };
        assert_eq!(dist_infos(1), BTreeSet::from(["hipmerge-1.0.dist-info".to_string()]));
        let device = dist_infos(2);
        assert_eq!(device, BTreeSet::from([format!("hipmerge_device_{target}-1.0.dist-info")]));
        // The installed set, as wheels, covers the target.
        let set: Vec<PathBuf> = dist_infos(1)
            .iter()
            .chain(&device)
            .map(|d| house.join(format!("{}-cp311-cp311-linux_x86_64.whl", d.trim_end_matches(".dist-info"))))
            .collect();
        run_expect(quarry().args(["wheel", "check", "--targets", target]).args(&set), 0);
    }

    // A `--set` of the family's parameter builds that member only; an extra
    // no wheel offers is named.
    let one = stdout_json(&run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .args(["--set", "GPU_TARGET=gfx942", "--json", "-o"])
            .arg(t.join("one"))
            .arg("--cache-dir")
            .arg(&cache),
        0,
    ));
    assert_eq!(one["manifest_digest"], images[1]["manifest_digest"], "the same image, from the cache");
    let e = run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .args(["--set", "GPU_TARGET=gfx1151", "-o"])
            .arg(t.join("bad"))
            .arg("--cache-dir")
            .arg(&cache),
        1,
    );
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("device-gfx1151") && e.contains("device-gfx942"), "{e}");

    if !common::registry::have_registry() {
        return;
    }
    let reg = common::registry::Registry::start("");
    let push = |target: &str| {
        stdout_json(&run_expect(
            quarry()
                .arg("push")
                .arg(out.join(target))
                .arg(format!("{}/hipmerge-test:{target}", reg.addr()))
                .args(["--plain-http", "--json", "--cache-dir"])
                .arg(&cache),
            0,
        ))
    };
    let layers_pushed = |p: &serde_json::Value| {
        p["blobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["what"].as_str().unwrap().starts_with("layer "))
            .filter(|b| b["action"] == "pushed")
            .count()
    };
    let first = push(TARGETS[0]);
    assert_eq!(layers_pushed(&first), 3, "{first:#}");
    let second = push(TARGETS[1]);
    assert_eq!(layers_pushed(&second), 1, "the device layer only: {second:#}");
    let sent = second["blobs"].as_array().unwrap().iter().find(|b| b["what"] == "layer 2").unwrap();
    assert_eq!(sent["action"], "pushed", "{second:#}");
}
