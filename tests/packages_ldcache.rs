//! The generated /etc/ld.so.cache matches what the image's own ldconfig
//! wrote in an mmdebstrap rootfs: same libraries, same paths, same order
//! (the loader binary-searches it), read back by the host's ldconfig.
mod common;

use common::*;
use quarry::layer::archive::{read_into, Placement};
use quarry::layer::Tree;
use std::process::Command;

fn listing(cache: &std::path::Path) -> Vec<String> {
    let out = run_expect(Command::new("ldconfig").arg("-p").arg("-C").arg(cache), 0);
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with('\t')).map(String::from).collect()
}

#[test]
fn ld_so_cache_matches_ldconfig() {
    if !have_tool("mmdebstrap") || !have_tool("ldconfig") {
        return;
    }
    let rootfs = debian_rootfs("");
    let spool = tempfile::tempdir().unwrap();
    let mut tree = Tree::new();
    read_into(&rootfs, &mut tree, &Placement::default(), spool.path()).unwrap();
    let theirs = spool.path().join("theirs.cache");
    let node = tree.get(b"etc/ld.so.cache").expect("mmdebstrap wrote a cache");
    std::fs::write(&theirs, node.read_content().unwrap()).unwrap();
    let ours = spool.path().join("ours.cache");
    std::fs::write(&ours, quarry::distro::ldcache::generate(&tree, "amd64").expect("a cache")).unwrap();
    let (a, b) = (listing(&ours), listing(&theirs));
    assert!(b.len() > 50, "{b:?}");
    assert_eq!(a, b);
}
