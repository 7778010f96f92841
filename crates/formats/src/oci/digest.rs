//! Content digests: the `Digest` type (a sha256, written `sha256:<hex>` as
//! OCI spells it), a hashing writer for streaming pipelines, and one-shot
//! digests of bytes, readers and files. `sha2` picks the CPU's SHA
//! extensions at run time when they exist.

use sha2::{Digest as _, Sha256};
use std::io::{self, Read, Write};
use std::path::Path;

/// A sha256 content digest. Shown, serialized and parsed as `sha256:<hex>`
/// (the OCI form); `hex()` gives the bare hex that file names use.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

/// A string that is not a sha256 digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a sha256 digest (`sha256:` and 64 lowercase hex digits)")]
pub struct BadDigest(pub String);

impl Digest {
    pub const PREFIX: &'static str = "sha256:";

    /// `sha256:<hex>`.
    pub fn parse(s: &str) -> Result<Digest, BadDigest> {
        s.strip_prefix(Self::PREFIX).and_then(|h| Self::from_hex(h).ok()).ok_or_else(|| BadDigest(s.to_string()))
    }

    /// Bare lowercase hex, as in file names and `sha256 = "..."` pins.
    pub fn from_hex(hex: &str) -> Result<Digest, BadDigest> {
        let mut out = [0u8; 32];
        let lower = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match hex::decode_to_slice(hex, &mut out) {
            Ok(()) if lower => Ok(Digest(out)),
            _ => Err(BadDigest(hex.to_string())),
        }
    }

    /// A digest already computed (as 32 bytes).
    pub fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    pub fn of_bytes(data: &[u8]) -> Digest {
        Digest(Sha256::digest(data).into())
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn from_hasher(h: Sha256) -> Digest {
        Digest(h.finalize().into())
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.hex())
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Digest {
    type Err = BadDigest;
    fn from_str(s: &str) -> Result<Digest, BadDigest> {
        Digest::parse(s)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl From<Digest> for oci_spec::image::Digest {
    fn from(d: Digest) -> oci_spec::image::Digest {
        oci_spec::image::Sha256Digest::from_str(&d.hex()).expect("64 lowercase hex digits").into()
    }
}

impl TryFrom<&oci_spec::image::Digest> for Digest {
    type Error = BadDigest;
    fn try_from(d: &oci_spec::image::Digest) -> Result<Digest, BadDigest> {
        Digest::parse(d.as_ref())
    }
}

use std::str::FromStr as _;

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

    /// Returns the inner writer, the digest and the byte count.
    pub fn finish(self) -> (W, Digest, u64) {
        (self.inner, Digest::from_hasher(self.hasher), self.bytes)
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

/// A reader of content that must be `expected` (`size` bytes): it hashes
/// what it passes on and, instead of its end, returns an error naming
/// `what` when the bytes were other ones. A consumer (a tar writer, an
/// upload, an engine's load) so never finishes with damaged content, and
/// no extra pass reads the file.
pub struct VerifyingReader<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
    expected: Digest,
    size: u64,
    what: String,
}

impl<R: Read> VerifyingReader<R> {
    pub fn new(inner: R, expected: Digest, size: u64, what: impl Into<String>) -> Self {
        VerifyingReader { inner, hasher: Sha256::new(), bytes: 0, expected, size, what: what.into() }
    }
}

/// The error a [`VerifyingReader`] returns for content that is not its digest.
pub fn damaged(what: &str, expected: &Digest, size: u64, actual: &Digest, actual_size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{what} is damaged: blob {expected} ({size} bytes) holds other bytes ({actual}, {actual_size} bytes); nothing was written from it"
        ),
    )
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        if n == 0 || self.bytes > self.size {
            let actual = Digest::from_hasher(self.hasher.clone());
            if actual != self.expected || self.bytes != self.size {
                return Err(damaged(&self.what, &self.expected, self.size, &actual, self.bytes));
            }
        }
        Ok(n)
    }
}

/// Hex sha256 of a byte slice.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(&Sha256::digest(data)[..])
}

/// Digest and length of everything a reader yields.
pub fn sha256_reader(mut r: impl Read) -> io::Result<(Digest, u64)> {
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
    Ok((Digest::from_hasher(hasher), total))
}

/// Hex sha256 of a file's contents.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    Ok(sha256_reader(std::fs::File::open(path)?)?.0.hex())
}

/// Digest and length of a file's contents.
pub fn digest_file(path: &Path) -> io::Result<(Digest, u64)> {
    sha256_reader(std::fs::File::open(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verifying_reader_ends_only_for_the_expected_bytes() {
        let data = b"layer bytes".to_vec();
        let d = Digest::of_bytes(&data);
        let mut out = Vec::new();
        VerifyingReader::new(&data[..], d, data.len() as u64, "blob").read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
        let mut flipped = data.clone();
        flipped[3] ^= 1;
        let e = VerifyingReader::new(&flipped[..], d, data.len() as u64, "layout `x`")
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("layout `x` is damaged") && e.to_string().contains(&d.to_string()), "{e}");
        let e =
            VerifyingReader::new(&data[..4], d, data.len() as u64, "blob").read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn known_vector() {
        // sha256("abc") from FIPS 180-2, appendix B.1
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"ab").unwrap();
        w.write_all(b"c").unwrap();
        let (inner, digest, n) = w.finish();
        assert_eq!(inner, b"abc");
        assert_eq!(n, 3);
        assert_eq!(digest.hex(), sha256_hex(b"abc"));
        assert_eq!(digest, Digest::of_bytes(b"abc"));
    }

    #[test]
    fn digests_parse_show_and_refuse() {
        let hex = sha256_hex(b"abc");
        let d = Digest::parse(&format!("sha256:{hex}")).unwrap();
        assert_eq!(d.to_string(), format!("sha256:{hex}"));
        assert_eq!(Digest::from_hex(&hex).unwrap(), d);
        assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"sha256:{hex}\""));
        assert_eq!(serde_json::from_str::<Digest>(&format!("\"sha256:{hex}\"")).unwrap(), d);
        let oci: oci_spec::image::Digest = d.into();
        assert_eq!(Digest::try_from(&oci).unwrap(), d);
        for bad in [hex.clone(), format!("sha512:{hex}"), format!("sha256:{}", hex.to_uppercase()), "sha256:abc".into()]
        {
            assert!(Digest::parse(&bad).is_err(), "{bad}");
        }
    }
}
