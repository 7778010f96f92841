//! Kernel builds cached like step layers: the key is an explicit encoding
//! (see `store::key`) of the image, the source tree's content, the
//! command, the targets, the environment, the outputs asked for and the
//! network setting; the value is the output tree, kept in the layer cache
//! under `kernels/<key>/files`. Entries are written under the cache's
//! `tmp/` and renamed into place, so a killed build leaves no half entry.
//! The job count is not in the key: it changes how fast, not what.

use crate::store::cache::Cache;
use crate::store::key::{Key, KeyEncoder};
use crate::store::Digest;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Everything a kernel build's outputs depend on.
pub struct KeyInputs<'a> {
    /// The image's config digest (the engine's image id).
    pub image: &'a Digest,
    pub source: &'a Key,
    pub cmd: &'a [String],
    pub targets: &'a [String],
    /// `K=V`, as given (later ones win, so order counts).
    pub env: &'a [String],
    /// Container paths copied out.
    pub outputs: &'a [String],
    pub network: bool,
}

/// The build's cache key. Bump the version when what it encodes changes.
pub fn key(i: &KeyInputs) -> Key {
    let mut k = KeyEncoder::new("kernel-build", 1);
    k.digest("image", i.image).key("source", i.source).list("cmd", i.cmd).list("targets", i.targets);
    k.list("env", i.env).list("outputs", i.outputs).bool("network", i.network);
    k.finish()
}

/// The content of a source tree: every path (sorted), its kind, its
/// executable bit and its content or link target. Top-level names in
/// `skip` are left out (the default output directory `build`). Times and
/// owners are not part of it.
pub fn source_key(dir: &Path, skip: &[&str]) -> io::Result<Key> {
    let mut k = KeyEncoder::new("kernel-source", 1);
    let walk = walkdir::WalkDir::new(dir).follow_links(false).sort_by_file_name().min_depth(1);
    let top = |e: &walkdir::DirEntry| e.depth() == 1 && skip.iter().any(|s| e.file_name() == *s);
    for entry in walk.into_iter().filter_entry(|e| !top(e)) {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry.path().strip_prefix(dir).map_err(io::Error::other)?.to_string_lossy().into_owned();
        let meta = entry.path().symlink_metadata()?;
        let ft = meta.file_type();
        if ft.is_dir() {
            k.str("dir", &rel);
        } else if ft.is_symlink() {
            k.str("symlink", &rel).str("target", &std::fs::read_link(entry.path())?.to_string_lossy());
        } else if ft.is_file() {
            let (digest, size) = crate::store::digest::digest_file(entry.path())?;
            k.str("file", &rel).bool("executable", meta.permissions().mode() & 0o111 != 0);
            k.u64("size", size).digest("content", &digest);
        }
    }
    Ok(k.finish())
}

fn entry_dir(cache: &Cache, key: &Key) -> PathBuf {
    cache.root().join("kernels").join(key.hex())
}

/// The cached output tree of `key`, when there is one.
pub fn lookup(cache: &Cache, key: &Key) -> Option<PathBuf> {
    let dir = entry_dir(cache, key);
    dir.join("complete").is_file().then(|| dir.join("files"))
}

/// A fresh directory under the cache's `tmp/` to copy outputs into; it
/// becomes the entry with [`commit`].
pub fn staging(cache: &Cache) -> io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("kernel-").tempdir_in(cache.tmp_dir())?;
    std::fs::create_dir(dir.path().join("files"))?;
    Ok(dir)
}

/// Keep a staging directory (its `files/` filled) as `key`'s entry;
/// returns the entry's output tree.
pub fn commit(cache: &Cache, key: &Key, staged: tempfile::TempDir) -> io::Result<PathBuf> {
    std::fs::write(staged.path().join("complete"), key.hex())?;
    let dest = entry_dir(cache, key);
    std::fs::create_dir_all(dest.parent().expect("under kernels/"))?;
    let staged = staged.keep();
    if let Err(e) = std::fs::rename(&staged, &dest) {
        // Another build stored the same key meanwhile: theirs is as good.
        let _ = std::fs::remove_dir_all(&staged);
        if !dest.join("complete").is_file() {
            return Err(e);
        }
    }
    Ok(dest.join("files"))
}

