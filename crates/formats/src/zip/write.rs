//! The crate's one zip writer: deterministic, parallel, streaming.
//!
//! Entries are written in the order given. Every entry is cut into pieces
//! of [`PIECE`] bytes; one thread reads them ahead (see
//! [`crate::read_once`]), worker threads deflate them (see
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
//! needs them. Empty entries and those marked `stored` are stored, not deflated.

use super::deflate;
use super::headers::{central_header, end_of_central_directory, local_header, Central};
use super::pieces::{plan_pieces, read_piece, Job, Piece, Reuse};
use super::reuse;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Condvar, Mutex};
use zip::DateTime;

pub use super::entry::{EntrySource, Written, ZipEntry};
pub use super::pieces::PIECE;
pub use super::ZipError;

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

/// A piece's index and its bytes, read.
type Read = (usize, Result<Vec<u8>, ZipError>);
/// A piece's index, its bytes and what stands for them in the stream.
type Done = (usize, Result<(Vec<u8>, Vec<u8>), ZipError>);

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

    fn io(&self, source: io::Error) -> ZipError {
        ZipError::Io { path: self.path.clone(), source }
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<(), ZipError> {
        self.out.write_all(bytes).map_err(|e| self.io(e))?;
        self.position += bytes.len() as u64;
        Ok(())
    }

    /// Write `entries` in order; returns each one's SHA-256 and size.
    pub fn write_entries(&mut self, entries: &[ZipEntry]) -> Result<Vec<Written>, ZipError> {
        let mut sizes = Vec::with_capacity(entries.len());
        for e in entries {
            sizes.push(match &e.source {
                EntrySource::Bytes(b) => b.len() as u64,
                EntrySource::Splice(s) | EntrySource::Reused(s, _) => s.len(),
                EntrySource::Path(p) => {
                    std::fs::metadata(p).map_err(|source| ZipError::Io { path: p.clone(), source })?.len()
                }
            });
        }
        let mut pieces = Vec::new();
        for (i, (e, &size)) in entries.iter().zip(&sizes).enumerate() {
            let reuse = match &e.source {
                EntrySource::Reused(splice, original) if !e.stored => {
                    reuse::window(splice, original).and_then(|window| {
                        // Unreadable here, it fails when read for the pieces.
                        let bridge = reuse::bridge(splice, original, &window).ok()??;
                        Some(Reuse { original: original.clone(), window, bridge })
                    })
                }
                _ => None,
            };
            plan_pieces(&mut pieces, i, size, reuse);
        }
        let window = 4 * self.threads;
        let stop = AtomicBool::new(false);
        let written = (Mutex::new(0usize), Condvar::new());
        let (read_tx, read_rx) = mpsc::channel::<Read>();
        let read_rx = Mutex::new(read_rx);
        let (tx, rx) = mpsc::channel::<Done>();
        let mut results = Vec::with_capacity(entries.len());
        let (sizes_ref, pieces_ref): (&[u64], &[Piece]) = (&sizes, &pieces);
        std::thread::scope(|s| -> Result<(), ZipError> {
            // One thread reads the pieces in order, at most `window` ahead
            // of the writer: a read waiting for the disk (a cold page
            // cache, direct reads) then keeps no compressor waiting.
            let (stop_ref, written_ref) = (&stop, &written);
            s.spawn(move || {
                let mut open = None;
                for (j, p) in pieces_ref.iter().enumerate() {
                    {
                        let mut w = written_ref.0.lock().unwrap_or_else(|e| e.into_inner());
                        while j >= *w + window && !stop_ref.load(Ordering::SeqCst) {
                            w = written_ref.1.wait(w).unwrap_or_else(|e| e.into_inner());
                        }
                    }
                    if stop_ref.load(Ordering::SeqCst)
                        || read_tx.send((j, read_piece(&entries[p.entry], p, &mut open))).is_err()
                    {
                        return;
                    }
                }
            });
            for _ in 0..self.threads {
                let tx = tx.clone();
                let (stop, pieces, sizes, read_rx) = (&stop, pieces_ref, sizes_ref, &read_rx);
                s.spawn(move || {
                    let mut compressor = deflate::PieceCompressor::new();
                    loop {
                        let next = read_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((j, raw)) = next else { return };
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let p = &pieces[j];
                        let r = raw.and_then(|raw| {
                            let e = &entries[p.entry];
                            match &p.job {
                                _ if sizes[p.entry] == 0 || e.stored => Ok((raw, Vec::new())),
                                Job::Deflate { final_block } => compressor
                                    .compress_piece(&raw, *final_block)
                                    .map(|c| (raw, c))
                                    .map_err(|source| ZipError::Deflate { name: e.name.clone(), source }),
                                Job::Hash => Ok((raw, Vec::new())),
                                Job::Bridge(bridge) => {
                                    let bytes = reuse::bridge_bytes(bridge, &raw);
                                    Ok((raw, bytes))
                                }
                                Job::Copy { original, from, to, close } => {
                                    reuse::copy_bits(&original.index, *from, *to, *close)
                                        .map(|c| (raw, c))
                                        .map_err(|source| ZipError::Io { path: original.index.zip.clone(), source })
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
    ) -> Result<(), ZipError> {
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
                let (k, r) = rx.recv().map_err(|_| ZipError::ThreadStopped { name: entries[p.entry].name.clone() })?;
                pending.insert(k, r?);
            };
            let e = &entries[p.entry];
            let stored = sizes[p.entry] == 0 || e.stored;
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
            let out = if stored { &raw } else { &deflated };
            self.emit(out)?;
            compressed += out.len() as u64;
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
    pub fn finish(mut self) -> Result<W, ZipError> {
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

/// Write `entries` as a zip at `out` in one go (temporary name, then renamed).
pub fn write_file(out: &Path, entries: &[ZipEntry], time: DateTime) -> Result<Vec<Written>, ZipError> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |source| ZipError::Io { path: parent.to_path_buf(), source };
    let tmp = tempfile::Builder::new().prefix(".quarry-zip-").suffix(".tmp").tempfile_in(parent).map_err(io)?;
    let file = tmp.reopen().map_err(io)?;
    let mut z = ZipOut::new(io::BufWriter::with_capacity(1 << 20, file), out, time);
    let written = z.write_entries(entries)?;
    z.finish()?;
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(io)?;
    tmp.persist(out).map_err(|e| ZipError::Io { path: out.to_path_buf(), source: e.error })?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splice::Splice;
    use std::fs::File;
    use std::io::Read;
    use std::sync::Arc;

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

    #[test]
    fn a_stored_entry_is_written_as_is_across_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(2 * PIECE as usize + 77)).map(|i| (i * 7 % 251) as u8).collect();
        let src = dir.path().join("a.kpack");
        std::fs::write(&src, &data).unwrap();
        let out = dir.path().join("out.zip");
        let entries = [ZipEntry::file("pkg/.kpack/a.kpack", &src, false).stored(), ZipEntry::bytes("pkg/b", "bb")];
        write_file(&out, &entries, DateTime::default()).unwrap();
        let mut zip = zip::ZipArchive::new(File::open(&out).unwrap()).unwrap();
        let mut e = zip.by_name("pkg/.kpack/a.kpack").unwrap();
        assert_eq!(e.compression(), zip::CompressionMethod::Stored);
        assert_eq!(e.compressed_size(), data.len() as u64);
        let mut got = Vec::new();
        e.read_to_end(&mut got).unwrap();
        assert!(got == data);
        drop(e);
        assert_eq!(zip.by_name("pkg/b").unwrap().compression(), zip::CompressionMethod::Deflated);
    }
}
