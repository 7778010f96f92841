//! Compressed offload bundles (`CCOB`, `clang-offload-bundler -compress`,
//! `--offload-compress`): a header, then an ordinary offload bundle
//! compressed with zlib or zstd.
//!
//! Header (little-endian), as clang's OffloadBundler writes it:
//! `CCOB`, u16 version, u16 method (llvm::compression::Format: 0 zlib,
//! 1 zstd), then
//! - version 1: u32 uncompressed size, u64 hash (20 bytes);
//! - version 2: u32 total size, u32 uncompressed size, u64 hash (24 bytes);
//! - version 3: u64 total size, u64 uncompressed size, u64 hash (32 bytes).
//!
//! The total size counts the header; the hash is the first 8 bytes (read
//! little-endian) of the MD5 of the uncompressed bundle. The payload is
//! decompressed as a stream: memory stays flat however large it is.

use super::bundle::{self, Bundle, BundleError, Stream};
use md5::{Digest, Md5};
use std::io::{self, Read};

pub const MAGIC: &[u8] = b"CCOB";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Zlib,
    Zstd,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Zlib => "zlib",
            Method::Zstd => "zstd",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub method: Method,
    /// Header and payload (versions 2 and 3).
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    pub hash: u64,
    pub header_len: usize,
}

fn le(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(x)
}

pub fn parse_header(data: &[u8]) -> Result<Header, BundleError> {
    if !data.starts_with(MAGIC) {
        return Err(BundleError::BadMagic);
    }
    let short = |n: usize| BundleError::Truncated(format!("its header needs {n} bytes, {} are there", data.len()));
    if data.len() < 8 {
        return Err(short(8));
    }
    let version = le(&data[4..6]) as u16;
    let method = match le(&data[6..8]) {
        0 => Method::Zlib,
        1 => Method::Zstd,
        m => {
            return Err(BundleError::Unsupported(format!(
                "compressed offload bundle with unknown compression method {m} (0 zlib, 1 zstd)"
            )))
        }
    };
    let (header_len, total_size, uncompressed_size, hash) = match version {
        1 if data.len() >= 20 => (20, None, le(&data[8..12]), le(&data[12..20])),
        2 if data.len() >= 24 => (24, Some(le(&data[8..12])), le(&data[12..16]), le(&data[16..24])),
        3 if data.len() >= 32 => (32, Some(le(&data[8..16])), le(&data[16..24]), le(&data[24..32])),
        1 => return Err(short(20)),
        2 => return Err(short(24)),
        3 => return Err(short(32)),
        v => {
            return Err(BundleError::Unsupported(format!(
                "compressed offload bundle format version {v}: this quarry reads versions 1 to 3"
            )))
        }
    };
    if let Some(t) = total_size {
        if t < header_len as u64 {
            return Err(BundleError::Corrupt(format!("its total size {t} is smaller than its header")));
        }
    }
    Ok(Header { version, method, total_size, uncompressed_size, hash, header_len })
}

/// Counts and hashes what passes through.
struct Hashing<R> {
    inner: R,
    md5: Md5,
    count: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.md5.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// A compressed bundle read: its header, the bundle inside, and how many
/// bytes of the input it took (to find what follows it).
#[derive(Debug)]
pub struct Compressed {
    pub header: Header,
    pub bundle: Bundle,
    pub consumed: u64,
}

fn decode_err(method: Method, e: io::Error) -> BundleError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => BundleError::Truncated(format!("its {} data ends early", method.name())),
        _ => BundleError::Compressed(format!("its {} data does not decompress: {e}", method.name())),
    }
}

/// Read a compressed bundle at the start of `data` (which may run past it).
pub fn read(data: &[u8]) -> Result<Compressed, BundleError> {
    read_with(data, &mut |_, _| Ok(()))
}

/// [`read`], handing each entry's code to `visit` as it is decompressed.
/// The size and hash are checked after the last entry: a caller keeps what
/// it was handed only when this returns Ok.
pub fn read_with(data: &[u8], visit: &mut bundle::Visit) -> Result<Compressed, BundleError> {
    let header = parse_header(data)?;
    let end = match header.total_size {
        Some(t) if t > data.len() as u64 => {
            return Err(BundleError::Truncated(format!("its header says {t} bytes, {} are there", data.len())))
        }
        Some(t) => t as usize,
        None => data.len(),
    };
    let mut payload: &[u8] = &data[header.header_len..end];
    let before = payload.len();
    let (bundle, md5, count) = match header.method {
        Method::Zstd => {
            let dec = zstd::stream::read::Decoder::with_buffer(&mut payload)
                .map_err(|e| decode_err(header.method, e))?
                .single_frame();
            inflate(dec, &header, visit)?
        }
        Method::Zlib => inflate(flate2::bufread::ZlibDecoder::new(&mut payload), &header, visit)?,
    };
    let consumed = match header.total_size {
        Some(t) => t,
        None => (header.header_len + before - payload.len()) as u64,
    };
    if count != header.uncompressed_size {
        return Err(BundleError::Corrupt(format!(
            "it decompresses to {count} bytes, its header says {}",
            header.uncompressed_size
        )));
    }
    let digest = md5.finalize();
    let hash = u64::from_le_bytes(digest[..8].try_into().expect("md5 is 16 bytes"));
    if hash != header.hash {
        return Err(BundleError::Corrupt(format!(
            "the MD5 of its contents ({hash:016x}) differs from its header's ({:016x})",
            header.hash
        )));
    }
    Ok(Compressed { header, bundle, consumed })
}