/// Copy an output tree into `out` (created when missing; files there with
/// the same names are replaced). Returns the files copied, relative, sorted.
pub fn copy_tree(from: &Path, out: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)?;
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(from).follow_links(false).sort_by_file_name().min_depth(1) {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry.path().strip_prefix(from).map_err(io::Error::other)?;
        let dest = out.join(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            std::fs::create_dir_all(&dest)?;
            continue;
        }
        if dest.symlink_metadata().is_ok() {
            std::fs::remove_file(&dest)?;
        }
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
        } else {
            std::fs::copy(entry.path(), &dest)?;
        }
        files.push(rel.to_path_buf());
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(image: &'a Digest, source: &'a Key, cmd: &'a [String], targets: &'a [String]) -> KeyInputs<'a> {
        KeyInputs { image, source, cmd, targets, env: &[], outputs: &[], network: false }
    }

    #[test]
    fn the_key_follows_every_input_and_the_source_content_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/build")).unwrap();
        std::fs::write(d.path().join("src/k.hip"), "kernel").unwrap();
        std::fs::write(d.path().join("src/build/stale.o"), "old").unwrap();
        let src = d.path().join("src");
        let a = source_key(&src, &["build"]).unwrap();
        // The skipped build directory and mtimes do not count...
        std::fs::write(d.path().join("src/build/stale.o"), "older").unwrap();
        std::fs::write(d.path().join("src/k.hip"), "kernel").unwrap();
        assert_eq!(source_key(&src, &["build"]).unwrap(), a);
        assert_ne!(source_key(&src, &[]).unwrap(), a);
        // ...content and the executable bit do.
        std::fs::set_permissions(d.path().join("src/k.hip"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let b = source_key(&src, &["build"]).unwrap();
        assert_ne!(b, a);
        std::fs::write(d.path().join("src/k.hip"), "kernel2").unwrap();
        assert_ne!(source_key(&src, &["build"]).unwrap(), b);

        let image = Digest::of_bytes(b"config");
        let cmd = vec!["make".to_string()];
        let targets = vec!["gfx90a".to_string()];
        let base = key(&inputs(&image, &a, &cmd, &targets));
        assert_eq!(base, key(&inputs(&image, &a, &cmd, &targets)));
        let other_targets = vec!["gfx90a".to_string(), "gfx942".to_string()];
        assert_ne!(base, key(&inputs(&image, &a, &cmd, &other_targets)));
        assert_ne!(base, key(&inputs(&image, &a, &["make".into(), "all".into()], &targets)));
        assert_ne!(base, key(&inputs(&Digest::of_bytes(b"other"), &a, &cmd, &targets)));
        let env = vec!["CFLAGS=-O3".to_string()];
        assert_ne!(base, key(&KeyInputs { env: &env, ..inputs(&image, &a, &cmd, &targets) }));
        assert_ne!(base, key(&KeyInputs { network: true, ..inputs(&image, &a, &cmd, &targets) }));
    }

    #[test]
    fn entries_are_committed_whole_and_copied_out() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::open(&d.path().join("cache")).unwrap();
        let k = Digest::of_bytes(b"k");
        let mut e = KeyEncoder::new("test", 1);
        e.digest("k", &k);
        let key = e.finish();
        assert!(lookup(&cache, &key).is_none());
        let s = staging(&cache).unwrap();
        std::fs::create_dir_all(s.path().join("files/lib")).unwrap();
        std::fs::write(s.path().join("files/lib/libk.so"), "elf").unwrap();
        std::os::unix::fs::symlink("lib/libk.so", s.path().join("files/libk.so")).unwrap();
        let files = commit(&cache, &key, s).unwrap();
        assert_eq!(lookup(&cache, &key).unwrap(), files);
        let out = d.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("libk.so"), "replaced").unwrap();
        let copied = copy_tree(&files, &out).unwrap();
        assert_eq!(copied, [PathBuf::from("lib/libk.so"), PathBuf::from("libk.so")]);
        assert_eq!(std::fs::read_to_string(out.join("libk.so")).unwrap(), "elf");
    }
}
