//! The deterministic tar writer: one tree in, one byte-identical tar out,
//! whatever the host's mtimes, owners or directory order.
//! Headers are ustar; PAX extended headers carry what ustar cannot hold
//! (paths or link targets over 100 bytes, huge sizes or ids, capabilities).

use super::path::display;
use super::tree::{Content, Kind, Node, Tree};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;

/// Largest size/id a ustar octal field holds.
const USTAR_SIZE_MAX: u64 = 0o77777777777;
const USTAR_ID_MAX: u64 = 0o7777777;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot read `{source_path}` for layer entry `{entry}`: {err}")]
    Read { entry: String, source_path: String, err: io::Error },
    #[error("`{source_path}` changed while the layer was written (expected {expected} bytes); re-run the build")]
    Changed { source_path: String, expected: u64 },
    #[error("writing the layer failed: {0}")]
    Io(#[from] io::Error),
}

/// What packing learned of each `Content::HostToHash` file, by its inode
/// (device, inode number) as opened: what a first build's cache key needs,
/// from the one read that packing does anyway (see
/// `source::hashes::KeyHashing`). A file replaced since it was scanned has
/// another inode, so it is not taken for the scanned one.
pub type HostDigests = HashMap<(u64, u64), HostFile>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// Of the bytes written.
    pub sha256: [u8; 32],
    /// The `security.capability` xattr, which the entry's header carries.
    pub capability: Option<Vec<u8>>,
}

/// A `HostToHash` file as the writer handed it to its sink, by number
/// (`TarSink::append_hashed`): the sink hashes the content.
#[derive(Debug)]
pub struct HashedFile {
    pub inode: (u64, u64),
    pub capability: Option<Vec<u8>>,
}

/// Options that shape every header.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// mtimes are clamped to this (SOURCE_DATE_EPOCH; default 0).
    pub source_date_epoch: u64,
}

/// Where `write_tar_to` writes. `append_from` copies a file's content;
/// a sink with its own buffer (the pack pipeline's) reads straight into it,
/// saving a copy of every byte.
pub trait TarSink: Write {
    /// Append exactly `len` bytes from `src`.
    fn append_from(&mut self, src: &mut dyn Read, len: u64) -> Result<(), CopyError> {
        let mut buf = vec![0u8; (len as usize).clamp(1, 256 << 10)];
        let mut left = len;
        while left > 0 {
            let want = (buf.len() as u64).min(left) as usize;
            let n = match src.read(&mut buf[..want]) {
                Ok(0) => return Err(CopyError::Short),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(CopyError::Read(e)),
            };
            self.write_all(&buf[..n]).map_err(CopyError::Write)?;
            left -= n as u64;
        }
        Ok(())
    }

    /// Append file number `file`'s content, which the sink hashes (the
    /// pack pipeline, on its tar hashing thread); a plain sink does not.
    fn append_hashed(&mut self, src: &mut dyn Read, len: u64, file: u32) -> Result<(), CopyError> {
        let _ = file;
        self.append_from(src, len)
    }
}

/// Why `TarSink::append_from` stopped.
#[derive(Debug)]
pub enum CopyError {
    /// The source ended before `len` bytes.
    Short,
    Read(io::Error),
    Write(io::Error),
}

/// Any writer, as a sink that copies through a buffer.
struct Plain<W>(W);

impl<W: Write> Write for Plain<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write> TarSink for Plain<W> {}

fn set_bytes(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field.iter_mut().for_each(|b| *b = 0);
    field[..n].copy_from_slice(&value[..n]);
}

fn pax_record(key: &str, value: &[u8], out: &mut Vec<(String, Vec<u8>)>) {
    out.push((key.to_string(), value.to_vec()));
}

