//! Writing `.kpack` archives (format version 1, the layout [`super::kpack`]
//! reads): `KPAK`, the version, the table of contents' offset, zero padding
//! to 64 bytes, the blob region, then the MessagePack table of contents to
//! the end of the file. Kernels are added one at a time and written out at
//! once (each compressed as its own zstd frame for `zstd-per-kernel`), so
//! memory holds one kernel, never the archive. The table's keys are in the
//! order ROCm's own writer uses; the runtime looks them up by name.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// Where the blob region starts (ROCm's writer aligns it to 64 bytes).
const BLOB_START: u64 = 64;
/// zstd level of each kernel frame (ROCm's default).
pub const ZSTD_LEVEL: i32 = 3;

/// How kernels are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    None,
    ZstdPerKernel,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Scheme::None => "none",
            Scheme::ZstdPerKernel => "zstd-per-kernel",
        }
    }
}

#[derive(Serialize)]
struct KernelEntry {
    r#type: &'static str,
    ordinal: u32,
    original_size: u64,
}

#[derive(Serialize)]
struct Blob {
    offset: u64,
    size: u64,
}

/// The table of contents, keys in ROCm's order; the scheme's own fields last.
#[derive(Serialize)]
struct Toc<'a> {
    format_version: u32,
    group_name: &'a str,
    gfx_arch_family: &'a str,
    gfx_arches: Vec<&'a str>,
    toc: &'a BTreeMap<String, BTreeMap<String, KernelEntry>>,
    compression_scheme: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    blobs: Option<&'a [Blob]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    zstd_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    zstd_size: Option<u64>,
}

/// An archive being written: one architecture's kernels of one package.
pub struct KpackWriter<W: Write + Seek> {
    out: W,
    scheme: Scheme,
    group: String,
    arch: String,
    toc: BTreeMap<String, BTreeMap<String, KernelEntry>>,
    blobs: Vec<Blob>,
    count: u32,
    /// The next byte's offset.
    pos: u64,
    /// The last frame's buffer, reused for the next.
    buf: Vec<u8>,
}

impl<W: Write + Seek> KpackWriter<W> {
    /// Start an archive of `group`'s (the package's) kernels for `arch`
    /// (a full target id: `gfx90a:xnack+`).
    pub fn new(mut out: W, group: &str, arch: &str, scheme: Scheme) -> io::Result<KpackWriter<W>> {
        let mut head = [0u8; BLOB_START as usize];
        head[..4].copy_from_slice(super::kpack::MAGIC);
        head[4..8].copy_from_slice(&1u32.to_le_bytes());
        out.write_all(&head)?;
        let mut pos = BLOB_START;
        if scheme == Scheme::ZstdPerKernel {
            // The kernel count, written when the archive is finished.
            out.write_all(&0u32.to_le_bytes())?;
            pos += 4;
        }
        Ok(KpackWriter {
            out,
            scheme,
            group: group.to_string(),
            arch: arch.to_string(),
            toc: BTreeMap::new(),
            blobs: Vec::new(),
            count: 0,
            pos,
            buf: Vec::new(),
        })
    }

