//! Layer compression: gzip (fixed-size blocks, each an independent gzip
//! member, so the bytes never depend on the thread count), zstd and none.

use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// Size of the independent gzip blocks. Part of the output format: changing
/// it changes every gzip digest, so it is also part of the cache key.
pub const GZIP_BLOCK: usize = 1 << 20;
pub const GZIP_LEVEL: i32 = 6;
pub const ZSTD_LEVEL: i32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Gzip,
    Zstd,
    None,
}

impl Compression {
    pub fn media_type(self) -> &'static str {
        match self {
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
        }
    }

    /// Identifies the exact byte format produced, for cache keys.
    pub fn format_id(self) -> String {
        match self {
            Compression::Gzip => format!("gzip-libdeflate-l{GZIP_LEVEL}-b{GZIP_BLOCK}"),
            Compression::Zstd => format!("zstd-l{ZSTD_LEVEL}-mt"),
            Compression::None => "none".to_string(),
        }
    }

    pub fn from_media_type(mt: &str) -> Option<Compression> {
        if mt.ends_with("+gzip") || mt.ends_with(".tar.gzip") {
            Some(Compression::Gzip)
        } else if mt.ends_with("+zstd") {
            Some(Compression::Zstd)
        } else if mt.ends_with(".tar") || mt.ends_with("rootfs.diff.tar") {
            Some(Compression::None)
        } else {
            None
        }
    }
}

/// Thread count used when the caller does not choose: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A compressing writer; `finish` flushes everything and returns the sink.
pub enum Encoder<W: Write> {
    Gzip(GzipBlocks<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
    None(W),
}

pub fn encoder<W: Write>(c: Compression, threads: usize, out: W) -> io::Result<Encoder<W>> {
    Ok(match c {
        Compression::Gzip => Encoder::Gzip(GzipBlocks::new(out, threads)),
        Compression::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL)?;
            // Any worker count >= 1 gives the same bytes; 0 would differ.
            e.multithread(threads.max(1) as u32)?;
            Encoder::Zstd(e)
        }
        Compression::None => Encoder::None(out),
    })
}

impl<W: Write> Encoder<W> {
    pub fn finish(self) -> io::Result<W> {
        match self {
            Encoder::Gzip(g) => g.finish(),
            Encoder::Zstd(z) => z.finish(),
            Encoder::None(mut w) => {
                w.flush()?;
                Ok(w)
            }
        }
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::Gzip(g) => g.write(buf),
            Encoder::Zstd(z) => z.write(buf),
            Encoder::None(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(g) => g.flush(),
            Encoder::Zstd(z) => z.flush(),
            Encoder::None(w) => w.flush(),
        }
    }
}

/// Deterministic gzip: input cut into `GZIP_BLOCK`-sized blocks, each
/// compressed on its own into one gzip member (multi-member streams are valid
/// gzip and every OCI runtime reads them). Blocks are compressed in batches on
/// `threads` workers and written in order.
pub struct GzipBlocks<W: Write> {
    out: W,
    pending: Vec<Vec<u8>>,
    current: Vec<u8>,
    threads: usize,
}

impl<W: Write> GzipBlocks<W> {
    pub fn new(out: W, threads: usize) -> Self {
        GzipBlocks { out, pending: Vec::new(), current: Vec::with_capacity(GZIP_BLOCK), threads: threads.max(1) }
    }

    fn flush_pending(&mut self) -> io::Result<()> {
        use rayon::prelude::*;
        let blocks = std::mem::take(&mut self.pending);
        let compressed: Vec<Vec<u8>> = if self.threads > 1 {
            blocks.par_iter().map(|b| gzip_member(b)).collect()
        } else {
            blocks.iter().map(|b| gzip_member(b)).collect()
        };
        for c in compressed {
            self.out.write_all(&c)?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<W> {
        if !self.current.is_empty() {
            let block = std::mem::take(&mut self.current);
            self.pending.push(block);
        }
        self.flush_pending()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn gzip_member(data: &[u8]) -> Vec<u8> {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(GZIP_LEVEL).expect("valid level"));
    let mut out = vec![0u8; c.gzip_compress_bound(data.len())];
    let n = c.gzip_compress(data, &mut out).expect("output buffer sized by gzip_compress_bound");
    out.truncate(n);
    out
}

impl<W: Write> Write for GzipBlocks<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = GZIP_BLOCK - self.current.len();
        let n = room.min(buf.len());
        self.current.extend_from_slice(&buf[..n]);
        if self.current.len() == GZIP_BLOCK {
            let block = std::mem::replace(&mut self.current, Vec::with_capacity(GZIP_BLOCK));
            self.pending.push(block);
            if self.pending.len() >= self.threads * 2 {
                self.flush_pending()?;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..(3 * GZIP_BLOCK / 7) {
            v.extend_from_slice(format!("line {i} {}\n", i * 31 % 97).as_bytes());
        }
        v
    }

    fn compress(c: Compression, threads: usize, data: &[u8]) -> Vec<u8> {
        let mut e = encoder(c, threads, Vec::new()).unwrap();
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_round_trips_and_ignores_thread_count() {
        let data = sample();
        let one = compress(Compression::Gzip, 1, &data);
        let two = compress(Compression::Gzip, 2, &data);
        let four = compress(Compression::Gzip, 4, &data);
        assert_eq!(one, two);
        assert_eq!(one, four);
        let mut back = Vec::new();
        flate2::read::MultiGzDecoder::new(&one[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn zstd_round_trips_and_ignores_thread_count() {
        let data = sample();
        let one = compress(Compression::Zstd, 1, &data);
        let two = compress(Compression::Zstd, 2, &data);
        assert_eq!(one, two);
        assert_eq!(zstd::decode_all(&one[..]).unwrap(), data);
    }
}
