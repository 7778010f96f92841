//! Cache keys: an explicit, versioned encoding of named fields. Every key
//! starts with its schema's name and version, and each field is written as
//! a type tag, its name and its length-prefixed value, so no two different
//! sets of fields can encode alike and nothing depends on how a Rust struct
//! happens to print or serialize. Changing what a key holds means bumping
//! its schema's version (tests in `plan` pin a few keys to catch accidents).

use crate::oci::Digest;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// A cache key (a sha256 over the encoded fields).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(into = "String")]
pub struct Key([u8; 32]);

impl Key {
    /// Lowercase hex: the name of the key's record in the cache.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl From<Key> for String {
    fn from(k: Key) -> String {
        k.hex()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.hex())
    }
}

/// Builds one key from named fields, in the order the caller writes them.
///
/// Fields are gathered in a buffer and hashed in large pieces: a directory's
/// key has several fields per entry, and hashing each few-byte piece on its
/// own costs more than the hashing itself (the bytes hashed are the same).
pub struct KeyEncoder {
    sha: Sha256,
    pending: Vec<u8>,
}

/// Bytes gathered before they are hashed.
const ENCODER_BUFFER: usize = 16 << 10;

impl KeyEncoder {
    /// A key of `schema` (e.g. `files-layer`) at `version`.
    pub fn new(schema: &str, version: u32) -> KeyEncoder {
        let mut e = KeyEncoder { sha: Sha256::new(), pending: Vec::with_capacity(ENCODER_BUFFER) };
        e.raw(b"quarry-key\0").raw(schema.as_bytes()).raw(&version.to_le_bytes());
        e
    }

    fn raw(&mut self, data: &[u8]) -> &mut Self {
        self.put(&(data.len() as u64).to_le_bytes());
        self.put(data)
    }

    fn put(&mut self, data: &[u8]) -> &mut Self {
        if self.pending.len() + data.len() > ENCODER_BUFFER {
            self.sha.update(&self.pending);
            self.pending.clear();
        }
        if data.len() >= ENCODER_BUFFER {
            self.sha.update(data);
        } else {
            self.pending.extend_from_slice(data);
        }
        self
    }

    fn tagged(&mut self, tag: u8, name: &str) -> &mut Self {
        self.put(&[tag]);
        self.raw(name.as_bytes())
    }

    pub fn bytes(&mut self, name: &str, value: &[u8]) -> &mut Self {
        self.tagged(b'b', name).raw(value)
    }

    pub fn str(&mut self, name: &str, value: &str) -> &mut Self {
        self.tagged(b's', name).raw(value.as_bytes())
    }

    pub fn u64(&mut self, name: &str, value: u64) -> &mut Self {
        self.tagged(b'u', name).raw(&value.to_le_bytes())
    }

    pub fn bool(&mut self, name: &str, value: bool) -> &mut Self {
        self.tagged(b'?', name).raw(&[value as u8])
    }

    /// An optional string: absent and empty differ.
    pub fn opt_str(&mut self, name: &str, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => self.tagged(b'o', name).raw(b"some").raw(v.as_bytes()),
            None => self.tagged(b'o', name).raw(b"none"),
        }
    }

    pub fn list<S: AsRef<str>>(&mut self, name: &str, items: impl IntoIterator<Item = S>) -> &mut Self {
        let items: Vec<S> = items.into_iter().collect();
        self.tagged(b'l', name).raw(&(items.len() as u64).to_le_bytes());
        for i in &items {
            self.raw(i.as_ref().as_bytes());
        }
        self
    }

    /// A string map, in key order.
    pub fn map(&mut self, name: &str, map: &BTreeMap<String, String>) -> &mut Self {
        self.tagged(b'm', name).raw(&(map.len() as u64).to_le_bytes());
        for (k, v) in map {
            self.raw(k.as_bytes()).raw(v.as_bytes());
        }
        self
    }

    pub fn digest(&mut self, name: &str, d: &Digest) -> &mut Self {
        self.tagged(b'd', name).raw(d.as_bytes())
    }

    pub fn opt_digest(&mut self, name: &str, d: Option<&Digest>) -> &mut Self {
        match d {
            Some(d) => self.tagged(b'D', name).raw(b"some").raw(d.as_bytes()),
            None => self.tagged(b'D', name).raw(b"none"),
        }
    }

    pub fn key(&mut self, name: &str, k: &Key) -> &mut Self {
        self.tagged(b'k', name).raw(&k.0)
    }

    pub fn finish(self) -> Key {
        let KeyEncoder { mut sha, pending } = self;
        sha.update(&pending);
        Key(sha.finalize().into())
    }
}

