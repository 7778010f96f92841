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
/// Entries at or above this size get ZIP64 headers (with room for deflate
/// to grow an incompressible entry past 4 GiB).
const ZIP64_ENTRY: u64 = 0xF000_0000;

/// What an entry holds.
#[derive(Debug, Clone)]
pub enum EntrySource {
    Path(PathBuf),
    Bytes(Vec<u8>),
    /// An edited file, read from its parts (see [`crate::splice`]).
    Splice(Arc<Splice>),
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

struct Central {
    name: String,
    crc: u32,
    compressed: u64,
    size: u64,
    offset: u64,
    executable: bool,
    stored: bool,
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

struct Piece {
    entry: usize,
    offset: u64,
    len: usize,
    last: bool,
}

type Done = (usize, Result<(Vec<u8>, Vec<u8>), ZipWriteError>);

fn local_header(name: &str, time: DateTime, crc: u32, compressed: u64, size: u64, stored: bool) -> Vec<u8> {
    let zip64 = size >= ZIP64_ENTRY;
    let mut h = Vec::with_capacity(30 + name.len() + 20);
    h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    h.extend_from_slice(&(if zip64 { 45u16 } else { 20 }).to_le_bytes());
    h.extend_from_slice(&(1u16 << 11).to_le_bytes()); // UTF-8 names
    h.extend_from_slice(&(if stored { 0u16 } else { 8 }).to_le_bytes());
    h.extend_from_slice(&time.timepart().to_le_bytes());
    h.extend_from_slice(&time.datepart().to_le_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    if zip64 {
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        h.extend_from_slice(&u32::MAX.to_le_bytes());
    } else {
        h.extend_from_slice(&(compressed as u32).to_le_bytes());
        h.extend_from_slice(&(size as u32).to_le_bytes());
    }
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(&(if zip64 { 20u16 } else { 0 }).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    if zip64 {
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&16u16.to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h.extend_from_slice(&compressed.to_le_bytes());
    }
    h
}

fn central_header(c: &Central, time: DateTime) -> Vec<u8> {
    let big_size = c.size >= ZIP64_ENTRY;
    let big_offset = c.offset >= u64::from(u32::MAX);
    let mut extra = Vec::new();
    if big_size {
        extra.extend_from_slice(&c.size.to_le_bytes());
        extra.extend_from_slice(&c.compressed.to_le_bytes());
    }
    if big_offset {
        extra.extend_from_slice(&c.offset.to_le_bytes());
    }
    let zip64 = !extra.is_empty();
    let mut h = Vec::with_capacity(46 + c.name.len() + 28);
    h.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    h.extend_from_slice(&(0x0300u16 | if zip64 { 45 } else { 20 }).to_le_bytes()); // made on Unix
    h.extend_from_slice(&(if zip64 { 45u16 } else { 20 }).to_le_bytes());
    h.extend_from_slice(&(1u16 << 11).to_le_bytes());
    h.extend_from_slice(&(if c.stored { 0u16 } else { 8 }).to_le_bytes());
    h.extend_from_slice(&time.timepart().to_le_bytes());
    h.extend_from_slice(&time.datepart().to_le_bytes());
    h.extend_from_slice(&c.crc.to_le_bytes());
    let clip = |v: u64, big: bool| if big { u32::MAX } else { v as u32 };
    h.extend_from_slice(&clip(c.compressed, big_size).to_le_bytes());
    h.extend_from_slice(&clip(c.size, big_size).to_le_bytes());
    h.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
    h.extend_from_slice(&(if zip64 { extra.len() as u16 + 4 } else { 0 }).to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes()); // comment
    h.extend_from_slice(&0u16.to_le_bytes()); // disk
    h.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
    let mode: u32 = 0o100000 | if c.executable { 0o755 } else { 0o644 };
    h.extend_from_slice(&(mode << 16).to_le_bytes());
    h.extend_from_slice(&clip(c.offset, big_offset).to_le_bytes());
    h.extend_from_slice(c.name.as_bytes());
    if zip64 {
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        h.extend_from_slice(&extra);
    }
    h
}

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
                EntrySource::Splice(s) => s.len(),
                EntrySource::Path(p) => {
                    std::fs::metadata(p).map_err(|source| ZipWriteError::Io { path: p.clone(), source })?.len()
                }
            });
        }
        let mut pieces = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let n = size.div_ceil(PIECE).max(1);
            for k in 0..n {
                let offset = k * PIECE;
                let len = (size - offset).min(PIECE) as usize;
                pieces.push(Piece { entry: i, offset, len, last: k + 1 == n });
            }
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
                            if sizes[p.entry] == 0 {
                                return Ok((raw, Vec::new()));
                            }
                            compressor
                                .compress_piece(&raw, p.last)
                                .map(|c| (raw, c))
                                .map_err(|why| ZipWriteError::Entry { name: entries[p.entry].name.clone(), why })
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
            if p.offset == 0 {
                header_at = self.position;
                compressed = 0;
                sha = Sha256::new();
                crc = crc32fast::Hasher::new();
                let h = local_header(&e.name, self.time, 0, 0, sizes[p.entry], stored);
                self.emit(&h)?;
            }
            sha.update(&raw);
            crc.update(&raw);
            self.emit(&deflated)?;
            compressed += deflated.len() as u64;
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
        let zip64 = count >= 0xffff || cd_start >= u64::from(u32::MAX) || cd_size >= u64::from(u32::MAX);
        let mut end = Vec::new();
        if zip64 {
            let record_at = self.position;
            end.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
            end.extend_from_slice(&44u64.to_le_bytes());
            end.extend_from_slice(&0x032du16.to_le_bytes());
            end.extend_from_slice(&45u16.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&count.to_le_bytes());
            end.extend_from_slice(&count.to_le_bytes());
            end.extend_from_slice(&cd_size.to_le_bytes());
            end.extend_from_slice(&cd_start.to_le_bytes());
            end.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&record_at.to_le_bytes());
            end.extend_from_slice(&1u32.to_le_bytes());
        }
        end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        let n16 = count.min(0xffff) as u16;
        end.extend_from_slice(&n16.to_le_bytes());
        end.extend_from_slice(&n16.to_le_bytes());
        end.extend_from_slice(&(cd_size.min(u64::from(u32::MAX)) as u32).to_le_bytes());
        end.extend_from_slice(&(cd_start.min(u64::from(u32::MAX)) as u32).to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        self.emit(&end)?;
        self.out.flush().map_err(|e| self.io(e))?;
        Ok(self.out)
    }
}

fn read_piece(e: &ZipEntry, p: &Piece) -> Result<Vec<u8>, ZipWriteError> {
    match &e.source {
        EntrySource::Bytes(b) => Ok(b[p.offset as usize..p.offset as usize + p.len].to_vec()),
        EntrySource::Splice(s) => {
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
