//! Opening a wheel to rewrite it (relabel, repair): its RECORD verified,
//! its files unpacked into a temporary directory beside the output, so the
//! finished zip is renamed into place and nothing half-written remains.

use super::archive::{self, Scan, WheelZip};
use super::check::record_problems;
use super::name::WheelName;
use super::WheelError;
use std::path::{Path, PathBuf};

/// A wheel unpacked for rewriting; the directory goes when this is dropped.
pub struct Unpacked {
    /// Scratch space in the output directory (holds `root`).
    pub work: tempfile::TempDir,
    /// The wheel's files.
    pub root: PathBuf,
    pub name: WheelName,
    /// `{name}-{version}.dist-info`.
    pub dist_info: String,
    pub scan: Scan,
}

/// Check `wheel`'s name and RECORD and unpack it under a new
/// `out_dir/.quarry-{purpose}-*` directory.
pub fn unpack(wheel: &Path, out_dir: &Path, purpose: &str) -> Result<Unpacked, WheelError> {
    let file_name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = WheelName::parse(&file_name)?;
    std::fs::create_dir_all(out_dir).map_err(|source| WheelError::Io { path: out_dir.to_path_buf(), source })?;
    let work = tempfile::Builder::new()
        .prefix(&format!(".quarry-{purpose}-"))
        .tempdir_in(out_dir)
        .map_err(|source| WheelError::Io { path: out_dir.to_path_buf(), source })?;
    let root = work.path().join("wheel");
    let mut zip = WheelZip::open(wheel)?;
    let dist_info = zip.dist_info_dir()?;
    let scan = zip.scan(Some(&root), |_, _| true)?;
    let problems = record_problems(&mut zip, &dist_info, &scan)?;
    if !problems.is_empty() {
        return Err(WheelError::Record { wheel: wheel.to_path_buf(), problems });
    }
    Ok(Unpacked { work, root, name, dist_info, scan })
}

impl Unpacked {
    /// The time stamped on every member of the rewritten zip:
    /// SOURCE_DATE_EPOCH when set, else the input's latest.
    pub fn zip_time(&self) -> Result<zip::DateTime, WheelError> {
        Ok(match archive::source_date_epoch()? {
            Some(epoch) => archive::zip_time(epoch),
            None => self.scan.latest_time.unwrap_or_default(),
        })
    }
}
