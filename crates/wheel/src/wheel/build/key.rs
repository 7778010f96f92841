//! A wheel build's cache keys: an explicit encoding (see `cache::key`) of
//! everything its wheels depend on: the image, the project's content (an
//! sdist's bytes, or a directory tree), the Pythons asked for (`auto` is a
//! fact of the image), the axes and the local version template, the repair
//! options and the patchelf that repairs, the build isolation and the lock
//! of build requirements, the find-links wheelhouse, the network setting,
//! SOURCE_DATE_EPOCH and the GPU targets. Not the test command: a test
//! checks wheels, it does not make them. The project's compiler cache is
//! keyed by the image, the targets and the project's name only.

use crate::cache::key::{tree_key, Key, KeyEncoder};
use crate::oci::Digest;
use std::io;
use std::path::Path;

/// Everything a wheel build's outputs depend on.
#[derive(Clone, Copy)]
pub struct KeyInputs<'a> {
    pub image: &'a Digest,
    pub source: &'a Key,
    /// None: every Python the image has.
    pub pythons: Option<&'a [String]>,
    pub axes: &'a [(String, Vec<String>)],
    pub local_version: Option<&'a str>,
    pub repair: bool,
    pub exclude: &'a [String],
    /// Which patchelf repairs (`pinned 0.19.3`, or a user's program by sha256).
    pub patchelf: &'a str,
    pub isolation: bool,
    /// The lock's pins of build requirements, as bytes (None: no lock, or no isolation).
    pub lock: Option<&'a [u8]>,
    pub find_links: Option<&'a Key>,
    /// A build on ROCm's packages (`--rocm-packages`): their content and pin.
    pub rocm: Option<&'a Key>,
    pub network: bool,
    pub epoch: u64,
    pub targets: &'a [String],
    /// Each wheel split into host and device wheels (`--split`).
    pub split: bool,
    /// Linked for a split or a merge (see `BuildOptions::split_link`).
    pub split_link: bool,
}

/// The build's key. Bump the version when what it encodes changes.
pub fn key(i: &KeyInputs) -> Key {
    let mut k = KeyEncoder::new("wheel-build", 1);
    k.digest("image", i.image).key("source", i.source);
    match i.pythons {
        Some(p) => k.list("pythons", p),
        None => k.str("pythons", "auto"),
    };
    for (name, values) in i.axes {
        k.str("axis", name).list("values", values);
    }
    k.str("local-version", i.local_version.unwrap_or(""));
    k.bool("repair", i.repair).list("exclude", i.exclude).str("patchelf", i.patchelf);
    k.bool("isolation", i.isolation).bytes("lock", i.lock.unwrap_or_default());
    match i.find_links {
        Some(f) => k.key("find-links", f),
        None => k.str("find-links", ""),
    };
    k.bool("network", i.network).u64("epoch", i.epoch).list("targets", i.targets);
    // Only when given: the keys of other builds stay what they were.
    if i.split {
        k.bool("split", true);
    }
    if i.split_link {
        k.bool("split-link", true);
    }
    if let Some(r) = i.rocm {
        k.key("rocm", r);
    }
    k.finish()
}

/// The project's content: an sdist's bytes and name, or a directory tree
/// (its top-level `skip` names left out: an output directory inside it).
pub fn source_key(source: &Path, skip: &[&str]) -> io::Result<Key> {
    if source.is_dir() {
        return tree_key("wheel-source", source, skip);
    }
    let (digest, size) = crate::oci::digest::digest_file(source)?;
    let mut k = KeyEncoder::new("wheel-sdist", 1);
    k.str("name", &source.file_name().unwrap_or_default().to_string_lossy());
    k.u64("size", size).digest("content", &digest);
    Ok(k.finish())
}

/// The project's name: an sdist's name without its version
/// (`msgpack-1.1.0.tar.gz` -> `msgpack`), or the directory's name.
pub fn project_name(source: &Path) -> String {
    let name = source.file_name().unwrap_or_default().to_string_lossy().into_owned();
    if source.is_dir() {
        return name;
    }
    match name.rfind('-') {
        Some(i) if name[i + 1..].starts_with(|c: char| c.is_ascii_digit()) => name[..i].to_string(),
        _ => name,
    }
}

/// The key of a project's compiler cache.
pub fn project_key(image: &Digest, targets: &[String], project: &str) -> Key {
    let mut k = KeyEncoder::new("wheel-project", 1);
    k.digest("image", image).list("targets", targets).str("project", project);
    k.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys() {
        assert_eq!(project_name(Path::new("x/msgpack-1.1.0.tar.gz")), "msgpack");
        assert_eq!(project_name(Path::new("x/typing_extensions-4.12.2.tar.gz")), "typing_extensions");
        let image = Digest::of_bytes(b"config");
        let source = KeyEncoder::new("test-source", 1).finish();
        let axes = vec![("TORCH".to_string(), vec!["2.5".to_string()])];
        let base = KeyInputs {
            image: &image,
            source: &source,
            pythons: None,
            axes: &axes,
            local_version: None,
            repair: false,
            split: false,
            split_link: false,
            exclude: &[],
            patchelf: "pinned",
            isolation: true,
            lock: Some(b"lock"),
            find_links: None,
            rocm: None,
            network: false,
            epoch: 0,
            targets: &[],
        };
        let k = key(&base);
        assert_eq!(k, key(&base));
        assert_ne!(k, key(&KeyInputs { lock: Some(b"other lock"), ..base }));
        assert_ne!(k, key(&KeyInputs { epoch: 1, ..base }));
        assert_ne!(k, key(&KeyInputs { split_link: true, ..base }));
        assert_ne!(k, key(&KeyInputs { local_version: Some("rocm{R}"), ..base }));
        let one = ["cp311".to_string()];
        assert_ne!(k, key(&KeyInputs { pythons: Some(&one), ..base }));
    }
}