/// Build the ustar header and the PAX records an entry needs.
pub(super) fn header_for(path: &[u8], node: &Node, opts: &WriteOptions) -> (tar::Header, Vec<(String, Vec<u8>)>) {
    let mut h = tar::Header::new_ustar();
    let mut pax = Vec::new();

    let mut name = path.to_vec();
    if node.kind.is_dir() {
        name.push(b'/');
    }
    if name.len() > 100 {
        pax_record("path", &name, &mut pax);
    }
    set_bytes(&mut h.as_old_mut().name, &name);

    h.set_mode(node.mode & 0o7777);
    for (key, id, set) in [("uid", node.uid, 0), ("gid", node.gid, 1)] {
        let v = if id > USTAR_ID_MAX {
            pax_record(key, id.to_string().as_bytes(), &mut pax);
            0
        } else {
            id
        };
        if set == 0 {
            h.set_uid(v);
        } else {
            h.set_gid(v);
        }
    }
    h.set_mtime(node.mtime.min(opts.source_date_epoch));

    let (etype, size, link): (tar::EntryType, u64, Option<&[u8]>) = match &node.kind {
        Kind::Dir => (tar::EntryType::Directory, 0, None),
        Kind::File { size, .. } => (tar::EntryType::Regular, *size, None),
        Kind::Symlink(t) => (tar::EntryType::Symlink, 0, Some(t)),
        Kind::Hardlink(t) => (tar::EntryType::Link, 0, Some(t)),
        Kind::CharDev(..) => (tar::EntryType::Char, 0, None),
        Kind::BlockDev(..) => (tar::EntryType::Block, 0, None),
        Kind::Fifo => (tar::EntryType::Fifo, 0, None),
    };
    h.set_entry_type(etype);
    if size > USTAR_SIZE_MAX {
        pax_record("size", size.to_string().as_bytes(), &mut pax);
    }
    h.set_size(size);
    if let Some(t) = link {
        if t.len() > 100 {
            pax_record("linkpath", t, &mut pax);
        }
        set_bytes(&mut h.as_old_mut().linkname, t);
    }
    if let Kind::CharDev(maj, min) | Kind::BlockDev(maj, min) = node.kind {
        // Always Ok on a ustar header.
        let _ = h.set_device_major(maj);
        let _ = h.set_device_minor(min);
    }
    for (k, v) in &node.xattrs {
        pax_record(&format!("SCHILY.xattr.{k}"), v, &mut pax);
    }
    // uname/gname stay empty: new_ustar zero-fills them.
    h.set_cksum();
    (h, pax)
}

/// What error messages call an entry's content: its host file, else the entry.
fn source_name(path: &[u8], content: &Content) -> String {
    match content {
        Content::Host(p) | Content::HostToHash(p) => p.display().to_string(),
        Content::Slice { file, .. } => file.display().to_string(),
        Content::Bytes(_) => display(path),
    }
}

/// An opened file entry's content; for `HostToHash`, also its inode and capability.
struct Opened {
    reader: Box<dyn Read>,
    host: Option<HashedFile>,
}

fn open_content(path: &[u8], content: &Content, size: u64) -> Result<Opened, WriteError> {
    // The name is only made for an error: this runs once per file.
    let read_err = |err| WriteError::Read { entry: display(path), source_path: source_name(path, content), err };
    // Files are read unbuffered: the sink asks for large reads.
    match content {
        Content::Host(p) | Content::HostToHash(p) => {
            let f = File::open(p).map_err(read_err)?;
            let meta = f.metadata().map_err(read_err)?;
            if meta.len() != size {
                return Err(WriteError::Changed { source_path: source_name(path, content), expected: size });
            }
            let host = matches!(content, Content::HostToHash(_))
                .then(|| HashedFile { inode: (meta.dev(), meta.ino()), capability: fd_capability(&f) });
            Ok(Opened { reader: Box::new(f), host })
        }
        Content::Slice { file, offset } => {
            let mut f = File::open(file.as_ref()).map_err(read_err)?;
            f.seek(SeekFrom::Start(*offset)).map_err(read_err)?;
            Ok(Opened { reader: Box::new(f), host: None })
        }
        Content::Bytes(b) => Ok(Opened { reader: Box::new(io::Cursor::new(b.clone())), host: None }),
    }
}

