//! Stability guard for layer packing: a fixed, generated tree built through
//! the binary with gzip and zstd at their default levels must give the same
//! layer digests as before the small-file packing work. The
//! expected digests below were recorded before that work began; they are a
//! stability guard, not a derived truth: if an intended format change moves
//! them, record the new ones and say why in the commit.

use crate::common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Expected (diff_id, gzip digest, zstd digest), recorded before the small-file packing work.
const DIFF_ID: &str = "sha256:9ae1a8aa9425c3bd6443695a959a3afe6077ed6b9c9ef0d042d12974782943be";
const GZIP_DIGEST: &str = "sha256:90211bf9b81e14863cee579ae0226b21a2a572cebb5dcbad8695052bf33e6fdf";
const ZSTD_DIGEST: &str = "sha256:0b7000c107a9bb858e0d39bd0609b6a6bc22fed0594346b46473530e02bf4cd5";

/// Deterministic content: many small files (the case that packing work sped up),
/// a few large ones spanning several gzip blocks and zstd jobs, empty
/// files, explicit modes, symlinks, a hardlink and an empty directory.
/// Mtimes need no fixing: with `SOURCE_DATE_EPOCH` unset quarry clamps
/// every mtime to 0.
fn make_tree(root: &Path) {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let words = ["include", "hip", "gfx90a", "python", "site", "layer", "def", "return", "self", "import"];
    let file = |p: &Path, data: &[u8], mode: u32| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    for d in 0..12 {
        for f in 0..60 {
            let mut text = Vec::new();
            let len = (next() % 6000) as usize;
            while text.len() < len {
                text.extend_from_slice(words[(next() % words.len() as u64) as usize].as_bytes());
                text.push(if next() % 11 == 0 { b'\n' } else { b' ' });
            }
            let mode = if f % 7 == 0 { 0o755 } else { 0o644 };
            file(&root.join(format!("pkg{d:02}/sub{}/mod{f:03}.py", f % 3)), &text, mode);
        }
    }
    let random: Vec<u8> = (0..(3 << 20) + 12345).map(|_| next() as u8).collect();
    file(&root.join("data/random.bin"), &random, 0o600);
    let mut text = Vec::new();
    while text.len() < 5 << 20 {
        text.extend_from_slice(words[(next() % words.len() as u64) as usize].as_bytes());
        text.push(b' ');
    }
    file(&root.join("data/words.txt"), &text, 0o644);
    file(&root.join("data/zeros.bin"), &vec![0u8; 2 << 20], 0o644);
    file(&root.join("empty/file"), b"", 0o400);
    std::fs::create_dir_all(root.join("empty/dir")).unwrap();
    std::fs::hard_link(root.join("data/random.bin"), root.join("data/random-link.bin")).unwrap();
    std::os::unix::fs::symlink("pkg00/sub0/mod000.py", root.join("main.py")).unwrap();
    std::os::unix::fs::symlink("../missing", root.join("data/dangling")).unwrap();
    // Directory modes set explicitly, so the umask does not matter.
    for d in 0..12 {
        std::fs::set_permissions(root.join(format!("pkg{d:02}")), std::fs::Permissions::from_mode(0o755)).unwrap();
        for s in 0..3 {
            let sub = root.join(format!("pkg{d:02}/sub{s}"));
            std::fs::set_permissions(sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    for d in ["", "empty"] {
        std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for d in ["pkg03", "data", "empty/dir"] {
        std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o750)).unwrap();
    }
}

#[test]
fn fixed_tree_packs_to_the_recorded_digests() {
    let tmp = tempfile::Builder::new().prefix("pack-digests-").tempdir_in(fixtures_dir()).unwrap();
    let dir = tmp.path();
    make_tree(&dir.join("tree"));
    write(
        &dir.join("image.toml"),
        "name = \"guard\"\nbase = \"scratch\"\n[[layer]]\nname = \"tree\"\n[[layer.source]]\ndir = \"tree\"\ndest = \"/opt/tree\"\n",
    );
    let mut got = Vec::new();
    for (compression, expected) in [("gzip", GZIP_DIGEST), ("zstd", ZSTD_DIGEST)] {
        let out = run_expect(
            quarry()
                .arg("build")
                .arg(dir.join("image.toml"))
                .args(["--compression", compression, "--json"])
                .arg("--cache-dir")
                .arg(dir.join(format!("cache-{compression}")))
                .arg("-o")
                .arg(dir.join(format!("out-{compression}"))),
            0,
        );
        let layer = stdout_json(&out)["layers"][0].clone();
        assert_eq!(layer["cached"], false);
        got.push((compression, layer["diff_id"].clone(), layer["digest"].clone(), expected));
    }
    for (compression, diff_id, digest, expected) in &got {
        assert_eq!(diff_id, DIFF_ID, "{compression}: the tar of the fixed tree changed (all: {got:?})");
        assert_eq!(digest, expected, "{compression}: the blob of the fixed tree changed (all: {got:?})");
    }
}
