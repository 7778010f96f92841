//! The one way content enters the local tier: written under a temporary
//! name in the cache's `tmp/` (on the same file system), checked, then
//! renamed to its final name. A rename is atomic, so a reader sees a whole
//! entry or none, and a killed writer leaves only a temporary file that no
//! lookup ever trusts (`tmp/` is swept of day-old leftovers).
//! Blobs and other files named by their digest are committed by
//! [`crate::oci::BlobWriter`], which checks the digest on the way.

use std::io::{self, Write};
use std::path::Path;

/// What a commit does when the final name is already taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existing {
    /// Keep what is there: an entry under a key is the same whoever made it
    /// (two builds that committed one key at once both succeed).
    Keep,
    /// The newer entry wins (a compiler cache grows with every build).
    Replace,
}

/// Make `staged` (a directory under `tmp`) the entry at `dest`.
pub(crate) fn commit_dir(staged: tempfile::TempDir, dest: &Path, existing: Existing, tmp: &Path) -> io::Result<()> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let staged = staged.keep();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match std::fs::rename(&staged, dest) {
            Ok(()) => return Ok(()),
            Err(e) if dest.exists() => {
                if existing == Existing::Keep || attempts > 5 {
                    // Another build stored the same key meanwhile: theirs is as good.
                    let _ = std::fs::remove_dir_all(&staged);
                    return if existing == Existing::Keep { Ok(()) } else { Err(e) };
                }
                // Move the old entry aside (one rename: readers see old or new), then retry.
                let aside = tempfile::Builder::new().prefix("replaced-").tempdir_in(tmp)?.keep();
                let _ = std::fs::rename(dest, aside.join("entry"));
                let _ = std::fs::remove_dir_all(&aside);
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                return Err(e);
            }
        }
    }
}

/// Write `data` as the file `dest` (a record or a note), through a temporary file in `tmp`.
pub(crate) fn commit_bytes(data: &[u8], dest: &Path, tmp: &Path) -> io::Result<()> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = tempfile::Builder::new().prefix("file-").tempfile_in(tmp)?;
    f.write_all(data)?;
    f.flush()?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644));
    f.persist(dest).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(tmp: &Path, content: &str) -> tempfile::TempDir {
        let d = tempfile::Builder::new().prefix("stage-").tempdir_in(tmp).unwrap();
        std::fs::write(d.path().join("f"), content).unwrap();
        d
    }

    #[test]
    fn keep_leaves_the_first_and_replace_puts_the_newest() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let dest = root.path().join("bucket/key");
        commit_dir(staged(&tmp, "one"), &dest, Existing::Keep, &tmp).unwrap();
        commit_dir(staged(&tmp, "two"), &dest, Existing::Keep, &tmp).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("f")).unwrap(), "one");
        commit_dir(staged(&tmp, "three"), &dest, Existing::Replace, &tmp).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("f")).unwrap(), "three");
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "nothing left in tmp/");

        commit_bytes(b"{}", &root.path().join("layers/k.json"), &tmp).unwrap();
        assert_eq!(std::fs::read(root.path().join("layers/k.json")).unwrap(), b"{}");
    }
}
