//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`): what `hipcc` puts in
//! a host binary's `.hip_fatbin` section and writes for `--genco`.
//!
//! Layout (little-endian): the 24-byte magic, a u64 entry count, then per
//! entry a u64 offset (from the bundle's start), a u64 size, a u64 id
//! length and the id (`hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`,
//! `host-x86_64-unknown-linux-gnu-`); the code objects follow. Entries are
//! read in offset order from a forward-only stream, so a bundle inside a
//! decompressing reader is never held in memory: only each code object's
//! ELF header is kept.

use super::amdgpu;
use std::io::{self, Read};

pub const MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// More entries than any real bundle has (one per target): a corrupt count.
const MAX_ENTRIES: u64 = 1 << 16;
const MAX_ID_LEN: u64 = 4096;

/// Why a bundle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("not an offload bundle (no `__CLANG_OFFLOAD_BUNDLE__` magic)")]
    BadMagic,
    #[error("truncated offload bundle: {0}")]
    Truncated(String),
    #[error("corrupt offload bundle: {0}")]
    Corrupt(String),
    #[error("compressed offload bundle: {0}")]
    Compressed(String),
    /// A format version or method this quarry does not read.
    #[error("{0}")]
    Unsupported(String),
    #[error("reading the bundle: {0}")]
    Io(#[from] io::Error),
}

/// A stream that can move forward without reading into memory.
pub trait Forward: Read {
    /// Move `n` bytes forward; returns how many were skipped.
    fn skip(&mut self, n: u64) -> io::Result<u64>;
}

impl Forward for &[u8] {
    fn skip(&mut self, n: u64) -> io::Result<u64> {
        let k = n.min(self.len() as u64) as usize;
        *self = &self[k..];
        Ok(k as u64)
    }
}

/// Any reader, skipped by reading (for decompressing streams).
pub struct Stream<R>(pub R);

impl<R: Read> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read> Forward for Stream<R> {
    fn skip(&mut self, n: u64) -> io::Result<u64> {
        io::copy(&mut (&mut self.0).take(n), &mut io::sink())
    }
}

/// One entry of a bundle: its id, its size and the first bytes of its code.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: String,
    pub offset: u64,
    pub size: u64,
    /// Up to `amdgpu::HEADER_LEN` bytes from the start of the entry.
    pub head: Vec<u8>,
}

/// A bundle read from a stream.
#[derive(Debug)]
pub struct Bundle {
    pub entries: Vec<Entry>,
    /// Bytes from the bundle's start to the end of its last entry (or of
    /// its header when the entries are empty).
    pub len: u64,
}

fn read_u64(r: &mut impl Read, what: &str) -> Result<u64, BundleError> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).map_err(|e| eof(e, what))?;
    Ok(u64::from_le_bytes(b))
}

fn eof(e: io::Error, what: &str) -> BundleError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        BundleError::Truncated(format!("it ends inside {what}"))
    } else {
        BundleError::Io(e)
    }
}

/// What [`read_with`] calls for each entry with code: the entry (its id,
/// offset, size and head) and a reader of all its bytes, head included.
pub type Visit<'a> = dyn FnMut(&Entry, &mut dyn Read) -> Result<(), BundleError> + 'a;

/// Read a bundle from `r`, positioned at its magic. `available`: the bytes
/// that can belong to it (a section's rest, a decompressed size), when known.
pub fn read(r: &mut impl Forward, available: Option<u64>) -> Result<Bundle, BundleError> {
    read_with(r, available, &mut |_, _| Ok(()))
}

/// The entries a bundle's header lists (ids, offsets, sizes; no code
/// read): what a caller needs to know before streaming the code, such as
/// how much device code a binary holds.
pub fn entries(r: &mut impl Read, available: Option<u64>) -> Result<Vec<Entry>, BundleError> {
    read_header(r, available).map(|(entries, _)| entries)
}

