//! Wheel zips: reading (safe paths, every byte hashed while it streams by)
//! and deterministic writing (entries sorted with `.dist-info` last and
//! RECORD at the very end, one fixed timestamp, fixed permissions, ZIP64
//! where a file or the archive needs it, files streamed from disk).

use super::record::{self, Measured, RecordRow};
use super::WheelError;
use crate::tarball::path::normalize_member;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipArchive, ZipWriter};

/// Deflate level of written wheels (zlib's default, as pip and auditwheel use).
const DEFLATE_LEVEL: i64 = 6;
/// Files at or above this size get ZIP64 local headers.
const ZIP64_FILE_THRESHOLD: u64 = 0xFFFF_FFFF;
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
}

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
            let mut entry = self.zip.by_index(i).map_err(|e| WheelError::Zip {
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
                f.into_inner()
                    .map_err(|e| WheelError::Io { path: path.clone(), source: e.into_error() })?
                    .sync_all()
                    .ok();
                scan.extracted.push(name.clone());
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

/// SOURCE_DATE_EPOCH from the environment, when set.
pub fn source_date_epoch() -> Result<Option<i64>, WheelError> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse::<i64>().map(Some).map_err(|_| WheelError::BadEpoch { value: v.clone() })
        }
        _ => Ok(None),
    }
}

/// A zip timestamp for a Unix time: UTC, clipped to the zip range
/// (1980-01-01 .. 2107-12-31), seconds rounded down to even.
pub fn zip_time(epoch: i64) -> DateTime {
    use chrono::{Datelike, Timelike};
    let min = 315_532_800; // 1980-01-01T00:00:00Z
    let max = 4_354_819_198; // 2107-12-31T23:59:58Z
    let t = chrono::DateTime::from_timestamp(epoch.clamp(min, max), 0).unwrap_or_default().naive_utc();
    DateTime::from_date_and_time(
        t.year() as u16,
        t.month() as u8,
        t.day() as u8,
        t.hour() as u8,
        t.minute() as u8,
        (t.second() & !1) as u8,
    )
    .unwrap_or_default()
}

/// Sort key of a wheel member: package files first, then the `.dist-info`
/// directory, RECORD (and its signatures) at the very end.
fn member_order(name: &str, dist_info: &str) -> (u8, u8, String) {
    let in_dist_info = name.split('/').next().is_some_and(|top| top.ends_with(".dist-info"));
    let is_record = name == format!("{dist_info}/RECORD");
    (u8::from(in_dist_info), u8::from(is_record), name.to_string())
}

/// Turn the unpacked wheel under `root` into a wheel at `out`: RECORD is
/// regenerated (signatures dropped), members are sorted and stamped with
/// `time`; the zip is written to a temporary name and renamed, so a failure
/// never leaves a partial wheel at `out`.
pub fn pack_dir(root: &Path, dist_info: &str, out: &Path, time: DateTime) -> Result<(), WheelError> {
    let mut names = Vec::new();
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
        names.push(rel.to_string());
    }
    let record_name = format!("{dist_info}/RECORD");
    names.retain(|n| n != &record_name && *n != format!("{record_name}.jws") && *n != format!("{record_name}.p7s"));
    for sig in ["RECORD.jws", "RECORD.p7s"] {
        let p = root.join(dist_info).join(sig);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|source| WheelError::Io { path: p.clone(), source })?;
        }
    }
    names.push(record_name.clone());
    names.sort_by_cached_key(|n| member_order(n, dist_info));

    let mut rows = Vec::with_capacity(names.len());
    for n in &names {
        if *n == record_name {
            rows.push(RecordRow { path: n.clone(), hash: None, size: None });
            continue;
        }
        let path = root.join(n);
        let f = File::open(&path).map_err(|source| WheelError::Io { path: path.clone(), source })?;
        let mut hasher = HashCount::default();
        io::copy(&mut BufReader::with_capacity(1 << 16, f), &mut hasher)
            .map_err(|source| WheelError::Io { path: path.clone(), source })?;
        let field = record::sha256_field(&hasher.hasher.finalize());
        rows.push(RecordRow {
            path: n.clone(),
            hash: Some(("sha256".into(), field["sha256=".len()..].to_string())),
            size: Some(hasher.count),
        });
    }
    let record_path = root.join(&record_name);
    std::fs::write(&record_path, record::write(&rows))
        .map_err(|source| WheelError::Io { path: record_path, source })?;

    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".quarry-wheel-")
        .suffix(".tmp")
        .tempfile_in(parent)
        .map_err(|source| WheelError::Io { path: parent.to_path_buf(), source })?;
    let entries: Vec<(String, PathBuf)> = names.iter().map(|n| (n.clone(), root.join(n))).collect();
    write_zip(&entries, time, tmp.as_file()).map_err(|e| match e {
        WriteError::Io(path, source) => WheelError::Io { path, source },
        WriteError::Zip(why) => WheelError::Zip { wheel: out.to_path_buf(), why },
    })?;
    // Wheels are ordinary files (tempfile creates 0600).
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|source| WheelError::Io { path: tmp.path().to_path_buf(), source })?;
    tmp.persist(out).map_err(|e| WheelError::Io { path: out.to_path_buf(), source: e.error })?;
    Ok(())
}

