//! Layer compression: gzip (fixed-size blocks, each an independent gzip
//! member, so the bytes never depend on the thread count), zstd and none.
//!
//! Over 400 lines: 170 of them are tests of the parallel gzip stream against
//! flate2's decoders (the code is under 400).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{mpsc, Arc, Mutex};

/// Size of the independent gzip blocks. Part of the output format: changing
/// it changes every gzip digest, so it is also part of the cache key.
pub const GZIP_BLOCK: usize = 1 << 20;
/// Default levels. gzip 4 (libdeflate) is as small as `gzip -6` and much
/// faster. zstd 2, not zstd's own default 3: on quarry's sorted tars with
/// libzstd 1.5.7 (whose block splitter the zstd 1.5.4 CLI lacks) level 2
/// is as small as `zstd -3` of a plain `tar -c` and compresses about twice
/// as fast (benches/pack.sh reports both levels and the sizes).
pub const GZIP_LEVEL: i32 = 4;
pub const ZSTD_LEVEL: i32 = 2;
/// The libdeflate bundled by `libdeflate-sys` (1.26.x in Cargo.lock); its
/// `LIBDEFLATE_VERSION_STRING` is not exported, so bump this with the crate.
const LIBDEFLATE_VERSION: &str = "1.26";
/// Bytes of input per zstd job (part of the output format, like
/// `GZIP_BLOCK`). Memory grows with it: about 150 MB peak RSS at 8 MiB.
pub const ZSTD_JOB: usize = 8 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
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

/// A `--compression-level` the compression does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LevelError {
    #[error("--compression-level needs --compression gzip or zstd")]
    NoCompression,
    #[error("--compression-level {level} is out of range for {compression:?}: give {min} to {max}")]
    OutOfRange { compression: Compression, level: i32, min: i32, max: i32 },
}

/// A compression and its level: what a layer's bytes depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LayerCodec {
    pub compression: Compression,
    /// 0 for `none`.
    pub level: i32,
}

impl Default for LayerCodec {
    fn default() -> Self {
        LayerCodec { compression: Compression::Gzip, level: GZIP_LEVEL }
    }
}

impl LayerCodec {
    /// `level` None takes the compression's default; a level out of the
    /// compressor's range is an error that gives the range.
    pub fn new(compression: Compression, level: Option<i32>) -> Result<LayerCodec, LevelError> {
        let (default, range) = match compression {
            Compression::Gzip => (GZIP_LEVEL, 1..=12),
            Compression::Zstd => (ZSTD_LEVEL, 1..=19),
            Compression::None => (0, 0..=0),
        };
        let level = level.unwrap_or(default);
        if !range.contains(&level) {
            return Err(match compression {
                Compression::None => LevelError::NoCompression,
                c => LevelError::OutOfRange { compression: c, level, min: *range.start(), max: *range.end() },
            });
        }
        Ok(LayerCodec { compression, level })
    }