    /// Add the kernel `binary_key` (`lib/libx.so#0`): `size` bytes from `code`.
    /// Returns its ordinal.
    pub fn add(&mut self, binary_key: &str, code: &mut dyn Read, size: u64) -> io::Result<u32> {
        let ordinal = self.count;
        if self.toc.get(binary_key).is_some_and(|a| a.contains_key(&self.arch)) {
            return Err(io::Error::other(format!("kernel `{binary_key}` for {} is added twice", self.arch)));
        }
        match self.scheme {
            Scheme::None => {
                let copied = io::copy(&mut code.take(size), &mut self.out)?;
                if copied != size {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the kernel ends early"));
                }
                self.blobs.push(Blob { offset: self.pos, size });
                self.pos += size;
            }
            Scheme::ZstdPerKernel => {
                // One frame with its content size and no checksum, as ROCm
                // writes them, compressed as the kernel streams in: memory
                // holds the frame, never the kernel.
                let mut out = std::mem::take(&mut self.buf);
                out.clear();
                let mut enc = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL)?;
                enc.set_pledged_src_size(Some(size))?;
                enc.include_contentsize(true)?;
                enc.include_checksum(false)?;
                if io::copy(&mut code.take(size), &mut enc)? != size {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the kernel ends early"));
                }
                let frame = enc.finish()?;
                let len = u32::try_from(frame.len()).map_err(|_| io::Error::other("a kernel over 4 GiB"))?;
                self.out.write_all(&len.to_le_bytes())?;
                self.out.write_all(&frame)?;
                self.pos += 4 + frame.len() as u64;
                // Kept for the next kernel unless a large one made it large:
                // a split has one writer per architecture open at once.
                if frame.capacity() <= 4 << 20 {
                    self.buf = frame;
                }
            }
        }
        self.toc
            .entry(binary_key.to_string())
            .or_default()
            .insert(self.arch.clone(), KernelEntry { r#type: "hsaco", ordinal, original_size: size });
        self.count += 1;
        Ok(ordinal)
    }

    /// Make `binary_key` name the kernel already added as `ordinal` (of
    /// `size` bytes): two wrappers of one binary that register the same
    /// bundle (`-fgpu-rdc` links do) each get a key, the code is stored once.
    pub fn alias(&mut self, binary_key: &str, ordinal: u32, size: u64) -> io::Result<()> {
        if ordinal >= self.count {
            return Err(io::Error::other(format!("no kernel {ordinal} to alias as `{binary_key}`")));
        }
        self.toc
            .entry(binary_key.to_string())
            .or_default()
            .insert(self.arch.clone(), KernelEntry { r#type: "hsaco", ordinal, original_size: size });
        Ok(())
    }

    /// How many kernels were added.
    pub fn len(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Write the table of contents and the header's offset; returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        let toc_offset = self.pos;
        let zstd = self.scheme == Scheme::ZstdPerKernel;
        let toc = Toc {
            format_version: 1,
            group_name: &self.group,
            gfx_arch_family: &self.arch,
            gfx_arches: vec![&self.arch],
            toc: &self.toc,
            compression_scheme: self.scheme.name(),
            blobs: (!zstd).then_some(&self.blobs[..]),
            zstd_offset: zstd.then_some(BLOB_START),
            zstd_size: zstd.then_some(toc_offset - BLOB_START),
        };
        let bytes = rmp_serde::to_vec_named(&toc).map_err(io::Error::other)?;
        self.out.write_all(&bytes)?;
        self.out.seek(SeekFrom::Start(8))?;
        self.out.write_all(&toc_offset.to_le_bytes())?;
        if zstd {
            self.out.seek(SeekFrom::Start(BLOB_START))?;
            self.out.write_all(&self.count.to_le_bytes())?;
        }
        self.out.seek(SeekFrom::End(0))?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code_objects::amdgpu::tests::header;
    use crate::code_objects::kpack;
    use std::io::Cursor;

    fn archive(scheme: Scheme, kernels: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut w = KpackWriter::new(Cursor::new(Vec::new()), "torch", "gfx942", scheme).unwrap();
        for (key, code) in kernels {
            w.add(key, &mut &code[..], code.len() as u64).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn archives_read_back_with_every_kernel() {
        let mut big = header(0x04c, 3);
        big.extend((0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()));
        let kernels = vec![("lib/libx.so#0", header(0x04c, 3)), ("lib/libx.so#1", big.clone()), ("bin/y#0", big)];
        for scheme in [Scheme::None, Scheme::ZstdPerKernel] {
            let data = archive(scheme, &kernels);
            assert_eq!(&data[..4], b"KPAK");
            let read = kpack::read(&data).unwrap();
            assert_eq!(read.len(), 3, "{scheme:?}");
            for (key, code) in &kernels {
                let k = read.iter().find(|k| k.binary == *key).unwrap();
                assert_eq!((k.arch.as_str(), k.size), ("gfx942", code.len() as u64));
                assert_eq!(k.head, code[..64]);
                assert_eq!(kpack::kernel(&data, key, "gfx942").unwrap().as_ref(), Some(code));
            }
            assert_eq!(kpack::kernel(&data, "bin/y#1", "gfx942").unwrap(), None);
            assert_eq!(kpack::arches(&data).unwrap(), ["gfx942"]);
            // The same kernels give the same bytes.
            assert_eq!(data, archive(scheme, &kernels));
        }
    }

    #[test]
    fn a_short_kernel_or_a_repeated_key_is_an_error() {
        let mut w = KpackWriter::new(Cursor::new(Vec::new()), "g", "gfx90a", Scheme::ZstdPerKernel).unwrap();
        assert!(w.add("a#0", &mut &[1u8, 2][..], 3).is_err());
        w.add("b#0", &mut &[1u8, 2][..], 2).unwrap();
        assert!(w.add("b#0", &mut &[1u8, 2][..], 2).is_err());
        // An alias shares the code of an added kernel.
        w.alias("b#1", 0, 2).unwrap();
        assert!(w.alias("b#2", 5, 2).is_err());
        let data = w.finish().unwrap().into_inner();
        assert_eq!(kpack::kernel(&data, "b#1", "gfx90a").unwrap(), Some(vec![1u8, 2]));
    }
}
