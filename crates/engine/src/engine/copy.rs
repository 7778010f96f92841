//! Copying files into and out of containers through the engine's archive
//! API (`PUT`/`GET /containers/{id}/archive`), which works with remote and
//! rootless engines where bind mounts do not.
//!
//! In: host files and directories become one tar stream whose members are
//! named by their container paths (parents the engine creates 0755; the
//! destination directory's own metadata is never sent, so copying into
//! `/tmp` cannot change `/tmp`'s mode). Out: the engine's tar is spooled to
//! a temporary file beside the destination and extracted with the same
//! checks as any archive (no `..`, no absolute paths, nothing through
//! symlinks).

use super::{describe, stream, EngineError};
use crate::layer::archive::{read_into, Placement};
use crate::layer::extract::extract_tree;
use crate::layer::Tree;
use bollard::query_parameters::{DownloadFromContainerOptionsBuilder, UploadToContainerOptionsBuilder};
use bollard::Docker;
use futures_util::StreamExt;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One file or directory to copy in.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyIn {
    pub host: PathBuf,
    /// Absolute container path; a trailing `/` means "into this directory".
    pub dest: String,
}

/// How copied-in members are stamped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stamp {
    /// Owner of every member (the default 0:0).
    pub owner: (u64, u64),
    /// Fixed mtime for every member (steps, for reproducible layers); else the host's.
    pub mtime: Option<u64>,
}

fn member_name(dest: &str) -> String {
    dest.trim_start_matches('/').trim_end_matches('/').to_string()
}

fn header(meta: &std::fs::Metadata, stamp: Stamp, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(meta.mode() & 0o7777);
    h.set_uid(stamp.owner.0);
    h.set_gid(stamp.owner.1);
    h.set_mtime(stamp.mtime.unwrap_or(meta.mtime().max(0) as u64));
    h.set_size(size);
    h
}

/// Write a tar holding every item at its container path.
pub fn write_copy_in_tar(items: &[CopyIn], stamp: Stamp, out: impl Write) -> io::Result<()> {
    let mut b = tar::Builder::new(out);
    for item in items {
        let meta = std::fs::symlink_metadata(&item.host)?;
        let base = if item.dest.ends_with('/') || item.dest == "/" {
            let name = item.host.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let dir = member_name(&item.dest);
            if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            }
        } else {
            member_name(&item.dest)
        };
        if meta.is_dir() {
            // Sorted walk: the same tree gives the same tar.
            for entry in walkdir::WalkDir::new(&item.host).follow_links(false).sort_by_file_name().min_depth(1) {
                let entry = entry.map_err(io::Error::other)?;
                let rel = entry.path().strip_prefix(&item.host).map_err(io::Error::other)?;
                let name =
                    if base.is_empty() { rel.display().to_string() } else { format!("{base}/{}", rel.display()) };
                append(&mut b, entry.path(), &name, stamp)?;
            }
        } else {
            if base.is_empty() {
                return Err(io::Error::other(format!(
                    "`{}`: a file needs a destination path, not `/`",
                    item.host.display()
                )));
            }
            append(&mut b, &item.host, &base, stamp)?;
        }
    }
    b.into_inner()?.flush()
}

fn append<W: Write>(b: &mut tar::Builder<W>, path: &Path, name: &str, stamp: Stamp) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let ft = meta.file_type();
    if ft.is_dir() {
        let mut h = header(&meta, stamp, tar::EntryType::Directory, 0);
        b.append_data(&mut h, format!("{name}/"), io::empty())
    } else if ft.is_symlink() {
        let mut h = header(&meta, stamp, tar::EntryType::Symlink, 0);
        b.append_link(&mut h, name, std::fs::read_link(path)?)
    } else if ft.is_file() {
        let mut h = header(&meta, stamp, tar::EntryType::Regular, meta.len());
        b.append_data(&mut h, name, std::fs::File::open(path)?)
    } else {
        // Sockets, fifos and devices are not copied.
        Ok(())
    }
}

/// Stream `items` into the container's filesystem.
pub async fn copy_in(docker: &Docker, id: &str, items: Vec<CopyIn>, stamp: Stamp) -> Result<(), EngineError> {
    if items.is_empty() {
        return Ok(());
    }
    for i in &items {
        std::fs::symlink_metadata(&i.host).map_err(|e| EngineError::io("--copy-in: cannot read", &i.host, e))?;
    }
    let what = items.iter().map(|i| format!("{}:{}", i.host.display(), i.dest)).collect::<Vec<_>>().join(", ");
    let (body, producer) = stream::from_writer(move |w| write_copy_in_tar(&items, stamp, w));
    let up = docker
        .upload_to_container(
            id,
            Some(UploadToContainerOptionsBuilder::default().path("/").build()),
            bollard::body_try_stream(body),
        )
        .await;
    let produced = producer.await.map_err(|e| EngineError::Invalid(format!("copying in {what}: {e}")))?;
    produced.map_err(|e| EngineError::Invalid(format!("copying in {what}: {e}")))?;
    up.map_err(|e| EngineError::Api { what: format!("copying {what} into the container"), detail: describe(&e) })
}

