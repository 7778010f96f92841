//! Wheel zips: the crate's one zip reader ([`WheelZip`]: safe paths, every
//! byte hashed while it streams by) and the wheel layer over the one zip
//! writer ([`write_wheel`]: entries sorted with `.dist-info` last and
//! RECORD at the very end, RECORD generated; see [`crate::zip::write`]).
//!
//! Over 400 lines: reading and writing share the member rules (safe names,
//! order, modes); 75 of them are the zip64 tests.

use super::record::{self, Measured, RecordRow};
pub use super::source_epoch::source_date_epoch;
use super::WheelError;
use crate::layer::path::normalize_member;
use crate::zip::inflate_index::{FileStamp, IndexedInflate, Member, StreamIndex};
pub use crate::zip::time::zip_time;
use crate::zip::write::{ZipEntry, ZipOut};
use crate::zip::ZipError;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use zip::{DateTime, ZipArchive};
/// Largest metadata file read into memory (METADATA, WHEEL, RECORD).
const MAX_METADATA_BYTES: u64 = 256 << 20;

/// An open wheel.
pub struct WheelZip {
    path: PathBuf,
    zip: ZipArchive<BufReader<File>>,
}

/// What a pass over the wheel measured.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every file (not directory) in the archive, by normalized path.
    pub files: BTreeMap<String, Measured>,
    /// The files written to the destination.
    pub extracted: Vec<String>,
    /// The latest entry timestamp (a deterministic default for rewrites).
    pub latest_time: Option<DateTime>,
    /// The block index of every extracted member of at least
    /// [`INDEXED_MEMBER`] bytes (a rewrite may copy its unchanged blocks).
    pub streams: BTreeMap<String, StreamIndex>,
}

/// Members this large are inflated with a block index when extracted.
pub const INDEXED_MEMBER: u64 = 16 << 20;

impl WheelZip {
    pub fn open(path: &Path) -> Result<WheelZip, WheelError> {
        let file = File::open(path).map_err(|source| WheelError::Io { path: path.to_path_buf(), source })?;
        let zip = ZipArchive::new(BufReader::new(file)).map_err(|e| WheelError::Zip {
            wheel: path.to_path_buf(),
            why: format!("{e}; the file is not a readable zip (is it truncated or not a wheel?)"),
        })?;
        Ok(WheelZip { path: path.to_path_buf(), zip })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Normalized names of all files (directories left out).
    pub fn file_names(&self) -> Result<Vec<String>, WheelError> {
        let mut out = Vec::new();
        for raw in self.zip.file_names_raw() {
            if raw.ends_with(b"/") {
                continue;
            }
            out.push(safe_name(&self.path, raw)?);
        }
        Ok(out)
    }

    /// The single top-level `*.dist-info` directory.
    pub fn dist_info_dir(&self) -> Result<String, WheelError> {
        let mut dirs: Vec<String> = self
            .file_names()?
            .iter()
            .filter_map(|n| n.split_once('/').map(|(top, _)| top.to_string()))
            .filter(|top| top.ends_with(".dist-info"))
            .collect();
        dirs.sort();
        dirs.dedup();
        match dirs.len() {
            1 => Ok(dirs.remove(0)),
            0 => Err(WheelError::Layout { wheel: self.path.clone(), why: "it has no `.dist-info` directory".into() }),
            _ => Err(WheelError::Layout {
                wheel: self.path.clone(),
                why: format!("it has several `.dist-info` directories: {}", dirs.join(", ")),
            }),
        }
    }

    /// Read one member fully, whatever its size (a binary to parse, an
    /// archive to look into).
    pub fn read_member(&mut self, name: &str) -> Result<Vec<u8>, WheelError> {
        let path = self.path.clone();
        let mut entry = self
            .zip
            .by_name(name)
            .map_err(|e| WheelError::Zip { wheel: path.clone(), why: format!("member `{name}`: {e}") })?;
        let mut buf = Vec::with_capacity(entry.size().min(1 << 30) as usize);
        entry
            .read_to_end(&mut buf)
            .map_err(|e| WheelError::Zip { wheel: path, why: format!("member `{name}`: {e}; the wheel is damaged") })?;
        Ok(buf)
    }

    /// Read one small file (metadata) fully.
    pub fn read_file(&mut self, name: &str) -> Result<Vec<u8>, WheelError> {
        let path = self.path.clone();
        let mut entry = self.zip.by_name(name).map_err(|e| match e {
            zip::result::ZipError::FileNotFound => {
                WheelError::Layout { wheel: path.clone(), why: format!("it has no `{name}`") }
            }
            e => WheelError::Zip { wheel: path.clone(), why: format!("member `{name}`: {e}") },
        })?;
        if entry.size() > MAX_METADATA_BYTES {
            return Err(WheelError::Layout {
                wheel: path,
                why: format!("`{name}` is {} bytes, too large for a metadata file", entry.size()),
            });
        }
        let mut buf = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut buf).map_err(|e| WheelError::Zip {
            wheel: self.path.clone(),
            why: format!("member `{name}`: {e}; the wheel is damaged"),
        })?;
        Ok(buf)
    }

