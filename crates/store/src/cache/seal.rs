//! Whether a blob of the cache is still the content its name says, without
//! reading it on every use. When a blob is known good (committed by a
//! writer that hashed it, or rehashed here), its file's identity is noted
//! as its seal: size, modification time (nanoseconds) and inode. A blob
//! whose file still matches its seal is trusted; one that does not (any
//! write to it moves its mtime; a copy moves its inode) is hashed again
//! before use, and dropped when its bytes are not its digest. Lookups stamp
//! a blob's access time, never its modification time (see `lease`), so use
//! keeps the seal. `--verify` rehashes every blob it uses.

use super::local::Local;
use crate::oci::Digest;
use std::os::unix::fs::MetadataExt;

/// The notes kind seals are kept under (`notes/blob-seals/<hex>`).
const SEALS: &str = "blob-seals";

/// What a look at a blob found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intact {
    /// There, whole, and its digest.
    Yes,
    /// Not there, or not its size.
    Missing,
    /// There, but its bytes are not its digest: it was removed.
    Damaged,
}

fn seal_of(m: &std::fs::Metadata) -> String {
    let mtime = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
    format!("{} {mtime} {}", m.len(), m.ino())
}

/// Note that the blob's file, as it is now, holds `digest`.
pub(crate) fn seal(local: &Local, digest: &Digest) {
    if let Ok(m) = std::fs::metadata(local.blobs().path(digest)) {
        let _ = local.write_note(SEALS, &digest.hex(), seal_of(&m).as_bytes());
    }
}

/// Is the blob `digest` there with `size` bytes, and its digest (checked
/// by seal, or by hashing when the seal does not match or `rehash`)?
/// A damaged blob is removed, and `what` (the entry it belongs to) named
/// in a warning: the caller makes it again.
pub(crate) fn intact(local: &Local, digest: &Digest, size: u64, rehash: bool, what: &str) -> Intact {
    let path = local.blobs().path(digest);
    let Ok(m) = std::fs::metadata(&path) else { return Intact::Missing };
    if m.len() != size {
        return Intact::Missing;
    }
    let noted = local.note_path(SEALS, &digest.hex()).ok().and_then(|p| std::fs::read(p).ok());
    if !rehash && noted.as_deref() == Some(seal_of(&m).as_bytes()) {
        return Intact::Yes;
    }
    match crate::oci::digest::digest_file(&path) {
        Ok((actual, n)) if actual == *digest && n == size => {
            seal(local, digest);
            Intact::Yes
        }
        Ok((actual, n)) => {
            log::warn!(
                "cache `{}`: {what}: blob {digest} holds other bytes ({actual}, {n} bytes): it was damaged; removed, and made again",
                local.root().display()
            );
            let _ = std::fs::remove_file(&path);
            if let Ok(p) = local.note_path(SEALS, &digest.hex()) {
                let _ = std::fs::remove_file(p);
            }
            Intact::Damaged
        }
        Err(_) => Intact::Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_sealed_blob_is_trusted_until_its_file_changes() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp/own");
        std::fs::create_dir_all(&tmp).unwrap();
        let local = Local::open(root.path(), &tmp).unwrap();
        let mut w = local.blobs().writer().unwrap();
        w.write_all(b"layer bytes").unwrap();
        let stored = w.commit().unwrap();
        let d = stored.digest;
        // No seal yet: hashed once, then sealed.
        assert_eq!(intact(&local, &d, 11, false, "t"), Intact::Yes);
        assert!(local.note_path(SEALS, &d.hex()).unwrap().is_file());
        assert_eq!(intact(&local, &d, 12, false, "t"), Intact::Missing, "another size");
        // Reading and stamping its access time keep the seal.
        let _ = std::fs::read(&stored.path).unwrap();
        filetime::set_file_atime(&stored.path, filetime::FileTime::now()).unwrap();
        assert_eq!(intact(&local, &d, 11, false, "t"), Intact::Yes);
        // One byte flipped in place: its mtime moved, it is hashed, found damaged and removed.
        std::thread::sleep(std::time::Duration::from_millis(10));
        let mut f = std::fs::OpenOptions::new().write(true).open(&stored.path).unwrap();
        f.write_all(b"L").unwrap();
        drop(f);
        assert_eq!(intact(&local, &d, 11, false, "t"), Intact::Damaged);
        assert!(!stored.path.exists());
    }

    #[test]
    fn rehash_finds_what_the_seal_hides() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp/own");
        std::fs::create_dir_all(&tmp).unwrap();
        let local = Local::open(root.path(), &tmp).unwrap();
        let mut w = local.blobs().writer().unwrap();
        w.write_all(b"abc").unwrap();
        let stored = w.commit().unwrap();
        seal(&local, &stored.digest);
        // Damage that keeps size and mtime (bit rot; a write with the time put back).
        let m = std::fs::metadata(&stored.path).unwrap();
        std::fs::write(&stored.path, b"abd").unwrap();
        filetime::set_file_mtime(&stored.path, filetime::FileTime::from_last_modification_time(&m)).unwrap();
        assert_eq!(intact(&local, &stored.digest, 3, false, "t"), Intact::Yes, "the seal is only a stat");
        assert_eq!(intact(&local, &stored.digest, 3, true, "t"), Intact::Damaged, "--verify reads it");
    }
}
