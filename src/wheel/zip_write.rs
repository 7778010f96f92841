//! The crate's one zip writer: deterministic, parallel, streaming.
//!
//! Entries are written in the order given. Every entry is cut into pieces
//! of [`PIECE`] bytes; worker threads read and deflate pieces (see
//! [`super::deflate`]) while this thread writes them out in order, hashing
//! each entry (SHA-256 for RECORD, CRC-32 for the zip) as it passes. A
//! bounded window of pieces is in flight, so memory stays flat however
//! large an entry is, and the bytes never depend on the thread count.
//!
//! The container is written by hand: the zip crate compresses an entry
//! itself (or takes one finished in memory), and cannot take a deflate
//! stream made in pieces elsewhere. What is written: local headers whose
//! sizes are patched once known, one fixed time, permissions 0644/0755,
//! UTF-8 names, ZIP64 fields where an entry, an offset or the entry count
//! needs them. Empty entries are stored, not deflated.

use super::deflate;
use super::zip_headers::{central_header, end_of_central_directory, local_header, Central};
use super::zip_reuse::{self, Original, Window};
use crate::splice::Splice;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use zip::DateTime;

/// Bytes per piece compressed on its own.
pub const PIECE: u64 = 2 << 20;

/// What an entry holds.
#[derive(Debug, Clone)]
pub enum EntrySource {
    Path(PathBuf),
    Bytes(Vec<u8>),
    /// An edited file, read from its parts (see [`crate::splice`]).
    Splice(Arc<Splice>),
    /// An edited member of a zip being rewritten: the unchanged stretch
    /// of its original stream is copied (see [`super::zip_reuse`]).
    Reused(Arc<Splice>, Arc<Original>),
}

/// One file of the archive.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    pub name: String,
    pub source: EntrySource,
    pub executable: bool,
}

impl ZipEntry {
    pub fn bytes(name: impl Into<String>, data: impl Into<Vec<u8>>) -> ZipEntry {
        ZipEntry { name: name.into(), source: EntrySource::Bytes(data.into()), executable: false }
    }

    pub fn file(name: impl Into<String>, path: impl Into<PathBuf>, executable: bool) -> ZipEntry {
        ZipEntry { name: name.into(), source: EntrySource::Path(path.into()), executable }
    }

    pub fn splice(name: impl Into<String>, splice: Arc<Splice>, executable: bool) -> ZipEntry {
        ZipEntry { name: name.into(), source: EntrySource::Splice(splice), executable }
    }
}

/// What was written for an entry (RECORD's fields).
#[derive(Debug, Clone)]
pub struct Written {
    pub name: String,
    pub sha256: [u8; 32],
    pub size: u64,
    /// Compressed bytes copied from the entry's original stream.
    pub copied: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ZipWriteError {
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("`{path}` changed size while it was being archived ({expected} bytes, then {found})")]
    Changed { path: PathBuf, expected: u64, found: u64 },
    #[error("entry `{name}`: {why}")]
    Entry { name: String, why: String },
}

/// A zip being written to `out` (a file: local headers are patched in place).
pub struct ZipOut<W: Write + Seek> {
    out: W,
    /// Names errors after the output.
    path: PathBuf,
    time: DateTime,
    threads: usize,
    position: u64,
    central: Vec<Central>,
}

/// A piece of an entry: `len` bytes at `offset` read (hashed in order),
/// and what its compressed bytes are.
struct Piece {
    entry: usize,
    offset: u64,
    len: usize,
    job: Job,
    /// The entry's first and last pieces.
    first: bool,
    last: bool,
}

enum Job {
    /// The bytes deflated; `final_block`: the stream's end.
    Deflate { final_block: bool },
    /// The bytes only hashed: a copy stands for them.
    Hash,
    /// The bytes as the literals of a bridge to a copy (see [`zip_reuse::Bridge`]).
    Bridge(zip_reuse::Bridge),
    /// Bits of the original stream (see [`zip_reuse::copy_bits`]).
    Copy { original: Arc<Original>, from: u64, to: u64, close: bool },
}

/// What an entry copies from its original stream.
struct Reuse {
    original: Arc<Original>,
    window: Window,
    bridge: zip_reuse::Bridge,
}

