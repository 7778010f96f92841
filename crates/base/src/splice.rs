//! A file described as byte parts: ranges of original files, runs of zeros
//! and small blocks of bytes. An edited ELF file is its source plus a few
//! overwrites plus an appended tail; describing it this way lets it be read
//! (and streamed into an archive) without a copy on disk or in memory.
//!
//! Reads of file parts go through [`crate::read_once`] (a part is streamed
//! once); depends on nothing else in the crate.

use crate::read_once;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// A source file, named for errors: held open, or opened for each read
/// (see [`Splice::unopened`]).
#[derive(Debug)]
pub struct Source {
    path: PathBuf,
    file: Option<File>,
    /// Whether `file`'s large reads are direct, chosen at the first read
    /// (see [`read_once::read_directly`]).
    direct: OnceLock<bool>,
}

impl Source {
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match &self.file {
            Some(f) => {
                let direct = *self.direct.get_or_init(|| read_once::read_directly(f));
                read_once::read_exact_at(f, direct, buf, offset)
            }
            None => {
                let f = File::open(&self.path)?;
                let direct = buf.len() >= read_once::DIRECT_MIN && read_once::read_directly(&f);
                read_once::read_exact_at(&f, direct, buf, offset)
            }
        }
    }
}

/// One run of bytes of a [`Splice`].
#[derive(Debug, Clone)]
pub enum Part {
    Bytes(Arc<[u8]>),
    Zeros(u64),
    File { source: Arc<Source>, offset: u64, len: u64 },
}

impl Part {
    pub fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::Zeros(n) => *n,
            Part::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes `from..` of this part, as a part of their own.
    fn slice(&self, from: u64, len: u64) -> Part {
        match self {
            Part::Bytes(b) => Part::Bytes(b[from as usize..(from + len) as usize].into()),
            Part::Zeros(_) => Part::Zeros(len),
            Part::File { source, offset, .. } => Part::File { source: source.clone(), offset: offset + from, len },
        }
    }
}

/// A file as an ordered list of parts.
#[derive(Debug, Clone, Default)]
pub struct Splice {
    parts: Vec<Part>,
    /// Where each part starts (prefix sums of the part lengths).
    starts: Vec<u64>,
    len: u64,
}

impl Splice {
    /// The whole file at `path`, as one part.
    pub fn file(path: &Path) -> io::Result<Splice> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let source = Arc::new(Source { path: path.to_path_buf(), file: Some(file), direct: OnceLock::new() });
        let mut s = Splice::default();
        s.push(Part::File { source, offset: 0, len });
        Ok(s)
    }

    /// The file at `path`, `len` bytes long, opened only while it is read:
    /// for archives of many files (a tar of thousands of headers), where
    /// holding every file open would run out of descriptors.
    pub fn unopened(path: &Path, len: u64) -> Splice {
        Splice::unopened_range(path, 0, len)
    }

    /// `len` bytes of the file at `path` from `offset`, opened only while read.
    pub fn unopened_range(path: &Path, offset: u64, len: u64) -> Splice {
        let source = Arc::new(Source { path: path.to_path_buf(), file: None, direct: OnceLock::new() });
        let mut s = Splice::default();
        s.push(Part::File { source, offset, len });
        s
    }

    /// Append every part of `other`.
    pub fn append(&mut self, other: &Splice) {
        for p in &other.parts {
            self.push(p.clone());
        }
    }

    /// The source of the first file part (the file this splice edits).
    pub fn source(&self) -> Option<Arc<Source>> {
        self.parts.iter().find_map(|p| match p {
            Part::File { source, .. } => Some(source.clone()),
            _ => None,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Append a part at the end.
    pub fn push(&mut self, part: Part) {
        if part.is_empty() {
            return;
        }
        self.starts.push(self.len);
        self.len += part.len();
        self.parts.push(part);
    }

    /// Replace the bytes at `at..at + bytes.len()`, which must lie inside
    /// the splice, with `bytes`.
    pub fn overwrite(&mut self, at: u64, bytes: Vec<u8>) {
        let end = at + bytes.len() as u64;
        assert!(end <= self.len, "overwrite {at}..{end} past the end of a {}-byte splice", self.len);
        if bytes.is_empty() {
            return;
        }
        let first = self.split_at(at);
        let last = self.split_at(end);
        self.parts.splice(first..last, [Part::Bytes(bytes.into())]);
        self.reindex();
    }

    /// Make a part boundary at `pos`; the index of the part starting there.
    fn split_at(&mut self, pos: u64) -> usize {
        if pos == self.len {
            return self.parts.len();
        }
        let i = self.starts.partition_point(|&s| s <= pos) - 1;
        let from = pos - self.starts[i];
        if from == 0 {
            return i;
        }
        let part = &self.parts[i];
        let (head, tail) = (part.slice(0, from), part.slice(from, part.len() - from));
        self.parts.splice(i..=i, [head, tail]);
        self.reindex();
        i + 1
    }

    fn reindex(&mut self) {
        self.starts.clear();
        let mut at = 0;
        for p in &self.parts {
            self.starts.push(at);
            at += p.len();
        }
        self.len = at;
    }

    /// Fill `buf` with the bytes at `offset..`. A source file shorter than
    /// when the splice was made is an error naming it.
    pub fn read_at(&self, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
        if offset + buf.len() as u64 > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read of {} bytes at {offset} past the end of a {}-byte file", buf.len(), self.len),
            ));
        }
        while !buf.is_empty() {
            let i = self.starts.partition_point(|&s| s <= offset) - 1;
            let part = &self.parts[i];
            let from = offset - self.starts[i];
            let n = (part.len() - from).min(buf.len() as u64) as usize;
            let (now, rest) = buf.split_at_mut(n);
            match part {
                Part::Bytes(b) => now.copy_from_slice(&b[from as usize..from as usize + n]),
                Part::Zeros(_) => now.fill(0),
                Part::File { source, offset: base, .. } => source.read_exact_at(now, base + from).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("`{}` changed while it was being read: {e}", source.path.display()),
                    )
                })?,
            }
            offset += n as u64;
            buf = rest;
        }
        Ok(())
    }

    /// A `Read + Seek` view from the start.
    pub fn reader(&self) -> SpliceReader<'_> {
        SpliceReader { splice: self, pos: 0 }
    }
}

