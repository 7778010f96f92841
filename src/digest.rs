//! sha256 helpers: a hashing writer for streaming pipelines and one-shot digests.
//! `sha2` picks the CPU's SHA extensions at run time when they exist.

use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};
use std::path::Path;

/// A writer that hashes and counts every byte it passes on.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter { inner, hasher: Sha256::new(), bytes: 0 }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Returns the inner writer, the hex sha256 and the byte count.
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, hex::encode(&self.hasher.finalize()[..]), self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Hex sha256 of a byte slice.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(&Sha256::digest(data)[..])
}

/// Hex sha256 of everything a reader yields.
pub fn sha256_reader(mut r: impl Read) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(&hasher.finalize()[..]), total))
}

/// Hex sha256 of a file's contents.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    Ok(sha256_reader(std::fs::File::open(path)?)?.0)
}

/// Incremental hasher for cache keys: length-prefixed fields so that
/// ("ab","c") and ("a","bc") never collide.
#[derive(Clone, Default)]
pub struct KeyHasher(Sha256);

impl KeyHasher {
    pub fn new() -> Self {
        KeyHasher(Sha256::new())
    }
    pub fn field(&mut self, data: impl AsRef<[u8]>) -> &mut Self {
        let d = data.as_ref();
        self.0.update((d.len() as u64).to_le_bytes());
        self.0.update(d);
        self
    }
    pub fn finish(self) -> String {
        hex::encode(&self.0.finalize()[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // sha256("abc") from FIPS 180-2, appendix B.1
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"ab").unwrap();
        w.write_all(b"c").unwrap();
        let (inner, hex, n) = w.finish();
        assert_eq!(inner, b"abc");
        assert_eq!(n, 3);
        assert_eq!(hex, sha256_hex(b"abc"));
    }

    #[test]
    fn key_fields_are_delimited() {
        let mut a = KeyHasher::new();
        a.field("ab").field("c");
        let mut b = KeyHasher::new();
        b.field("a").field("bc");
        assert_ne!(a.finish(), b.finish());
    }
}