/// The `security.capability` xattr of an open file (no path lookup).
pub fn fd_capability(f: &File) -> Option<Vec<u8>> {
    use std::os::fd::AsRawFd;
    // Hand-written: one fgetxattr call does not justify an xattr crate.
    // Most files have none: no allocation unless one is there.
    let mut buf = [0u8; 256];
    // SAFETY: the name is NUL-terminated, the fd is open and buf is valid for its length.
    let n =
        unsafe { libc::fgetxattr(f.as_raw_fd(), c"security.capability".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return None;
    }
    Some(buf[..n as usize].to_vec())
}

/// Write `tree` as a tar stream into `out`; `on_bytes` sees content progress.
/// Call `Tree::finalize_hardlinks` first.
pub fn write_tar<W: Write>(
    tree: &Tree,
    out: W,
    opts: &WriteOptions,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<W, WriteError> {
    Ok(write_tar_to(tree, Plain(out), opts, on_bytes, None)?.0)
}

/// `write_tar` into a `TarSink`. With `hashed`, each `Content::HostToHash`
/// file goes to the sink as the next number of `hashed`, whose sha256 the
/// sink computes (`TarSink::append_hashed`).
pub fn write_tar_to<S: TarSink>(
    tree: &Tree,
    out: S,
    opts: &WriteOptions,
    on_bytes: &mut dyn FnMut(u64),
    mut hashed: Option<&mut Vec<HashedFile>>,
) -> Result<S, WriteError> {
    let mut b = tar::Builder::new(out);
    for (path, node) in tree.iter() {
        let (header, mut pax) = header_for(path, node, opts);
        let Kind::File { size, content } = &node.kind else {
            if !pax.is_empty() {
                b.append_pax_extensions(pax.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
            }
            b.append(&header, io::empty())?;
            continue;
        };
        // Opened before the header is written: a `HostToHash` file's
        // capability, read from it, goes last in the PAX records, where
        // `header_for` puts the node's own xattrs.
        let Opened { mut reader, host } = open_content(path, content, *size)?;
        if let Some(cap) = host.as_ref().and_then(|h| h.capability.as_ref()) {
            pax_record("SCHILY.xattr.security.capability", cap, &mut pax);
        }
        if !pax.is_empty() {
            b.append_pax_extensions(pax.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
        }
        let number = match (host, hashed.as_deref_mut()) {
            (Some(host), Some(files)) => {
                files.push(host);
                Some((files.len() - 1) as u32)
            }
            _ => None,
        };
        // What `tar::Builder::append` writes, with the content copied by
        // the sink: header, content, zeros to 512 bytes.
        let sink = b.get_mut();
        sink.write_all(header.as_bytes())?;
        let copied = match number {
            Some(n) => sink.append_hashed(&mut reader, *size, n),
            None => sink.append_from(&mut reader, *size),
        };
        copied.map_err(|e| match e {
            CopyError::Short => WriteError::Changed { source_path: source_name(path, content), expected: *size },
            CopyError::Read(err) => {
                WriteError::Read { entry: display(path), source_path: source_name(path, content), err }
            }
            CopyError::Write(err) => WriteError::Io(err),
        })?;
        let tail = (*size % 512) as usize;
        if tail != 0 {
            sink.write_all(&[0u8; 512][..512 - tail])?;
        }
        on_bytes(*size);
    }
    Ok(b.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(tar_bytes: &[u8]) -> Vec<(String, u32, u64, Option<String>)> {
        let mut a = tar::Archive::new(tar_bytes);
        a.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    String::from_utf8(e.path_bytes().to_vec()).unwrap(),
                    h.mode().unwrap(),
                    h.mtime().unwrap(),
                    e.link_name_bytes().map(|l| String::from_utf8(l.to_vec()).unwrap()),
                )
            })
            .collect()
    }

    #[test]
    fn writes_sorted_clamped_pax_entries() {
        let mut t = Tree::new();
        let long = format!("d/{}", "x".repeat(300));
        let mut f = Node::bytes(b"hello".to_vec(), 0o4755);
        f.mtime = 1_700_000_000;
        t.insert(b"b/file".to_vec(), f).unwrap();
        t.insert(long.clone().into_bytes(), Node::bytes(b"long".to_vec(), 0o644)).unwrap();
        t.insert(b"a".to_vec(), Node::new(Kind::Symlink(b"b/file".to_vec()), 0o777)).unwrap();
        let out = write_tar(&t, Vec::new(), &WriteOptions { source_date_epoch: 100 }, &mut |_| {}).unwrap();
        let got = entries(&out);
        let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["a", "b/", "b/file", "d/", long.as_str()]);
        let file = &got[2];
        assert_eq!(file.1, 0o4755);
        assert_eq!(file.2, 100, "mtime clamped to SOURCE_DATE_EPOCH");
        assert_eq!(got[0].3.as_deref(), Some("b/file"));
    }

    #[test]
    fn same_tree_same_bytes() {
        let build = || {
            let mut t = Tree::new();
            t.insert(b"x/y".to_vec(), Node::bytes(b"1".to_vec(), 0o644)).unwrap();
            t.insert(b"x/a".to_vec(), Node::bytes(b"2".to_vec(), 0o600)).unwrap();
            write_tar(&t, Vec::new(), &WriteOptions::default(), &mut |_| {}).unwrap()
        };
        assert_eq!(build(), build());
    }
}
