//! The compression floor of `quarry rocm package`, for benches/rocm_package.sh:
//! the time libdeflate takes, at the crate's level, for the bytes of the
//! wheels quarry wrote, with nothing else (no reading, ELF edits, hashing
//! or writing, and not the walk that joins pieces into one stream: that is
//! timed apart, as `join_*`).
//!
//! usage: deflate_floor WHEEL...   (the wheels of one `rocm package` run)
//!
//! Every member is inflated untimed (the zip crate's flate2 reader, CRC
//! checked) into batches of about [`BATCH`] bytes; each batch is cut into
//! [`PIECE`] pieces starting at each member's start, as `zip::write` cuts
//! them, and `deflate::compress` (libdeflate) on those pieces is timed, on
//! `nproc` threads (one compressor each, as `zip::write`'s workers); then,
//! timed apart, `deflate::finish_piece` (finding each piece's final block
//! and closing it). Prints JSON: `{bytes, floor_wall_s, floor_cpu_s,
//! join_wall_s, join_cpu_s, compressed, members, threads}`.
//!
//! Self-check: the pieces are the same bytes at the same level as in the
//! wheels, and a member's compressed size is exactly the sum of its pieces
//! (`zip::write` writes them back to back; empty members are stored, 0
//! bytes), so `compressed` must equal the sum of the members' compressed
//! sizes, or this is not the same work and it exits with an error.

use anyhow::{bail, Context, Result};
use quarry::zip::deflate;
use quarry::zip::write::PIECE;
use quarry::zip::DeflateError;
use std::fs::File;
use std::io::{BufReader, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Raw bytes inflated before a timed compression round (a larger member
/// makes a batch of its own): bounds memory, keeps every thread busy.
const BATCH: usize = 256 << 20;

/// One piece of a batch: a byte range of it and whether it ends its member.
struct Piece {
    start: usize,
    len: usize,
    last: bool,
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Totals over all batches.
#[derive(Default)]
struct Floor {
    bytes: u64,
    compressed: u64,
    wall: Duration,
    cpu: Duration,
    join_wall: Duration,
    join_cpu: Duration,
}

/// Run `work(state, j)` for every j < n on `threads` threads, each with
/// its own `state`; the results, wall time and the threads' CPU time.
fn on_threads<S, T: Send>(
    n: usize,
    threads: usize,
    state: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> Result<T, DeflateError> + Sync,
) -> Result<(Vec<T>, Duration, Duration)> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let per_thread = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (next, work, state) = (&next, &work, &state);
                s.spawn(move || -> Result<(Vec<(usize, T)>, Duration), DeflateError> {
                    let mut st = state();
                    let cpu0 = thread_cpu();
                    let mut done = Vec::new();
                    loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        if j >= n {
                            break;
                        }
                        done.push((j, work(&mut st, j)?));
                    }
                    Ok((done, thread_cpu() - cpu0))
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a compression thread panicked")).collect::<Vec<_>>()
    });
    let wall = started.elapsed();
    let (mut all, mut cpu) = (Vec::new(), Duration::ZERO);
    for r in per_thread {
        let (done, c) = r?;
        all.extend(done);
        cpu += c;
    }
    all.sort_by_key(|(j, _)| *j);
    Ok((all.into_iter().map(|(_, t)| t).collect(), wall, cpu))
}

/// Compress one batch's pieces on `threads` threads (timed), then join them (timed apart).
fn compress_batch(batch: &[u8], pieces: &[Piece], threads: usize, floor: &mut Floor) -> Result<()> {
    // One compressor per thread, as zip::write's workers have.
    let (streams, wall, cpu) = on_threads(pieces.len(), threads, deflate::compressor, |c, j| {
        let p = &pieces[j];
        deflate::compress(c, &batch[p.start..p.start + p.len])
    })?;
    floor.wall += wall;
    floor.cpu += cpu;
    let streams: Vec<std::sync::Mutex<Option<Vec<u8>>>> =
        streams.into_iter().map(|s| std::sync::Mutex::new(Some(s))).collect();
    let (joined, wall, cpu) = on_threads(
        pieces.len(),
        threads,
        || (),
        |_, j| {
            let s = streams[j].lock().unwrap_or_else(|e| e.into_inner()).take().expect("each piece joined once");
            deflate::finish_piece(s, pieces[j].last).map(|out| out.len() as u64)
        },
    )?;
    floor.join_wall += wall;
    floor.join_cpu += cpu;
    floor.compressed += joined.iter().sum::<u64>();
    floor.bytes += batch.len() as u64;
    Ok(())
}

fn main() -> Result<()> {
    let wheels: Vec<String> = std::env::args().skip(1).collect();
    if wheels.is_empty() {
        bail!("usage: deflate_floor WHEEL... (the wheels one `quarry rocm package` run wrote)");
    }
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut floor = Floor::default();
    let (mut expected, mut members) = (0u64, 0u64);
    let mut batch: Vec<u8> = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    for wheel in &wheels {
        let file = File::open(wheel).with_context(|| format!("{wheel}: cannot open"))?;
        let mut zip = zip::ZipArchive::new(BufReader::new(file)).with_context(|| format!("{wheel}: not a zip"))?;
        for i in 0..zip.len() {
            let mut m = zip.by_index(i).with_context(|| format!("{wheel}: member {i}"))?;
            let name = m.name().map(|n| n.to_string()).unwrap_or_else(|_| format!("member {i}"));
            if m.size() == 0 {
                continue; // stored empty: no deflate work in the wheel either
            }
            if m.compression() != zip::CompressionMethod::Deflated {
                bail!("{wheel}: {name} is not deflated; give the wheels quarry wrote");
            }
            expected += m.compressed_size();
            members += 1;
            if !batch.is_empty() && batch.len() as u64 + m.size() > BATCH as u64 {
                compress_batch(&batch, &pieces, threads, &mut floor)?;
                batch.clear();
                pieces.clear();
            }
            // Pieces start at the member's start, as zip::write cuts them.
            let start = batch.len();
            m.read_to_end(&mut batch).with_context(|| format!("{wheel}: inflating {name}"))?;
            let mut at = start;
            while at < batch.len() {
                let len = (batch.len() - at).min(PIECE as usize);
                pieces.push(Piece { start: at, len, last: at + len == batch.len() });
                at += len;
            }
        }
    }
    if !batch.is_empty() {
        compress_batch(&batch, &pieces, threads, &mut floor)?;
    }
    if floor.compressed != expected {
        bail!(
            "not the same work: the pieces compress to {} bytes, the wheels' members hold {expected}",
            floor.compressed
        );
    }
    let json = serde_json::json!({
        "bytes": floor.bytes,
        "floor_wall_s": floor.wall.as_secs_f64(),
        "floor_cpu_s": floor.cpu.as_secs_f64(),
        "join_wall_s": floor.join_wall.as_secs_f64(),
        "join_cpu_s": floor.join_cpu.as_secs_f64(),
        "compressed": floor.compressed,
        "members": members,
        "threads": threads,
    });
    println!("{json}");
    Ok(())
}
