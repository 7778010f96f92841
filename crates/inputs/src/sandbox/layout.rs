//! Laying a tree out inside the sandbox (already chrooted: an absolute
//! symlink cannot lead out): the layers below, as a container runtime
//! applies them (whiteouts, opaque directories, later layers over earlier
//! ones), then the job's entries over them. Owners, modes, capabilities and
//! times are set as recorded, times clamped to the build's epoch so that
//! what the steps read (a cache that records a directory's time, a `.pyc`
//! that records its source's) is what the image will hold.

use super::error::{io, HelperError};
use super::job::{Entry, EntryKind};
use super::sys;
use crate::layer::path::{join, normalize_member, parent};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self as stdio, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn abs(p: &[u8]) -> PathBuf {
    Path::new("/").join(std::ffi::OsStr::from_bytes(p))
}

/// Make way for a new entry at `at`: a directory stays for a directory,
/// anything else goes.
fn clear(at: &Path, dir: bool) -> stdio::Result<bool> {
    match fs::symlink_metadata(at) {
        Ok(m) if m.is_dir() && dir => Ok(true),
        Ok(m) if m.is_dir() => fs::remove_dir_all(at).map(|_| false),
        Ok(_) => fs::remove_file(at).map(|_| false),
        Err(e) if e.kind() == stdio::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn parents(at: &Path) -> stdio::Result<()> {
    match at.parent() {
        Some(p) if !p.as_os_str().is_empty() => fs::create_dir_all(p),
        _ => Ok(()),
    }
}

/// What one entry is, whatever it came from.
enum Make<'a> {
    Dir,
    File(&'a mut dyn FnMut(&File) -> stdio::Result<()>),
    Symlink(&'a [u8]),
    Hardlink(&'a [u8]),
    Fifo,
}

struct Meta<'a> {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    capability: Option<&'a [u8]>,
}

fn make(path: &[u8], what: Make, meta: &Meta) -> stdio::Result<()> {
    let at = abs(path);
    parents(&at)?;
    let is_dir = matches!(what, Make::Dir);
    let exists = clear(&at, is_dir)?;
    match what {
        Make::Dir => {
            if !exists {
                fs::create_dir(&at)?;
            }
        }
        Make::File(fill) => {
            let f = OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(&at)?;
            fill(&f)?;
        }
        Make::Symlink(target) => std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), &at)?,
        Make::Hardlink(target) => {
            fs::hard_link(abs(target), &at)?;
            return Ok(()); // the inode's metadata is the target's
        }
        Make::Fifo => sys::mkfifo(&at, 0o600)?,
    }
    sys::lchown(&at, meta.uid, meta.gid)?;
    let symlink = fs::symlink_metadata(&at)?.file_type().is_symlink();
    if !symlink {
        // After the owner: chown clears setuid and setgid bits.
        fs::set_permissions(&at, fs::Permissions::from_mode(meta.mode & 0o7777))?;
        if let Some(cap) = meta.capability {
            sys::set_capability(&at, cap)?;
        }
    }
    sys::set_mtime(&at, meta.mtime)
}

/// Directory times last: writing into a directory moves its time.
fn settle_dir_times(dirs: &[(Vec<u8>, i64)]) -> stdio::Result<()> {
    for (p, t) in dirs.iter().rev() {
        sys::set_mtime(&abs(p), *t)?;
    }
    Ok(())
}

/// Apply one OCI layer blob (tar, gzip or zstd) over what is laid out.
pub fn apply_layer(file: File, epoch: u64) -> stdio::Result<()> {
    let reader = crate::layer::stream::sniffing_decoder(BufReader::with_capacity(1 << 20, file))?;
    let mut archive = tar::Archive::new(reader);
    // Paths this layer made: its whiteouts remove only what is below.
    let mut made: HashSet<Vec<u8>> = HashSet::new();
    let mut dirs = Vec::new();
    for entry in archive.entries()? {
        let mut e = entry?;
        let Ok(path) = normalize_member(&e.path_bytes()) else { continue };
        if path.is_empty() {
            continue;
        }
        let dir = parent(&path).unwrap_or(b"").to_vec();
        let name = path[if dir.is_empty() { 0 } else { dir.len() + 1 }..].to_vec();
        if name == b".wh..wh..opq" {
            for child in fs::read_dir(abs(&dir))? {
                let child = child?;
                let p = join(&dir, child.file_name().as_bytes());
                if !made.contains(&p) {
                    clear(&abs(&p), false)?;
                }
            }
            continue;
        }
        if let Some(gone) = name.strip_prefix(b".wh.") {
            clear(&abs(&join(&dir, gone)), false)?;
            continue;
        }
        let h = e.header();
        let mut meta = Meta {
            mode: h.mode().unwrap_or(0o644),
            uid: h.uid().unwrap_or(0) as u32,
            gid: h.gid().unwrap_or(0) as u32,
            mtime: h.mtime().unwrap_or(0).min(epoch) as i64,
            capability: None,
        };
        let mut capability = None;
        if let Ok(Some(exts)) = e.pax_extensions() {
            for ext in exts.flatten() {
                match ext.key().unwrap_or("") {
                    "uid" => meta.uid = ext.value().ok().and_then(|v| v.parse().ok()).unwrap_or(meta.uid),
                    "gid" => meta.gid = ext.value().ok().and_then(|v| v.parse().ok()).unwrap_or(meta.gid),
                    "SCHILY.xattr.security.capability" => capability = Some(ext.value_bytes().to_vec()),
                    _ => {}
                }
            }
        }
        meta.capability = capability.as_deref();
        let link = e.link_name_bytes().map(|l| l.into_owned()).unwrap_or_default();
        match e.header().entry_type() {
            tar::EntryType::Directory => {
                make(&path, Make::Dir, &meta)?;
                dirs.push((path.clone(), meta.mtime));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut fill = |f: &File| stdio::copy(&mut e, &mut &*f).map(|_| ());
                make(&path, Make::File(&mut fill), &meta)?;
            }
            tar::EntryType::Symlink => make(&path, Make::Symlink(&link), &meta)?,
            tar::EntryType::Link => match normalize_member(&link) {
                Ok(t) => make(&path, Make::Hardlink(&t), &meta)?,
                Err(_) => continue,
            },
            tar::EntryType::Fifo => make(&path, Make::Fifo, &meta)?,
            // Device nodes cannot be made in a user namespace; the steps do without.
            _ => continue,
        }
        made.insert(path);
    }
    settle_dir_times(&dirs)
}

/// Write the job's entries over what is laid out (hardlinks last: their
/// targets may sort after them).
pub fn write_entries(entries: &[Entry], sources: &[File], epoch: u64) -> Result<(), HelperError> {
    let mut dirs = Vec::new();
    let mut links = Vec::new();
    for e in entries {
        let meta = Meta {
            mode: e.mode,
            uid: e.uid,
            gid: e.gid,
            mtime: e.mtime.min(epoch as i64),
            capability: e.capability.as_deref(),
        };
        let what = || format!("laying out `/{}`", String::from_utf8_lossy(&e.path));
        match &e.kind {
            EntryKind::Dir => {
                make(&e.path, Make::Dir, &meta).map_err(io(what()))?;
                dirs.push((e.path.clone(), meta.mtime));
            }
            EntryKind::File { source, offset, size } => {
                let src = sources.get(*source as usize).ok_or_else(|| HelperError::Job(what()))?;
                let mut fill = |f: &File| sys::copy_range(src, *offset, *size, f);
                make(&e.path, Make::File(&mut fill), &meta).map_err(io(what()))?;
            }
            EntryKind::Bytes(b) => {
                let mut fill = |mut f: &File| stdio::Write::write_all(&mut f, b);
                make(&e.path, Make::File(&mut fill), &meta).map_err(io(what()))?;
            }
            EntryKind::Symlink(t) => make(&e.path, Make::Symlink(t), &meta).map_err(io(what()))?,
            EntryKind::Hardlink(_) => links.push(e),
            EntryKind::Fifo => make(&e.path, Make::Fifo, &meta).map_err(io(what()))?,
        }
    }
    for e in links {
        let EntryKind::Hardlink(t) = &e.kind else { continue };
        let meta = Meta { mode: e.mode, uid: e.uid, gid: e.gid, mtime: e.mtime, capability: None };
        make(&e.path, Make::Hardlink(t), &meta)
            .map_err(io(format!("linking `/{}`", String::from_utf8_lossy(&e.path))))?;
    }
    settle_dir_times(&dirs).map_err(io("setting directory times"))
}