/// Copy the container path `src` to the host path `dest`: a file becomes
/// `dest` (or `dest/NAME` when `dest` is a directory); a directory's
/// contents land in `dest`, which must be new or empty.
pub async fn copy_out(docker: &Docker, id: &str, src: &str, dest: &Path) -> Result<(), EngineError> {
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    std::fs::create_dir_all(&parent).map_err(|e| EngineError::io("--copy-out: cannot create", &parent, e))?;
    let mut spool = tempfile::Builder::new()
        .prefix(".quarry-copy-out-")
        .tempfile_in(&parent)
        .map_err(|e| EngineError::io("--copy-out: cannot create a temporary file in", &parent, e))?;
    {
        let mut w = io::BufWriter::with_capacity(1 << 20, spool.as_file_mut());
        let mut s =
            docker.download_from_container(id, Some(DownloadFromContainerOptionsBuilder::default().path(src).build()));
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|e| {
                if super::is_not_found(&e) {
                    EngineError::Invalid(format!("--copy-out: `{src}` does not exist in the container"))
                } else {
                    EngineError::api(format!("copying `{src}` out of the container"), e)
                }
            })?;
            w.write_all(&chunk).map_err(|e| EngineError::io("--copy-out: cannot write", spool_path(&parent), e))?;
        }
        w.flush().map_err(|e| EngineError::io("--copy-out: cannot write", spool_path(&parent), e))?;
    }
    extract_copy(spool.path(), src, dest)
}

fn spool_path(parent: &Path) -> PathBuf {
    parent.join(".quarry-copy-out-*")
}

/// Place the engine's archive of `src` (members named `NAME/...`) at `dest`.
fn extract_copy(tar_path: &Path, src: &str, dest: &Path) -> Result<(), EngineError> {
    let bad = |m: String| EngineError::Invalid(format!("--copy-out `{src}` -> `{}`: {m}", dest.display()));
    // The first member tells a file from a directory.
    let first_is_file = {
        let f = std::fs::File::open(tar_path).map_err(|e| EngineError::io("cannot read", tar_path, e))?;
        let mut a = tar::Archive::new(f);
        let mut entries = a.entries().map_err(|e| bad(e.to_string()))?;
        match entries.next() {
            Some(e) => {
                let e = e.map_err(|e| bad(e.to_string()))?;
                !e.header().entry_type().is_dir()
            }
            None => return Err(bad("the engine sent an empty archive".into())),
        }
    };
    if first_is_file {
        let target = if dest.is_dir() {
            dest.join(Path::new(src.trim_end_matches('/')).file_name().unwrap_or_default())
        } else {
            dest.to_path_buf()
        };
        let f = std::fs::File::open(tar_path).map_err(|e| EngineError::io("cannot read", tar_path, e))?;
        let mut a = tar::Archive::new(f);
        let mut entry = a
            .entries()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .expect("checked above")
            .map_err(|e| bad(e.to_string()))?;
        let kind = entry.header().entry_type();
        if kind.is_symlink() {
            return Err(bad("is a symlink; copy the file it points to".into()));
        }
        if !kind.is_file() {
            return Err(bad(format!("is not a regular file ({kind:?})")));
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new()
            .prefix(".quarry-copy-")
            .tempfile_in(dir)
            .map_err(|e| EngineError::io("cannot write in", dir, e))?;
        io::copy(&mut entry, tmp.as_file_mut()).map_err(|e| EngineError::io("cannot write", &target, e))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode));
        tmp.persist(&target).map_err(|e| EngineError::io("cannot write", &target, e.error))?;
        return Ok(());
    }
    let mut tree = Tree::new();
    let place = Placement { strip_components: 1, ..Default::default() };
    let spool_dir = tar_path.parent().unwrap_or(Path::new("."));
    read_into(tar_path, &mut tree, &place, spool_dir).map_err(|e| bad(e.to_string()))?;
    extract_tree(&tree, dest).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_in_tar_names_members_by_container_path() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/sub")).unwrap();
        std::fs::write(d.path().join("src/sub/a.txt"), "a").unwrap();
        std::fs::write(d.path().join("f.txt"), "f").unwrap();
        let items = vec![
            CopyIn { host: d.path().join("src"), dest: "/work/in".into() },
            CopyIn { host: d.path().join("f.txt"), dest: "/tmp/".into() },
        ];
        let mut out = Vec::new();
        write_copy_in_tar(&items, Stamp { owner: (0, 0), mtime: Some(0) }, &mut out).unwrap();
        let mut a = tar::Archive::new(&out[..]);
        let names: Vec<String> =
            a.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect();
        assert_eq!(names, ["work/in/sub/", "work/in/sub/a.txt", "tmp/f.txt"]);
    }
}