/// Cut entry `entry` (of `size` bytes) into pieces; `window`: original
/// blocks copied in place of its unchanged stretch.
fn plan_pieces(pieces: &mut Vec<Piece>, entry: usize, size: u64, reuse: Option<Reuse>) {
    let at = pieces.len();
    let deflate = |pieces: &mut Vec<Piece>, from: u64, to: u64, final_block: bool| {
        let n = (to - from).div_ceil(PIECE).max(1);
        for k in 0..n {
            let offset = from + k * PIECE;
            let len = (to - offset).min(PIECE) as usize;
            let job = Job::Deflate { final_block: final_block && k + 1 == n };
            pieces.push(Piece { entry, offset, len, job, first: false, last: false });
        }
    };
    match reuse {
        None => deflate(pieces, 0, size, true),
        Some(Reuse { original, window: w, bridge }) => {
            let literals_at = w.start.out - bridge.literals;
            deflate(pieces, 0, literals_at, false);
            let (offset, len, job) = (literals_at, bridge.literals as usize, Job::Bridge(bridge));
            pieces.push(Piece { entry, offset, len, job, first: false, last: false });
            let mut offset = w.start.out;
            while offset < w.end.out {
                let len = (w.end.out - offset).min(PIECE) as usize;
                pieces.push(Piece { entry, offset, len, job: Job::Hash, first: false, last: false });
                offset += len as u64;
            }
            let mut from = bridge.copy_from;
            while from < w.end.bit {
                let to = (from + 8 * zip_reuse::COPY_PIECE).min(w.end.bit);
                let job = Job::Copy { original: original.clone(), from, to, close: to == w.end.bit };
                pieces.push(Piece { entry, offset: w.end.out, len: 0, job, first: false, last: false });
                from = to;
            }
            deflate(pieces, w.end.out, size, true);
        }
    }
    pieces[at].first = true;
    if let Some(p) = pieces.last_mut() {
        p.last = true;
    }
}

type Done = (usize, Result<(Vec<u8>, Vec<u8>), ZipWriteError>);

impl<W: Write + Seek> ZipOut<W> {
    /// Start a zip on `out` (at its current position 0); `path` names it in errors.
    pub fn new(out: W, path: &Path, time: DateTime) -> ZipOut<W> {
        let threads = rayon::current_num_threads().max(1);
        ZipOut { out, path: path.to_path_buf(), time, threads, position: 0, central: Vec::new() }
    }

    /// Compress on `n` threads (the bytes are the same for any `n`).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    fn io(&self, source: io::Error) -> ZipWriteError {
        ZipWriteError::Io { path: self.path.clone(), source }
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<(), ZipWriteError> {
        self.out.write_all(bytes).map_err(|e| self.io(e))?;
        self.position += bytes.len() as u64;
        Ok(())
    }

