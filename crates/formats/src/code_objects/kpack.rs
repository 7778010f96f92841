//! `.kpack` archives (ROCm's kernel packs, rocm-kpack format version 1):
//! the device code split out of host binaries, per architecture family.
//!
//! Layout: `KPAK`, u32 version (1), u64 offset of the table of contents;
//! blobs; the table of contents in MessagePack:
//! `{format_version, group_name, gfx_arch_family, gfx_arches,
//!   compression_scheme: "none" | "zstd-per-kernel",
//!   blobs: [{offset, size}]          # "none": absolute offsets, by ordinal
//!   zstd_offset, zstd_size,          # "zstd-per-kernel": u32 count, then
//!                                    #   (u32 size, zstd frame) per ordinal
//!   toc: {binary path: {gfx arch: {type, ordinal, original_size}}}}`.

use super::bundle::BundleError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Read;

pub const MAGIC: &[u8] = b"KPAK";

#[derive(Deserialize)]
struct Toc {
    #[serde(default)]
    compression_scheme: Option<String>,
    #[serde(default)]
    gfx_arches: Vec<String>,
    #[serde(default)]
    blobs: Vec<Blob>,
    #[serde(default)]
    zstd_offset: Option<u64>,
    #[serde(default)]
    zstd_size: Option<u64>,
    toc: BTreeMap<String, BTreeMap<String, Kernel>>,
}

#[derive(Deserialize)]
struct Blob {
    offset: u64,
    size: u64,
}

#[derive(Deserialize)]
struct Kernel {
    ordinal: u64,
    #[serde(default)]
    original_size: Option<u64>,
}

/// One kernel of an archive: where it belongs, for which architecture,
/// its size and the first bytes of its code.
#[derive(Debug)]
pub struct KpackKernel {
    pub binary: String,
    pub arch: String,
    pub size: u64,
    pub head: Vec<u8>,
    pub compression: Option<&'static str>,
}

fn corrupt(m: impl Into<String>) -> BundleError {
    BundleError::Corrupt(m.into())
}

fn slice<'a>(data: &'a [u8], offset: u64, size: u64, what: &str) -> Result<&'a [u8], BundleError> {
    let end = offset.checked_add(size).ok_or_else(|| corrupt(format!("{what} overflows")))?;
    if end > data.len() as u64 {
        return Err(BundleError::Truncated(format!(
            "{what} (offset {offset}, {size} bytes) ends past the file's {} bytes",
            data.len()
        )));
    }
    Ok(&data[offset as usize..end as usize])
}

/// An archive's table of contents and, for `zstd-per-kernel`, its frames by ordinal.
struct Opened<'a> {
    toc: Toc,
    zstd: bool,
    frames: Vec<&'a [u8]>,
}

fn open(data: &[u8]) -> Result<Opened<'_>, BundleError> {
    if !data.starts_with(MAGIC) {
        return Err(BundleError::BadMagic);
    }
    if data.len() < 16 {
        return Err(BundleError::Truncated(format!("its header needs 16 bytes, {} are there", data.len())));
    }
    let version = u32::from_le_bytes(data[4..8].try_into().expect("4 bytes"));
    if version != 1 {
        return Err(BundleError::Unsupported(format!("kpack format version {version}: this quarry reads version 1")));
    }
    let toc_offset = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    if toc_offset < 16 || toc_offset >= data.len() as u64 {
        return Err(BundleError::Truncated(format!(
            "its table of contents is at {toc_offset}, outside the file's {} bytes",
            data.len()
        )));
    }
    let toc: Toc = rmp_serde::from_slice(&data[toc_offset as usize..])
        .map_err(|e| corrupt(format!("its table of contents does not parse: {e}")))?;
    let scheme = toc.compression_scheme.as_deref().unwrap_or("none");
    // zstd-per-kernel: index the frames once.
    let frames: Vec<&[u8]> = match scheme {
        "none" => Vec::new(),
        "zstd-per-kernel" => {
            let (off, size) = toc
                .zstd_offset
                .zip(toc.zstd_size)
                .ok_or_else(|| corrupt("zstd-per-kernel without zstd_offset/zstd_size"))?;
            let mut blob = slice(data, off, size, "the zstd blob")?;
            fn word(blob: &mut &[u8], what: &str) -> Result<u32, BundleError> {
                let mut b = [0u8; 4];
                blob.read_exact(&mut b)
                    .map_err(|_| BundleError::Truncated(format!("the zstd blob ends inside {what}")))?;
                Ok(u32::from_le_bytes(b))
            }
            let count = word(&mut blob, "its kernel count")?;
            let mut frames = Vec::new();
            for i in 0..count {
                let n = word(&mut blob, &format!("the size of frame {i}"))? as usize;
                if n > blob.len() {
                    return Err(BundleError::Truncated(format!("frame {i} ({n} bytes) runs past the zstd blob")));
                }
                let (frame, rest) = blob.split_at(n);
                frames.push(frame);
                blob = rest;
            }
            frames
        }
        other => return Err(BundleError::Unsupported(format!("unknown kpack compression scheme `{other}`"))),
    };
    Ok(Opened { zstd: scheme != "none", toc, frames })
}

