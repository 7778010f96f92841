//! Unchanged rebuilds: layer cache keys come from file *contents* (hashed
//! through a stat memo), so `touch` rehashes a file without rebuilding the
//! layer, a content change rebuilds it, and `--verify` rehashes everything.
//! A first build hashes its files as it packs them, and reaches the key
//! that `quarry plan` computes by hashing first.

use crate::common;

use common::*;
use std::path::Path;
use std::process::Command;

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn build_cmd(&self, extra: &[&str]) -> Command {
        let mut c = quarry();
        c.arg("build")
            .arg(self.path().join("image.toml"))
            .args(["--json", "--threads", "2"])
            .arg("--cache-dir")
            .arg(self.path().join("cache"))
            .arg("-o")
            .arg(self.path().join("out"))
            .args(extra);
        c
    }

    /// `quarry plan` with this cache directory: the layer's JSON object.
    fn plan(&self, cache: &str) -> serde_json::Value {
        let mut c = quarry();
        c.arg("plan").arg(self.path().join("image.toml")).arg("--json").arg("--cache-dir").arg(self.path().join(cache));
        stdout_json(&run_expect(&mut c, 0))["layers"][0].clone()
    }

    /// Build and return the layer's JSON object.
    fn build(&self, extra: &[&str]) -> serde_json::Value {
        stdout_json(&run_expect(&mut self.build_cmd(extra), 0))["layers"][0].clone()
    }
}

const FILES: usize = 30;

fn setup(name: &str) -> Case {
    let dir = tempfile::Builder::new().prefix(name).tempdir_in(fixtures_dir()).unwrap();
    for i in 0..FILES {
        write(&dir.path().join(format!("tree/d{}/f{i}.txt", i % 3)), &format!("file {i}\n").repeat(500));
    }
    write(
        &dir.path().join("image.toml"),
        "name = \"rebuild\"\nbase = \"scratch\"\n[[layer]]\nname = \"tree\"\n[[layer.source]]\ndir = \"tree\"\ndest = \"/srv\"\n",
    );
    // Files whose timestamps are this fresh are never memoized (a write in
    // the same timestamp tick would go unseen): let them age.
    std::thread::sleep(std::time::Duration::from_secs(3));
    Case { dir }
}

fn set_mtime(p: &Path, secs: i64) {
    filetime::set_file_mtime(p, filetime::FileTime::from_unix_time(secs, 0)).unwrap();
}

#[test]
fn touch_keeps_the_layer_and_a_content_change_rebuilds_it() {
    let case = setup("rebuild-touch-");
    let first = case.build(&[]);
    assert_eq!(first["cached"], false);
    assert_eq!(first["files_hashed"], FILES as u64);

    let noop = case.build(&[]);
    assert_eq!(noop["cached"], true);
    assert_eq!(noop["files_hashed"], 0, "an unchanged tree is not read again");
    assert_eq!(noop["digest"], first["digest"]);

    // A new mtime, same content: rehashed, still cached, same digest.
    let touched = case.path().join("tree/d1/f4.txt");
    set_mtime(&touched, 1_900_000_000);
    let after_touch = case.build(&[]);
    assert_eq!(after_touch["files_hashed"], 1);
    assert_eq!(after_touch["cached"], true, "touch alone must not rebuild the layer");
    assert_eq!(after_touch["digest"], first["digest"]);

    // Same size, different content, mtime put back: rebuilt, new digest.
    let changed = case.path().join("tree/d2/f5.txt");
    let old = std::fs::metadata(&changed).unwrap();
    let text = std::fs::read_to_string(&changed).unwrap().replacen("file 5", "FILE 5", 1);
    std::fs::write(&changed, text).unwrap();
    filetime::set_file_mtime(&changed, filetime::FileTime::from_last_modification_time(&old)).unwrap();
    let rebuilt = case.build(&[]);
    assert_eq!(rebuilt["cached"], false, "a content change must rebuild the layer");
    assert_ne!(rebuilt["digest"], first["digest"]);
    assert_ne!(rebuilt["diff_id"], first["diff_id"]);
}