    /// One pass over every entry: hash and size each file; write to `dest`
    /// those `want(name, first_bytes)` accepts (nothing is written outside
    /// `dest`: paths with `..` or a leading `/` are refused).
    pub fn scan(&mut self, dest: Option<&Path>, want: impl Fn(&str, &[u8]) -> bool) -> Result<Scan, WheelError> {
        let mut scan = Scan::default();
        let mut buf = vec![0u8; 1 << 16];
        for i in 0..self.zip.len() {
            let entry = self.zip.by_index(i).map_err(|e| WheelError::Zip {
                wheel: self.path.clone(),
                why: format!("entry {i}: {e}; the wheel is damaged"),
            })?;
            let raw = entry.name_raw().to_vec();
            if entry.is_dir() {
                continue;
            }
            let name = safe_name(&self.path, &raw)?;
            if entry.is_symlink() {
                return Err(WheelError::Layout {
                    wheel: self.path.clone(),
                    why: format!("member `{name}` is a symbolic link; wheels hold regular files only"),
                });
            }
            if scan.files.contains_key(&name) {
                return Err(WheelError::Layout {
                    wheel: self.path.clone(),
                    why: format!("member `{name}` appears twice"),
                });
            }
            if let Some(t) = entry.last_modified() {
                scan.latest_time = Some(scan.latest_time.map_or(t, |l| l.max(t)));
            }
            let executable = entry.unix_mode().is_some_and(|m| m & 0o111 != 0);
            let declared = entry.size();
            let damaged = |e: io::Error| WheelError::Zip {
                wheel: self.path.clone(),
                why: format!("member `{name}`: {e}; the wheel is damaged (truncated?)"),
            };
            let indexed = dest.is_some()
                && declared >= INDEXED_MEMBER
                && entry.compression() == zip::CompressionMethod::Deflated
                && !entry.encrypted();
            let mut entry = match (indexed, entry.data_start()) {
                (true, Some(start)) => {
                    let (compressed, crc) = (entry.compressed_size(), entry.crc32());
                    drop(entry);
                    Member::Indexed(
                        IndexedInflate::open(&self.path, start, compressed, declared, crc).map_err(damaged)?,
                    )
                }
                _ => Member::Zip(entry),
            };
            // The first block decides whether the file is wanted (ELF magic...).
            let mut head_len = 0;
            while head_len < buf.len() {
                match entry.read(&mut buf[head_len..]) {
                    Ok(0) => break,
                    Ok(n) => head_len += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(damaged(e)),
                }
            }
            let mut out = match dest {
                Some(dest) if want(&name, &buf[..head_len]) => Some(create_file(dest, &name, executable)?),
                _ => None,
            };
            let mut hasher = Sha256::new();
            let mut size = 0u64;
            let mut chunk = head_len;
            loop {
                if chunk == 0 {
                    break;
                }
                hasher.update(&buf[..chunk]);
                size += chunk as u64;
                if let Some((path, f)) = out.as_mut() {
                    f.write_all(&buf[..chunk]).map_err(|source| WheelError::Io { path: path.clone(), source })?;
                }
                chunk = loop {
                    match entry.read(&mut buf) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(damaged(e)),
                    }
                };
            }
            if size != declared {
                return Err(damaged(io::Error::other(format!("holds {size} bytes, its header says {declared}"))));
            }
            if let Some((path, f)) = out {
                // No fsync: the destination is scratch, read back by this process.
                f.into_inner().map_err(|e| WheelError::Io { path: path.clone(), source: e.into_error() })?;
                scan.extracted.push(name.clone());
                if let Member::Indexed(inflate) = entry {
                    let stamp = FileStamp::of(&path).map_err(|source| WheelError::Io { path: path.clone(), source })?;
                    let index = inflate.into_index().map(|i| StreamIndex { extracted: Some(stamp), ..i });
                    scan.streams.extend(index.map(|index| (name.clone(), index)));
                }
            }
            scan.files.insert(name, Measured { sha256: hasher.finalize().into(), size });
        }
        Ok(scan)
    }
}

