//! `quarry diff A B`: what differs between two images (OCI layouts), two
//! wheels or two lock files, for people (text, markdown for a PR comment) and for bots
//! (JSON): packages added, removed, up- and downgraded; for images also the
//! config fields, the layers shared and changed, and the files of each
//! changed layer.

pub mod explain;
pub mod image;
pub mod locks;
pub mod packages;
mod render;
pub mod wheel;

pub use render::{markdown, text};

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("{path}: {message}")]
    Image { path: String, message: String },
    #[error(transparent)]
    Lock(#[from] crate::plan::lockfile::LockFileError),
    #[error(
        "{layout} and {other} are not of one kind: `quarry diff` compares two images, two wheels or two lock files"
    )]
    Mixed { layout: String, other: String },
    #[error("{path} is neither an OCI layout (a directory with index.json), a wheel (.whl) nor a lock file (IMAGE.lock); `quarry diff` compares two of one kind")]
    Kind { path: String },
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Report {
    Images(image::ImageDiff),
    Locks(locks::LockDiff),
    Wheels(wheel::WheelDiff),
}

impl Report {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        match self {
            Report::Images(d) => d.identical,
            Report::Locks(d) => d.sets.is_empty() && d.pypi.is_empty(),
            Report::Wheels(d) => d.identical,
        }
    }
}

fn is_layout(p: &std::path::Path) -> bool {
    p.join("index.json").is_file()
}

/// Compare `a` and `b`: two layouts, two wheels, or two lock files.
pub fn diff(a: &std::path::Path, b: &std::path::Path) -> Result<Report, DiffError> {
    match (wheel::is_wheel(a), wheel::is_wheel(b)) {
        (true, true) => return Ok(Report::Wheels(wheel::diff(a, b)?)),
        (true, false) | (false, true) => {
            let (w, other) = if wheel::is_wheel(a) { (a, b) } else { (b, a) };
            return Err(DiffError::Mixed { layout: w.display().to_string(), other: other.display().to_string() });
        }
        (false, false) => {}
    }
    match (is_layout(a), is_layout(b)) {
        (true, true) => return Ok(Report::Images(image::diff(a, b)?)),
        (true, false) => {
            return Err(DiffError::Mixed { layout: a.display().to_string(), other: b.display().to_string() })
        }
        (false, true) => {
            return Err(DiffError::Mixed { layout: b.display().to_string(), other: a.display().to_string() })
        }
        (false, false) => {}
    }
    let read = |p: &std::path::Path| -> Result<crate::plan::lockfile::LockFile, DiffError> {
        if !p.is_file() || is_layout(p) {
            return Err(DiffError::Kind { path: p.display().to_string() });
        }
        crate::plan::lockfile::LockFile::read(p)?.ok_or_else(|| DiffError::Kind { path: p.display().to_string() })
    };
    let (la, lb) = (read(a)?, read(b)?);
    Ok(Report::Locks(locks::diff(&la, &lb)))
}
