//! `quarry code-objects` on real GPU code and on damaged input.
//!
//! Real: tests/fixtures/hip/vector_ops.hip compiled with Debian 13's hipcc
//! (ROCm 5.7, clang 17) in the shipped hip-builder-debian13 image, network
//! off and no GPU: a fat binary for three targets, a `--genco` bundle, an
//! `-fgpu-rdc` static library, and Debian's rocBLAS (librocblas with its
//! `.hip_fatbin`, Tensile code objects). The outputs are cached under
//! the fixtures (hip-real). Crafted: bad magic, truncated bundles,
//! compressed (CCOB) bundles, kpack archives, disagreeing headers.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

fn code_objects(args: &[&Path], code: i32) -> Value {
    let mut c = quarry();
    c.arg("code-objects").arg("--json").args(args);
    stdout_json(&run_expect(&mut c, code))
}

fn targets(report: &Value) -> Vec<String> {
    report["targets"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

const HIP_REAL_SCRIPT: &str = r#"
            cd /work/src
            mkdir -p /work/out
            hipcc --offload-arch=gfx90a --offload-arch=gfx942 --offload-arch=gfx1100 -o /work/out/vector_ops vector_ops.hip
            hipcc --offload-arch=gfx942:xnack- --genco -o /work/out/vector_ops.hsaco vector_ops.hip
            hipcc -c -fgpu-rdc --offload-arch=gfx90a -o /work/out/vector_ops.o vector_ops.hip
            ar rcs /work/out/libvector_ops.a /work/out/vector_ops.o
            # It runs, and says there is no GPU here.
            /work/out/vector_ops > /work/out/run.txt 2>&1 || echo "exit $?" >> /work/out/run.txt
            lib=$(echo /usr/lib/x86_64-linux-gnu/rocblas/*/library)
            cp "$lib"/TensileLibrary_gfx90a.co "$lib"/Kernels.so-000-gfx1030.hsaco /work/out/
            cp /usr/lib/x86_64-linux-gnu/librocblas.so.0.1 /work/out/
        "#;

/// vector_ops.hip built for gfx90a, gfx942 and gfx1100 and friends, and
/// rocBLAS files, copied out of hip-builder-debian13 once (named by the
/// script and the source).
fn real_outputs() -> PathBuf {
    hip_outputs("hip-real", HIP_REAL_SCRIPT, &["vector_ops.hip"])
}

#[test]
fn real_hip_outputs_and_rocblas_list_their_targets() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let dir = real_outputs();
    let run = std::fs::read_to_string(dir.join("run.txt")).unwrap();
    assert!(run.contains("no ROCm-capable device is detected") && run.contains("exit 3"), "{run}");

    let fat = dir.join("vector_ops");
    let r = &code_objects(&[&fat], 0)[0];
    assert_eq!(targets(r), ["gfx1100", "gfx90a", "gfx942"]);
    let cos = r["code_objects"].as_array().unwrap();
    assert_eq!(cos.len(), 3, "{r:#}");
    for c in cos {
        assert_eq!(c["container"], "offload-bundle");
        assert_eq!(c["format"], "elf");
        assert_eq!(c["bundle_id"], format!("hipv4-amdgcn-amd-amdhsa--{}", c["target"].as_str().unwrap()));
        assert!(c["size"].as_u64().unwrap() > 1000, "{c}");
    }

    let genco = &code_objects(&[&dir.join("vector_ops.hsaco")], 0)[0];
    assert_eq!(targets(genco), ["gfx942"]);
    assert_eq!(genco["code_objects"][0]["features"], serde_json::json!(["xnack-"]));
    assert_eq!(genco["code_objects"][0]["bundle_id"], "hipv4-amdgcn-amd-amdhsa--gfx942:xnack-");

    let rdc = &code_objects(&[&dir.join("libvector_ops.a")], 0)[0];
    assert_eq!(targets(rdc), ["gfx90a"]);
    assert_eq!(rdc["code_objects"][0]["format"], "bitcode");

    // Debian's rocBLAS: Tensile code objects, and the library's fat binary.
    let tensile = &code_objects(&[&dir.join("TensileLibrary_gfx90a.co")], 0)[0];
    assert_eq!(targets(tensile), ["gfx90a"]);
    assert_eq!(tensile["code_objects"][0]["container"], "code-object");
    let rocblas = &code_objects(&[&dir.join("librocblas.so.0.1")], 0)[0];
    let t = targets(rocblas);
    for want in ["gfx1030", "gfx1100", "gfx900", "gfx906", "gfx908", "gfx90a"] {
        assert!(t.iter().any(|x| x == want), "librocblas lacks {want}: {t:?}");
    }
    assert!(rocblas.get("problems").is_none(), "{:#}", rocblas["problems"]);

    // A directory: every file with GPU code, in path order; others left out.
    let all = code_objects(&[&dir], 0);
    let files: Vec<&str> = all.as_array().unwrap().iter().map(|r| r["file"].as_str().unwrap()).collect();
    assert!(files.len() >= 6 && !files.iter().any(|f| f.ends_with("run.txt")), "{files:?}");
    assert!(files.windows(2).all(|w| w[0] < w[1]), "{files:?}");

    // A wheel: each member that holds GPU code, named WHEEL/MEMBER.
    let work = tempfile::tempdir().unwrap();
    let whl = work.path().join("vops-1.0-py3-none-linux_x86_64.whl");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&whl).unwrap());
    let opts = zip::write::SimpleFileOptions::default();
    for (name, src) in [("vops/_vops.so", fat.clone()), ("vops/kernels/k.hsaco", dir.join("vector_ops.hsaco"))] {
        z.start_file(name, opts).unwrap();
        z.write_all(&std::fs::read(src).unwrap()).unwrap();
    }
    z.start_file("vops-1.0.dist-info/RECORD", opts).unwrap();
    z.finish().unwrap();
    let w = code_objects(&[&whl], 0);
    let names: Vec<String> = w.as_array().unwrap().iter().map(|r| r["file"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, [format!("{}/vops/_vops.so", whl.display()), format!("{}/vops/kernels/k.hsaco", whl.display())]);
    // `wheel check` reports the same targets (its RECORD here is empty: exit 1, the report still printed).
    let mut union: Vec<String> = w.as_array().unwrap().iter().flat_map(targets).collect();
    union.sort();
    union.dedup();
    let checked = stdout_json(&run_expect(quarry().args(["wheel", "check", "--json"]).arg(&whl), 1));
    assert_eq!(checked[0]["gpu_targets"], serde_json::json!(union), "{checked:#}");

    // A code object whose header disagrees with its bundle id: gfx942's
    // e_flags rewritten to gfx90a's machine.
    let mut bytes = std::fs::read(&fat).unwrap();
    let at = (0..bytes.len() - 64)
        .find(|&i| bytes[i..].starts_with(b"\x7fELF") && bytes[i + 18] == 224 && bytes[i + 48] == 0x4c)
        .expect("the gfx942 code object");
    bytes[at + 48] = 0x3f;
    let bad = work.path().join("disagrees");
    std::fs::write(&bad, &bytes).unwrap();
    let r = &code_objects(&[&bad], 1)[0];
    let problems = r["problems"].to_string();
    assert!(
        problems.contains("hipv4-amdgcn-amd-amdhsa--gfx942")
            && problems.contains("`gfx90a`")
            && problems.contains("agree"),
        "{problems}"
    );
}

// --- crafted input -------------------------------------------------------

/// An AMDGPU ELF header (code object v5) for EF_AMDGPU_MACH `mach`.
fn amdgpu_header(flags: u32) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[6] = 1;
    h[7] = 64;
    h[8] = 3;
    h[16] = 3;
    h[18..20].copy_from_slice(&224u16.to_le_bytes());
    h[48..52].copy_from_slice(&flags.to_le_bytes());
    h
}

/// An uncompressed offload bundle: a host entry and the given ones.
fn bundle(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut all = vec![("host-x86_64-unknown-linux-gnu-", Vec::new())];
    all.extend(entries.iter().cloned());
    let header: usize = 32 + all.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
    let mut out = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    out.extend((all.len() as u64).to_le_bytes());
    let mut body: Vec<u8> = Vec::new();
    let mut offset = header;
    for (id, data) in &all {
        out.extend((offset as u64).to_le_bytes());
        out.extend((data.len() as u64).to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
        body.extend(data);
        offset += data.len();
    }
    out.extend(body);
    out
}

/// A version 3 zstd CCOB of `plain`, with MD5 hash `hash` (None: the right one).
fn ccob(plain: &[u8], hash: Option<u64>) -> Vec<u8> {
    use md5::Digest;
    let payload = zstd::bulk::compress(plain, 3).unwrap();
    let right = u64::from_le_bytes(md5::Md5::digest(plain)[..8].try_into().unwrap());
    let mut out = b"CCOB".to_vec();
    out.extend(3u16.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(((32 + payload.len()) as u64).to_le_bytes());
    out.extend((plain.len() as u64).to_le_bytes());
    out.extend(hash.unwrap_or(right).to_le_bytes());
    out.extend(payload);
    out
}

#[test]
fn crafted_inputs_read_or_fail_clearly() {
    let work = tempfile::tempdir().unwrap();
    let d = work.path();
    let gfx942 = bundle(&[
        ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", amdgpu_header(0x04c | 0xc00 | 0x200)),
        ("hipv4-amdgcn-amd-amdhsa--gfx1100", amdgpu_header(0x041)),
    ]);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("plain.hsaco", gfx942.clone()),
        ("packed.hsaco", ccob(&gfx942, None)),
        ("bare.co", amdgpu_header(0x03f | 0x400 | 0x100)),
    ];
    for (name, data) in &files {
        std::fs::write(d.join(name), data).unwrap();
    }
    let r = code_objects(&[&d.join("plain.hsaco"), &d.join("packed.hsaco"), &d.join("bare.co")], 0);
    assert_eq!(targets(&r[0]), ["gfx1100", "gfx942"]);
    let c942 = r[0]["code_objects"].as_array().unwrap().iter().find(|c| c["target"] == "gfx942").unwrap();
    assert_eq!(c942["features"], serde_json::json!(["sramecc+", "xnack-"]));
    assert_eq!(targets(&r[1]), ["gfx1100", "gfx942"]);
    assert_eq!(r[1]["code_objects"][0]["container"], "compressed-offload-bundle");
    assert_eq!(r[1]["code_objects"][0]["compression"], "zstd");
    assert_eq!(targets(&r[2]), ["gfx90a"]);
    assert_eq!(r[2]["code_objects"][0]["features"], serde_json::json!([]));

    // Damage: each file gets a problem naming what is wrong; exit 1, no panic.
    let damaged: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage.co", b"this is not a code object at all".to_vec(), "no known magic"),
        ("cut.hsaco", gfx942[..gfx942.len() - 10].to_vec(), "truncated offload bundle"),
        ("cut-header.hsaco", gfx942[..40].to_vec(), "offload bundle: it claims 3 entries"),
        ("hash.hsaco", ccob(&gfx942, Some(7)), "MD5"),
        ("cut.ccob.hsaco", ccob(&gfx942, None)[..50].to_vec(), "truncated"),
        ("short.co", amdgpu_header(0x04c)[..30].to_vec(), "truncated ELF header"),
        ("unknown.co", amdgpu_header(0x0fe), "unknown EF_AMDGPU_MACH value 0x0fe"),
        (
            "disagree.hsaco",
            bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", amdgpu_header(0x03f))]),
            "holds a code object for `gfx90a`",
        ),
        ("kpack-bad.kpack", b"KPAK\x09\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00".to_vec(), "version 9"),
    ];
    for (name, data, want) in &damaged {
        let f = d.join(name);
        std::fs::write(&f, data).unwrap();
        let r = &code_objects(&[&f], 1)[0];
        let problems = r["problems"].to_string();
        assert!(problems.contains(want), "{name}: want `{want}` in {problems}");
    }
    // The human output says the same, with the file's name.
    let out = run_expect(quarry().arg("code-objects").arg(d.join("cut.hsaco")), 1);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cut.hsaco: no AMD GPU code") && text.contains("problem: bundle at offset 0x0"), "{text}");

    // An empty file and a text file named directly: no GPU code, no error.
    std::fs::write(d.join("empty"), b"").unwrap();
    std::fs::write(d.join("README"), b"the magic __CLANG_OFFLOAD_BUNDLE__ is mentioned here").unwrap();
    let r = code_objects(&[&d.join("empty"), &d.join("README")], 0);
    assert_eq!((targets(&r[0]).len(), targets(&r[1]).len()), (0, 0));
    // A missing path is an error naming it.
    let e = run_expect(quarry().arg("code-objects").arg(d.join("nope.co")), 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains("nope.co"), "{e:?}");
}