/// A member name, normalized; absolute paths and `..` are refused.
fn safe_name(wheel: &Path, raw: &[u8]) -> Result<String, WheelError> {
    let shown = String::from_utf8_lossy(raw).into_owned();
    let norm = normalize_member(raw).map_err(|problem| WheelError::Zip {
        wheel: wheel.to_path_buf(),
        why: format!("member `{shown}` {problem}; a wheel must hold relative paths"),
    })?;
    String::from_utf8(norm).map_err(|_| WheelError::Zip {
        wheel: wheel.to_path_buf(),
        why: format!("member `{shown}` is not a UTF-8 path"),
    })
}

fn create_file(dest: &Path, name: &str, executable: bool) -> Result<(PathBuf, BufWriter<File>), WheelError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dest.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| WheelError::Io { path: parent.to_path_buf(), source })?;
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if executable { 0o755 } else { 0o644 })
        .open(&path)
        .map_err(|source| WheelError::Io { path: path.clone(), source })?;
    Ok((path, BufWriter::with_capacity(1 << 16, f)))
}

/// What [`write_wheel`] wrote.
pub struct Wrote {
    /// RECORD's rows in wheel order.
    pub rows: Vec<RecordRow>,
    /// Members that copied part of their original stream: compressed bytes copied.
    pub copied: BTreeMap<String, u64>,
}

/// Sort key of a wheel member: package files first, then the `.dist-info`
/// directory, RECORD (and its signatures) at the very end.
fn member_order(name: &str, dist_info: &str) -> (u8, u8, String) {
    let in_dist_info = name.split('/').next().is_some_and(|top| top.ends_with(".dist-info"));
    let is_record = name == format!("{dist_info}/RECORD");
    (u8::from(in_dist_info), u8::from(is_record), name.to_string())
}

/// Write the wheel `out` from `entries` with the one zip writer
/// ([`crate::zip::write`]): entries sorted (package files, `.dist-info`,
/// RECORD last), RECORD generated from what was written (an entry named
/// RECORD or a signature of it is dropped), every member stamped with
/// `time`; a temporary name is renamed into place, so a failure never
/// leaves a partial wheel.
pub fn write_wheel(
    out: &Path,
    dist_info: &str,
    mut entries: Vec<ZipEntry>,
    time: DateTime,
) -> Result<Wrote, WheelError> {
    let record_name = format!("{dist_info}/RECORD");
    let signatures = [format!("{record_name}.jws"), format!("{record_name}.p7s")];
    entries.retain(|e| e.name != record_name && !signatures.contains(&e.name));
    entries.sort_by_cached_key(|e| member_order(&e.name, dist_info));
    if let Some(w) = entries.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(WheelError::Zip {
            wheel: out.to_path_buf(),
            why: format!("`{}` would be written twice", w[0].name),
        });
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |source| WheelError::Io { path: parent.to_path_buf(), source };
    let tmp = tempfile::Builder::new().prefix(".quarry-wheel-").suffix(".tmp").tempfile_in(parent).map_err(io)?;
    let file = tmp.reopen().map_err(io)?;
    let mut zip = ZipOut::new(BufWriter::with_capacity(1 << 20, file), out, time);
    let written = zip.write_entries(&entries).map_err(|e| zip_error(out, e))?;
    let copied = written.iter().filter(|w| w.copied > 0).map(|w| (w.name.clone(), w.copied)).collect();
    let mut rows: Vec<RecordRow> = written
        .into_iter()
        .map(|w| RecordRow {
            hash: Some(("sha256".into(), record::sha256_field(&w.sha256)["sha256=".len()..].to_string())),
            path: w.name,
            size: Some(w.size),
        })
        .collect();
    rows.push(RecordRow { path: record_name.clone(), hash: None, size: None });
    zip.write_entries(&[ZipEntry::bytes(record_name, record::write(&rows))]).map_err(|e| zip_error(out, e))?;
    zip.finish().map_err(|e| zip_error(out, e))?;
    // Wheels are ordinary files (tempfile creates 0600).
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|source| WheelError::Io { path: tmp.path().to_path_buf(), source })?;
    tmp.persist(out).map_err(|e| WheelError::Io { path: out.to_path_buf(), source: e.error })?;
    Ok(Wrote { rows, copied })
}