/// The content of a directory tree as a key of `schema` (version 1):
/// every path (sorted), its kind, its executable bit and its content or
/// link target. Top-level names in `skip` are left out. Times and owners
/// are not part of it.
pub fn tree_key(schema: &str, dir: &std::path::Path, skip: &[&str]) -> std::io::Result<Key> {
    use std::io;
    use std::os::unix::fs::PermissionsExt;
    let mut k = KeyEncoder::new(schema, 1);
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
            let (digest, size) = crate::oci::digest::digest_file(entry.path())?;
            k.str("file", &rel).bool("executable", meta.permissions().mode() & 0o111 != 0);
            k.u64("size", size).digest("content", &digest);
        }
    }
    Ok(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffer changes nothing: the key is the sha256 of the encoding,
    /// whether the fields are tiny, longer than the buffer or straddle it.
    #[test]
    fn buffering_hashes_exactly_the_encoding() {
        let long = vec![7u8; ENCODER_BUFFER + 3];
        let mut e = KeyEncoder::new("t", 3);
        let mut plain: Vec<u8> = Vec::new();
        let raw = |out: &mut Vec<u8>, d: &[u8]| {
            out.extend_from_slice(&(d.len() as u64).to_le_bytes());
            out.extend_from_slice(d);
        };
        plain.extend_from_slice(&11u64.to_le_bytes());
        plain.extend_from_slice(b"quarry-key\0");
        raw(&mut plain, b"t");
        raw(&mut plain, &3u32.to_le_bytes());
        for i in 0..3000u64 {
            let value: &[u8] = if i % 1000 == 999 { &long } else { b"some bytes" };
            e.bytes("f", value).u64("n", i);
            plain.push(b'b');
            raw(&mut plain, b"f");
            raw(&mut plain, value);
            plain.push(b'u');
            raw(&mut plain, b"n");
            raw(&mut plain, &i.to_le_bytes());
        }
        assert_eq!(e.finish().0, <[u8; 32]>::from(Sha256::digest(&plain)));
    }

    #[test]
    fn fields_names_and_types_all_count() {
        let one = |f: &dyn Fn(&mut KeyEncoder)| {
            let mut e = KeyEncoder::new("t", 1);
            f(&mut e);
            e.finish()
        };
        let a = one(&|e| {
            e.str("a", "bc");
        });
        assert_ne!(
            a,
            one(&|e| {
                e.str("ab", "c");
            })
        );
        assert_ne!(
            a,
            one(&|e| {
                e.bytes("a", b"bc");
            })
        );
        assert_ne!(
            a,
            one(&|e| {
                e.list("a", ["bc"]);
            })
        );
        assert_ne!(
            one(&|e| {
                e.list("l", ["a", "b"]);
            }),
            one(&|e| {
                e.list("l", ["ab"]);
            })
        );
        assert_ne!(
            one(&|e| {
                e.opt_str("o", None);
            }),
            one(&|e| {
                e.opt_str("o", Some(""));
            })
        );
        let mut v2 = KeyEncoder::new("t", 2);
        v2.str("a", "bc");
        assert_ne!(a, v2.finish(), "the version is part of the key");
    }

    #[test]
    fn stability_guard() {
        // A stability guard, not a proof of correctness: if this changes,
        // every cache key of every user changes; bump schema versions
        // deliberately instead of changing the encoding.
        let mut e = KeyEncoder::new("guard", 1);
        e.str("name", "x").u64("n", 7).bool("b", true).list("l", ["p", "q"]);
        assert_eq!(e.finish().hex(), "c8e00b4587fef2802c29f31f44fd856acb71b649811bd1a2d2d65630e59ef035");
    }
}