#[test]
fn a_first_build_hashes_while_packing_and_reaches_the_planned_key() {
    let case = setup("rebuild-first-");
    // `quarry plan` hashes every file before anything is built (in a cache
    // of its own): the key the first build must reach.
    let planned = case.plan("cache-plan");
    assert_eq!(planned["cached"], false);
    assert!(planned["note"].is_null(), "{planned}");
    let key = planned["key"].as_str().unwrap().to_string();

    let first = case.build(&[]);
    assert_eq!((first["cached"].clone(), first["files_hashed"].clone()), (false.into(), FILES.into()));
    let recorded = case.plan("cache");
    assert_eq!(recorded["key"], key.as_str(), "the key learned while packing is the planned one");
    assert_eq!(recorded["cached"], true);
    let noop = case.build(&[]);
    assert_eq!(noop["files_hashed"], 0, "packing left a stat memo behind");
    assert_eq!((noop["cached"].clone(), noop["digest"].clone()), (true.into(), first["digest"].clone()));

    // `--no-cache` looks nothing up: what the memo lacks is hashed while packing.
    set_mtime(&case.path().join("tree/d0/f3.txt"), 1_900_000_000);
    let repacked = case.build(&["--no-cache"]);
    assert_eq!((repacked["cached"].clone(), repacked["files_hashed"].clone()), (false.into(), 1.into()));
    assert_eq!(repacked["digest"], first["digest"]);
    // Hashing first (`--verify`) makes the same layer.
    let verified = case.build(&["--verify", "--no-cache"]);
    assert_eq!(verified["files_hashed"], FILES as u64);
    assert_eq!(verified["digest"], first["digest"]);
}

#[test]
fn mtimes_count_when_the_tar_keeps_them() {
    // With SOURCE_DATE_EPOCH in the future, the tar stores real mtimes: a
    // touch then changes the layer and must rebuild it.
    let case = setup("rebuild-epoch-");
    let build = || {
        let mut c = case.build_cmd(&[]);
        c.env("SOURCE_DATE_EPOCH", "4000000000");
        stdout_json(&run_expect(&mut c, 0))["layers"][0].clone()
    };
    let first = build();
    set_mtime(&case.path().join("tree/d0/f0.txt"), 1_500_000_000);
    let second = build();
    assert_eq!(second["cached"], false);
    assert_ne!(second["diff_id"], first["diff_id"]);
}

#[test]
fn verify_rehashes_everything_and_repairs_a_lying_memo() {
    let case = setup("rebuild-verify-");
    let first = case.build(&[]);
    assert_eq!(case.build(&[])["files_hashed"], 0);

    let verified = case.build(&["--verify"]);
    assert_eq!(verified["files_hashed"], FILES as u64, "--verify reads every file");
    assert_eq!(verified["cached"], true);
    assert_eq!(verified["digest"], first["digest"]);

    // Make the memo lie about one file's content (as if it had changed
    // without any stat change): a normal build trusts it, --verify does not.
    let memo_dir = case.path().join("cache/notes/stat-memo");
    let memos: Vec<_> = std::fs::read_dir(&memo_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(memos.len(), 1, "one memo for the one dir source");
    let real = hex::decode(quarry::oci::digest::sha256_hex("file 7\n".repeat(500).as_bytes())).unwrap();
    let mut memo = std::fs::read(&memos[0]).unwrap();
    let at = memo.windows(32).position(|w| w == real).expect("the memo records the file's sha256");
    memo[at..at + 32].fill(0);
    std::fs::write(&memos[0], memo).unwrap();

    let trusting = case.build(&[]);
    assert_eq!(trusting["files_hashed"], 0);
    assert_eq!(trusting["cached"], false, "the lying memo gave another key");

    let out = run_expect(&mut case.build_cmd(&["--verify"]), 0);
    let doc = stdout_json(&out);
    let layer = &doc["layers"][0];
    assert_eq!(layer["cached"], true, "rehashed: the real key is found again");
    assert_eq!(layer["digest"], first["digest"]);
    // With --json the warning travels in the document, not on stderr.
    let warnings = doc["warnings"].as_array().expect("warnings in --json output");
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("1 file(s) changed without")), "{warnings:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("changed without"), "stderr: {stderr}");
    assert_eq!(case.build(&[])["files_hashed"], 0, "--verify repaired the memo");
}