fn zip_error(wheel: &Path, source: ZipError) -> WheelError {
    WheelError::Write { wheel: wheel.to_path_buf(), source }
}

/// Turn the unpacked wheel under `root` into a wheel at `out` (see
/// [`write_wheel`]; RECORD signatures are dropped, also from `root`).
pub fn pack_dir(root: &Path, dist_info: &str, out: &Path, time: DateTime) -> Result<(), WheelError> {
    pack_dir_with(root, dist_info, out, time, Vec::new()).map(drop)
}

/// [`pack_dir`] with `substitutes`: entries written instead of the files of
/// the same name under `root`, or in addition (an edited file streamed from
/// a splice over its source, never copied). Returns what
/// [`Wrote::copied`] says.
pub fn pack_dir_with(
    root: &Path,
    dist_info: &str,
    out: &Path,
    time: DateTime,
    substitutes: Vec<ZipEntry>,
) -> Result<BTreeMap<String, u64>, WheelError> {
    use std::os::unix::fs::PermissionsExt;
    let replaced: std::collections::BTreeSet<String> = substitutes.iter().map(|e| e.name.clone()).collect();
    let mut entries = Vec::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.map_err(|e| WheelError::Io {
            path: e.path().map(Path::to_path_buf).unwrap_or_else(|| root.to_path_buf()),
            source: e.into_io_error().unwrap_or_else(|| io::Error::other("walk failed")),
        })?;
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let rel = entry.path().strip_prefix(root).expect("walkdir stays under its root");
        let rel = rel.to_str().ok_or_else(|| WheelError::Layout {
            wheel: root.to_path_buf(),
            why: format!("`{}` is not a UTF-8 path", rel.display()),
        })?;
        if !ft.is_file() {
            return Err(WheelError::Layout {
                wheel: root.to_path_buf(),
                why: format!("`{rel}` is not a regular file; wheels hold regular files only"),
            });
        }
        let meta = entry.metadata().map_err(|e| WheelError::Io {
            path: entry.path().to_path_buf(),
            source: e.into_io_error().unwrap_or_else(|| io::Error::other("stat failed")),
        })?;
        if !replaced.contains(rel) {
            entries.push(ZipEntry::file(rel, entry.path(), meta.permissions().mode() & 0o111 != 0));
        }
    }
    entries.extend(substitutes);
    for sig in ["RECORD.jws", "RECORD.p7s"] {
        let p = root.join(dist_info).join(sig);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|source| WheelError::Io { path: p.clone(), source })?;
        }
    }
    Ok(write_wheel(out, dist_info, entries, time)?.copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zip_times_clip() {
        assert_eq!(zip_time(0), DateTime::from_date_and_time(1980, 1, 1, 0, 0, 0).unwrap());
        // 2023-11-14T22:13:21Z -> seconds rounded down to even.
        assert_eq!(zip_time(1_700_000_001), DateTime::from_date_and_time(2023, 11, 14, 22, 13, 20).unwrap());
        assert_eq!(zip_time(i64::MAX).year(), 2107);
    }

    #[test]
    fn pack_is_deterministic_and_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for (name, data) in [
            ("pkg/b.py", "b"),
            ("pkg/a.py", "a"),
            ("pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n"),
            ("pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n"),
            ("pkg-1.0.dist-info/RECORD", "stale"),
            ("zzz.py", "z"),
        ] {
            let p = root.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
        }
        let out1 = dir.path().join("one.whl");
        let out2 = dir.path().join("two.whl");
        pack_dir(&root, "pkg-1.0.dist-info", &out1, zip_time(1_700_000_000)).unwrap();
        pack_dir(&root, "pkg-1.0.dist-info", &out2, zip_time(1_700_000_000)).unwrap();
        assert_eq!(std::fs::read(&out1).unwrap(), std::fs::read(&out2).unwrap());

        let mut w = WheelZip::open(&out1).unwrap();
        assert_eq!(
            w.file_names().unwrap(),
            [
                "pkg/a.py",
                "pkg/b.py",
                "zzz.py",
                "pkg-1.0.dist-info/METADATA",
                "pkg-1.0.dist-info/WHEEL",
                "pkg-1.0.dist-info/RECORD"
            ]
        );
        let scan = w.scan(None, |_, _| false).unwrap();
        let rows = record::parse(&w.read_file("pkg-1.0.dist-info/RECORD").unwrap(), "RECORD").unwrap();
        assert!(record::verify(&rows, &scan.files, "pkg-1.0.dist-info/RECORD").is_empty());
        assert_eq!(scan.latest_time, Some(zip_time(1_700_000_000)));
    }

    #[test]
    fn truncated_zip_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("p-1.dist-info")).unwrap();
        std::fs::write(root.join("p-1.dist-info/WHEEL"), "x".repeat(10_000)).unwrap();
        let out = dir.path().join("p-1-py3-none-any.whl");
        pack_dir(&root, "p-1.dist-info", &out, zip_time(0)).unwrap();
        let data = std::fs::read(&out).unwrap();
        std::fs::write(&out, &data[..data.len() / 2]).unwrap();
        let err = WheelZip::open(&out).err().unwrap().to_string();
        assert!(err.contains("p-1-py3-none-any.whl") && err.contains("truncated"), "{err}");
    }
}

