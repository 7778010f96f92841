//! Reading the tree back: a snapshot of every path's inode and change time
//! before the steps, and after them what is new, changed or gone. A path
//! whose inode and ctime are unchanged was not touched (writing, renaming
//! over, chmod and chown all move the ctime), so the parent keeps what it
//! already knows of it; only what changed is reported, a changed file's
//! bytes copied to the spool.

use super::job::{Changed, Found};
use super::sys;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

fn abs(p: &[u8]) -> PathBuf {
    Path::new("/").join(std::ffi::OsStr::from_bytes(p))
}

/// (inode, ctime seconds, ctime nanoseconds).
type Stamp = (u64, i64, i64);

fn stamp(m: &fs::Metadata) -> Stamp {
    (m.ino(), m.ctime(), m.ctime_nsec())
}

/// Every path under `/` but those in `skip` (and below them), with its metadata.
fn walk(skip: &[Vec<u8>]) -> io::Result<BTreeMap<Vec<u8>, fs::Metadata>> {
    let root_dev = fs::symlink_metadata("/")?.dev();
    let mut out = BTreeMap::new();
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(abs(&dir))? {
            let e = e?;
            let p = crate::layer::path::join(&dir, e.file_name().as_bytes());
            if skip.contains(&p) {
                continue;
            }
            let m = fs::symlink_metadata(abs(&p))?;
            // Another file system mounted inside (a bind the steps made) is not the tree's.
            if m.dev() != root_dev {
                continue;
            }
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p, m);
        }
    }
    Ok(out)
}

pub struct Snapshot(HashMap<Vec<u8>, Stamp>);

pub fn snapshot(skip: &[Vec<u8>]) -> io::Result<Snapshot> {
    Ok(Snapshot(walk(skip)?.into_iter().map(|(p, m)| (p, stamp(&m))).collect()))
}

/// What the steps made or changed (path order) and what they removed
/// (only the top of a removed subtree).
pub fn compare(before: &Snapshot, skip: &[Vec<u8>], spool: &File) -> io::Result<(Vec<Changed>, Vec<Vec<u8>>)> {
    let now = walk(skip)?;
    let mut changed = Vec::new();
    let mut first_of_inode: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut spooled = 0u64;
    for (p, m) in &now {
        let same = before.0.get(p).is_some_and(|s| *s == stamp(m));
        // A changed inode shared with other paths: all of them are reported,
        // the first in path order as the file, the others as links to it.
        if same {
            continue;
        }
        let ft = m.file_type();
        let found = if ft.is_dir() {
            Found::Dir
        } else if ft.is_symlink() {
            Found::Symlink(fs::read_link(abs(p))?.as_os_str().as_bytes().to_vec())
        } else if ft.is_file() {
            if m.nlink() > 1 {
                if let Some(first) = first_of_inode.get(&m.ino()) {
                    changed.push(Changed {
                        path: p.clone(),
                        found: Found::Hardlink(first.clone()),
                        mode: m.mode() & 0o7777,
                        uid: m.uid(),
                        gid: m.gid(),
                        capability: None,
                    });
                    continue;
                }
                first_of_inode.insert(m.ino(), p.clone());
            }
            let f = File::open(abs(p))?;
            sys::copy_range(&f, 0, m.len(), spool)?;
            let at = spooled;
            spooled += m.len();
            Found::File { offset: at, size: m.len() }
        } else if ft.is_fifo() {
            Found::Fifo
        } else if ft.is_char_device() || ft.is_block_device() {
            let rdev = m.rdev();
            Found::Device { block: ft.is_block_device(), major: libc::major(rdev), minor: libc::minor(rdev) }
        } else {
            continue; // sockets: nothing an image holds
        };
        let capability = if ft.is_file() { sys::capability(&abs(p)) } else { None };
        changed.push(Changed {
            path: p.clone(),
            found,
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            capability,
        });
    }
    // Hardlinks to an inode changed where it has other, unchanged names:
    // those names moved ctime too, so they are in `changed` already.
    let mut removed: Vec<Vec<u8>> = before.0.keys().filter(|p| !now.contains_key(*p)).cloned().collect();
    removed.sort();
    let mut tops: Vec<Vec<u8>> = Vec::new();
    for p in removed {
        if tops.last().is_some_and(|t| p.starts_with(t) && p.get(t.len()) == Some(&b'/')) {
            continue;
        }
        tops.push(p);
    }
    Ok((changed, tops))
}

/// Remove everything under `/` on the root's own file system (a disk root
/// must not outlive the run; mounts inside are left alone).
pub fn clear_root() -> io::Result<()> {
    let root_dev = fs::symlink_metadata("/")?.dev();
    for e in fs::read_dir("/")? {
        let e = e?;
        let m = fs::symlink_metadata(e.path())?;
        if m.dev() != root_dev {
            continue;
        }
        if m.is_dir() {
            fs::remove_dir_all(e.path())?;
        } else {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}
