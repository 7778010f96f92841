//! A first build's key, learned while packing, is the key hashing first
//! gives; so is its layer.

use super::hashes::{ContentHasher, KeyHashing};
use crate::cache::Cache;
use crate::layer::compress::{Compression, LayerCodec};
use crate::layer::pack::pack_tree;
use crate::layer::write::{HostDigests, WriteOptions};
use std::collections::BTreeMap;
use std::path::Path;

fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

/// A tree with what a key must see: an empty file, a file spanning
/// several pack chunks, a hardlink pair, a symlink, a file with a
/// `security.capability`, and a file a later source replaces.
fn tree(root: &Path) {
    write(&root.join("src/empty"), b"");
    let big: Vec<u8> = (0..3_500_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    write(&root.join("src/lib/big.bin"), &big);
    write(&root.join("src/lib/a.txt"), b"alpha\n");
    std::fs::hard_link(root.join("src/lib/a.txt"), root.join("src/lib/a-link.txt")).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("src/lib/sym")).unwrap();
    write(&root.join("src/bin/ping"), b"#!/bin/sh\n");
    // A capability as `setcap cap_net_raw+ep` writes it (VFS_CAP_REVISION_2).
    let cap: [u8; 20] = [0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let path = std::ffi::CString::new(root.join("src/bin/ping").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings, a valid buffer; the test runs as root (as CI does).
    let rc = unsafe { libc::setxattr(path.as_ptr(), c"security.capability".as_ptr(), cap.as_ptr().cast(), 20, 0) };
    assert_eq!(rc, 0, "setting security.capability needs root: {}", std::io::Error::last_os_error());
    write(&root.join("src/replaced.txt"), b"from the dir\n");
    write(&root.join("over/replaced.txt"), b"from the file source\n");
    write(
        &root.join("image.toml"),
        br#"name = "t"
base = "scratch"
[[layer]]
name = "files"
[[layer.source]]
dir = "src"
dest = "/opt"
[[layer.source]]
file = "over/replaced.txt"
dest = "/opt/replaced.txt"
"#,
    );
}

#[test]
fn a_key_learned_while_packing_is_the_key_hashed_first() {
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path());
    let image = crate::definition::load_image(&tmp.path().join("image.toml"), &BTreeMap::new()).unwrap();
    let layer = &image.layers[0];
    let codec = LayerCodec::default();
    let opts = WriteOptions::default();

    // Hashing first.
    let cache = Cache::open(&tmp.path().join("cache-first")).unwrap();
    let mut hasher = ContentHasher::new(cache.clone(), false);
    let mut scan = super::scan(layer, &BTreeMap::new()).unwrap();
    let (key, contents) = scan.fingerprint(&mut hasher, 0).unwrap().expect("Upfront never defers");
    let (first_tree, _) = scan.into_tree(&BTreeMap::new(), tmp.path()).unwrap();
    let first = pack_tree(cache.blobs(), &first_tree, codec, 2, &opts, &mut |_| {}, None).unwrap();

    // Hashing while packing, into a cache that has never seen the source.
    let cache = Cache::open(&tmp.path().join("cache-while")).unwrap();
    let mut hasher = ContentHasher::new(cache.clone(), false).with_timing(KeyHashing::WhilePackingNewSources);
    let mut scan = super::scan(layer, &BTreeMap::new()).unwrap();
    assert!(scan.fingerprint(&mut hasher, 0).unwrap().is_none(), "a new source is left to packing");
    assert_eq!(scan.pending_files(), 5, "every file with content: a hardlink's second name is not one");
    assert_eq!(hasher.files_hashed, 0);
    let (tree, _) = scan.into_tree(&BTreeMap::new(), tmp.path()).unwrap();
    let mut packed = HostDigests::new();
    let blob = pack_tree(cache.blobs(), &tree, codec, 2, &opts, &mut |_| {}, Some(&mut packed)).unwrap();
    assert_eq!(blob, first, "the layer does not depend on when its files are hashed");
    let cap = packed.values().filter(|f| f.capability.is_some()).count();
    assert_eq!(cap, 1, "the capability was read from the open file");
    // Every codec's pipeline (the uncompressed one ends on the hashing thread) reports the same.
    for c in [Compression::None, Compression::Zstd] {
        let mut again = HostDigests::new();
        pack_tree(cache.blobs(), &tree, LayerCodec::new(c, None).unwrap(), 1, &opts, &mut |_| {}, Some(&mut again))
            .unwrap();
        assert_eq!(again, packed, "{c:?}");
    }
    let mut hasher = ContentHasher::new(cache.clone(), false);
    let (later, later_contents) = scan.complete(&mut hasher, 0, &packed).unwrap();
    assert_eq!(later, key, "the key does not depend on when its files are hashed");
    assert_eq!(later_contents, contents);
    // The file the later source replaced never reached the tar: it alone
    // was read again. Each file was read once (the `file` source too).
    assert_eq!(packed.len(), 4);
    assert_eq!(hasher.files_hashed, 6);

    // The source is known now: the next plan hashes first (these files are
    // too new to memoize, so all of them) and finds the layer by its key.
    let mut hasher = ContentHasher::new(cache.clone(), false).with_timing(KeyHashing::WhilePackingNewSources);
    let mut scan = super::scan(layer, &BTreeMap::new()).unwrap();
    let (again, _) = scan.fingerprint(&mut hasher, 0).unwrap().expect("a known source is hashed first");
    assert_eq!(again, key);
}

#[test]
fn no_cache_defers_what_the_memo_lacks_and_upfront_never_defers() {
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path());
    let image = crate::definition::load_image(&tmp.path().join("image.toml"), &BTreeMap::new()).unwrap();
    let layer = &image.layers[0];
    let cache = Cache::open(&tmp.path().join("cache")).unwrap();
    for timing in [KeyHashing::Upfront, KeyHashing::WhilePacking] {
        let mut hasher = ContentHasher::new(cache.clone(), false).with_timing(timing);
        let mut scan = super::scan(layer, &BTreeMap::new()).unwrap();
        let deferred = scan.fingerprint(&mut hasher, 0).unwrap().is_none();
        assert_eq!(deferred, timing == KeyHashing::WhilePacking, "{timing:?}");
    }
    // `--verify` hashes first whatever the timing asked.
    let mut hasher = ContentHasher::new(cache.clone(), true).with_timing(KeyHashing::WhilePacking);
    let mut scan = super::scan(layer, &BTreeMap::new()).unwrap();
    assert!(scan.fingerprint(&mut hasher, 0).unwrap().is_some());
}