#[cfg(test)]
mod zip64_tests {
    use super::*;

    /// More than 65535 members need the ZIP64 end-of-central-directory
    /// records; the archive must read back whole.
    #[test]
    fn many_members_use_zip64() {
        let dir = tempfile::tempdir().unwrap();
        let entries: Vec<ZipEntry> = (0..70_000).map(|i| ZipEntry::bytes(format!("p/{i:05}"), Vec::new())).collect();
        let out = dir.path().join("many.zip");
        crate::zip::write::write_file(&out, &entries, zip_time(0)).unwrap();
        let data = std::fs::read(&out).unwrap();
        // The ZIP64 end-of-central-directory record and locator are present.
        assert!(data.windows(4).any(|w| w == b"PK\x06\x06") && data.windows(4).any(|w| w == b"PK\x06\x07"));
        let mut w = WheelZip::open(&out).unwrap();
        assert_eq!(w.file_names().unwrap().len(), 70_000);
        let scan = w.scan(None, |_, _| false).unwrap();
        assert_eq!(scan.files.len(), 70_000);
        assert!(scan.files.values().all(|m| m.size == 0));
    }

    /// The same bytes whatever the thread count; large entries cut into
    /// pieces read back whole, with their RECORD hashes.
    #[test]
    fn same_bytes_on_any_thread_count() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.bin");
        let mut x = 7u64;
        let data: Vec<u8> = (0..(crate::zip::write::PIECE as usize * 3 + 12_345))
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                if i % 3 == 0 {
                    (x >> 56) as u8
                } else {
                    (i % 97) as u8
                }
            })
            .collect();
        std::fs::write(&big, &data).unwrap();
        let entries = vec![
            ZipEntry::bytes("p-1.dist-info/WHEEL", "Wheel-Version: 1.0\n"),
            ZipEntry::file("pkg/big.bin", &big, true),
            ZipEntry::bytes("pkg/empty", ""),
            ZipEntry::bytes("pkg/a.py", "print(1)\n"),
        ];
        let mut outs = Vec::new();
        for threads in [1, 3] {
            let out = dir.path().join(format!("t{threads}.zip"));
            let f = File::create(&out).unwrap();
            let mut z = ZipOut::new(BufWriter::new(f), &out, zip_time(0)).threads(threads);
            let written = z.write_entries(&entries).unwrap();
            z.finish().unwrap();
            assert_eq!(written[1].size, data.len() as u64);
            outs.push(std::fs::read(&out).unwrap());
        }
        assert!(outs[0] == outs[1], "thread count changed the bytes");
        let w1 = dir.path().join("one.whl");
        let rows = write_wheel(&w1, "p-1.dist-info", entries.clone(), zip_time(0)).unwrap().rows;
        let names: Vec<&str> = rows.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(names, ["pkg/a.py", "pkg/big.bin", "pkg/empty", "p-1.dist-info/WHEEL", "p-1.dist-info/RECORD"]);
        let mut w = WheelZip::open(&w1).unwrap();
        let scan = w.scan(Some(&dir.path().join("x")), |_, _| true).unwrap();
        let record = record::parse(&w.read_file("p-1.dist-info/RECORD").unwrap(), "RECORD").unwrap();
        assert!(record::verify(&record, &scan.files, "p-1.dist-info/RECORD").is_empty());
        assert_eq!(std::fs::read(dir.path().join("x/pkg/big.bin")).unwrap(), data);
        // Python's zipfile reads it too (CRC checked on every member).
        let ok = std::process::Command::new("python3")
            .args(["-c", "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None"])
            .arg(&w1)
            .status();
        if let Ok(st) = ok {
            assert!(st.success(), "python's zipfile rejects the wheel");
        }
    }
}
