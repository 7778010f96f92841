//! Scratch space, owned: each process that opens the cache stages its work
//! (packed layers, downloads, unpacked trees, sandboxes on disk) in
//! `tmp/<its lease's name>/`, which it removes when it ends. A killed
//! process cannot remove it; its lease is then unlocked (see `lease`), so
//! the next process to open the cache, `cache prune` and `cache du` know it
//! is dead and remove what it left, however recent: a killed build no
//! longer leaves hundreds of megabytes for a day.
//!
//! Entries of `tmp/` that belong to no lease (left by versions that staged
//! in `tmp/` itself) go when no other process uses the cache, else after a day.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// This process's scratch directory, removed when dropped.
pub(crate) struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// `tmp/<owner>/` in the cache at `root` (`owner`: this process's lease).
    pub fn create(root: &Path, owner: &str) -> std::io::Result<Scratch> {
        let dir = super::local::scratch_root(root).join(owner);
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn remove(p: &Path) {
    let _ = if p.is_dir() && !p.is_symlink() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
}

fn older_than(p: &Path, age: Duration) -> bool {
    std::fs::symlink_metadata(p).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).is_some_and(|a| a > age)
}

/// Remove what dead processes left in `tmp/` of the cache at `root`; `own`
/// is the caller's lease (its scratch stays). Returns the bytes freed.
pub(crate) fn sweep(root: &Path, own: &str) -> u64 {
    let tmp = super::local::scratch_root(root);
    let Ok(entries) = std::fs::read_dir(&tmp) else { return 0 };
    let live = super::lease::live(root);
    let others_live = live.iter().any(|l| l != own);
    let mut freed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let dead = if name == own || live.contains(&name) {
            false
        } else if super::lease::names_a_lease(&name) {
            // An owner's directory whose lease is gone or unlocked.
            true
        } else {
            !others_live || older_than(&p, Duration::from_secs(24 * 3600))
        };
        if dead {
            freed += bytes(&p);
            remove(&p);
        }
    }
    super::lease::clear_dead(root);
    freed
}

/// The bytes under `path` (the scratch of running builds, for `cache du`).
pub(crate) fn bytes(path: &Path) -> u64 {
    walkdir::WalkDir::new(path)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::lease::Lease;

    #[test]
    fn what_dead_processes_left_goes_and_a_live_ones_stays() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let mine = Lease::take(r).unwrap();
        let other = Lease::take(r).unwrap();
        let other_scratch = Scratch::create(r, other.name()).unwrap();
        std::fs::write(other_scratch.dir().join("blob-x"), vec![0u8; 100]).unwrap();
        // A killed build: its lease file left unlocked, its scratch full.
        std::fs::write(r.join("leases/4242-dead"), "0\n").unwrap();
        std::fs::create_dir_all(r.join("tmp/4242-dead/entry-y")).unwrap();
        std::fs::write(r.join("tmp/4242-dead/entry-y/f"), vec![0u8; 300]).unwrap();
        // And one whose lease file is gone already.
        std::fs::create_dir_all(r.join("tmp/777-gone")).unwrap();
        std::fs::write(r.join("tmp/777-gone/f"), vec![0u8; 50]).unwrap();
        // An older version's file, staged in tmp/ itself.
        std::fs::write(r.join("tmp/blob-legacy"), vec![0u8; 7]).unwrap();

        assert_eq!(sweep(r, mine.name()), 350, "the dead ones' bytes");
        assert!(other_scratch.dir().join("blob-x").exists(), "a live process keeps its scratch");
        assert!(!r.join("tmp/4242-dead").exists() && !r.join("tmp/777-gone").exists());
        assert!(!r.join("leases/4242-dead").exists(), "the dead lease is cleared");
        assert!(r.join("tmp/blob-legacy").exists(), "another process runs: a young loose file may be its");
        drop(other_scratch);
        drop(other);
        assert_eq!(sweep(r, mine.name()), 7, "no one else runs: the loose file is no one's");
        assert_eq!(std::fs::read_dir(r.join("tmp")).unwrap().count(), 0);
    }
}