/// The architectures an archive says it holds (`gfx_arches`: what the
/// runtime indexes archives by).
pub fn arches(data: &[u8]) -> Result<Vec<String>, BundleError> {
    Ok(open(data)?.toc.gfx_arches)
}

/// Does the archive's table of contents list kernel `binary_key` for `arch`?
pub fn has_kernel(data: &[u8], binary_key: &str, arch: &str) -> Result<bool, BundleError> {
    Ok(open(data)?.toc.toc.get(binary_key).is_some_and(|a| a.contains_key(arch)))
}

/// The sizes (as the table of contents says) of kernels `{binary}#0`,
/// `#1`, ... up to `count`, for `arch`; None where the archive lacks one.
pub fn kernel_sizes(data: &[u8], binary: &str, arch: &str, count: u64) -> Result<Vec<Option<u64>>, BundleError> {
    let o = open(data)?;
    Ok((0..count)
        .map(|i| {
            o.toc.toc.get(&format!("{binary}#{i}")).and_then(|a| a.get(arch)).map(|k| k.original_size.unwrap_or(0))
        })
        .collect())
}

/// The code of kernel `binary_key` (`lib/libx.so#0`) for `arch`, decoded;
/// None when the archive has no such kernel.
pub fn kernel(data: &[u8], binary_key: &str, arch: &str) -> Result<Option<Vec<u8>>, BundleError> {
    let o = open(data)?;
    let Some(k) = o.toc.toc.get(binary_key).and_then(|a| a.get(arch)) else {
        return Ok(None);
    };
    let what = format!("kernel `{binary_key}` @ {arch} (ordinal {})", k.ordinal);
    let code = if o.zstd {
        let frame = o.frames.get(k.ordinal as usize).ok_or_else(|| corrupt(format!("{what} has no zstd frame")))?;
        zstd::stream::decode_all(*frame).map_err(|e| BundleError::Compressed(format!("{what}: {e}")))?
    } else {
        let b = o.toc.blobs.get(k.ordinal as usize).ok_or_else(|| corrupt(format!("{what} has no blob")))?;
        slice(data, b.offset, b.size, &what)?.to_vec()
    };
    if k.original_size.is_some_and(|n| n != code.len() as u64) {
        return Err(corrupt(format!("{what} holds {} bytes, its table says {:?}", code.len(), k.original_size)));
    }
    Ok(Some(code))
}

