//! Bit-identical wheels: a wheel as a build backend wrote it (file times
//! of the build, the backend's member order and modes) rewritten with
//! quarry's deterministic zip writer: members sorted with `.dist-info`
//! last, every time set to SOURCE_DATE_EPOCH (clipped to the zip range),
//! modes 0644/0755, RECORD regenerated. Same files in, same bytes out.

use super::archive;
use super::unpack::unpack;
use super::WheelError;
use std::path::{Path, PathBuf};

/// Rewrite `wheel` into `out_dir` (same file name) with every member
/// stamped `epoch` (seconds since 1970); its RECORD is checked first, so a
/// backend's wrong RECORD is an error, not silently replaced.
pub fn normalize(wheel: &Path, out_dir: &Path, epoch: u64) -> Result<PathBuf, WheelError> {
    let u = unpack(wheel, out_dir, "normalize")?;
    let out = out_dir.join(wheel.file_name().unwrap_or_default());
    archive::pack_dir(&u.root, &u.dist_info, &out, archive::zip_time(epoch.min(i64::MAX as u64) as i64))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A wheel as a backend might write it: unsorted, build-time stamps,
    /// odd modes, directory entries.
    fn messy_wheel(path: &Path, time: zip::DateTime, mode: u32) {
        let files: [(&str, &[u8]); 3] = [
            ("demo-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"),
            ("demo/__init__.py", b"x = 1\n"),
            ("demo-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nTag: py3-none-any\n"),
        ];
        let mut rows = String::new();
        for (n, d) in files {
            use sha2::Digest;
            let h = crate::wheel::record::sha256_field(&sha2::Sha256::digest(d));
            rows.push_str(&format!("{n},{h},{}\n", d.len()));
        }
        rows.push_str("demo-1.0.dist-info/RECORD,,\n");
        let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        let o = zip::write::SimpleFileOptions::default().last_modified_time(time).unix_permissions(mode);
        z.add_directory("demo/", o).unwrap();
        for (n, d) in files {
            z.start_file(n, o).unwrap();
            z.write_all(d).unwrap();
        }
        z.start_file("demo-1.0.dist-info/RECORD", o).unwrap();
        z.write_all(rows.as_bytes()).unwrap();
        z.finish().unwrap();
    }

    #[test]
    fn different_builds_give_the_same_bytes() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let name = "demo-1.0-py3-none-any.whl";
        messy_wheel(&a.join(name), zip::DateTime::from_date_and_time(2024, 5, 1, 10, 0, 0).unwrap(), 0o664);
        messy_wheel(&b.join(name), zip::DateTime::from_date_and_time(2025, 1, 2, 3, 4, 6).unwrap(), 0o600);
        assert_ne!(std::fs::read(a.join(name)).unwrap(), std::fs::read(b.join(name)).unwrap());
        let na = normalize(&a.join(name), &d.path().join("na"), 0).unwrap();
        let nb = normalize(&b.join(name), &d.path().join("nb"), 0).unwrap();
        assert_eq!(na.file_name().unwrap(), name);
        assert_eq!(std::fs::read(&na).unwrap(), std::fs::read(&nb).unwrap());
        let mut w = archive::WheelZip::open(&na).unwrap();
        assert_eq!(w.file_names().unwrap().last().unwrap(), "demo-1.0.dist-info/RECORD");
        assert_eq!(w.scan(None, |_, _| false).unwrap().latest_time, Some(archive::zip_time(0)));
        // Another epoch, other bytes.
        let nc = normalize(&a.join(name), &d.path().join("nc"), 1_700_000_000).unwrap();
        assert_ne!(std::fs::read(&na).unwrap(), std::fs::read(&nc).unwrap());
    }
}
