//! Keeping `quarry cache prune` away from what running builds use.
//!
//! Every process that uses the cache holds a lease: a file in `leases/`
//! that it keeps locked (flock) while it runs and that records when it
//! started. Every lookup that finds an entry, and every commit, stamps the
//! entry with the current time (its mtime) while holding the cache's prune
//! lock shared; `prune` holds that lock exclusively for its whole pass and
//! never removes an entry stamped at or after the start of a live lease.
//! So an entry a running build found or made stays, and a lookup that
//! waits for a prune to finish sees the truth afterwards. A lease whose
//! file is no longer locked belonged to a process that is gone.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// This process's lease (released when dropped).
pub(crate) struct Lease {
    file: File,
    path: PathBuf,
    /// The lease file's name: also its scratch directory's in `tmp/`.
    name: String,
    /// The cache-wide prune lock, held shared around stamps.
    prune_lock: File,
}

fn flock(f: &File, op: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a descriptor this process owns.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn open_lock(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)
}

impl Lease {
    pub fn take(root: &Path) -> io::Result<Lease> {
        let dir = root.join("leases");
        std::fs::create_dir_all(&dir)?;
        let prune_lock = open_lock(&root.join("prune.lock"))?;
        // Written and locked under a name no one reads, then renamed: a
        // lease is never seen unlocked (and taken for a dead process's)
        // while it is being made. The lock stays with the file.
        let mut tmp = tempfile::Builder::new().prefix(CREATING).tempfile_in(&dir)?;
        let started = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        writeln!(tmp, "{}", started.as_nanos())?;
        flock(tmp.as_file(), libc::LOCK_EX)?;
        let (file, creating) = tmp.keep().map_err(|e| e.error)?;
        let suffix =
            creating.file_name().and_then(|n| n.to_str()).unwrap_or_default().trim_start_matches(CREATING).to_string();
        let name = format!("{}-{suffix}", std::process::id());
        let path = dir.join(&name);
        std::fs::rename(&creating, &path)?;
        Ok(Lease { file, path, name, prune_lock })
    }

    /// The lease file's name (and its scratch directory's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `f` (a lookup that stamps what it finds, or a commit) while no
    /// prune runs.
    pub fn stamping<T>(&self, f: impl FnOnce() -> T) -> T {
        let locked = flock(&self.prune_lock, libc::LOCK_SH).is_ok();
        let r = f();
        if locked {
            let _ = flock(&self.prune_lock, libc::LOCK_UN);
        }
        r
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = flock(&self.file, libc::LOCK_UN);
    }
}

/// The prefix of a lease file being made (see [`Lease::take`]).
const CREATING: &str = ".creating-";

/// Whether the lease `name` in the cache at `root` is held by a live
/// process: its file exists and is locked. A file no one locks belonged to
/// a process that is gone (killed, or it crashed).
pub(crate) fn is_live(root: &Path, name: &str) -> bool {
    let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(root.join("leases").join(name)) else {
        return false;
    };
    let unlocked = flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_ok();
    if unlocked {
        let _ = flock(&f, libc::LOCK_UN);
    }
    !unlocked
}

/// Whether `name` has the shape of a lease's (`<pid>-<suffix>`).
pub(crate) fn names_a_lease(name: &str) -> bool {
    name.split_once('-')
        .is_some_and(|(pid, rest)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) && !rest.is_empty())
}

/// Remove the lease files of processes that are gone (and files of leases
/// never finished, once an hour old).
pub(crate) fn clear_dead(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root.join("leases")) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let dead = if name.starts_with(CREATING) {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|a| a.as_secs() > 3600)
        } else {
            !is_live(root, &name)
        };
        if dead {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The live leases of the cache at `root`, by name.
pub(crate) fn live(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("leases"))
        .map(|r| r.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    v.retain(|n| !n.starts_with(CREATING) && is_live(root, n));
    v.sort();
    v
}

/// Mark `path` (an entry's directory or file) as used now.
pub(crate) fn stamp(path: &Path) {
    let _ = filetime::set_file_mtime(path, filetime::FileTime::now());
}

/// Mark a blob as used now: its access time, so its modification time
/// stays what it was when its content was written (its seal, see `seal`).
pub(crate) fn stamp_blob(path: &Path) {
    let _ = filetime::set_file_atime(path, filetime::FileTime::now());
}

/// Held by `prune` for its whole pass.
pub(crate) struct PruneGuard {
    _lock: File,
    /// The earliest start of a live lease: entries stamped since are in use.
    pub in_use_since: Option<SystemTime>,
}

impl PruneGuard {
    pub fn take(root: &Path) -> io::Result<PruneGuard> {
        let lock = open_lock(&root.join("prune.lock"))?;
        flock(&lock, libc::LOCK_EX)?;
        let mut earliest: Option<SystemTime> = None;
        if let Ok(entries) = std::fs::read_dir(root.join("leases")) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(CREATING) {
                    continue;
                }
                let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(e.path()) else { continue };
                if flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
                    // Its process is gone.
                    let _ = std::fs::remove_file(e.path());
                    continue;
                }
                let started = std::fs::read_to_string(e.path())
                    .ok()
                    .and_then(|t| t.trim().parse::<u128>().ok())
                    .map(|ns| SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(ns as u64))
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                earliest = Some(earliest.map_or(started, |t| t.min(started)));
            }
        }
        Ok(PruneGuard { _lock: lock, in_use_since: earliest })
    }

    /// An entry last stamped at `used` may go.
    pub fn may_remove(&self, used: SystemTime) -> bool {
        self.in_use_since.is_none_or(|since| used < since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_lease_protects_what_it_stamped_and_a_dead_one_is_cleared() {
        let root = tempfile::tempdir().unwrap();
        let before = SystemTime::now() - std::time::Duration::from_secs(60);
        let lease = Lease::take(root.path()).unwrap();
        let entry = root.path().join("entry");
        std::fs::write(&entry, "x").unwrap();
        lease.stamping(|| stamp(&entry));
        let used = std::fs::metadata(&entry).unwrap().modified().unwrap();
        {
            let g = PruneGuard::take(root.path()).unwrap();
            assert!(!g.may_remove(used), "stamped during a live lease");
            assert!(g.may_remove(before), "older than every live lease");
        }
        drop(lease);
        // A lease file left by a killed process (not locked) is cleared.
        std::fs::write(root.path().join("leases/999999-dead"), "0\n").unwrap();
        let g = PruneGuard::take(root.path()).unwrap();
        assert!(g.in_use_since.is_none());
        assert!(g.may_remove(used));
        assert_eq!(std::fs::read_dir(root.path().join("leases")).unwrap().count(), 0);
    }
}