/// Every kernel of the archive in `data`.
pub fn read(data: &[u8]) -> Result<Vec<KpackKernel>, BundleError> {
    let Opened { toc, zstd, frames } = open(data)?;
    let scheme = if zstd { "zstd-per-kernel" } else { "none" };
    let mut out = Vec::new();
    for (binary, arches) in &toc.toc {
        for (arch, k) in arches {
            let what = format!("kernel `{binary}` @ {arch} (ordinal {})", k.ordinal);
            let (size, head, compression) = if scheme == "none" {
                let b = toc.blobs.get(k.ordinal as usize).ok_or_else(|| corrupt(format!("{what} has no blob")))?;
                let code = slice(data, b.offset, b.size, &what)?;
                (b.size, code[..code.len().min(super::amdgpu::HEADER_LEN)].to_vec(), None)
            } else {
                let frame =
                    frames.get(k.ordinal as usize).ok_or_else(|| corrupt(format!("{what} has no zstd frame")))?;
                let mut dec = zstd::stream::read::Decoder::with_buffer(*frame)
                    .map_err(|e| BundleError::Compressed(format!("{what}: {e}")))?
                    .single_frame();
                let mut head = vec![0u8; super::amdgpu::HEADER_LEN];
                let mut got = 0;
                while got < head.len() {
                    let n = dec.read(&mut head[got..]).map_err(|e| BundleError::Compressed(format!("{what}: {e}")))?;
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                head.truncate(got);
                let rest = std::io::copy(&mut dec, &mut std::io::sink())
                    .map_err(|e| BundleError::Compressed(format!("{what}: {e}")))?;
                (got as u64 + rest, head, Some("zstd"))
            };
            if let Some(o) = k.original_size {
                if o != size {
                    return Err(corrupt(format!("{what} holds {size} bytes, its table says {o}")));
                }
            }
            out.push(KpackKernel { binary: binary.clone(), arch: arch.clone(), size, head, compression });
        }
    }
    Ok(out)
}

/// Write an archive (tests build fixtures with it): kernels as
/// (binary, arch, code), stored or zstd-compressed.
#[cfg(test)]
pub(crate) fn write(kernels: &[(&str, &str, &[u8])], zstd: bool) -> Vec<u8> {
    use serde::Serialize;
    #[derive(Serialize)]
    struct K {
        r#type: &'static str,
        ordinal: u64,
        original_size: u64,
    }
    let mut out = MAGIC.to_vec();
    out.extend(1u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(64, 0);
    let mut toc: BTreeMap<String, BTreeMap<String, K>> = BTreeMap::new();
    let mut blobs = Vec::new();
    let mut frames = (kernels.len() as u32).to_le_bytes().to_vec();
    for (i, (bin, arch, code)) in kernels.iter().enumerate() {
        toc.entry(bin.to_string())
            .or_default()
            .insert(arch.to_string(), K { r#type: "hsaco", ordinal: i as u64, original_size: code.len() as u64 });
        if zstd {
            let f = zstd::bulk::compress(code, 3).unwrap();
            frames.extend((f.len() as u32).to_le_bytes());
            frames.extend(f);
        } else {
            blobs.push(BTreeMap::from([("offset", out.len() as u64), ("size", code.len() as u64)]));
            out.extend(*code);
        }
    }
    let zstd_offset = out.len() as u64;
    if zstd {
        out.extend(&frames);
    }
    #[derive(Serialize)]
    struct T<'a> {
        format_version: u32,
        group_name: &'a str,
        gfx_arch_family: &'a str,
        gfx_arches: Vec<&'a str>,
        compression_scheme: &'a str,
        blobs: Vec<BTreeMap<&'a str, u64>>,
        zstd_offset: u64,
        zstd_size: u64,
        toc: BTreeMap<String, BTreeMap<String, K>>,
    }
    let toc_offset = out.len() as u64;
    let t = T {
        format_version: 1,
        group_name: "test",
        gfx_arch_family: "gfx94X",
        gfx_arches: kernels.iter().map(|k| k.1).collect(),
        compression_scheme: if zstd { "zstd-per-kernel" } else { "none" },
        blobs,
        zstd_offset,
        zstd_size: if zstd { frames.len() as u64 } else { 0 },
        toc,
    };
    out.extend(rmp_serde::to_vec_named(&t).unwrap());
    out[8..16].copy_from_slice(&toc_offset.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code_objects::amdgpu::tests::header;

    #[test]
    fn stored_and_zstd_archives_read_back() {
        let (a, b) = (header(0x04c, 3), header(0x03f, 3));
        for zstd in [false, true] {
            let data = write(&[("lib/librocblas.so.4", "gfx942", &a), ("lib/librocblas.so.4", "gfx90a", &b)], zstd);
            let ks = read(&data).unwrap();
            assert_eq!(ks.len(), 2);
            let k = ks.iter().find(|k| k.arch == "gfx942").unwrap();
            assert_eq!((k.binary.as_str(), k.size, &k.head), ("lib/librocblas.so.4", 64, &a));
            assert_eq!(k.compression, zstd.then_some("zstd"));
        }
    }

    #[test]
    fn damaged_archives_are_errors() {
        let data = write(&[("bin/x", "gfx942", &header(0x04c, 3))], true);
        for cut in [3, 15, 64, 80, data.len() - 3] {
            assert!(read(&data[..cut]).is_err(), "cut {cut}");
        }
        let mut v = data.clone();
        v[4] = 2;
        assert!(matches!(read(&v), Err(BundleError::Unsupported(m)) if m.contains("version 2")));
        let mut toc = data;
        toc[8..16].copy_from_slice(&20u64.to_le_bytes());
        assert!(read(&toc).is_err());
    }
}
