//! End-to-end: `quarry cache du` and `quarry cache prune` on a real cache
//! (layers of a real build, PyPI-free): sizes per bucket add up to what is
//! on disk, a prune brings the cache under its limit least recently used
//! first, and a build afterwards still succeeds, with the same image.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn du(cache: &Path) -> Value {
    stdout_json(&run_expect(quarry().args(["cache", "du", "--json", "--cache-dir"]).arg(cache), 0))
}

fn bytes_on_disk(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter(|e| !e.path().starts_with(dir.join("tmp")) && !e.path().starts_with(dir.join("leases")))
        .filter(|e| e.file_name() != "prune.lock")
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn build(def: &Path, out: &Path, cache: &Path) -> Value {
    stdout_json(&run_expect(
        quarry().arg("build").arg(def).arg("-o").arg(out).arg("--json").arg("--cache-dir").arg(cache),
        0,
    ))
}

#[test]
fn prune_brings_the_cache_under_its_limit_and_builds_still_succeed() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let cache = w.join("cache");
    // Two images: an old one (1 MB of random bytes) and a newer one.
    // xorshift bytes: gzip cannot shrink them.
    let mut x = 0x9e3779b97f4a7c15u64;
    let random: Vec<u8> = (0..(1u32 << 20))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::create_dir_all(w.join("old")).unwrap();
    std::fs::write(w.join("old/blob.bin"), &random).unwrap();
    write(
        &w.join("old/image.toml"),
        "name = \"old\"\nbase = \"scratch\"\n[[layer]]\nname = \"blob\"\n[[layer.source]]\nfile = \"blob.bin\"\ndest = \"/blob.bin\"\n",
    );
    write(&w.join("new/hello.txt"), "hello\n");
    write(
        &w.join("new/image.toml"),
        "name = \"new\"\nbase = \"scratch\"\n[[layer]]\nname = \"hello\"\n[[layer.source]]\nfile = \"hello.txt\"\ndest = \"/hello.txt\"\n",
    );
    let old = build(&w.join("old/image.toml"), &w.join("out-old"), &cache);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let new = build(&w.join("new/image.toml"), &w.join("out-new"), &cache);

    let before = du(&cache);
    let total = before["total_bytes"].as_u64().unwrap();
    assert_eq!(total, bytes_on_disk(&cache), "du counts every byte of the cache: {before:#}");
    let bucket =
        |v: &Value, name: &str| v["buckets"].as_array().unwrap().iter().find(|b| b["bucket"] == name).unwrap().clone();
    assert_eq!(bucket(&before, "layers")["entries"], 2, "{before:#}");
    assert!(bucket(&before, "layers")["bytes"].as_u64().unwrap() > 1 << 20, "{before:#}");

    // Keep 100 KB: the old image's big layer goes first (least recently used).
    let r = stdout_json(&run_expect(
        quarry().args(["cache", "prune", "--keep-bytes", "100K", "--json", "--cache-dir"]).arg(&cache),
        0,
    ));
    assert!(r["bytes_after"].as_u64().unwrap() <= 100 << 10, "{r:#}");
    let after = du(&cache);
    assert!(after["total_bytes"].as_u64().unwrap() <= 100 << 10, "{after:#}");
    assert_eq!(after["total_bytes"].as_u64().unwrap(), bytes_on_disk(&cache));
    assert_eq!(bucket(&after, "layers")["entries"], 1, "the newer layer stays: {after:#}");

    // Builds still succeed: the pruned layer is built again, the image unchanged.
    let again = build(&w.join("old/image.toml"), &w.join("out-old2"), &cache);
    assert_eq!(again["manifest_digest"], old["manifest_digest"]);
    assert_eq!(again["layers"][0]["cached"], false, "{again:#}");
    let cached = build(&w.join("new/image.toml"), &w.join("out-new2"), &cache);
    assert_eq!(cached["layers"][0]["cached"], true, "{cached:#}");
    assert_eq!(cached["manifest_digest"], new["manifest_digest"]);

    // --older-than 0 empties it; nothing asked is an error that says what to give.
    run_expect(quarry().args(["cache", "prune", "--older-than", "0", "--cache-dir"]).arg(&cache), 0);
    assert_eq!(du(&cache)["total_bytes"], 0);
    let o = run_expect(quarry().args(["cache", "prune", "--cache-dir"]).arg(&cache), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--keep-bytes") && err.contains("--older-than"), "{err}");
    let o = run_expect(quarry().args(["cache", "prune", "--keep-bytes", "lots", "--cache-dir"]).arg(&cache), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("`lots` is not a size"));
}