#[derive(Default)]
struct HashCount {
    hasher: Sha256,
    count: u64,
}

impl Write for HashCount {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        self.count += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum WriteError {
    Io(PathBuf, io::Error),
    Zip(String),
}

/// Write `entries` (member name, file on disk), in the order given.
fn write_zip(entries: &[(String, PathBuf)], time: DateTime, out: &File) -> Result<(), WriteError> {
    use std::os::unix::fs::PermissionsExt;
    let mut zip = ZipWriter::new(BufWriter::with_capacity(1 << 20, out));
    for (name, path) in entries {
        let meta = std::fs::metadata(path).map_err(|e| WriteError::Io(path.clone(), e))?;
        let mode = if meta.permissions().mode() & 0o111 != 0 { 0o755 } else { 0o644 };
        // Deflating nothing only adds a two-byte stream: store empty files.
        let (method, level) = if meta.len() == 0 {
            (CompressionMethod::Stored, None)
        } else {
            (CompressionMethod::Deflated, Some(DEFLATE_LEVEL))
        };
        let options = SimpleFileOptions::default()
            .compression_method(method)
            .compression_level(level)
            .last_modified_time(time)
            .unix_permissions(mode)
            .large_file(meta.len() >= ZIP64_FILE_THRESHOLD);
        zip.start_file(name.as_str(), options).map_err(|e| WriteError::Zip(format!("writing `{name}`: {e}")))?;
        let f = File::open(path).map_err(|e| WriteError::Io(path.clone(), e))?;
        io::copy(&mut BufReader::with_capacity(1 << 16, f), &mut zip).map_err(|e| WriteError::Io(path.clone(), e))?;
    }
    let mut w = zip.finish().map_err(|e| WriteError::Zip(format!("finishing the archive: {e}")))?;
    w.flush().map_err(|e| WriteError::Io(PathBuf::from("<output wheel>"), e))?;
    Ok(())
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
        let one = dir.path().join("one");
        std::fs::write(&one, b"").unwrap(); // empty: stored, so the test stays fast
        let entries: Vec<(String, PathBuf)> = (0..70_000).map(|i| (format!("p/{i:05}"), one.clone())).collect();
        let out = dir.path().join("many.zip");
        let f = File::create(&out).unwrap();
        assert!(write_zip(&entries, zip_time(0), &f).is_ok());
        drop(f);
        let data = std::fs::read(&out).unwrap();
        // The ZIP64 end-of-central-directory record and locator are present.
        assert!(data.windows(4).any(|w| w == b"PK\x06\x06") && data.windows(4).any(|w| w == b"PK\x06\x07"));
        let mut w = WheelZip::open(&out).unwrap();
        assert_eq!(w.file_names().unwrap().len(), 70_000);
        let scan = w.scan(None, |_, _| false).unwrap();
        assert_eq!(scan.files.len(), 70_000);
        assert!(scan.files.values().all(|m| m.size == 0));
    }
}