    /// Write `entries` in order; returns each one's SHA-256 and size.
    pub fn write_entries(&mut self, entries: &[ZipEntry]) -> Result<Vec<Written>, ZipWriteError> {
        let mut sizes = Vec::with_capacity(entries.len());
        for e in entries {
            sizes.push(match &e.source {
                EntrySource::Bytes(b) => b.len() as u64,
                EntrySource::Splice(s) | EntrySource::Reused(s, _) => s.len(),
                EntrySource::Path(p) => {
                    std::fs::metadata(p).map_err(|source| ZipWriteError::Io { path: p.clone(), source })?.len()
                }
            });
        }
        let mut pieces = Vec::new();
        for (i, (e, &size)) in entries.iter().zip(&sizes).enumerate() {
            let reuse = match &e.source {
                EntrySource::Reused(splice, original) => zip_reuse::window(splice, original).and_then(|window| {
                    // Unreadable here, it fails when read for the pieces.
                    let bridge = zip_reuse::bridge(splice, original, &window).ok()??;
                    Some(Reuse { original: original.clone(), window, bridge })
                }),
                _ => None,
            };
            plan_pieces(&mut pieces, i, size, reuse);
        }
        let window = 4 * self.threads;
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let written = (Mutex::new(0usize), Condvar::new());
        let (tx, rx) = mpsc::channel::<Done>();
        let mut results = Vec::with_capacity(entries.len());
        let (sizes_ref, pieces_ref): (&[u64], &[Piece]) = (&sizes, &pieces);
        std::thread::scope(|s| -> Result<(), ZipWriteError> {
            for _ in 0..self.threads {
                let tx = tx.clone();
                let (next, stop, written, pieces, sizes) = (&next, &stop, &written, pieces_ref, sizes_ref);
                s.spawn(move || {
                    let mut compressor = deflate::PieceCompressor::new();
                    loop {
                        let j = next.fetch_add(1, Ordering::SeqCst);
                        if j >= pieces.len() || stop.load(Ordering::SeqCst) {
                            return;
                        }
                        {
                            let mut w = written.0.lock().unwrap_or_else(|e| e.into_inner());
                            while j >= *w + window && !stop.load(Ordering::SeqCst) {
                                w = written.1.wait(w).unwrap_or_else(|e| e.into_inner());
                            }
                        }
                        let p = &pieces[j];
                        let r = read_piece(&entries[p.entry], p).and_then(|raw| {
                            let e = &entries[p.entry];
                            match &p.job {
                                _ if sizes[p.entry] == 0 => Ok((raw, Vec::new())),
                                Job::Deflate { final_block } => compressor
                                    .compress_piece(&raw, *final_block)
                                    .map(|c| (raw, c))
                                    .map_err(|why| ZipWriteError::Entry { name: e.name.clone(), why }),
                                Job::Hash => Ok((raw, Vec::new())),
                                Job::Bridge(bridge) => {
                                    let bytes = zip_reuse::bridge_bytes(bridge, &raw);
                                    Ok((raw, bytes))
                                }
                                Job::Copy { original, from, to, close } => {
                                    zip_reuse::copy_bits(&original.index, *from, *to, *close).map(|c| (raw, c)).map_err(
                                        |source| ZipWriteError::Io { path: original.index.zip.clone(), source },
                                    )
                                }
                            }
                        });
                        if tx.send((j, r)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(tx);
            let r = self.write_in_order(entries, &sizes, &pieces, &rx, &written, &mut results);
            if r.is_err() {
                stop.store(true, Ordering::SeqCst);
                written.1.notify_all();
            }
            r
        })?;
        Ok(results)
    }

    fn write_in_order(
        &mut self,
        entries: &[ZipEntry],
        sizes: &[u64],
        pieces: &[Piece],
        rx: &mpsc::Receiver<Done>,
        written: &(Mutex<usize>, Condvar),
        results: &mut Vec<Written>,
    ) -> Result<(), ZipWriteError> {
        let mut pending: BTreeMap<usize, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
        let mut sha = Sha256::new();
        let mut crc = crc32fast::Hasher::new();
        let mut header_at = 0u64;
        let mut compressed = 0u64;
        let mut copied = 0u64;
        for (j, p) in pieces.iter().enumerate() {
            let (raw, deflated) = loop {
                if let Some(done) = pending.remove(&j) {
                    break done;
                }
                let (k, r) = rx.recv().map_err(|_| ZipWriteError::Entry {
                    name: entries[p.entry].name.clone(),
                    why: "a compression thread stopped".into(),
                })?;
                pending.insert(k, r?);
            };
            let e = &entries[p.entry];
            let stored = sizes[p.entry] == 0;
            if p.first {
                header_at = self.position;
                compressed = 0;
                copied = 0;
                sha = Sha256::new();
                crc = crc32fast::Hasher::new();
                let h = local_header(&e.name, self.time, 0, 0, sizes[p.entry], stored);
                self.emit(&h)?;
            }
            sha.update(&raw);
            crc.update(&raw);
            self.emit(&deflated)?;
            compressed += deflated.len() as u64;
            if matches!(p.job, Job::Copy { .. }) {
                copied += deflated.len() as u64;
            }
            if p.last {
                let c = Central {
                    name: e.name.clone(),
                    crc: std::mem::take(&mut crc).finalize(),
                    compressed,
                    size: sizes[p.entry],
                    offset: header_at,
                    executable: e.executable,
                    stored,
                };
                let h = local_header(&c.name, self.time, c.crc, c.compressed, c.size, stored);
                self.out.seek(SeekFrom::Start(header_at)).map_err(|e| self.io(e))?;
                self.out.write_all(&h).map_err(|e| self.io(e))?;
                self.out.seek(SeekFrom::Start(self.position)).map_err(|e| self.io(e))?;
                results.push(Written {
                    name: c.name.clone(),
                    sha256: std::mem::take(&mut sha).finalize().into(),
                    size: c.size,
                    copied,
                });
                self.central.push(c);
            }
            *written.0.lock().unwrap_or_else(|e| e.into_inner()) = j + 1;
            written.1.notify_all();
        }
        Ok(())
    }

    /// Write the central directory; returns the output.
    pub fn finish(mut self) -> Result<W, ZipWriteError> {
        let cd_start = self.position;
        let central = std::mem::take(&mut self.central);
        for c in &central {
            let h = central_header(c, self.time);
            self.emit(&h)?;
        }
        let cd_size = self.position - cd_start;
        let count = central.len() as u64;
        let end = end_of_central_directory(count, cd_start, cd_size, self.position);
        self.emit(&end)?;
        self.out.flush().map_err(|e| self.io(e))?;
        Ok(self.out)
    }
}

fn read_piece(e: &ZipEntry, p: &Piece) -> Result<Vec<u8>, ZipWriteError> {
    if p.len == 0 {
        return Ok(Vec::new());
    }
    match &e.source {
        EntrySource::Bytes(b) => Ok(b[p.offset as usize..p.offset as usize + p.len].to_vec()),
        EntrySource::Splice(s) | EntrySource::Reused(s, _) => {
            let mut buf = vec![0u8; p.len];
            let path = || s.source().map(|src| src.path().to_path_buf()).unwrap_or_else(|| e.name.clone().into());
            s.read_at(p.offset, &mut buf).map_err(|source| ZipWriteError::Io { path: path(), source })?;
            Ok(buf)
        }
        EntrySource::Path(path) => {
            let io = |source| ZipWriteError::Io { path: path.clone(), source };
            let f = File::open(path).map_err(io)?;
            let mut buf = vec![0u8; p.len];
            let mut got = 0;
            while got < p.len {
                let n = f.read_at(&mut buf[got..], p.offset + got as u64).map_err(io)?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            if got < p.len {
                let found = f.metadata().map(|m| m.len()).unwrap_or(p.offset + got as u64);
                return Err(ZipWriteError::Changed { path: path.clone(), expected: p.offset + p.len as u64, found });
            }
            Ok(buf)
        }
    }
}

/// Write `entries` as a zip at `out` in one go (temporary name, then renamed).
pub fn write_file(out: &Path, entries: &[ZipEntry], time: DateTime) -> Result<Vec<Written>, ZipWriteError> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |source| ZipWriteError::Io { path: parent.to_path_buf(), source };
    let tmp = tempfile::Builder::new().prefix(".quarry-zip-").suffix(".tmp").tempfile_in(parent).map_err(io)?;
    let file = tmp.reopen().map_err(io)?;
    let mut z = ZipOut::new(io::BufWriter::with_capacity(1 << 20, file), out, time);
    let written = z.write_entries(entries)?;
    z.finish()?;
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(io)?;
    tmp.persist(out).map_err(|e| ZipWriteError::Io { path: out.to_path_buf(), source: e.error })?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_splice_entry_is_stored_as_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib.so");
        let original: Vec<u8> = (0..(PIECE as usize + 4000)).map(|i| (i % 253) as u8).collect();
        std::fs::write(&src, &original).unwrap();
        let mut splice = Splice::file(&src).unwrap();
        splice.overwrite(PIECE - 2, b"edit".to_vec()); // across a piece boundary
        splice.push(crate::splice::Part::Zeros(10));
        let mut expected = original;
        expected[PIECE as usize - 2..PIECE as usize + 2].copy_from_slice(b"edit");
        expected.extend([0; 10]);
        let out = dir.path().join("out.zip");
        let entries = [ZipEntry::splice("pkg/lib.so", Arc::new(splice), true), ZipEntry::bytes("pkg/a.txt", "a")];
        let written = write_file(&out, &entries, DateTime::default()).unwrap();
        assert_eq!(written[0].size, expected.len() as u64);
        let mut zip = zip::ZipArchive::new(File::open(&out).unwrap()).unwrap();
        let mut got = Vec::new();
        zip.by_name("pkg/lib.so").unwrap().read_to_end(&mut got).unwrap();
        assert!(got == expected, "the stored bytes differ from the splice");
    }
}
