//! `quarry wheel split` on a fat wheel of real HIP libraries, compiled with
//! Debian 13's hipcc in the shipped hip-builder-debian13 image (cached in
//! the fixtures): `libvec.so` (one unit, gfx90a:xnack+, gfx942, gfx1100),
//! `libtwo.so` (two units: two bundles, two wrappers), `librdc.so`
//! (`-fgpu-rdc`: two wrappers registering one bundle), and a rocBLAS
//! Tensile code object as a kernel database.
//!
//! The runtime's lookup is done here as ROCm's loader does it, from the
//! split files alone: the binary's `.rocm_kpack_ref` marker -> its search
//! path with `@GFXARCH@` expanded for a device (features dropped from the
//! right) -> the archive whose `gfx_arches` has it -> `kernel_name#i` for
//! wrapper i; the code must be byte for byte the code object wrapper i
//! registered before the split.

use crate::common;
use crate::wheel_fixtures;

use common::*;
use object::{Object, ObjectSection};
use quarry::code_objects::{bundle, compressed, kpack};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

const BUILD_SCRIPT: &str = r#"
    cd /work/src
    mkdir -p /work/out
    hipcc --offload-arch=gfx90a:xnack+ --offload-arch=gfx942 --offload-arch=gfx1100 -shared -fPIC -o /work/out/libvec.so split_a.hip
    hipcc --offload-arch=gfx942 --offload-arch=gfx1100 -shared -fPIC -o /work/out/libtwo.so split_a.hip split_b.hip
    hipcc -fgpu-rdc --offload-arch=gfx90a:xnack+ --offload-arch=gfx942 -shared -fPIC -o /work/out/librdc.so split_a.hip split_b.hip
    lib=$(echo /usr/lib/x86_64-linux-gnu/rocblas/*/library)
    cp "$lib"/Kernels.so-000-gfx90a-xnack+.hsaco /work/out/
"#;

/// The libraries, built once (named by the script and the sources).
fn built() -> PathBuf {
    hip_outputs("hip-split", BUILD_SCRIPT, &["split_a.hip", "split_b.hip"])
}

const LIBS: [&str; 3] = ["hipsplit/lib/libvec.so", "hipsplit/libtwo.so", "hipsplit/librdc.so"];
const TENSILE: &str = "hipsplit/lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco";

fn fat_wheel(dir: &Path) -> PathBuf {
    let b = built();
    let init = dir.join("__init__.py");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&init, "").unwrap();
    let files: Vec<(&str, PathBuf)> = vec![
        ("hipsplit/__init__.py", init),
        (LIBS[0], b.join("libvec.so")),
        (LIBS[1], b.join("libtwo.so")),
        (LIBS[2], b.join("librdc.so")),
        (TENSILE, b.join("Kernels.so-000-gfx90a-xnack+.hsaco")),
    ];
    let files: Vec<(&str, &Path)> = files.iter().map(|(a, b)| (*a, b.as_path())).collect();
    wheel_fixtures::make_wheel(dir, "hipsplit-1.0-cp311-cp311-linux_x86_64.whl", &files)
}

/// Every file of `wheel`, unpacked under `into` (pip's install layout: all wheels in one tree).
fn install(wheel: &Path, into: &Path) {
    let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    z.extract(into).unwrap();
}

/// Wrapper i's code objects by architecture, read where its pointer points.
fn original_code(path: &Path) -> Vec<BTreeMap<String, Vec<u8>>> {
    let fat = quarry::elf::kpack_ref::read_fat_binary(path).unwrap().expect("a fat binary");
    let data = std::fs::read(path).unwrap();
    let section = &data[fat.fatbin_offset as usize..(fat.fatbin_offset + fat.fatbin_size) as usize];
    let mut out = Vec::new();
    for &at in &fat.wrappers {
        let mut code = BTreeMap::new();
        let mut visit = |e: &bundle::Entry, r: &mut dyn Read| {
            let id = bundle::EntryId::parse(&e.id).unwrap();
            if !id.is_host() && e.size > 0 {
                let mut v = Vec::new();
                r.read_to_end(&mut v).unwrap();
                let t = quarry::code_objects::target_id::TargetId::parse(&id.target).unwrap();
                code.insert(t.to_string(), v);
            }
            Ok(())
        };
        let rest = &section[at as usize..];
        if rest.starts_with(bundle::MAGIC) {
            bundle::read_with(&mut &rest[..], Some(rest.len() as u64), &mut visit).unwrap();
        } else {
            compressed::read_with(rest, &mut visit).unwrap();
        }
        out.push(code);
    }
    out
}

#[derive(serde::Deserialize)]
struct Marker {
    kpack_search_paths: Vec<String>,
    kernel_name: String,
}

/// ROCm's loader: candidates for a device, most specific first (features dropped from the right).
fn candidates(device: &str) -> Vec<String> {
    let mut parts = device.split(':');
    let processor = parts.next().unwrap();
    let features: Vec<&str> = parts.collect();
    let n = features.len();
    (0..1u32 << n)
        .rev()
        .map(|mask| {
            let mut s = processor.to_string();
            for (i, f) in features.iter().enumerate() {
                if mask & (1 << (n - 1 - i)) != 0 {
                    s.push(':');
                    s.push_str(f);
                }
            }
            s
        })
        .collect()
}

/// What the runtime loads for wrapper `index` of the split binary at `path` on `device`.
fn runtime_lookup(path: &Path, index: usize, device: &str) -> Option<Vec<u8>> {
    let data = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let marker = elf.section_by_name(".rocm_kpack_ref").expect("the marker section");
    let m: Marker = rmp_serde::from_slice(marker.data().unwrap()).unwrap();
    let key = format!("{}#{index}", m.kernel_name);
    for candidate in candidates(device) {
        for p in &m.kpack_search_paths {
            let archive = path.parent().unwrap().join(p.replacen("@GFXARCH@", &candidate, 1));
            let Ok(bytes) = std::fs::read(&archive) else { continue };
            if !kpack::arches(&bytes).unwrap().contains(&candidate) {
                continue;
            }
            if let Some(code) = kpack::kernel(&bytes, &key, &candidate).unwrap() {
                return Some(code);
            }
        }
    }
    None
}

fn split(wheel: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut c = quarry();
    c.args(["wheel", "split", "--json", "-o"]).arg(out).arg(wheel).args(extra);
    stdout_json(&run_expect(&mut c, 0))[0].clone()
}

#[test]
fn a_fat_wheel_splits_into_host_and_device_wheels_the_runtime_can_use() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = fat_wheel(&tmp.path().join("in"));
    let out = tmp.path().join("out");
    let report = split(&wheel, &out, &[]);

    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".whl"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "hipsplit-1.0-cp311-cp311-linux_x86_64.whl",
            "hipsplit_device_gfx1100-1.0-cp311-cp311-linux_x86_64.whl",
            "hipsplit_device_gfx90a-1.0-cp311-cp311-linux_x86_64.whl",
            "hipsplit_device_gfx942-1.0-cp311-cp311-linux_x86_64.whl",
        ],
        "{report:#}"
    );
    // Each wheel's provenance beside it: the wheel by sha256, the fat wheel
    // as the input; the SLSA models take it.
    let fat_sha = quarry::oci::digest::sha256_file(&wheel).unwrap();
    for n in &names {
        let statement = std::fs::read(out.join(format!("{n}.intoto.json"))).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&statement).unwrap();
        assert_eq!(doc["subject"][0]["name"], n.as_str());
        assert_eq!(doc["subject"][0]["digest"]["sha256"], quarry::oci::digest::sha256_file(&out.join(n)).unwrap());
        let deps = &doc["predicate"]["buildDefinition"]["resolvedDependencies"];
        assert_eq!(deps[0]["digest"]["sha256"], fat_sha.as_str(), "{doc}");
        common::provenance::check_with_in_toto_models(&statement, tmp.path());
    }
    // Every wheel has a right RECORD.
    let mut check = quarry();
    check.args(["wheel", "check"]);
    for n in &names {
        check.arg(out.join(n));
    }
    run_expect(&mut check, 0);

    // The host's METADATA: an extra per target and device-all.
    let site = tmp.path().join("site");
    for n in &names {
        install(&out.join(n), &site);
    }
    let meta = std::fs::read_to_string(site.join("hipsplit-1.0.dist-info/METADATA")).unwrap();
    for t in ["gfx90a", "gfx942", "gfx1100"] {
        assert!(meta.contains(&format!("Provides-Extra: device-{t}\n")), "{meta}");
        assert!(
            meta.contains(&format!("Requires-Dist: hipsplit-device-{t} == 1.0; extra == \"device-{t}\"\n")),
            "{meta}"
        );
        assert!(
            meta.contains(&format!("Requires-Dist: hipsplit-device-{t} == 1.0; extra == \"device-all\"\n")),
            "{meta}"
        );
        let dm = std::fs::read_to_string(site.join(format!("hipsplit_device_{t}-1.0.dist-info/METADATA"))).unwrap();
        assert!(dm.contains("Requires-Dist: hipsplit == 1.0\n"), "{dm}");
    }
    // The Tensile file went to gfx90a's wheel, at its path.
    assert!(site.join(TENSILE).exists());
    let zip_names = wheel_fixtures::zip_names(&out.join(&names[0]));
    assert!(!zip_names.iter().any(|n| n == TENSILE), "the host kept {TENSILE}");

    // The runtime's lookup gives back every original code object.
    let built = built();
    for (lib, file) in LIBS.iter().zip(["libvec.so", "libtwo.so", "librdc.so"]) {
        let original = original_code(&built.join(file));
        let split_bin = site.join(lib);
        assert!(
            std::fs::metadata(&split_bin).unwrap().len() < std::fs::metadata(built.join(file)).unwrap().len(),
            "{lib} did not shrink"
        );
        let data = std::fs::read(&split_bin).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        assert_eq!(elf.section_by_name(".hip_fatbin").unwrap().kind(), object::SectionKind::UninitializedData);
        let segment = elf.section_by_name(".hipFatBinSegment").unwrap().data().unwrap().to_vec();
        assert_eq!(segment.len() / 24, original.len(), "{lib}: wrappers");
        for (i, code) in original.iter().enumerate() {
            let w = &segment[i * 24..(i + 1) * 24];
            assert_eq!(&w[..4], b"HIPK", "{lib} wrapper {i}");
            assert_eq!(u64::from_le_bytes(w[16..24].try_into().unwrap()), i as u64, "{lib} wrapper {i} index");
            for (arch, device) in [
                ("gfx90a:xnack+", "gfx90a:sramecc+:xnack+"),
                ("gfx942", "gfx942:sramecc+:xnack-"),
                ("gfx1100", "gfx1100"),
            ] {
                let got = runtime_lookup(&split_bin, i, device);
                assert_eq!(got.as_ref(), code.get(arch), "{lib} wrapper {i} on {device}");
            }
            // xnack+ code never runs where xnack is off.
            if code.contains_key("gfx90a:xnack+") {
                assert_eq!(runtime_lookup(&split_bin, i, "gfx90a:sramecc+:xnack-"), None);
            }
        }
    }

    // `quarry code-objects` shows the marker and the kernels installed for it.
    let mut c = quarry();
    c.args(["code-objects", "--json"]).arg(site.join(LIBS[2]));
    let r = &stdout_json(&run_expect(&mut c, 0))[0]["kpack_ref"];
    assert_eq!((r["kernel_name"].as_str(), r["wrappers"].as_u64()), (Some("librdc.so"), Some(2)), "{r:#}");
    let kernels =
        |arch: &str| r["archives"].as_array().unwrap().iter().find(|a| a["arch"] == arch).map(|a| a["kernels"].clone());
    assert!(kernels("gfx942").unwrap().as_array().unwrap().iter().all(|k| k.as_u64().is_some_and(|n| n > 0)));
    // librdc.so was not built for gfx1100: that archive has no kernel of it.
    assert_eq!(kernels("gfx1100"), Some(serde_json::json!([null, null])));

    // `wheel repair` edits split binaries natively (here a RUNPATH long
    // enough to grow the string table into a new tail): the marker and the
    // wrappers stay, and the lookup still finds every kernel.
    let edits = quarry::elf::edit::ElfEdits {
        set_runpath: Some(format!("$ORIGIN/../../hipsplit.libs/{}", "x".repeat(300))),
        ..Default::default()
    };
    let vec_bin = site.join(LIBS[0]);
    let edited_bin = vec_bin.with_file_name("libvec_edited.so");
    let edited = quarry::elf::edit::edit(&vec_bin, &edits).unwrap();
    assert!(edited.grew, "the edit was meant to grow the string table");
    let mut bytes = Vec::new();
    edited.splice.reader().read_to_end(&mut bytes).unwrap();
    std::fs::write(&edited_bin, &bytes).unwrap();
    let original_vec = original_code(&built.join("libvec.so"));
    for device in ["gfx90a:sramecc+:xnack+", "gfx942:sramecc+:xnack-", "gfx1100"] {
        let arch = device.split(":sramecc").next().unwrap();
        let arch = if arch == "gfx90a" { "gfx90a:xnack+" } else { arch };
        assert_eq!(runtime_lookup(&edited_bin, 0, device).as_ref(), original_vec[0].get(arch), "edited, {device}");
    }

    // The split libraries load in Debian 13 with its HIP runtime (which
    // registers each wrapper when a library is loaded).
    let (_, builder) = debian13_rocm_images();
    let script = "import ctypes\nfor p in ['lib/libvec.so', 'lib/libvec_edited.so', 'libtwo.so', 'librdc.so']:\n    ctypes.CDLL('/work/site/hipsplit/' + p)\nprint('loaded')";
    let o = run_expect(in_image(&builder, &[(&site, "/work/site")]).args(["--", "python3", "-c", script]), 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("loaded"), "{}", String::from_utf8_lossy(&o.stderr));

    // The same input gives the same bytes.
    let again = tmp.path().join("again");
    split(&wheel, &again, &[]);
    for n in &names {
        assert_eq!(std::fs::read(out.join(n)).unwrap(), std::fs::read(again.join(n)).unwrap(), "{n} differs");
    }
}

#[test]
fn targets_narrow_the_split_and_bad_input_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = fat_wheel(&tmp.path().join("in"));
    let out = tmp.path().join("out");
    let report = split(&wheel, &out, &["--targets", "gfx942"]);
    assert_eq!(report["device"].as_array().unwrap().len(), 1, "{report:#}");
    assert_eq!(report["dropped"], serde_json::json!(["gfx1100", "gfx90a"]));
    // A list as ROCm's variables write it (`;`) is the same list as with `,`,
    // as every command that takes --targets reads it.
    let semi = tmp.path().join("semi");
    let report = split(&wheel, &semi, &["--targets", "gfx942;gfx90a"]);
    assert_eq!(report["dropped"], serde_json::json!(["gfx1100"]), "{report:#}");
    let mut c = quarry();
    c.args(["wheel", "split", "-o"]).arg(tmp.path().join("bad")).arg(&wheel).args(["--targets", "gfx942,sm_80"]);
    let err = String::from_utf8_lossy(&run_expect(&mut c, 2).stderr).to_string();
    assert!(err.contains("--targets") && err.contains("`sm_80` is not a target id"), "{err}");
    // Stored kernels and no family chain: the runtime finds the same code.
    let plain = tmp.path().join("plain");
    let report = split(&wheel, &plain, &["--compression", "none", "--families", "none", "--device-prefix", "hs-dev"]);
    let set: Vec<PathBuf> = std::iter::once(report["host"].as_str().unwrap().into())
        .chain(report["device"].as_array().unwrap().iter().map(|d| PathBuf::from(d["wheel"].as_str().unwrap())))
        .collect();
    assert!(set.iter().any(|w| w.to_string_lossy().contains("hs_dev_gfx942-1.0")), "{report:#}");
    check_targets(&set, "gfx942", 0);
    let site = tmp.path().join("plain-site");
    for w in &set {
        install(w, &site);
    }
    let original = original_code(&built().join("libtwo.so"));
    assert_eq!(runtime_lookup(&site.join(LIBS[1]), 1, "gfx942").as_ref(), original[1].get("gfx942"));

    // A target the wheel lacks, and a wheel without fat binaries: errors naming them, nothing written.
    let none = tmp.path().join("none");
    let mut c = quarry();
    c.args(["wheel", "split", "-o"]).arg(&none).arg(&wheel).args(["--targets", "gfx1201"]);
    let o = run_expect(&mut c, 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("gfx1201"), "{}", String::from_utf8_lossy(&o.stderr));
    let pure = wheel_fixtures::make_wheel(
        &tmp.path().join("pure"),
        "pure-1.0-py3-none-any.whl",
        &[("pure/__init__.py", wheel.as_path())],
    );
    let mut c = quarry();
    c.args(["wheel", "split", "-o"]).arg(&none).arg(&pure);
    let o = run_expect(&mut c, 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pure-1.0-py3-none-any.whl") && err.contains("no fat binary"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&none).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An archive for `arch_out` holding the kernels of `src` (for `arch_in`) that `keep` takes.
fn archive_subset(src: &Path, arch_in: &str, arch_out: &str, keep: impl Fn(&str) -> bool, dst: &Path) {
    use quarry::code_objects::kpack_writer::{KpackWriter, Scheme};
    let data = std::fs::read(src).unwrap();
    let file = std::fs::File::create(dst).unwrap();
    let mut w = KpackWriter::new(file, "hipsplit", arch_out, Scheme::ZstdPerKernel).unwrap();
    for k in kpack::read(&data).unwrap() {
        if keep(&k.binary) {
            let code = kpack::kernel(&data, &k.binary, arch_in).unwrap().unwrap();
            w.add(&k.binary, &mut &code[..], code.len() as u64).unwrap();
        }
    }
    w.finish().unwrap();
}

fn check_targets(wheels: &[PathBuf], targets: &str, code: i32) -> serde_json::Value {
    check_targets_with(wheels, targets, &[], &[], code)
}

/// `wheel check --targets` with more arguments and environment variables.
fn check_targets_with(
    wheels: &[PathBuf],
    targets: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    code: i32,
) -> serde_json::Value {
    let mut c = quarry();
    c.args(["wheel", "check", "--json", "--targets", targets]).args(extra).args(wheels);
    for v in ["ROCM_KPACK_DISABLE", "ROCM_KPACK_PATH", "ROCM_KPACK_PATH_PREFIX"] {
        c.env_remove(v);
    }
    c.envs(env.iter().copied());
    stdout_json(&run_expect(&mut c, code))["coverage"].clone()
}

fn problems(coverage: &serde_json::Value) -> Vec<String> {
    coverage["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{} on {}: {}",
                p["binary"].as_str().unwrap(),
                p["target"].as_str().unwrap(),
                p["why"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn wheel_check_targets_finds_what_an_install_set_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let fat = fat_wheel(&tmp.path().join("in"));
    let out = tmp.path().join("out");
    split(&fat, &out, &[]);
    let wheel = |n: &str| out.join(format!("{n}-1.0-cp311-cp311-linux_x86_64.whl"));
    let host = wheel("hipsplit");
    let devices = ["gfx90a", "gfx942", "gfx1100"].map(|t| wheel(&format!("hipsplit_device_{t}")));
    let all: Vec<PathBuf> = std::iter::once(host.clone()).chain(devices.iter().cloned()).collect();

    // The complete set, and the fat wheel itself, hold code for gfx942 (every library was built for it).
    let c = check_targets(&all, "gfx942", 0);
    assert_eq!(c["binaries"].as_array().unwrap().len(), 3, "{c:#}");
    check_targets(std::slice::from_ref(&fat), "gfx942", 0);
    // A target missing from a library's archives: librdc.so was not built for gfx1100.
    let p = problems(&check_targets(&all, "gfx1100", 1));
    assert_eq!(p.len(), 2, "librdc's two wrappers: {p:#?}");
    assert!(
        p.iter().all(|p| p.contains("hipsplit/librdc.so on gfx1100") && p.contains("no kernel `librdc.so#")),
        "{p:#?}"
    );
    let p = problems(&check_targets(std::slice::from_ref(&fat), "gfx1100", 1));
    assert!(p.len() == 2 && p.iter().all(|p| p.contains("librdc.so on gfx1100")), "{p:#?}");
    // gfx90a without a feature: an xnack-off GPU has no code (only xnack+ was built).
    let p = problems(&check_targets(&all, "gfx90a", 1));
    assert!(p.iter().any(|p| p.contains("librdc.so on gfx90a:xnack-")), "{p:#?}");
    assert!(!p.iter().any(|p| p.contains("libvec.so on gfx90a:xnack+")), "{p:#?}");

    // An install without any device extra.
    let p = problems(&check_targets(std::slice::from_ref(&host), "gfx942", 1));
    assert!(p.iter().any(|p| p.contains("hipsplit/librdc.so on gfx942") && p.contains("device-gfx942")), "{p:#?}");

    let site = tmp.path().join("site");
    install(&devices[1], &site);
    let archive = site.join("hipsplit/.kpack/hipsplit_gfx942.kpack");
    let partial = tmp.path().join("partial");
    std::fs::create_dir_all(&partial).unwrap();
    // An xnack-specific archive that shadows the full one.
    archive_subset(&archive, "gfx942", "gfx942:xnack-", |b| b.starts_with("lib/libvec.so"), &partial.join("x.kpack"));
    let shadow = wheel_fixtures::make_wheel(
        &tmp.path().join("shadow"),
        "hipsplit_xnack-1.0-cp311-cp311-linux_x86_64.whl",
        &[("hipsplit/.kpack/hipsplit_gfx942:xnack-.kpack", &partial.join("x.kpack"))],
    );
    let mut with_shadow = all.clone();
    with_shadow.push(shadow);
    // ROCm 7's loader: the first matching archive decides.
    let c = check_targets_with(&with_shadow, "gfx942:xnack-", &["--loader", "rocm-7"], &[], 1);
    assert_eq!(c["loader"], "rocm-7");
    let p = problems(&c);
    let shadowed: Vec<&String> = p.iter().filter(|p| p.contains("does not fall back")).collect();
    assert_eq!(shadowed.len(), 4, "libtwo's and librdc's wrappers: {p:#?}");
    assert!(!shadowed.iter().any(|p| p.contains("libvec.so on")), "libvec's kernels are in the xnack- archive: {p:#?}");
    // And the extra that would install it does not pull the wheel it is in.
    assert!(p.iter().any(|p| p.contains("does not pull `hipsplit_xnack`")), "{p:#?}");
    // The newest loader (the default) falls through to the full archive for
    // libtwo's and librdc's kernels; the extra still misses the xnack wheel.
    let c = check_targets(&with_shadow, "gfx942:xnack-", 1);
    assert_eq!(c["loader"], "rocm-10");
    let p = problems(&c);
    assert!(!p.iter().any(|p| p.contains("fall back") || p.contains("less specific archive")), "{p:#?}");
    assert!(p.iter().any(|p| p.contains("does not pull `hipsplit_xnack`")), "{p:#?}");
    // The xnack- archive inside the gfx942 device wheel itself (pulled by its
    // extra): fine with the newest loader, each fallen-through kernel noted;
    // ROCm 7's loader fails on the same kernels.
    let site942 = tmp.path().join("site942");
    install(&devices[1], &site942);
    std::fs::copy(partial.join("x.kpack"), site942.join("hipsplit/.kpack/hipsplit_gfx942:xnack-.kpack")).unwrap();
    let mut members: Vec<(String, PathBuf)> = Vec::new();
    for e in walkdir::WalkDir::new(&site942).sort_by_file_name() {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(&site942).unwrap().to_string_lossy().to_string();
        if e.file_type().is_file() && !rel.contains(".dist-info/") {
            members.push((rel, e.path().to_path_buf()));
        }
    }
    let members: Vec<(&str, &Path)> = members.iter().map(|(a, b)| (a.as_str(), b.as_path())).collect();
    let both = wheel_fixtures::make_wheel_with(
        &tmp.path().join("both"),
        "hipsplit_device_gfx942-1.0-cp311-cp311-linux_x86_64.whl",
        &members,
        "Requires-Dist: hipsplit == 1.0\n",
    );
    let set = vec![host.clone(), devices[0].clone(), both.clone(), devices[2].clone()];
    let c = check_targets(&set, "gfx942:xnack-", 0);
    let notes: Vec<String> =
        c["notes"].as_array().unwrap().iter().map(|n| n["why"].as_str().unwrap().to_string()).collect();
    assert_eq!(notes.len(), 4, "libtwo's and librdc's wrappers: {notes:#?}");
    assert!(
        notes.iter().all(|n| n.contains("falls through") && n.contains("hipsplit_gfx942:xnack-.kpack")),
        "{notes:#?}"
    );
    let p = problems(&check_targets_with(&set, "gfx942:xnack-", &["--loader", "7.1"], &[], 1));
    assert_eq!(p.len(), 4, "{p:#?}");
    assert!(p.iter().all(|p| p.contains("no kernel `lib") && p.contains("rocm-7 loader stops")), "{p:#?}");
    // ROCM_KPACK_DISABLE: every device-split binary is refused; fat wheels are not affected.
    let p = problems(&check_targets_with(&all, "gfx942", &[], &[("ROCM_KPACK_DISABLE", "1")], 1));
    assert_eq!(p.len(), 3, "one per split library: {p:#?}");
    assert!(p.iter().all(|p| p.contains("ROCM_KPACK_DISABLE is set")), "{p:#?}");
    check_targets_with(&all, "gfx942", &[], &[("ROCM_KPACK_DISABLE", "0")], 0);
    check_targets_with(std::slice::from_ref(&fat), "gfx942", &[], &[("ROCM_KPACK_DISABLE", "1")], 0);
    // ROCM_KPACK_PATH replaces the marker's search paths: the host wheel
    // alone with gfx942's archive on disk is complete (no extra needed)...
    let on_disk = archive.to_str().unwrap();
    check_targets_with(std::slice::from_ref(&host), "gfx942", &[], &[("ROCM_KPACK_PATH", on_disk)], 0);
    // ...and the complete set with a path to nothing has no code.
    let p = problems(&check_targets_with(&all, "gfx942", &[], &[("ROCM_KPACK_PATH", "/nonexistent/a.kpack")], 1));
    assert!(p.len() == 5 && p.iter().all(|p| p.contains("ROCM_KPACK_PATH replaces")), "every wrapper: {p:#?}");
    // ROCM_KPACK_PATH_PREFIX comes first: the xnack- archive missing
    // libtwo's and librdc's kernels shadows the set's on ROCm 7, not on the newest.
    let prefix = [("ROCM_KPACK_PATH_PREFIX", partial.join("x.kpack").to_str().unwrap().to_string())];
    let prefix: Vec<(&str, &str)> = prefix.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = problems(&check_targets_with(&all, "gfx942:xnack-", &["--loader", "rocm-7"], &prefix, 1));
    assert!(p.len() == 4 && p.iter().all(|p| p.contains("x.kpack") && p.contains("does not fall back")), "{p:#?}");
    check_targets_with(&all, "gfx942:xnack-", &[], &prefix, 0);
    // The same set is fine where xnack is on: the xnack- archive is not a candidate there.
    check_targets(&with_shadow, "gfx942:xnack+", 0);

    // A device wheel without its family dependency: gfx1101's code is in the
    // gfx11 family wheel (built for gfx11-generic), and gfx1101's own wheel
    // (a kernel database only) does not require it.
    archive_subset(&archive, "gfx942", "gfx11-generic", |_| true, &partial.join("g.kpack"));
    let family = wheel_fixtures::make_wheel_with(
        &tmp.path().join("family"),
        "hipsplit_device_gfx11-1.0-cp311-cp311-linux_x86_64.whl",
        &[("hipsplit/.kpack/hipsplit_gfx11-generic.kpack", &partial.join("g.kpack"))],
        "Requires-Dist: hipsplit == 1.0\n",
    );
    let db = partial.join("TensileLibrary_gfx1101.dat");
    std::fs::write(&db, "tuning").unwrap();
    let device = |requires: &str, into: &str| {
        wheel_fixtures::make_wheel_with(
            &tmp.path().join(into),
            "hipsplit_device_gfx1101-1.0-cp311-cp311-linux_x86_64.whl",
            &[("hipsplit/lib/rocblas/library/TensileLibrary_gfx1101.dat", db.as_path())],
            requires,
        )
    };
    // The host as a split would make it for gfx1101 (its extra, its libraries).
    let host_tree = tmp.path().join("host-tree");
    install(&host, &host_tree);
    let host_files: Vec<(&str, PathBuf)> = LIBS.iter().map(|l| (*l, host_tree.join(l))).collect();
    let host_files: Vec<(&str, &Path)> = host_files.iter().map(|(a, b)| (*a, b.as_path())).collect();
    let host1101 = wheel_fixtures::make_wheel_with(
        &tmp.path().join("host1101"),
        "hipsplit-1.0-cp311-cp311-linux_x86_64.whl",
        &host_files,
        "Provides-Extra: device-gfx1101\nRequires-Dist: hipsplit-device-gfx1101 == 1.0; extra == \"device-gfx1101\"\n",
    );
    let lone = device("Requires-Dist: hipsplit == 1.0\n", "lone");
    let p = problems(&check_targets(&[host1101.clone(), lone, family.clone()], "gfx1101", 1));
    assert!(!p.is_empty() && p.iter().all(|p| p.contains("does not pull `hipsplit_device_gfx11`")), "{p:#?}");
    let chained = device("Requires-Dist: hipsplit == 1.0\nRequires-Dist: hipsplit-device-gfx11 == 1.0\n", "chained");
    check_targets(&[host1101, chained, family], "gfx1101", 0);
}

/// `wheel check --targets T --index DIR REQUIREMENT...`: the set pip would
/// install for the requirements (pip resolves, offline from a wheelhouse),
/// checked before anything is installed: the device extra's set passes;
/// no device extra, a device wheel missing a library's kernels, and a
/// device wheel without its family dependency each fail, named.
#[test]
fn index_preflight_checks_the_set_pip_would_install() {
    let tmp = tempfile::tempdir().unwrap();
    let fat = fat_wheel(&tmp.path().join("in"));
    let out = tmp.path().join("out");
    split(&fat, &out, &[]);
    let house = tmp.path().join("house");
    std::fs::create_dir_all(&house).unwrap();
    let boot = common::rocm_bootstrap_wheel();
    std::fs::copy(&boot, house.join(boot.file_name().unwrap())).unwrap();
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "whl") {
            std::fs::copy(&p, house.join(p.file_name().unwrap())).unwrap();
        }
    }
    let preflight = |house: &Path, reqs: &[&str], target: &str, code: i32| {
        let mut c = quarry();
        c.args(["wheel", "check", "--json", "--targets", target, "--index"]).arg(house).args(reqs);
        stdout_json(&run_expect(c.env_remove("ROCM_KPACK_DISABLE"), code))
    };
    let v = preflight(&house, &["hipsplit[device-gfx942]"], "gfx942", 0);
    let mut resolved: Vec<String> = v["wheels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            Path::new(w["wheel"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .split('-')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    resolved.sort();
    assert_eq!(resolved, ["hipsplit", "hipsplit_device_gfx942", "rocm_bootstrap"], "{v:#}");
    // No device extra: the host alone has no code.
    let p = problems(&preflight(&house, &["hipsplit"], "gfx942", 1)["coverage"]);
    assert!(p.iter().any(|p| p.contains("librdc.so on gfx942") && p.contains("device-gfx942")), "{p:#?}");
    // librdc was not built for gfx1100: its kernels are in no archive of the set.
    let p = problems(&preflight(&house, &["hipsplit[device-gfx1100]"], "gfx1100", 1)["coverage"]);
    assert!(
        !p.is_empty() && p.iter().all(|p| p.contains("librdc.so on gfx1100") && p.contains("no kernel `librdc.so#")),
        "{p:#?}"
    );
    // A device wheel without its family dependency: gfx1101's wheel holds a
    // database only, its code is in the gfx11 family wheel, which nothing pulls.
    let site = tmp.path().join("site");
    install(&out.join("hipsplit_device_gfx942-1.0-cp311-cp311-linux_x86_64.whl"), &site);
    let partial = tmp.path().join("partial");
    std::fs::create_dir_all(&partial).unwrap();
    archive_subset(
        &site.join("hipsplit/.kpack/hipsplit_gfx942.kpack"),
        "gfx942",
        "gfx11-generic",
        |_| true,
        &partial.join("g.kpack"),
    );
    let house11 = tmp.path().join("house11");
    wheel_fixtures::make_wheel_with(
        &house11,
        "hipsplit_device_gfx11-1.0-cp311-cp311-linux_x86_64.whl",
        &[("hipsplit/.kpack/hipsplit_gfx11-generic.kpack", &partial.join("g.kpack"))],
        "Requires-Dist: hipsplit == 1.0\n",
    );
    let db = partial.join("TensileLibrary_gfx1101.dat");
    std::fs::write(&db, "tuning").unwrap();
    wheel_fixtures::make_wheel_with(
        &house11,
        "hipsplit_device_gfx1101-1.0-cp311-cp311-linux_x86_64.whl",
        &[("hipsplit/lib/rocblas/library/TensileLibrary_gfx1101.dat", db.as_path())],
        "Requires-Dist: hipsplit == 1.0\n",
    );
    let host_tree = tmp.path().join("host-tree");
    install(&out.join("hipsplit-1.0-cp311-cp311-linux_x86_64.whl"), &host_tree);
    let host_files: Vec<(&str, PathBuf)> = LIBS.iter().map(|l| (*l, host_tree.join(l))).collect();
    let host_files: Vec<(&str, &Path)> = host_files.iter().map(|(a, b)| (*a, b.as_path())).collect();
    wheel_fixtures::make_wheel_with(
        &house11,
        "hipsplit-1.0-cp311-cp311-linux_x86_64.whl",
        &host_files,
        "Provides-Extra: device-gfx1101\nRequires-Dist: hipsplit-device-gfx1101 == 1.0; extra == \"device-gfx1101\"\n",
    );
    let p = problems(&preflight(&house11, &["hipsplit[device-gfx1101]"], "gfx1101", 1)["coverage"]);
    assert!(
        !p.is_empty() && p.iter().all(|p| p.contains("on gfx1101") && p.contains("hipsplit_gfx11-generic.kpack")),
        "{p:#?}"
    );
    // A requirement the wheelhouse cannot satisfy: pip's answer, exit 1.
    let mut c = quarry();
    c.args(["wheel", "check", "--targets", "gfx942", "--index"]).arg(&house).arg("nosuchproject");
    let e = String::from_utf8_lossy(&run_expect(&mut c, 1).stderr).to_string();
    assert!(e.contains("nosuchproject"), "{e}");
}

/// `wheel build --split`: tests/fixtures/hip/pyext built for two targets in
/// hip-builder-debian13, repaired, then split; the host and device wheels
/// pass `wheel check --targets` as an install set, and the extension
/// imports from them in Debian 13.
#[test]
fn wheel_build_split_emits_host_and_device_wheels() {
    let (_, builder) = debian13_rocm_images();
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("wheels");
    let built = stdout_json(&run_expect(
        quarry()
            .args(["wheel", "build"])
            .arg(repo().join("tests/fixtures/hip/pyext"))
            .arg("--image")
            .arg(&builder)
            .arg("-o")
            .arg(&out)
            .args(["--axis", "PYTORCH_ROCM_ARCH=gfx90a;gfx942", "--gpu", "none"])
            .args(["--repair", "--exclude", "libamdhip64.so*", "--split", "--json", "--cache-dir"])
            .arg(packages_cache()),
        0,
    ));
    let wheels = built.as_array().unwrap_or_else(|| built["wheels"].as_array().expect("a list of wheels"));
    assert_eq!(wheels.len(), 1, "{built:#}");
    let host = PathBuf::from(wheels[0]["wheel"].as_str().unwrap());
    let devices: Vec<PathBuf> =
        wheels[0]["device_wheels"].as_array().unwrap().iter().map(|d| PathBuf::from(d.as_str().unwrap())).collect();
    let names: Vec<String> = devices.iter().map(|d| d.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "{built:#}");
    assert!(names.iter().any(|n| n.contains("device_gfx90a")) && names.iter().any(|n| n.contains("device_gfx942")));
    let set: Vec<PathBuf> = std::iter::once(host.clone()).chain(devices.iter().cloned()).collect();
    check_targets(&set, "gfx90a,gfx942", 0);
    let p = problems(&check_targets(std::slice::from_ref(&host), "gfx942", 1));
    assert!(!p.is_empty());

    // Installed together (as pip would), the extension imports.
    let site = work.path().join("site");
    for w in &set {
        install(w, &site);
    }
    let import = "cd /tmp && PYTHONPATH=/tmp/site python3 -c 'import hipext; print(\"imported\")'";
    let o = run_expect(in_image(&builder, &[(&site, "/tmp/site")]).args(["--", "sh", "-c", import]), 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("imported"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A copy of `lib` with `edit` applied to its bytes (given the file's sections).
fn damaged(lib: &Path, into: &Path, edit: impl Fn(&mut Vec<u8>, &object::File)) -> PathBuf {
    let mut data = std::fs::read(lib).unwrap();
    let copy = data.clone();
    let elf = object::File::parse(&*copy).unwrap();
    edit(&mut data, &elf);
    std::fs::create_dir_all(into).unwrap();
    let out = into.join("libvec.so");
    std::fs::write(&out, data).unwrap();
    out
}

#[test]
fn damaged_binaries_are_named_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = built().join("libvec.so");
    let cases: Vec<(&str, PathBuf, &str)> = vec![
        (
            "truncated",
            // The bundle's first entry claims more bytes than .hip_fatbin has.
            damaged(&lib, &tmp.path().join("truncated"), |d, elf| {
                let (off, _) = elf.section_by_name(".hip_fatbin").unwrap().file_range().unwrap();
                let size_at = off as usize + 24 + 8 + 8;
                d[size_at..size_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
            }),
            "bundle",
        ),
        (
            "wrappers",
            // .hipFatBinSegment's size is no whole number of wrappers.
            damaged(&lib, &tmp.path().join("wrappers"), |d, elf| {
                let index = elf.section_by_name(".hipFatBinSegment").unwrap().index().0;
                let shoff = u64::from_le_bytes(d[0x28..0x30].try_into().unwrap()) as usize;
                let size_at = shoff + index * 64 + 32;
                d[size_at..size_at + 8].copy_from_slice(&25u64.to_le_bytes());
            }),
            "24",
        ),
    ];
    for (case, bin, says) in cases {
        let wheel = wheel_fixtures::make_wheel(
            &tmp.path().join(format!("{case}-in")),
            "hipsplit-1.0-cp311-cp311-linux_x86_64.whl",
            &[("hipsplit/lib/libvec.so", bin.as_path())],
        );
        let out = tmp.path().join(format!("{case}-out"));
        let mut c = quarry();
        c.args(["wheel", "split", "-o"]).arg(&out).arg(&wheel);
        let o = run_expect(&mut c, 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("member `hipsplit/lib/libvec.so`") && err.contains(says), "{case}: {err}");
        assert!(!err.contains("panicked"), "{case}: {err}");
        let left: Vec<_> = std::fs::read_dir(&out).map(|d| d.flatten().collect()).unwrap_or_default();
        assert!(left.is_empty(), "{case}: left behind {left:?}");
    }
}

/// Signed with `--sign-key`, each wheel's attestation is one cosign checks
/// as a blob's (`verify-blob-attestation --type slsaprovenance1`, the
/// wheel's sha256 against the statement's subject); another key, another
/// wheel and a truncated envelope are refused. Splitting twice writes the
/// same bytes.
#[test]
fn split_wheels_carry_attestations_cosign_verifies_as_blobs() {
    if !have_docker() || !have_tool("openssl") {
        return;
    }
    let tools = common::sigstore::tools_image();
    let tmp = tempfile::tempdir().unwrap();
    let wheel = fat_wheel(&tmp.path().join("in"));
    let keys = tmp.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    for k in ["signer", "other"] {
        let mut g = std::process::Command::new("openssl");
        g.args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
            .arg(keys.join(format!("{k}.pem")));
        run_expect(&mut g, 0);
        let mut p = std::process::Command::new("openssl");
        p.args(["pkey", "-pubout", "-in"])
            .arg(keys.join(format!("{k}.pem")))
            .arg("-out")
            .arg(keys.join(format!("{k}.pub")));
        run_expect(&mut p, 0);
    }
    let signed = |out: &Path| {
        let mut c = quarry();
        c.args(["wheel", "split", "--json", "-o"]).arg(out).arg(&wheel).arg("--sign-key").arg(keys.join("signer.pem"));
        run_expect(&mut c, 0);
    };
    let out = keys.join("out");
    signed(&out);
    signed(&keys.join("again"));
    let host = "hipsplit-1.0-cp311-cp311-linux_x86_64.whl";
    let device = "hipsplit_device_gfx942-1.0-cp311-cp311-linux_x86_64.whl";
    for n in [host, device] {
        let a = std::fs::read(out.join(format!("{n}.intoto.jsonl"))).unwrap();
        assert_eq!(
            a,
            std::fs::read(keys.join("again").join(format!("{n}.intoto.jsonl"))).unwrap(),
            "{n}: signed differently"
        );
    }
    let cosign = |key: &str, sig: &str, blob: &str| {
        let args = ["cosign", "verify-blob-attestation", "--key", key, "--signature", sig, "--type", "slsaprovenance1"];
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--insecure-ignore-tlog", blob]);
        common::sigstore::tool(&tools, &keys, &a)
    };
    let text = |o: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    for n in [host, device] {
        let o = cosign("signer.pub", &format!("out/{n}.intoto.jsonl"), &format!("out/{n}"));
        assert!(o.status.success(), "cosign verify-blob-attestation {n}: {}", text(&o));
    }
    let o = cosign("other.pub", &format!("out/{host}.intoto.jsonl"), &format!("out/{host}"));
    assert!(!o.status.success(), "cosign took another key: {}", text(&o));
    let o = cosign("signer.pub", &format!("out/{host}.intoto.jsonl"), &format!("out/{device}"));
    assert!(!o.status.success(), "cosign took the host's attestation for another wheel: {}", text(&o));
    let full = std::fs::read(out.join(format!("{host}.intoto.jsonl"))).unwrap();
    std::fs::write(keys.join("truncated.jsonl"), &full[..full.len() / 2]).unwrap();
    let o = cosign("signer.pub", "truncated.jsonl", &format!("out/{host}"));
    assert!(!o.status.success(), "cosign took a truncated envelope: {}", text(&o));

    // `quarry verify` runs the split again from the fat wheel the
    // provenance names (found by sha256 in --inputs) and compares.
    let verify = |target: &Path, extra: &[&str], code: i32| {
        let mut c = quarry();
        c.arg("verify").arg(target).arg("--json").arg("--inputs").arg(wheel.parent().unwrap()).args(extra);
        run_expect(&mut c, code)
    };
    let signer = keys.join("signer.pub");
    for n in [host, device] {
        let v = stdout_json(&verify(&out.join(n), &["--key", signer.to_str().unwrap()], 0));
        assert_eq!(v["reproduced"], true, "{v:#}");
        assert_eq!(v["build_type"], "urn:quarry:build-type:wheel-split:v1");
        assert!(v["signed_by"].is_string(), "{v:#}");
    }
    let e = verify(&out.join(host), &["--key", keys.join("other.pub").to_str().unwrap()], 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains(&host.to_string()), "{e:?}");
    // A compromised wheel that carries a statement about itself: the
    // rebuild names the member that differs.
    let bad = keys.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    wheel_fixtures::rewrite_member(&out.join(host), &bad.join(host), "hipsplit/__init__.py", |_| {
        b"import os\n".to_vec()
    });
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("{host}.intoto.json"))).unwrap()).unwrap();
    doc["subject"][0]["digest"]["sha256"] = quarry::oci::digest::sha256_file(&bad.join(host)).unwrap().into();
    std::fs::write(bad.join(format!("{host}.intoto.json")), serde_json::to_vec(&doc).unwrap()).unwrap();
    let v = stdout_json(&verify(&bad.join(host), &[], 1));
    assert_eq!(v["reproduced"], false, "{v:#}");
    assert!(v["difference"].as_str().unwrap().contains("zip member hipsplit/__init__.py"), "{v:#}");
    // The same wheel beside the original statement: the subject does not match.
    std::fs::copy(out.join(format!("{host}.intoto.json")), bad.join(format!("{host}.intoto.json"))).unwrap();
    let e = String::from_utf8_lossy(&verify(&bad.join(host), &[], 1).stderr).to_string();
    assert!(e.contains("the provenance is about sha256:") && e.contains(host), "{e}");
    // An input nowhere to be found: named, with where it was looked for.
    let empty = keys.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut c = quarry();
    c.arg("verify").arg(out.join(host)).arg("--inputs").arg(&empty);
    let e = String::from_utf8_lossy(&run_expect(&mut c, 1).stderr).to_string();
    assert!(e.contains("its input `hipsplit-1.0-cp311-cp311-linux_x86_64.whl`") && e.contains("--inputs"), "{e}");
}

/// `--device-requires-dist` as ROCm's splitter takes it: each target
/// wheel requires its `rocm-sdk-device-<target>`; a requirement without
/// `@GFXARCH@` goes to every device wheel; the host wheel gains nothing.
/// The option is in the provenance, so `quarry verify` splits the same way.
#[test]
fn device_requires_dist_templates_reach_each_device_wheel() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = fat_wheel(&tmp.path().join("in"));
    let out = tmp.path().join("out");
    let extra = ["--device-requires-dist", "rocm-sdk-device-@GFXARCH@ == 7.1", "--device-requires-dist", "numpy>=1.24"];
    split(&wheel, &out, &extra);
    let metadata = |name: &str, dist_info: &str| {
        let mut z = zip::ZipArchive::new(std::fs::File::open(out.join(name)).unwrap()).unwrap();
        let mut m = String::new();
        z.by_name(&format!("{dist_info}/METADATA")).unwrap().read_to_string(&mut m).unwrap();
        m
    };
    for t in ["gfx90a", "gfx942", "gfx1100"] {
        let m = metadata(
            &format!("hipsplit_device_{t}-1.0-cp311-cp311-linux_x86_64.whl"),
            &format!("hipsplit_device_{t}-1.0.dist-info"),
        );
        let requires: Vec<&str> = m.lines().filter(|l| l.starts_with("Requires-Dist:")).collect();
        assert_eq!(
            requires[..3],
            [
                "Requires-Dist: hipsplit == 1.0".to_string(),
                format!("Requires-Dist: rocm-sdk-device-{t} == 7.1"),
                "Requires-Dist: numpy>=1.24".to_string()
            ],
            "{m}"
        );
    }
    let host = metadata("hipsplit-1.0-cp311-cp311-linux_x86_64.whl", "hipsplit-1.0.dist-info");
    assert!(!host.contains("rocm-sdk-device") && !host.contains("numpy"), "{host}");
    let device = out.join("hipsplit_device_gfx942-1.0-cp311-cp311-linux_x86_64.whl");
    let mut c = quarry();
    c.arg("verify").arg(&device).arg("--json").arg("--inputs").arg(wheel.parent().unwrap());
    let v = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(v["reproduced"], true, "{v:#}");
}

/// Every kernel-database layout of ROCm's splitter routed to its device
/// wheel: Tensile's per-target folder (the manifest too), AOTriton's
/// target and family folders (`amd-gfx11xx` is the gfx11 family wheel,
/// which gfx1100's wheel then requires), MIOpen's CK per-target library
/// (moved whole, not split), hipkernelprovider's arch_content; a database
/// without a target stays in the host wheel. The set passes `wheel check`
/// for gfx942 (the one target every library was built for).
#[test]
fn each_database_layout_goes_to_its_target_or_family_wheel() {
    let tmp = tempfile::tempdir().unwrap();
    let b = built();
    let data = tmp.path().join("data.bin");
    std::fs::write(&data, "kernels").unwrap();
    let ck = tmp.path().join("libMIOpenCKGroupConv_gfx90a.so");
    wheel_fixtures::cc_shared(&ck, "int ck(void) { return 3; }", &[]);
    let init = tmp.path().join("__init__.py");
    std::fs::write(&init, "").unwrap();
    let (vec, two, rdc) = (b.join("libvec.so"), b.join("libtwo.so"), b.join("librdc.so"));
    let routed: [(&str, &str); 6] = [
        ("hipsplit/lib/hipblaslt/library/gfx942/TensileManifest.txt", "hipsplit_device_gfx942"),
        ("hipsplit/lib/aotriton.images/amd-gfx942/flash/attn_fwd/k.aks2", "hipsplit_device_gfx942"),
        ("hipsplit/lib/aotriton.images/amd-gfx11xx/flash/bwd/k.aks2", "hipsplit_device_gfx11"),
        ("hipsplit/share/miopen/db/gfx942130.kdb", "hipsplit_device_gfx942"),
        ("hipsplit/lib/libMIOpenCKGroupConv_gfx90a.so", "hipsplit_device_gfx90a"),
        ("hipsplit/engines/arch_content/gemm/gfx1100/a.bin", "hipsplit_device_gfx1100"),
    ];
    let mut files: Vec<(&str, &Path)> =
        vec![("hipsplit/__init__.py", &init), (LIBS[0], &vec), (LIBS[1], &two), (LIBS[2], &rdc)];
    for (member, _) in &routed {
        files.push((member, if member.ends_with(".so") { &ck } else { &data }));
    }
    files.push(("hipsplit/lib/rocblas/library/TensileLibrary_fallback.dat", &data));
    let wheel = wheel_fixtures::make_wheel(&tmp.path().join("in"), "hipsplit-1.0-cp311-cp311-linux_x86_64.whl", &files);
    let out = tmp.path().join("out");
    split(&wheel, &out, &[]);
    let members_of =
        |stem: &str| wheel_fixtures::zip_names(&out.join(format!("{stem}-1.0-cp311-cp311-linux_x86_64.whl")));
    for (member, stem) in routed {
        assert!(members_of(stem).iter().any(|m| m == member), "{member} not in {stem}: {:?}", members_of(stem));
        assert!(!members_of("hipsplit").iter().any(|m| m == member), "{member} left in the host wheel");
    }
    assert!(members_of("hipsplit").iter().any(|m| m == "hipsplit/lib/rocblas/library/TensileLibrary_fallback.dat"));
    // The CK library moved whole, byte for byte.
    let mut z = zip::ZipArchive::new(
        std::fs::File::open(out.join("hipsplit_device_gfx90a-1.0-cp311-cp311-linux_x86_64.whl")).unwrap(),
    )
    .unwrap();
    let mut moved = Vec::new();
    z.by_name("hipsplit/lib/libMIOpenCKGroupConv_gfx90a.so").unwrap().read_to_end(&mut moved).unwrap();
    assert!(moved == std::fs::read(&ck).unwrap());
    // gfx1100's wheel requires the gfx11 family wheel its AOTriton files are in.
    let mut z = zip::ZipArchive::new(
        std::fs::File::open(out.join("hipsplit_device_gfx1100-1.0-cp311-cp311-linux_x86_64.whl")).unwrap(),
    )
    .unwrap();
    let mut meta = String::new();
    z.by_name("hipsplit_device_gfx1100-1.0.dist-info/METADATA").unwrap().read_to_string(&mut meta).unwrap();
    assert!(meta.contains("Requires-Dist: hipsplit-device-gfx11 == 1.0"), "{meta}");
    let set: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    let mut c = quarry();
    c.args(["wheel", "check", "--targets", "gfx942"]).args(&set);
    run_expect(&mut c, 0);
}

/// A separated debug file (`objcopy --only-keep-debug`: `.hip_fatbin`'s
/// header kept, its bytes not) is no fat binary: the split leaves it as it
/// is. A host wheel given to `split` again is refused, naming the marked
/// binary, and nothing is written.
#[test]
fn debug_files_are_left_and_a_split_wheel_is_not_split_again() {
    let tmp = tempfile::tempdir().unwrap();
    let b = built();
    let dbg = tmp.path().join("libvec.so.dbg");
    run_expect(std::process::Command::new("objcopy").arg("--only-keep-debug").arg(b.join("libvec.so")).arg(&dbg), 0);
    let init = tmp.path().join("__init__.py");
    std::fs::write(&init, "").unwrap();
    let lib = b.join("libvec.so");
    let files: Vec<(&str, &Path)> =
        vec![("hipsplit/__init__.py", &init), (LIBS[0], &lib), ("hipsplit/lib/libvec.so.dbg", &dbg)];
    let wheel = wheel_fixtures::make_wheel(&tmp.path().join("in"), "hipsplit-1.0-cp311-cp311-linux_x86_64.whl", &files);
    let out = tmp.path().join("out");
    let report = split(&wheel, &out, &[]);
    assert_eq!(report["binaries"].as_object().unwrap().keys().collect::<Vec<_>>(), [LIBS[0]], "{report:#}");
    let host = out.join("hipsplit-1.0-cp311-cp311-linux_x86_64.whl");
    let mut z = zip::ZipArchive::new(std::fs::File::open(&host).unwrap()).unwrap();
    let mut kept = Vec::new();
    z.by_name("hipsplit/lib/libvec.so.dbg").unwrap().read_to_end(&mut kept).unwrap();
    assert!(kept == std::fs::read(&dbg).unwrap(), "the debug file is kept byte for byte");

    let again = tmp.path().join("again");
    let mut c = quarry();
    c.args(["wheel", "split", "-o"]).arg(&again).arg(&host);
    let e = String::from_utf8_lossy(&run_expect(&mut c, 1).stderr).to_string();
    assert!(e.contains("it was split already") && e.contains(LIBS[0]), "{e}");
    let left: Vec<_> = std::fs::read_dir(&again).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "nothing written: {left:?}");
}

/// `quarry diff` of two wheels. The fat wheel against its split host wheel:
/// each library's GPU targets go from its code objects' processors to
/// none, its content changes (the first differing ELF section named), the
/// device extras appear in METADATA, the Tensile database leaves. Two
/// cc-built wheels whose library links another library and moves its
/// search path from DT_RPATH to DT_RUNPATH: each change is named.
#[test]
fn diff_of_two_wheels_names_members_requirements_elf_entries_and_gpu_targets() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = fat_wheel(&tmp.path().join("in"));
    let out = tmp.path().join("out");
    split(&wheel, &out, &[]);
    let host = out.join("hipsplit-1.0-cp311-cp311-linux_x86_64.whl");
    let d = stdout_json(&run_expect(quarry().arg("diff").arg(&wheel).arg(&host).arg("--json"), 0));
    assert_eq!(d["kind"], "wheels", "{d:#}");
    assert_eq!(d["identical"], false);
    assert_eq!(d["fields"], serde_json::json!([]), "same name, version, tags: {d:#}");
    let targets: BTreeMap<String, serde_json::Value> = d["gpu_targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["member"].as_str().unwrap().to_string(), t.clone()))
        .collect();
    let want = |from: &[&str]| serde_json::json!(from);
    assert_eq!(targets[LIBS[0]]["from"], want(&["gfx1100", "gfx90a", "gfx942"]), "{d:#}");
    assert_eq!(targets[LIBS[0]]["to"], want(&[]), "{d:#}");
    assert_eq!(targets[LIBS[1]]["from"], want(&["gfx1100", "gfx942"]), "{d:#}");
    assert_eq!(targets[TENSILE]["from"], want(&["gfx90a"]), "{d:#}");
    let members: BTreeMap<&str, &serde_json::Value> =
        d["members"].as_array().unwrap().iter().map(|m| (m["path"].as_str().unwrap(), m)).collect();
    assert_eq!(members[TENSILE]["change"], "removed", "{d:#}");
    for lib in LIBS {
        assert_eq!(members[lib]["change"], "changed", "{d:#}");
        assert!(members[lib]["what"].as_array().unwrap().contains(&"content".into()), "{d:#}");
        assert!(members[lib]["detail"].as_str().unwrap().starts_with("ELF section "), "{d:#}");
    }
    // The empty __init__.py: the fixture deflates it, the split stores it.
    assert_eq!(members["hipsplit/__init__.py"]["what"], serde_json::json!(["compression"]), "{d:#}");
    let added: Vec<String> = d["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["change"] == "added")
        .map(|r| format!("{}: {}", r["field"].as_str().unwrap(), r["value"].as_str().unwrap()))
        .collect();
    assert!(added.contains(&"Provides-Extra: device-gfx942".to_string()), "{added:#?}");
    assert!(added.iter().any(|r| r.starts_with("Requires-Dist: hipsplit-device-gfx942")), "{added:#?}");
    let md = run_expect(quarry().arg("diff").arg(&wheel).arg(&host).args(["--format", "markdown"]), 0);
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.contains(&format!("- `{}`: gfx1100, gfx90a, gfx942 -> (none)", LIBS[0])), "{md}");
    assert!(md.contains(&format!("- removed `{TENSILE}`")), "{md}");
    let same = stdout_json(&run_expect(quarry().arg("diff").arg(&host).arg(&host).arg("--json"), 0));
    assert_eq!(same["identical"], true, "{same:#}");

    // Dynamic entries, on libraries cc builds.
    let w = tmp.path().join("cc");
    let lib = w.join("libdep.so");
    wheel_fixtures::cc_shared(&lib, "int dep(void) { return 1; }", &["-Wl,-soname,libdep.so"]);
    let one = w.join("one/libmod.so");
    wheel_fixtures::cc_shared(&one, "int f(void) { return 2; }", &["-Wl,--disable-new-dtags,-rpath,$ORIGIN/one"]);
    let two = w.join("two/libmod.so");
    let dir = format!("-L{}", w.display());
    wheel_fixtures::cc_shared(
        &two,
        "int dep(void); int f(void) { return dep(); }",
        &[&dir, "-ldep", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/two"],
    );
    let a =
        wheel_fixtures::make_wheel(&w.join("a"), "mod-1.0-cp311-cp311-linux_x86_64.whl", &[("mod/libmod.so", &one)]);
    let b = wheel_fixtures::make_wheel_with(
        &w.join("b"),
        "mod-1.1-cp311-cp311-linux_x86_64.whl",
        &[("mod/libmod.so", &two)],
        "Requires-Dist: numpy>=1.24\n",
    );
    let d = stdout_json(&run_expect(quarry().arg("diff").arg(&a).arg(&b).arg("--json"), 0));
    assert_eq!(d["fields"], serde_json::json!([{"field": "version", "from": "1.0", "to": "1.1"}]), "{d:#}");
    let elf: Vec<String> = d["elf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!("{} {}: {} -> {}", e["member"].as_str().unwrap(), e["field"].as_str().unwrap(), e["from"], e["to"])
        })
        .collect();
    assert!(elf.iter().any(|e| e.starts_with("mod/libmod.so NEEDED: ") && e.contains("\"libdep.so\"]")), "{elf:#?}");
    // DT_RPATH in the first, DT_RUNPATH in the second: each named as what it is.
    assert!(elf.contains(&r#"mod/libmod.so RPATH: ["$ORIGIN/one"] -> []"#.to_string()), "{elf:#?}");
    assert!(elf.contains(&r#"mod/libmod.so RUNPATH: [] -> ["$ORIGIN/two"]"#.to_string()), "{elf:#?}");
    assert_eq!(
        d["requirements"],
        serde_json::json!([{"field": "Requires-Dist", "change": "added", "value": "numpy>=1.24"}]),
        "{d:#}"
    );
    // Two kinds: a clear error, exit 1.
    let e = run_expect(quarry().arg("diff").arg(&a).arg(out.join("no-such.lock")), 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains("no-such.lock"), "{e:?}");
}

/// What a variant-aware check of `dir` finds, with PyPI's variantlib: each
/// variant wheel's `variant.json` read as one variant of its label, the
/// index-level `-variants.json` read, the variant it picks for a machine
/// with `amd :: gfx_arch :: TARGET`, and the index variantlib's own
/// `generate-index-json` makes of the wheels (its variants, as properties).
const VARIANTLIB_CHECK: &str = r#"
import json, sys, zipfile, pathlib, shutil, subprocess, os
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson
from variantlib.models.variant import VariantProperty
from variantlib.resolver.lib import sort_and_filter_supported_variants
d, target, strip = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "strip"
def read(text):
    doc = json.loads(text)
    if strip:  # the two PEP 817 keys variantlib 0.2 does not know
        doc["providers"]["amd"].pop("install-time")
        doc["default-priorities"].pop("property")
    return json.dumps(doc)
labels, copy = [], d / "variantlib"
copy.mkdir()
for w in sorted(d.glob("*.whl")):
    parts = w.name[:-4].split("-")
    if len(parts) != 6:
        continue
    with zipfile.ZipFile(w) as z:
        info = VariantDistInfo(read(z.read("hipsplit-1.0.dist-info/variant.json")), parts[5])
    labels.append(info.variant_label)
    with zipfile.ZipFile(w) as z, zipfile.ZipFile(copy / w.name, "w") as out:
        for m in z.namelist():
            data = z.read(m)
            out.writestr(m, read(data) if m.endswith("/variant.json") else data)
index = VariantsJson(json.loads(read((d / "hipsplit-1.0-variants.json").read_text())))
chosen = sort_and_filter_supported_variants(
    list(index.variants.values()),
    [VariantProperty.from_str(f"amd :: gfx_arch :: {target}")],
    namespace_priorities=index.namespace_priorities,
)
subprocess.run([os.path.join(os.path.dirname(sys.executable), "variantlib"), "generate-index-json", "-d", str(copy)], check=True)
made = VariantsJson(json.loads((copy / "hipsplit-1.0-variants.json").read_text()))
props = lambda j: {l: sorted(p.to_str() for p in v.properties) for l, v in j.variants.items()}
print(json.dumps({"labels": labels, "chosen": [v.label for v in chosen], "made": props(made), "ours": props(index)}))
"#;

/// ROCm's splitter's `variant.json` for the target wheels it made, as its
/// `_write_variant_json` writes it (Python's `json.dumps(indent=2)`): what
/// our index-level `-variants.json` must be, byte for byte.
const ROCM_VARIANT_JSON: &str = r#"
import json, sys
t = sorted(sys.argv[1].split(","))
print(json.dumps({
    "providers": {"amd": {"install-time": True, "plugin-api": "amd_variant_provider.plugin:AMDVariantPlugin",
                          "requires": ["amd-variant-provider >= 1.0"]}},
    "default-priorities": {"namespace": ["amd"], "property": {"amd": {"gfx_arch": t}}},
    "variants": {x: {"amd": {"gfx_arch": [x]}} for x in t},
}, indent=2))
"#;

/// `--variants`: a host wheel per target labelled with it, as PEP 817 has
/// them. Its METADATA is the classic one with each device extra's
/// requirement repeated under the target's variant property (ROCm's
/// splitter's markers); `-variants.json` is ROCm's `variant.json` byte for
/// byte; variantlib reads every wheel as one variant, picks gfx942's for a
/// gfx942 machine (then its `null` variant, the classic wheel) and makes
/// the same index of them. A classic installer
/// (pip) skips the variant wheels: `hipsplit[device-gfx942]` installs the
/// host and gfx942 wheels only. `wheel check` and `verify` take the set.
#[test]
fn variant_wheels_are_what_pep817_and_rocm_describe() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = fat_wheel(&tmp.path().join("in"));
    let read_member = |wheel: &Path, member: &str| {
        let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
        let mut s = String::new();
        z.by_name(member).unwrap().read_to_string(&mut s).unwrap();
        s
    };
    let targets = ["gfx1100", "gfx90a", "gfx942"];
    let bin = common::venv::variantlib();
    for (schema, strip) in [("pep817", "strip"), ("wheelnext-0.2", "keep")] {
        let out = tmp.path().join(schema);
        let r = split(&wheel, &out, &["--variants", "--variant-schema", schema]);
        let variants: Vec<String> = r["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| Path::new(v.as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let want: Vec<String> =
            targets.iter().map(|t| format!("hipsplit-1.0-cp311-cp311-linux_x86_64-{t}.whl")).collect();
        assert_eq!(variants, want, "{r:#}");

        // METADATA: the classic lines, each device extra's requirement followed by its variant form.
        let classic =
            read_member(&out.join("hipsplit-1.0-cp311-cp311-linux_x86_64.whl"), "hipsplit-1.0.dist-info/METADATA");
        let mut expected = String::new();
        for line in classic.lines() {
            expected.push_str(line);
            expected.push('\n');
            if let Some((req, extra)) = line.split_once("; extra == \"device-") {
                let t = extra.trim_end_matches('"');
                if t != "all" {
                    expected.push_str(&format!("{req}; \"amd :: gfx_arch :: {t}\" in variant_properties\n"));
                }
            }
        }
        for v in &want {
            assert_eq!(read_member(&out.join(v), "hipsplit-1.0.dist-info/METADATA"), expected, "{v}");
        }
        assert!(expected.contains(
            "Requires-Dist: hipsplit-device-gfx942 == 1.0; \"amd :: gfx_arch :: gfx942\" in variant_properties"
        ));

        let index = std::fs::read_to_string(out.join("hipsplit-1.0-variants.json")).unwrap();
        if schema == "pep817" {
            let rocm = run_expect(
                std::process::Command::new("python3").args(["-c", ROCM_VARIANT_JSON, &targets.join(",")]),
                0,
            );
            assert_eq!(index, String::from_utf8_lossy(&rocm.stdout), "ROCm's variant.json, key for key");
        }
        let o = run_expect(
            common::venv::in_venv(&bin, "python").args(["-c", VARIANTLIB_CHECK]).arg(&out).args(["gfx942", strip]),
            0,
        );
        let seen: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(seen["labels"], serde_json::json!(targets), "{seen:#}");
        // The gfx942 variant first; after it only variantlib's own `null`
        // (no properties: the classic wheel), never another target's.
        assert_eq!(seen["chosen"], serde_json::json!(["gfx942", "null"]), "{seen:#}");
        assert_eq!(seen["made"], seen["ours"], "variantlib's index of the wheels is ours: {seen:#}");
        assert_eq!(seen["ours"]["gfx90a"], serde_json::json!(["amd :: gfx_arch :: gfx90a"]), "{seen:#}");
    }

    // A classic pip, offline, from the whole set: host + gfx942 only.
    let out = tmp.path().join("pep817");
    let v = common::venv::venv(&tmp.path().join("v"));
    let boot = rocm_bootstrap_wheel();
    run_expect(
        common::venv::in_venv(&v, "pip")
            .args(["install", "-q", "--no-index", "--find-links"])
            .arg(&out)
            .arg("--find-links")
            .arg(boot.parent().unwrap())
            .arg("hipsplit[device-gfx942]"),
        0,
    );
    let listed = run_expect(common::venv::in_venv(&v, "pip").args(["list", "--format", "freeze"]), 0);
    let mut names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split_once("==").map(|(n, _)| n.to_lowercase()))
        .filter(|n| !["pip", "setuptools", "wheel"].contains(&n.as_str()))
        .collect();
    names.sort();
    assert_eq!(names, ["hipsplit", "hipsplit-device-gfx942", "rocm-bootstrap"]);

    // `wheel check`: the classic host or the gfx942 variant wheel, with the
    // device wheels, covers gfx942 (the target every library was built
    // for); the variant wheel without gfx942's device wheel does not; two
    // wheels of one project are refused.
    let all: Vec<String> = wheels_in(&out).into_iter().map(|(n, _)| n).collect();
    let device: Vec<PathBuf> = all.iter().filter(|n| n.contains("_device_")).map(|n| out.join(n)).collect();
    let variant = out.join("hipsplit-1.0-cp311-cp311-linux_x86_64-gfx942.whl");
    for host in [out.join("hipsplit-1.0-cp311-cp311-linux_x86_64.whl"), variant.clone()] {
        run_expect(quarry().args(["wheel", "check", "--targets", "gfx942"]).arg(host).args(&device), 0);
    }
    let others: Vec<&PathBuf> = device.iter().filter(|d| !d.to_string_lossy().contains("gfx942")).collect();
    run_expect(quarry().args(["wheel", "check", "--targets", "gfx942"]).arg(&variant).args(others), 1);
    let both =
        run_expect(quarry().args(["wheel", "check", "--targets", "gfx942"]).args(all.iter().map(|n| out.join(n))), 1);
    let e = String::from_utf8_lossy(&both.stderr);
    assert!(e.contains("one wheel of each project") && e.contains("-gfx1100.whl"), "{e}");
    let mut c = quarry();
    c.arg("verify").arg(out.join("hipsplit-1.0-cp311-cp311-linux_x86_64-gfx942.whl"));
    c.arg("--json").arg("--inputs").arg(wheel.parent().unwrap());
    let v = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(v["reproduced"], true, "{v:#}");
}