/// The entries of the compressed bundle `r` starts with, from the header
/// of the bundle inside: only the first bytes are decompressed (the code is
/// not, and the size and hash, which cover all of it, are not checked).
pub fn entries(r: &mut impl Read) -> Result<Vec<bundle::Entry>, BundleError> {
    let mut head = [0u8; 32];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..])? {
            0 => break,
            n => got += n,
        }
    }
    let header = parse_header(&head[..got])?;
    let payload = (&head[header.header_len..got]).chain(r);
    let available = Some(header.uncompressed_size);
    let read = match header.method {
        Method::Zstd => {
            let dec = zstd::stream::read::Decoder::new(payload).map_err(|e| decode_err(header.method, e))?;
            bundle::entries(&mut dec.single_frame(), available)
        }
        Method::Zlib => bundle::entries(&mut flate2::read::ZlibDecoder::new(payload), available),
    };
    read.map_err(|e| match e {
        BundleError::Io(io) => decode_err(header.method, io),
        other => other,
    })
}

/// Read the bundle out of a decompressing stream, then drain it to check
/// its size and hash.
fn inflate<R: Read>(dec: R, header: &Header, visit: &mut bundle::Visit) -> Result<(Bundle, Md5, u64), BundleError> {
    let mut s = Stream(Hashing { inner: dec, md5: Md5::new(), count: 0 });
    let bundle = bundle::read_with(&mut s, Some(header.uncompressed_size), visit).map_err(|e| match e {
        BundleError::Io(io) => decode_err(header.method, io),
        other => other,
    })?;
    io::copy(&mut s.0, &mut io::sink()).map_err(|e| decode_err(header.method, e))?;
    Ok((bundle, s.0.md5, s.0.count))
}

/// Write a compressed bundle (tests build fixtures with it).
#[cfg(test)]
pub(crate) fn compress(bundle: &[u8], method: Method, version: u16) -> Vec<u8> {
    use std::io::Write;
    let payload = match method {
        Method::Zstd => zstd::bulk::compress(bundle, 3).unwrap(),
        Method::Zlib => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(bundle).unwrap();
            e.finish().unwrap()
        }
    };
    let hash = u64::from_le_bytes(Md5::digest(bundle)[..8].try_into().unwrap());
    let mut out = MAGIC.to_vec();
    out.extend(version.to_le_bytes());
    out.extend((method as u16).to_le_bytes());
    let header_len = [0, 20, 24, 32][version as usize];
    let total = (header_len + payload.len()) as u64;
    match version {
        1 => out.extend((bundle.len() as u32).to_le_bytes()),
        2 => {
            out.extend((total as u32).to_le_bytes());
            out.extend((bundle.len() as u32).to_le_bytes());
        }
        _ => {
            out.extend(total.to_le_bytes());
            out.extend((bundle.len() as u64).to_le_bytes());
        }
    }
    out.extend(hash.to_le_bytes());
    out.extend(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code_objects::{amdgpu, bundle::tests::make_bundle};

    fn sample() -> Vec<u8> {
        make_bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", &amdgpu::tests::header(0x04c, 3))])
    }

    #[test]
    fn every_version_and_method_reads_back() {
        let plain = sample();
        for method in [Method::Zstd, Method::Zlib] {
            for version in 1..=3 {
                let mut c = compress(&plain, method, version);
                let len = c.len() as u64;
                c.extend([0u8; 100]); // section padding after it
                let r = read(&c).unwrap_or_else(|e| panic!("{method:?} v{version}: {e}"));
                assert_eq!(r.bundle.entries.len(), 2);
                assert_eq!(r.consumed, len, "{method:?} v{version}");
                assert_eq!(r.header.uncompressed_size, plain.len() as u64);
            }
        }
    }

    #[test]
    fn entries_come_from_the_header_alone() {
        let plain = sample();
        let whole = bundle::read(&mut &plain[..], Some(plain.len() as u64)).unwrap();
        for method in [Method::Zstd, Method::Zlib] {
            for version in 1..=3 {
                let c = compress(&plain, method, version);
                let got = entries(&mut &c[..]).unwrap_or_else(|e| panic!("{method:?} v{version}: {e}"));
                let ids = |v: &[bundle::Entry]| v.iter().map(|e| (e.id.clone(), e.size)).collect::<Vec<_>>();
                assert_eq!(ids(&got), ids(&whole.entries), "{method:?} v{version}");
            }
        }
        assert!(matches!(entries(&mut &b"CCOB"[..]), Err(BundleError::Truncated(_))));
        assert!(matches!(entries(&mut &b"nope"[..]), Err(BundleError::BadMagic)));
    }

    #[test]
    fn damage_is_reported_not_panicked() {
        let c = compress(&sample(), Method::Zstd, 3);
        for cut in [3, 7, 12, 31, 40, c.len() - 1] {
            assert!(read(&c[..cut]).is_err(), "cut at {cut}");
        }
        let mut hash = c.clone();
        hash[24] ^= 1;
        assert!(matches!(read(&hash), Err(BundleError::Corrupt(m)) if m.contains("MD5")));
        let mut size = c.clone();
        size[16] ^= 1;
        assert!(read(&size).is_err());
        let mut method = c.clone();
        method[6] = 7;
        assert!(matches!(read(&method), Err(BundleError::Unsupported(m)) if m.contains("method 7")));
        let mut version = c.clone();
        version[4] = 9;
        assert!(matches!(read(&version), Err(BundleError::Unsupported(m)) if m.contains("version 9")));
        let mut body = c;
        let n = body.len();
        body[n - 5..].fill(0xff);
        assert!(read(&body).is_err());
    }
}
