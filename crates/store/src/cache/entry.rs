//! Directory entries (kernel outputs, wheels, compiler caches, tools, PyPI
//! files): `files/` and, when the maker recorded something beside them,
//! `meta.json`. An entry being made is [`Staged`] under the cache's `tmp/`
//! and committed by one rename (see `commit`).

use std::io;
use std::path::{Path, PathBuf};

/// A committed directory entry.
#[derive(Debug, Clone)]
pub struct Entry {
    dir: PathBuf,
}

impl Entry {
    pub(crate) fn new(dir: PathBuf) -> Entry {
        Entry { dir }
    }

    /// The entry's files.
    pub fn files(&self) -> PathBuf {
        self.dir.join("files")
    }

    /// What the maker recorded beside the files, if anything.
    pub fn meta(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join("meta.json")).ok()
    }

    /// Copy the entry's files into `out` (created when missing; files there
    /// with the same names are replaced). Returns the files copied,
    /// relative, sorted.
    pub fn copy_files_to(&self, out: &Path) -> io::Result<Vec<PathBuf>> {
        copy_tree(&self.files(), out)
    }
}

/// A directory entry being made: fill [`Staged::files`], then commit it.
pub struct Staged {
    dir: tempfile::TempDir,
}

impl Staged {
    pub(crate) fn new(dir: tempfile::TempDir) -> Staged {
        Staged { dir }
    }

    pub(crate) fn into_dir(self) -> tempfile::TempDir {
        self.dir
    }

    pub fn files(&self) -> PathBuf {
        self.dir.path().join("files")
    }

    pub fn set_meta(&self, data: &[u8]) -> io::Result<()> {
        std::fs::write(self.dir.path().join("meta.json"), data)
    }
}

fn copy_tree(from: &Path, out: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)?;
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(from).follow_links(false).sort_by_file_name().min_depth(1) {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry.path().strip_prefix(from).map_err(io::Error::other)?;
        let dest = out.join(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            std::fs::create_dir_all(&dest)?;
            continue;
        }
        if dest.symlink_metadata().is_ok() {
            std::fs::remove_file(&dest)?;
        }
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
        } else {
            std::fs::copy(entry.path(), &dest)?;
        }
        files.push(rel.to_path_buf());
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_copied_out_over_what_is_there() {
        let d = tempfile::tempdir().unwrap();
        let e = Entry::new(d.path().join("entry"));
        std::fs::create_dir_all(e.files().join("lib")).unwrap();
        std::fs::write(e.files().join("lib/libk.so"), "elf").unwrap();
        std::os::unix::fs::symlink("lib/libk.so", e.files().join("libk.so")).unwrap();
        let out = d.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("libk.so"), "replaced").unwrap();
        let copied = e.copy_files_to(&out).unwrap();
        assert_eq!(copied, [PathBuf::from("lib/libk.so"), PathBuf::from("libk.so")]);
        assert_eq!(std::fs::read_to_string(out.join("libk.so")).unwrap(), "elf");
    }
}
