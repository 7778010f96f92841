//! Writing a wheel with its entries compressed in parallel.
//!
//! Entries are taken in the wheel's canonical order (package files, then
//! `.dist-info`, RECORD last) in batches of bounded size; within a batch,
//! each entry is deflated on a rayon thread into its own one-entry zip
//! (in memory when small, in a temporary file when large), hashed for
//! RECORD on the way; the batch is then copied, still compressed, into the
//! wheel in order. The bytes depend only on the entries, never on thread
//! timing, and memory stays bounded by the batch size.
//! (`wheel::archive::pack_dir` writes one entry at a time; this is its
//! parallel sibling for wheels of gigabytes.)

use super::PackageError;
use crate::wheel::record::{self, RecordRow};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Cursor, Read, Seek, Write};
use std::path::{Path, PathBuf};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipArchive, ZipWriter};

/// Deflate level (zlib's default, as pip and the `wheel` package use).
const DEFLATE_LEVEL: i64 = 6;
const ZIP64_FILE_THRESHOLD: u64 = 0xFFFF_FFFF;
/// Source bytes compressed per batch.
const BATCH_BYTES: u64 = 64 << 20;
/// Entries larger than this are compressed into a temporary file.
const IN_MEMORY_MAX: u64 = 4 << 20;

#[derive(Debug, Clone)]
pub enum Source {
    Path(PathBuf),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub source: Source,
    pub executable: bool,
}

impl Member {
    pub fn bytes(name: impl Into<String>, data: impl Into<Vec<u8>>) -> Member {
        Member { name: name.into(), source: Source::Bytes(data.into()), executable: false }
    }

    fn size(&self) -> Result<u64, PackageError> {
        match &self.source {
            Source::Bytes(b) => Ok(b.len() as u64),
            Source::Path(p) => {
                std::fs::metadata(p).map(|m| m.len()).map_err(|source| PackageError::Io { path: p.clone(), source })
            }
        }
    }
}

/// Package files first, then `.dist-info`, RECORD at the very end.
fn member_order(name: &str) -> (u8, String) {
    let in_dist_info = name.split('/').next().is_some_and(|top| top.ends_with(".dist-info"));
    (u8::from(in_dist_info), name.to_string())
}

enum Spool {
    Memory(Vec<u8>),
    Disk(tempfile::NamedTempFile),
}

struct Compressed {
    row: RecordRow,
    spool: Spool,
}

struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

fn options(time: DateTime, executable: bool, size: u64) -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(DEFLATE_LEVEL))
        .last_modified_time(time)
        .unix_permissions(if executable { 0o755 } else { 0o644 })
        .large_file(size >= ZIP64_FILE_THRESHOLD)
}

fn deflate_into<W: Write + Seek>(w: W, m: &Member, size: u64, time: DateTime) -> Result<(W, RecordRow), String> {
    let mut zip = ZipWriter::new(w);
    zip.start_file(m.name.as_str(), options(time, m.executable, size)).map_err(|e| e.to_string())?;
    let reader: Box<dyn Read> = match &m.source {
        Source::Bytes(b) => Box::new(Cursor::new(b.as_slice())),
        Source::Path(p) => {
            Box::new(BufReader::with_capacity(1 << 16, File::open(p).map_err(|e| format!("{}: {e}", p.display()))?))
        }
    };
    let mut h = Hashing { inner: reader, hasher: Sha256::new(), count: 0 };
    io::copy(&mut h, &mut zip).map_err(|e| e.to_string())?;
    let w = zip.finish().map_err(|e| e.to_string())?;
    let field = record::sha256_field(&h.hasher.finalize());
    Ok((
        w,
        RecordRow {
            path: m.name.clone(),
            hash: Some(("sha256".into(), field["sha256=".len()..].to_string())),
            size: Some(h.count),
        },
    ))
}

fn compress(m: &Member, size: u64, time: DateTime, scratch: &Path, wheel: &Path) -> Result<Compressed, PackageError> {
    let fail = |why: String| PackageError::WheelWrite {
        wheel: wheel.to_path_buf(),
        why: format!("entry `{}`: {why}", m.name),
    };
    if size <= IN_MEMORY_MAX {
        let (cur, row) = deflate_into(Cursor::new(Vec::new()), m, size, time).map_err(fail)?;
        Ok(Compressed { row, spool: Spool::Memory(cur.into_inner()) })
    } else {
        let tmp = tempfile::NamedTempFile::new_in(scratch)
            .map_err(|source| PackageError::Io { path: scratch.to_path_buf(), source })?;
        let file = tmp.reopen().map_err(|source| PackageError::Io { path: tmp.path().to_path_buf(), source })?;
        let (w, row) = deflate_into(BufWriter::new(file), m, size, time).map_err(fail)?;
        drop(w);
        Ok(Compressed { row, spool: Spool::Disk(tmp) })
    }
}

