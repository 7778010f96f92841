//! Safe extraction of a layer tree to a directory. The tree already refuses
//! `..`, absolute paths, writes through symlinks and hardlinks out of the
//! tree; here files are created exclusively (never through an existing
//! symlink) inside a destination that must start empty.

use super::path::display;
use super::tree::{Kind, Tree};
use super::write::WriteError;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("extraction target `{0}` exists and is not empty; choose an empty or new directory")]
    NotEmpty(String),
    #[error("extracting `{entry}` into `{dest}` failed: {err}")]
    Io { entry: String, dest: String, err: io::Error },
    #[error(transparent)]
    Content(#[from] WriteError),
}

fn rel(path: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(path))
}

/// Extract `tree` below `dest`. Ownership is not applied (an unprivileged
/// caller could not); modes are, directories last so read-only ones work.
pub fn extract_tree(tree: &Tree, dest: &Path) -> Result<(), ExtractError> {
    if dest.exists() && fs::read_dir(dest).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(ExtractError::NotEmpty(dest.display().to_string()));
    }
    let d = dest.display().to_string();
    let err = |entry: &[u8], e: io::Error| ExtractError::Io { entry: display(entry), dest: d.clone(), err: e };
    fs::create_dir_all(dest).map_err(|e| err(b"", e))?;
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    for (path, node) in tree.iter() {
        let full = dest.join(rel(path));
        match &node.kind {
            Kind::Dir => {
                fs::create_dir(&full).map_err(|e| err(path, e))?;
                dirs.push((full, node.mode));
            }
            Kind::File { .. } => {
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&full)
                    .map_err(|e| err(path, e))?;
                copy_content(node, &mut f).map_err(|e| err(path, e))?;
                fs::set_permissions(&full, fs::Permissions::from_mode(node.mode)).map_err(|e| err(path, e))?;
            }
            Kind::Symlink(target) => {
                std::os::unix::fs::symlink(rel(target), &full).map_err(|e| err(path, e))?;
            }
            Kind::Hardlink(target) => {
                fs::hard_link(dest.join(rel(target)), &full).map_err(|e| err(path, e))?;
            }
            // Device nodes and fifos need privileges or are meaningless here.
            Kind::CharDev(..) | Kind::BlockDev(..) | Kind::Fifo => {}
        }
    }
    for (dir, mode) in dirs.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).map_err(|e| err(dir.as_os_str().as_bytes(), e))?;
    }
    Ok(())
}

fn copy_content(node: &super::tree::Node, out: &mut fs::File) -> io::Result<()> {
    use super::tree::Content;
    use std::io::{Read, Seek, SeekFrom};
    let Kind::File { size, content } = &node.kind else {
        return Ok(());
    };
    let copied = match content {
        Content::Host(p) | Content::HostToHash(p) => io::copy(&mut fs::File::open(p)?.take(*size), out)?,
        Content::Slice { file, offset } => {
            let mut f = fs::File::open(file.as_ref())?;
            f.seek(SeekFrom::Start(*offset))?;
            io::copy(&mut f.take(*size), out)?
        }
        Content::Bytes(b) => io::copy(&mut &b[..], out)?,
    };
    if copied != *size {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "content is shorter than recorded"));
    }
    Ok(())
}