/// The header: its entries and its length.
fn read_header(r: &mut impl Read, available: Option<u64>) -> Result<(Vec<Entry>, u64), BundleError> {
    let mut magic = [0u8; 24];
    r.read_exact(&mut magic).map_err(|e| eof(e, "the magic"))?;
    if magic != MAGIC {
        return Err(BundleError::BadMagic);
    }
    let count = read_u64(r, "the entry count")?;
    let limit = available.map(|a| a.saturating_sub(32) / 24).unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES);
    if count > limit {
        return Err(BundleError::Corrupt(format!("it claims {count} entries (at most {limit} fit)")));
    }
    let mut pos = 32u64;
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count {
        let what = format!("the descriptor of entry {i}");
        let offset = read_u64(r, &what)?;
        let size = read_u64(r, &what)?;
        let id_len = read_u64(r, &what)?;
        if id_len > MAX_ID_LEN {
            return Err(BundleError::Corrupt(format!("entry {i} has a {id_len}-byte id")));
        }
        let mut id = vec![0u8; id_len as usize];
        r.read_exact(&mut id).map_err(|e| eof(e, &what))?;
        let id = String::from_utf8(id).map_err(|_| BundleError::Corrupt(format!("entry {i}'s id is not UTF-8")))?;
        pos += 24 + id_len;
        let end = offset.checked_add(size).ok_or_else(|| BundleError::Corrupt(format!("entry `{id}` overflows")))?;
        if let Some(a) = available {
            if end > a {
                return Err(BundleError::Truncated(format!(
                    "entry `{id}` (offset {offset}, {size} bytes) ends past the {a} bytes available"
                )));
            }
        }
        entries.push(Entry { id, offset, size, head: Vec::new() });
    }
    Ok((entries, pos))
}

/// [`read`], handing each entry's code to `visit` as it streams past (what
/// `visit` leaves unread is skipped).
pub fn read_with(r: &mut impl Forward, available: Option<u64>, visit: &mut Visit) -> Result<Bundle, BundleError> {
    let (mut entries, header_len) = read_header(r, available)?;
    let mut pos = header_len;
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| entries[i].offset);
    for i in order {
        let e = &mut entries[i];
        if e.size == 0 {
            continue;
        }
        if e.offset < pos {
            if e.offset < header_len {
                return Err(BundleError::Corrupt(format!(
                    "entry `{}` starts at {} inside the bundle's header",
                    e.id, e.offset
                )));
            }
            // Overlapping entries: not written by clang; read the head once.
            return Err(BundleError::Corrupt(format!("entry `{}` overlaps the entry before it", e.id)));
        }
        let gap = e.offset - pos;
        if r.skip(gap)? != gap {
            return Err(BundleError::Truncated(format!("it ends before entry `{}` at offset {}", e.id, e.offset)));
        }
        let want = e.size.min(amdgpu::HEADER_LEN as u64);
        let mut head = vec![0u8; want as usize];
        r.read_exact(&mut head).map_err(|err| eof(err, &format!("entry `{}`", e.id)))?;
        e.head = head;
        let e = &*e;
        let mut body = (&mut *r).take(e.size - want);
        visit(e, &mut (&e.head[..]).chain(&mut body))?;
        let rest = body.limit();
        if r.skip(rest)? != rest {
            return Err(BundleError::Truncated(format!(
                "entry `{}` (offset {}, {} bytes) is cut short",
                e.id, e.offset, e.size
            )));
        }
        pos = e.offset + e.size;
    }
    let len = entries.iter().map(|e| e.offset + e.size).max().unwrap_or(0).max(header_len);
    Ok(Bundle { entries, len })
}

/// A bundle entry id taken apart: `hipv4-amdgcn-amd-amdhsa--gfx942:xnack-`
/// -> kind `hipv4`, triple `amdgcn-amd-amdhsa`, target `gfx942:xnack-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryId {
    pub kind: String,
    pub triple: String,
    /// The target id (processor and features); empty for host entries.
    pub target: String,
}

impl EntryId {
    pub fn parse(id: &str) -> Option<EntryId> {
        let (kind, rest) = id.split_once('-')?;
        // arch-vendor-os, then an optional environment, then the target id:
        // `amdgcn-amd-amdhsa--gfx90a` (empty environment) or, from older
        // compilers, `amdgcn-amd-amdhsa-gfx906`.
        let mut parts = rest.splitn(4, '-');
        let (arch, vendor, os) = (parts.next()?, parts.next()?, parts.next()?);
        let tail = parts.next().unwrap_or("");
        let target = match tail.strip_prefix('-') {
            Some(t) => t,
            None if tail.starts_with("gfx") || tail.is_empty() => tail,
            // A named environment: `...-amdhsa-gnu-gfx90a`.
            None => tail.split_once('-').map(|(_, t)| t).unwrap_or(""),
        };
        Some(EntryId { kind: kind.into(), triple: format!("{arch}-{vendor}-{os}"), target: target.into() })
    }