fn copy_in<W: Write + Seek, R: Read + Seek>(
    out: &mut ZipWriter<W>,
    spool: R,
    wheel: &Path,
) -> Result<(), PackageError> {
    let fail = |e: zip::result::ZipError| PackageError::WheelWrite { wheel: wheel.to_path_buf(), why: e.to_string() };
    let mut one = ZipArchive::new(spool).map_err(fail)?;
    let file = one.by_index(0).map_err(fail)?;
    out.raw_copy_file(file).map_err(fail)
}

/// Write the wheel `out` from `members` (RECORD is generated); `scratch`
/// holds temporary spools. Returns the member names in wheel order.
pub fn write_wheel(
    out: &Path,
    dist_info: &str,
    mut members: Vec<Member>,
    time: DateTime,
    scratch: &Path,
) -> Result<Vec<String>, PackageError> {
    let record_name = format!("{dist_info}/RECORD");
    members.retain(|m| m.name != record_name);
    members.sort_by_cached_key(|m| member_order(&m.name));
    if let Some(w) = members.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(PackageError::WheelWrite {
            wheel: out.to_path_buf(),
            why: format!("`{}` would be written twice", w[0].name),
        });
    }
    let sizes: Vec<u64> = members.iter().map(Member::size).collect::<Result<_, _>>()?;

    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".quarry-wheel-")
        .suffix(".tmp")
        .tempfile_in(parent)
        .map_err(|source| PackageError::Io { path: parent.to_path_buf(), source })?;
    let io_fail = |source: io::Error| PackageError::Io { path: tmp.path().to_path_buf(), source };
    let mut zip = ZipWriter::new(BufWriter::with_capacity(1 << 20, tmp.reopen().map_err(io_fail)?));
    let mut rows = Vec::with_capacity(members.len() + 1);
    let mut start = 0;
    while start < members.len() {
        let mut end = start;
        let mut budget = 0u64;
        while end < members.len() && (end == start || budget + sizes[end] <= BATCH_BYTES) {
            budget += sizes[end];
            end += 1;
        }
        let batch: Vec<Compressed> = (start..end)
            .into_par_iter()
            .map(|i| compress(&members[i], sizes[i], time, scratch, out))
            .collect::<Result<_, _>>()?;
        for c in batch {
            match c.spool {
                Spool::Memory(v) => copy_in(&mut zip, Cursor::new(v), out)?,
                Spool::Disk(t) => {
                    let f = t.reopen().map_err(|source| PackageError::Io { path: t.path().to_path_buf(), source })?;
                    copy_in(&mut zip, BufReader::new(f), out)?
                }
            }
            rows.push(c.row);
        }
        start = end;
    }
    rows.push(RecordRow { path: record_name.clone(), hash: None, size: None });
    let record_bytes = record::write(&rows);
    let zip_fail = |e: zip::result::ZipError| PackageError::WheelWrite { wheel: out.to_path_buf(), why: e.to_string() };
    zip.start_file(record_name.as_str(), options(time, false, record_bytes.len() as u64)).map_err(zip_fail)?;
    zip.write_all(&record_bytes).map_err(io_fail)?;
    let mut w = zip.finish().map_err(zip_fail)?;
    w.flush().map_err(io_fail)?;
    drop(w);
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(io_fail)?;
    tmp.persist(out).map_err(|e| PackageError::Io { path: out.to_path_buf(), source: e.error })?;
    Ok(rows.into_iter().map(|r| r.path).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_wheel_is_deterministic_and_readable() {
        let t = tempfile::tempdir().unwrap();
        let big = t.path().join("big.bin");
        // Larger than the in-memory limit: goes through a disk spool.
        let data: Vec<u8> = (0..(IN_MEMORY_MAX as usize + 12345)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&big, &data).unwrap();
        let members = || {
            vec![
                Member::bytes("p-1.dist-info/WHEEL", "Wheel-Version: 1.0\n"),
                Member { name: "pkg/big.bin".into(), source: Source::Path(big.clone()), executable: true },
                Member::bytes("pkg/a.py", "print(1)\n"),
            ]
        };
        let w1 = t.path().join("one.whl");
        let w2 = t.path().join("two.whl");
        let time = crate::wheel::archive::zip_time(0);
        let names = write_wheel(&w1, "p-1.dist-info", members(), time, t.path()).unwrap();
        write_wheel(&w2, "p-1.dist-info", members(), time, t.path()).unwrap();
        assert_eq!(names, ["pkg/a.py", "pkg/big.bin", "p-1.dist-info/WHEEL", "p-1.dist-info/RECORD"]);
        assert_eq!(std::fs::read(&w1).unwrap(), std::fs::read(&w2).unwrap());
        let mut w = crate::wheel::archive::WheelZip::open(&w1).unwrap();
        let scan = w.scan(None, |_, _| false).unwrap();
        let rows = record::parse(&w.read_file("p-1.dist-info/RECORD").unwrap(), "RECORD").unwrap();
        assert!(record::verify(&rows, &scan.files, "p-1.dist-info/RECORD").is_empty());
        assert_eq!(scan.files["pkg/big.bin"].size, data.len() as u64);
    }
}