    pub fn media_type(self) -> &'static str {
        self.compression.media_type()
    }

    /// The codec a [`format_id`](Self::format_id) names (what a provenance
    /// records), whatever library version wrote it: None for an id no
    /// codec of this quarry writes.
    pub fn from_format_id(id: &str) -> Option<LayerCodec> {
        if id == "none" {
            return Some(LayerCodec { compression: Compression::None, level: 0 });
        }
        let compression = if id.starts_with("gzip-") {
            Compression::Gzip
        } else if id.starts_with("zstd") {
            Compression::Zstd
        } else {
            return None;
        };
        let level = id.split('-').find_map(|p| p.strip_prefix('l').and_then(|n| n.parse::<i32>().ok()))?;
        LayerCodec::new(compression, Some(level)).ok()
    }

    /// Identifies the exact byte format produced, for cache keys: the
    /// compressor library and its version, the level and the block size all
    /// change the bytes.
    pub fn format_id(self) -> String {
        let level = self.level;
        match self.compression {
            Compression::Gzip => format!("gzip-libdeflate{LIBDEFLATE_VERSION}-l{level}-b{GZIP_BLOCK}"),
            Compression::Zstd => format!("zstd{}-l{level}-mt-j{ZSTD_JOB}", zstd::zstd_safe::version_string()),
            Compression::None => "none".to_string(),
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

pub fn encoder<W: Write>(codec: LayerCodec, threads: usize, out: W) -> io::Result<Encoder<W>> {
    Ok(match codec.compression {
        Compression::Gzip => Encoder::Gzip(GzipBlocks::new(out, threads, codec.level)),
        Compression::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(out, codec.level)?;
            // Any worker count >= 1 gives the same bytes; 0 would differ.
            // (A spare worker beyond the cores was tried: more CPU, no
            // faster.)
            e.multithread(threads.max(1) as u32)?;
            // Fixed, so the bytes do not follow libzstd's default for the
            // level. libzstd hands a job only to an idle worker, and a
            // worker that finishes waits for the feeding thread: larger
            // jobs mean fewer such waits (and fewer window restarts).
            e.set_parameter(zstd::zstd_safe::CParameter::JobSize(ZSTD_JOB as u32))?;
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

/// Deterministic gzip: the input is cut into `GZIP_BLOCK`-sized blocks and
/// each is compressed on its own into one gzip member (multi-member streams
/// are valid gzip and every OCI runtime reads them), so the bytes never
/// depend on the thread count.
///
/// A pipeline: the writing thread (tar production and hashing upstream) fills
/// a block and hands it to `threads` worker threads, then goes on producing
/// while they compress. Finished members are written to `out` in block order
/// by the writing thread. At most `8 * threads` blocks are in flight (deep
/// enough that workers keep busy while a loaded machine delays the writing
/// thread, still a few MiB per thread): when
/// that many wait, the writer blocks on the oldest one, so memory stays flat
/// whatever the input size.
pub struct GzipBlocks<W: Write> {
    out: W,
    current: Vec<u8>,
    /// Results of the blocks in flight, oldest first.
    in_flight: VecDeque<mpsc::Receiver<Vec<u8>>>,
    max_in_flight: usize,
    wrote_any: bool,
    pool: GzipPool,
}

struct GzipJob {
    block: Vec<u8>,
    done: mpsc::SyncSender<Vec<u8>>,
}

/// The compressing threads; dropping the pool stops and joins them.
struct GzipPool {
    jobs: Option<mpsc::SyncSender<GzipJob>>,
    /// Input buffers the workers are done with, reused for the next blocks.
    free: mpsc::Receiver<Vec<u8>>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl GzipPool {
    fn new(threads: usize, max_in_flight: usize, level: i32) -> GzipPool {
        let (jobs, job_rx) = mpsc::sync_channel::<GzipJob>(max_in_flight);
        let (free_tx, free) = mpsc::sync_channel::<Vec<u8>>(max_in_flight + 1);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let workers = (0..threads)
            .map(|_| {
                let job_rx = Arc::clone(&job_rx);
                let free_tx = free_tx.clone();
                std::thread::spawn(move || gzip_worker(&job_rx, &free_tx, level))
            })
            .collect();
        GzipPool { jobs: Some(jobs), free, workers }
    }
}

impl Drop for GzipPool {
    fn drop(&mut self) {
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn gzip_worker(jobs: &Mutex<mpsc::Receiver<GzipJob>>, free: &mpsc::SyncSender<Vec<u8>>, level: i32) {
    // LayerCodec::new checked the range; the default is the fallback.
    let level = libdeflater::CompressionLvl::new(level).unwrap_or_default();
    let mut c = libdeflater::Compressor::new(level);
    loop {
        // The lock is held only while waiting for the next job.
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(GzipJob { mut block, done }) = job else {
            return;
        };
        let mut member = vec![0u8; c.gzip_compress_bound(block.len())];
        let n = c.gzip_compress(&block, &mut member).expect("output buffer sized by gzip_compress_bound");
        member.truncate(n);
        let _ = done.send(member);
        block.clear();
        let _ = free.try_send(block);
    }
}

fn worker_died() -> io::Error {
    io::Error::other("a gzip compression thread stopped unexpectedly")
}

impl<W: Write> GzipBlocks<W> {
    pub fn new(out: W, threads: usize, level: i32) -> Self {
        let threads = threads.max(1);
        let max_in_flight = 8 * threads;
        GzipBlocks {
            out,
            current: Vec::with_capacity(GZIP_BLOCK),
            in_flight: VecDeque::with_capacity(max_in_flight),
            max_in_flight,
            wrote_any: false,
            pool: GzipPool::new(threads, max_in_flight, level),
        }
    }

    /// Write out the oldest block's member, waiting for it.
    fn write_oldest(&mut self) -> io::Result<()> {
        if let Some(rx) = self.in_flight.pop_front() {
            let member = rx.recv().map_err(|_| worker_died())?;
            self.out.write_all(&member)?;
        }
        Ok(())
    }

    /// Write out the finished members that are next in order, without waiting.
    fn write_ready(&mut self) -> io::Result<()> {
        while let Some(rx) = self.in_flight.front() {
            match rx.try_recv() {
                Ok(member) => {
                    self.in_flight.pop_front();
                    self.out.write_all(&member)?;
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return Err(worker_died()),
            }
        }
        Ok(())
    }

    fn submit_current(&mut self) -> io::Result<()> {
        let next = self.pool.free.try_recv().unwrap_or_else(|_| Vec::with_capacity(GZIP_BLOCK));
        let block = std::mem::replace(&mut self.current, next);
        while self.in_flight.len() >= self.max_in_flight {
            self.write_oldest()?;
        }
        let (done, rx) = mpsc::sync_channel(1);
        let jobs = self.pool.jobs.as_ref().expect("open until the pool is dropped");
        jobs.send(GzipJob { block, done }).map_err(|_| worker_died())?;
        self.in_flight.push_back(rx);
        self.wrote_any = true;
        self.write_ready()
    }

    pub fn finish(mut self) -> io::Result<W> {
        // An empty input still makes one (empty) member: zero bytes are not gzip.
        if !self.current.is_empty() || !self.wrote_any {
            self.submit_current()?;
        }
        while !self.in_flight.is_empty() {
            self.write_oldest()?;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> Write for GzipBlocks<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = GZIP_BLOCK - self.current.len();
        let n = room.min(buf.len());
        self.current.extend_from_slice(&buf[..n]);
        if self.current.len() == GZIP_BLOCK {
            self.submit_current()?;
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

    #[test]
    fn a_format_id_names_its_codec_again() {
        for (c, l) in [(Compression::Gzip, Some(9)), (Compression::Zstd, None), (Compression::None, None)] {
            let codec = LayerCodec::new(c, l).unwrap();
            assert_eq!(LayerCodec::from_format_id(&codec.format_id()), Some(codec));
        }
        assert_eq!(LayerCodec::from_format_id("brotli-l3"), None);
        assert_eq!(LayerCodec::from_format_id("gzip-libdeflate1.0-l99-b1"), None);
    }

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..(3 * GZIP_BLOCK / 7) {
            v.extend_from_slice(format!("line {i} {}\n", i * 31 % 97).as_bytes());
        }
        v
    }

    fn compress(c: Compression, threads: usize, data: &[u8]) -> Vec<u8> {
        let mut e = encoder(LayerCodec::new(c, None).unwrap(), threads, Vec::new()).unwrap();
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_level_changes_bytes_and_format_id_and_is_range_checked() {
        let data = sample();
        for c in [Compression::Gzip, Compression::Zstd] {
            let default = LayerCodec::new(c, None).unwrap();
            let one = LayerCodec::new(c, Some(1)).unwrap();
            assert_ne!(default.format_id(), one.format_id());
            let compress_with = |codec: LayerCodec| {
                let mut e = encoder(codec, 2, Vec::new()).unwrap();
                e.write_all(&data).unwrap();
                e.finish().unwrap()
            };
            assert_ne!(compress_with(default), compress_with(one), "{c:?}");
            let err = LayerCodec::new(c, Some(40)).unwrap_err().to_string();
            assert!(err.contains("out of range") && err.contains("give 1 to"), "{err}");
        }
        assert!(LayerCodec::new(Compression::None, Some(3)).is_err());
        assert_eq!(LayerCodec::new(Compression::None, None).unwrap().format_id(), "none");
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

    /// Text, incompressible bytes and zeros: every block kind a layer has.
    fn mixed(len: usize) -> Vec<u8> {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            match (v.len() / 700_000) % 3 {
                0 => v.extend_from_slice(format!("entry {} of the layer\n", v.len() % 9973).as_bytes()),
                1 => {
                    for _ in 0..4096 {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        v.push(seed as u8);
                    }
                }
                _ => v.extend_from_slice(&[0u8; 4096]),
            }
        }
        v.truncate(len);
        v
    }

    /// Compress with writes of irregular sizes (how tar output arrives).
    fn compress_ragged(c: Compression, threads: usize, data: &[u8]) -> Vec<u8> {
        let mut e = encoder(LayerCodec::new(c, None).unwrap(), threads, Vec::new()).unwrap();
        let sizes = [1usize, 512, 7919, 65536, GZIP_BLOCK + 3, 100_003];
        let mut rest = data;
        for i in 0.. {
            if rest.is_empty() {
                break;
            }
            let n = sizes[i % sizes.len()].min(rest.len());
            e.write_all(&rest[..n]).unwrap();
            rest = &rest[n..];
        }
        e.finish().unwrap()
    }

    #[test]
    fn large_multi_block_gzip_is_fixed_blocks_whatever_the_threads() {
        let data = mixed(20 * GZIP_BLOCK + 12345);
        let one = compress_ragged(Compression::Gzip, 1, &data);
        for threads in [2, 3, 8] {
            assert!(compress_ragged(Compression::Gzip, threads, &data) == one, "{threads} threads differ from 1");
        }
        // One member per fixed-size block, in order.
        let mut rest = &one[..];
        let mut back = Vec::new();
        let mut member_sizes = Vec::new();
        while !rest.is_empty() {
            let mut d = flate2::bufread::GzDecoder::new(rest);
            let mut part = Vec::new();
            d.read_to_end(&mut part).unwrap();
            member_sizes.push(part.len());
            back.extend_from_slice(&part);
            rest = d.into_inner();
        }
        assert_eq!(member_sizes.len(), data.len().div_ceil(GZIP_BLOCK));
        assert!(member_sizes[..member_sizes.len() - 1].iter().all(|&n| n == GZIP_BLOCK));
        assert!(back == data, "members concatenate to the input");
        let mut multi = Vec::new();
        flate2::read::MultiGzDecoder::new(&one[..]).read_to_end(&mut multi).unwrap();
        assert!(multi == data);
    }

    #[test]
    fn empty_input_is_still_gzip() {
        let out = compress(Compression::Gzip, 2, b"");
        let mut back = Vec::new();
        flate2::read::MultiGzDecoder::new(&out[..]).read_to_end(&mut back).unwrap();
        assert!(back.is_empty());
    }

    /// A sink that records how much it has received.
    struct Counting(std::rc::Rc<std::cell::Cell<usize>>);
    impl Write for Counting {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.set(self.0.get() + buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn gzip_streams_with_a_bounded_number_of_blocks_in_flight() {
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut g = GzipBlocks::new(Counting(seen.clone()), 2, GZIP_LEVEL);
        let block = mixed(GZIP_BLOCK);
        for _ in 0..30 {
            g.write_all(&block).unwrap();
            assert!(g.in_flight.len() <= g.max_in_flight);
        }
        assert!(seen.get() > 0, "members are written while input still arrives");
        g.finish().unwrap();
    }

    #[test]
    fn large_zstd_round_trips_and_ignores_thread_count() {
        let data = mixed(24 << 20);
        let one = compress_ragged(Compression::Zstd, 1, &data);
        for threads in [2, 4] {
            assert!(compress_ragged(Compression::Zstd, threads, &data) == one, "{threads} workers differ from 1");
        }
        assert!(zstd::decode_all(&one[..]).unwrap() == data);
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
