//! Layer compression: gzip (fixed-size blocks, each an independent gzip
//! member, so the bytes never depend on the thread count), zstd and none.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{mpsc, Arc, Mutex};

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

/// Deterministic gzip: the input is cut into `GZIP_BLOCK`-sized blocks and
/// each is compressed on its own into one gzip member (multi-member streams
/// are valid gzip and every OCI runtime reads them), so the bytes never
/// depend on the thread count.
///
/// A pipeline: the writing thread (tar production and hashing upstream) fills
/// a block and hands it to `threads` worker threads, then goes on producing
/// while they compress. Finished members are written to `out` in block order
/// by the writing thread. At most `2 * threads + 2` blocks are in flight: when
/// that many wait, the writer blocks on the oldest one, so memory stays flat
/// whatever the input size.
pub struct GzipBlocks<W: Write> {
    out: W,
    current: Vec<u8>,
    /// Results of the blocks in flight, oldest first.
    in_flight: VecDeque<mpsc::Receiver<Vec<u8>>>,
    max_in_flight: usize,
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
    fn new(threads: usize, max_in_flight: usize) -> GzipPool {
        let (jobs, job_rx) = mpsc::sync_channel::<GzipJob>(threads);
        let (free_tx, free) = mpsc::sync_channel::<Vec<u8>>(max_in_flight + 1);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let workers = (0..threads)
            .map(|_| {
                let job_rx = Arc::clone(&job_rx);
                let free_tx = free_tx.clone();
                std::thread::spawn(move || gzip_worker(&job_rx, &free_tx))
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

fn gzip_worker(jobs: &Mutex<mpsc::Receiver<GzipJob>>, free: &mpsc::SyncSender<Vec<u8>>) {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(GZIP_LEVEL).expect("valid level"));
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
    pub fn new(out: W, threads: usize) -> Self {
        let threads = threads.max(1);
        let max_in_flight = 2 * threads + 2;
        GzipBlocks {
            out,
            current: Vec::with_capacity(GZIP_BLOCK),
            in_flight: VecDeque::with_capacity(max_in_flight),
            max_in_flight,
            pool: GzipPool::new(threads, max_in_flight),
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
        self.write_ready()
    }

    pub fn finish(mut self) -> io::Result<W> {
        if !self.current.is_empty() {
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