    pub fn is_host(&self) -> bool {
        self.kind == "host"
    }

    /// The processor and the features of the target id.
    pub fn processor_and_features(&self) -> (String, Vec<String>) {
        let mut parts = self.target.split(':');
        let processor = parts.next().unwrap_or("").to_string();
        let mut features: Vec<String> = parts.map(String::from).collect();
        features.sort();
        (processor, features)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bundle with a host entry and one entry per (id, payload).
    pub(crate) fn make_bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let all: Vec<(&str, &[u8])> =
            std::iter::once(("host-x86_64-unknown-linux-gnu-", &b""[..])).chain(entries.iter().copied()).collect();
        let header_len: usize = 32 + all.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
        let mut out = MAGIC.to_vec();
        out.extend((all.len() as u64).to_le_bytes());
        let mut offset = header_len.next_multiple_of(4096);
        let mut body = Vec::new();
        for (id, data) in &all {
            let off = if data.is_empty() { header_len } else { offset };
            out.extend((off as u64).to_le_bytes());
            out.extend((data.len() as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
            if !data.is_empty() {
                body.push((offset, *data));
                offset = (offset + data.len()).next_multiple_of(4096);
            }
        }
        for (off, data) in body {
            out.resize(off, 0);
            out.extend(data);
        }
        out
    }

    #[test]
    fn entry_ids() {
        let e = EntryId::parse("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-").unwrap();
        assert_eq!(
            (e.kind.as_str(), e.triple.as_str(), e.target.as_str()),
            ("hipv4", "amdgcn-amd-amdhsa", "gfx942:sramecc+:xnack-")
        );
        assert_eq!(e.processor_and_features(), ("gfx942".into(), vec!["sramecc+".into(), "xnack-".into()]));
        assert_eq!(EntryId::parse("hip-amdgcn-amd-amdhsa-gfx906").unwrap().target, "gfx906");
        assert_eq!(EntryId::parse("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic").unwrap().target, "gfx10-3-generic");
        let host = EntryId::parse("host-x86_64-unknown-linux-gnu-").unwrap();
        assert!(host.is_host());
        assert_eq!(EntryId::parse("garbage"), None);
    }

    #[test]
    fn reads_entries_in_offset_order_from_a_stream() {
        let a = amdgpu::tests::header(0x03f, 3);
        let b = amdgpu::tests::header(0x041, 3);
        let data = make_bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", &a), ("hipv4-amdgcn-amd-amdhsa--gfx1100", &b)]);
        let bundle = read(&mut Stream(&data[..]), None).unwrap();
        assert_eq!(bundle.entries.len(), 3);
        assert_eq!(bundle.len, data.len() as u64);
        assert_eq!(bundle.entries[2].head, b);
        let from_slice = read(&mut &data[..], Some(data.len() as u64)).unwrap();
        assert_eq!(from_slice.entries[1].head, a);
    }

    #[test]
    fn truncated_and_corrupt_bundles_are_errors() {
        let a = amdgpu::tests::header(0x03f, 3);
        let data = make_bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", &a)]);
        for cut in [0, 10, 30, 40, 80, data.len() - 1] {
            let err = read(&mut &data[..cut], None).unwrap_err();
            assert!(matches!(err, BundleError::Truncated(_) | BundleError::BadMagic), "cut {cut}: {err}");
            let err = read(&mut &data[..cut], Some(cut as u64)).unwrap_err();
            assert!(
                matches!(err, BundleError::Truncated(_) | BundleError::BadMagic | BundleError::Corrupt(_)),
                "{err}"
            );
        }
        let mut bad = data.clone();
        bad[0] = b'X';
        assert!(matches!(read(&mut &bad[..], None), Err(BundleError::BadMagic)));
        let mut huge = data.clone();
        huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(read(&mut &huge[..], None), Err(BundleError::Corrupt(_))));
        let mut long_id = data;
        long_id[48..56].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(read(&mut &long_id[..], None), Err(BundleError::Corrupt(_))));
    }
}
