//! What a zip holds and what was written for it: the crate's zip writer's
//! vocabulary (see `write`), apart so the pieces an entry is cut into
//! (`pieces`) can name it.

use super::reuse::Original;
use crate::splice::Splice;
use std::path::PathBuf;
use std::sync::Arc;

/// What an entry holds.
#[derive(Debug, Clone)]
pub enum EntrySource {
    Path(PathBuf),
    Bytes(Vec<u8>),
    /// An edited file, read from its parts (see [`crate::splice`]).
    Splice(Arc<Splice>),
    /// An edited member of a zip being rewritten: the unchanged stretch
    /// of its original stream is copied (see `reuse`).
    Reused(Arc<Splice>, Arc<Original>),
}

/// One file of the archive.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    pub name: String,
    pub source: EntrySource,
    pub executable: bool,
    /// Stored as is (zip method 0), not deflated: for data compressed
    /// already (`.kpack` archives are zstd frames), where deflate only
    /// costs time.
    pub stored: bool,
}

impl ZipEntry {
    pub fn bytes(name: impl Into<String>, data: impl Into<Vec<u8>>) -> ZipEntry {
        ZipEntry { name: name.into(), source: EntrySource::Bytes(data.into()), executable: false, stored: false }
    }

    pub fn file(name: impl Into<String>, path: impl Into<PathBuf>, executable: bool) -> ZipEntry {
        ZipEntry { name: name.into(), source: EntrySource::Path(path.into()), executable, stored: false }
    }

    pub fn splice(name: impl Into<String>, splice: Arc<Splice>, executable: bool) -> ZipEntry {
        ZipEntry { name: name.into(), source: EntrySource::Splice(splice), executable, stored: false }
    }
}

impl ZipEntry {
    /// This entry, stored rather than deflated.
    pub fn stored(self) -> ZipEntry {
        ZipEntry { stored: true, ..self }
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