/// Builds a splice from written bytes (kept as small `Bytes` parts) and
/// whole splices appended between them: a tar's headers around its files.
#[derive(Debug, Default)]
pub struct SpliceWriter {
    splice: Splice,
    pending: Vec<u8>,
}

impl SpliceWriter {
    /// Append `other`'s parts after the bytes written so far.
    pub fn append(&mut self, other: &Splice) {
        self.flush_pending();
        self.splice.append(other);
    }

    fn flush_pending(&mut self) {
        if !self.pending.is_empty() {
            let bytes = std::mem::take(&mut self.pending);
            self.splice.push(Part::Bytes(bytes.into()));
        }
    }

    pub fn finish(mut self) -> Splice {
        self.flush_pending();
        self.splice
    }
}

impl io::Write for SpliceWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads a [`Splice`] in order (for `object::ReadCache` and `io::copy`).
pub struct SpliceReader<'a> {
    splice: &'a Splice,
    pos: u64,
}

impl Read for SpliceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.splice.len.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        self.splice.read_at(self.pos, &mut buf[..n])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SpliceReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.splice.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn materialize(s: &Splice) -> Vec<u8> {
        let mut out = Vec::new();
        s.reader().read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_across_parts_match_the_materialized_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("src.bin");
        let original: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &original).unwrap();
        let mut s = Splice::file(&path).unwrap();
        s.push(Part::Zeros(300));
        s.push(Part::Bytes(b"tail".to_vec().into()));
        let mut expected = original.clone();
        expected.extend(std::iter::repeat_n(0, 300));
        expected.extend_from_slice(b"tail");
        // Overwrites that split parts, overlap earlier overwrites and cross into the zeros.
        for (at, bytes) in [(10u64, vec![1u8; 5]), (12, vec![2; 100]), (9_990, vec![3; 20]), (0, vec![4; 1])] {
            s.overwrite(at, bytes.clone());
            expected[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
        }
        assert_eq!(s.len(), expected.len() as u64);
        assert_eq!(materialize(&s), expected);
        let mut state = 12345u64;
        for _ in 0..500 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let at = (state >> 33) % s.len();
            let n = ((state >> 13) % 700).min(s.len() - at) as usize;
            let mut buf = vec![0xaa; n];
            s.read_at(at, &mut buf).unwrap();
            assert_eq!(buf, expected[at as usize..at as usize + n], "read of {n} at {at}");
        }
        let mut r = s.reader();
        r.seek(SeekFrom::End(-4)).unwrap();
        let mut tail = String::new();
        r.read_to_string(&mut tail).unwrap();
        assert_eq!(tail, "tail");
        assert!(s.read_at(s.len() - 1, &mut [0, 0]).is_err());
    }

    #[test]
    fn a_writer_joins_bytes_and_unopened_files() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.h");
        std::fs::write(&path, b"#define A 1\n").unwrap();
        let mut w = SpliceWriter::default();
        w.write_all(b"head:").unwrap();
        w.append(&Splice::unopened(&path, 12));
        w.write_all(b":tail").unwrap();
        let s = w.finish();
        assert_eq!(materialize(&s), b"head:#define A 1\n:tail");
        std::fs::remove_file(&path).unwrap();
        let err = s.read_at(0, &mut [0u8; 10]).unwrap_err().to_string();
        assert!(err.contains("a.h"), "{err}");
    }

    #[test]
    fn a_shrunken_source_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shrinks.so");
        std::fs::write(&path, vec![9u8; 4096]).unwrap();
        let s = Splice::file(&path).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
        let err = s.read_at(0, &mut [0u8; 4096]).unwrap_err().to_string();
        assert!(err.contains("shrinks.so") && err.contains("changed"), "{err}");
    }
}
