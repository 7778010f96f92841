//! Layers are byte-identical whatever the thread count: a real tree built
//! through the binary with `--threads 1` and `--threads 2`, gzip and zstd.

use crate::common;

use common::*;
use std::path::Path;

/// A tree of mixed content spanning many gzip blocks and zstd jobs: text,
/// incompressible bytes, zeros, copies of host binaries, a hardlink, a symlink.
fn make_tree(root: &Path) {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let words = ["rocm", "hip", "kernel", "gfx942", "wheel", "layer", "tar", "zstd", "gzip", "blob"];
    for d in 0..6 {
        for f in 0..12 {
            let mut text = String::new();
            while text.len() < 90_000 {
                text.push_str(words[(next() % words.len() as u64) as usize]);
                text.push(if next() % 9 == 0 { '\n' } else { ' ' });
            }
            write(&root.join(format!("text{d}/file{f}.txt")), &text);
        }
    }
    let random: Vec<u8> = (0..3 << 20).map(|_| next() as u8).collect();
    std::fs::write(root.join("random.bin"), &random).unwrap();
    std::fs::write(root.join("zeros.bin"), vec![0u8; 4 << 20]).unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    for tool in ["sh", "tar", "gzip", "ls", "cp"] {
        let p = Path::new("/usr/bin").join(tool);
        if let Ok(data) = std::fs::read(std::fs::canonicalize(&p).unwrap_or(p)) {
            std::fs::write(root.join("bin").join(tool), data).unwrap();
        }
    }
    std::fs::hard_link(root.join("random.bin"), root.join("random-link.bin")).unwrap();
    std::os::unix::fs::symlink("text0/file0.txt", root.join("readme")).unwrap();
}

fn build(dir: &Path, compression: &str, threads: u32) -> serde_json::Value {
    let out = run_expect(
        quarry()
            .arg("build")
            .arg(dir.join("image.toml"))
            .args(["--compression", compression, "--threads", &threads.to_string(), "--json"])
            .arg("--cache-dir")
            .arg(dir.join(format!("cache-{compression}-{threads}")))
            .arg("-o")
            .arg(dir.join(format!("out-{compression}-{threads}"))),
        0,
    );
    stdout_json(&out)
}

#[test]
fn layers_do_not_depend_on_the_thread_count() {
    let tmp = tempfile::Builder::new().prefix("threads-").tempdir_in(fixtures_dir()).unwrap();
    let dir = tmp.path();
    make_tree(&dir.join("tree"));
    write(
        &dir.join("image.toml"),
        "name = \"threads\"\nbase = \"scratch\"\n[[layer]]\nname = \"tree\"\n[[layer.source]]\ndir = \"tree\"\ndest = \"/opt/tree\"\n",
    );
    for (compression, tool) in [("gzip", "gzip"), ("zstd", "zstd")] {
        let one = build(dir, compression, 1);
        let two = build(dir, compression, 2);
        let l1 = &one["layers"][0];
        let l2 = &two["layers"][0];
        assert_eq!(l1["cached"], false);
        assert_eq!(l1["diff_id"], l2["diff_id"], "{compression}: the tar differs");
        assert_eq!(l1["digest"], l2["digest"], "{compression}: 1 and 2 threads gave different blobs");
        assert_eq!(one["manifest_digest"], two["manifest_digest"]);
        assert!(l1["size"].as_u64().unwrap() > 1 << 20, "{compression}: the layer should span many blocks");

        // An independent reader decompresses the blob to the tar whose digest is the diff_id.
        if have_tool(tool) {
            let hex = l1["digest"].as_str().unwrap().trim_start_matches("sha256:");
            let blob = dir.join(format!("out-{compression}-1/blobs/sha256/{hex}"));
            let tar = run_expect(std::process::Command::new(tool).arg("-dc").arg(&blob), 0).stdout;
            assert_eq!(format!("sha256:{}", quarry::oci::digest::sha256_hex(&tar)), l1["diff_id"].as_str().unwrap());
        }
    }
}
