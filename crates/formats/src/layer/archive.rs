//! Reading foreign archives (.tar, .tar.gz, .tar.xz, .tar.zst, .zip, .whl)
//! into a layer tree, re-normalized. Nothing is written to the host except
//! an append-only spool of file contents, so no member can escape: paths are
//! checked as bytes (`..` and absolute paths refused), writes through
//! symlinks and hardlinks out of the archive are refused by the tree.

use super::path::{display, join, normalize_member, strip_components, strip_prefix, PathProblem};
use super::stream::{decoder, Checks};
use super::tree::{Content, Kind, Node, Tree, TreeError};
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot read archive `{archive}`: {err}")]
    Io { archive: String, err: io::Error },
    #[error("archive `{archive}`: member `{member}` {problem}; archives must hold relative paths inside their root")]
    BadPath { archive: String, member: String, problem: PathProblem },
    #[error("archive `{archive}`: {err}")]
    Tree { archive: String, err: TreeError },
    #[error("archive `{archive}`: hardlink `{member}` points to `{target}`, outside the archive's extracted tree")]
    HardlinkOut { archive: String, member: String, target: String },
    #[error("archive `{archive}`: member `{member}` has an unsupported type ({kind})")]
    Unsupported { archive: String, member: String, kind: String },
    #[error("archive `{archive}` is not a readable zip file ({err}); is it truncated?")]
    Zip { archive: String, err: String },
}

pub use super::stream::{sniff, Format};

/// How an archive's members are placed in the layer.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Where members go when `map` is empty (normalized, may be empty = root).
    pub dest: Vec<u8>,
    pub strip_components: usize,
    /// `sub/path` -> `dest` pairs (normalized); members under no key are dropped.
    pub map: Vec<(Vec<u8>, Vec<u8>)>,
    /// Force this owner on every member (else the archive's numeric ids).
    pub owner: Option<(u64, u64)>,
    /// Keep device nodes (else they are dropped and counted).
    pub allow_devices: bool,
    /// Record every member's placed path in archive order (`ReadReport::order`):
    /// dpkg lists a package's files in the order of its data tar.
    pub record_order: bool,
    /// The archive's bytes were checked against a digest before (a .deb
    /// against its signed index): skip the compressor's own checksum, which
    /// can only repeat that check (xz's CRC64 cost 0.8 s of CPU in a 207
    /// package build).
    pub verified: bool,
}

impl Placement {
    /// Where a normalized member path lands, or None when it is dropped.
    pub fn place(&self, member: &[u8]) -> Option<Vec<u8>> {
        let rel: &[u8] =
            if self.strip_components > 0 { strip_components(member, self.strip_components)? } else { member };
        if self.map.is_empty() {
            return Some(join(&self.dest, rel));
        }
        // The longest matching key wins, so maps can nest.
        self.map
            .iter()
            .filter_map(|(k, d)| strip_prefix(rel, k).map(|rest| (k.len(), join(d, rest))))
            .max_by_key(|(len, _)| *len)
            .map(|(_, p)| p)
    }
}

#[derive(Debug, Default, Clone)]
pub struct ReadReport {
    pub members: usize,
    pub dropped_devices: usize,
    /// Placed paths in archive order, when `Placement::record_order`.
    pub order: Vec<Vec<u8>>,
}

/// An append-only file holding the contents of compressed members.
struct Spool {
    path: Arc<PathBuf>,
    file: io::BufWriter<File>,
    len: u64,
}

impl Spool {
    fn create(dir: &Path) -> io::Result<Spool> {
        let tmp = tempfile::Builder::new().prefix("spool-").tempfile_in(dir)?;
        let (file, path) = tmp.keep().map_err(|e| e.error)?;
        Ok(Spool { path: Arc::new(path), file: io::BufWriter::with_capacity(1 << 20, file), len: 0 })
    }

    fn add(&mut self, mut r: impl Read) -> io::Result<(u64, u64)> {
        let offset = self.len;
        let n = io::copy(&mut r, &mut self.file)?;
        self.len += n;
        Ok((offset, n))
    }

    fn finish(mut self) -> io::Result<()> {
        self.file.flush()
    }
}

struct Ctx<'a> {
    archive: String,
    tree: &'a mut Tree,
    place: &'a Placement,
    seen_files: HashSet<Vec<u8>>,
    report: ReadReport,
}

impl Ctx<'_> {
    fn io(&self, err: io::Error) -> ArchiveError {
        ArchiveError::Io { archive: self.archive.clone(), err }
    }

    fn member_path(&self, raw: &[u8]) -> Result<Option<Vec<u8>>, ArchiveError> {
        let norm = normalize_member(raw).map_err(|problem| ArchiveError::BadPath {
            archive: self.archive.clone(),
            member: display(raw),
            problem,
        })?;
        if norm.is_empty() {
            return Ok(None); // the archive's root "./"
        }
        Ok(self.place.place(&norm))
    }

    fn insert(&mut self, path: Vec<u8>, mut node: Node) -> Result<(), ArchiveError> {
        if let Some((u, g)) = self.place.owner {
            node.uid = u;
            node.gid = g;
        }
        if node.kind.is_device() && !self.place.allow_devices {
            self.report.dropped_devices += 1;
            return Ok(());
        }
        if !node.kind.is_dir() {
            self.seen_files.insert(path.clone());
        }
        self.report.members += 1;
        self.tree.insert(path, node).map_err(|err| ArchiveError::Tree { archive: self.archive.clone(), err })
    }
}

/// Read an archive of any supported format into `tree`.
pub fn read_into(
    archive: &Path,
    tree: &mut Tree,
    place: &Placement,
    spool_dir: &Path,
) -> Result<ReadReport, ArchiveError> {
    let name = archive.display().to_string();
    let io_err = |err| ArchiveError::Io { archive: name.clone(), err };
    let format = sniff(archive).map_err(io_err)?;
    let mut ctx = Ctx { archive: name.clone(), tree, place, seen_files: HashSet::new(), report: ReadReport::default() };
    let file = File::open(archive).map_err(io_err)?;
    match format {
        Format::Zip => read_zip(file, &mut ctx, spool_dir)?,
        Format::Tar => read_tar(
            BufReader::with_capacity(1 << 20, file),
            &mut ctx,
            TarContent::InPlace(Arc::new(archive.to_path_buf())),
        )?,
        Format::Gzip | Format::Xz | Format::Zstd => {
            let checks = if place.verified { Checks::Skip } else { Checks::Verify };
            let d = decoder(format, BufReader::with_capacity(1 << 20, file), checks).map_err(io_err)?;
            read_spooled(d, &mut ctx, spool_dir)?
        }
    }
    Ok(ctx.report)
}

enum TarContent {
    /// Uncompressed tar on disk: members are read in place by offset.
    InPlace(Arc<PathBuf>),
    Spool(Spool),
}

fn read_spooled(r: impl Read, ctx: &mut Ctx, spool_dir: &Path) -> Result<(), ArchiveError> {
    let spool = Spool::create(spool_dir).map_err(|e| ctx.io(e))?;
    read_tar(r, ctx, TarContent::Spool(spool))
}

fn read_tar(r: impl Read, ctx: &mut Ctx, mut content: TarContent) -> Result<(), ArchiveError> {
    let mut a = tar::Archive::new(r);
    let entries = a.entries().map_err(|e| ctx.io(e))?;
    let mut hardlinks: Vec<(Vec<u8>, Vec<u8>, Node)> = Vec::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| ctx.io(e))?;
        let raw = entry.path_bytes().into_owned();
        let Some(path) = ctx.member_path(&raw)? else {
            continue;
        };
        if ctx.place.record_order {
            ctx.report.order.push(path.clone());
        }
        let h = entry.header();
        let etype = h.entry_type();
        let mut node = Node::new(Kind::Dir, h.mode().unwrap_or(0o644));
        node.uid = h.uid().unwrap_or(0);
        node.gid = h.gid().unwrap_or(0);
        node.mtime = h.mtime().unwrap_or(0);
        let dev = (h.device_major().ok().flatten().unwrap_or(0), h.device_minor().ok().flatten().unwrap_or(0));
        if let Ok(Some(exts)) = entry.pax_extensions() {
            for ext in exts.flatten() {
                let key = ext.key().unwrap_or("");
                let num = || ext.value().ok().and_then(|v| v.parse::<u64>().ok());
                match key {
                    "uid" => node.uid = num().unwrap_or(node.uid),
                    "gid" => node.gid = num().unwrap_or(node.gid),
                    "SCHILY.xattr.security.capability" => {
                        node.xattrs.push(("security.capability".into(), ext.value_bytes().to_vec()))
                    }
                    _ => {}
                }
            }
        }
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        node.kind = match etype {
            tar::EntryType::Directory => Kind::Dir,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                let content = match &mut content {
                    TarContent::InPlace(file) => {
                        Content::Slice { file: file.clone(), offset: entry.raw_file_position() }
                    }
                    TarContent::Spool(spool) => {
                        let (offset, n) = spool.add(&mut entry).map_err(|e| ctx.io(e))?;
                        if n != size {
                            return Err(ctx.io(io::Error::new(io::ErrorKind::UnexpectedEof, "member is truncated")));
                        }
                        Content::Slice { file: spool.path.clone(), offset }
                    }
                };
                Kind::File { size, content }
            }
            tar::EntryType::Symlink => Kind::Symlink(link.unwrap_or_default()),
            tar::EntryType::Link => {
                // Resolved after every member is read: the target may come later
                // in a re-sorted tree, but must be a member of this archive.
                let raw_target = link.unwrap_or_default();
                let target = ctx.member_path(&raw_target)?;
                match target {
                    Some(t) => hardlinks.push((path, t, node)),
                    None => {
                        return Err(ArchiveError::HardlinkOut {
                            archive: ctx.archive.clone(),
                            member: display(&raw),
                            target: display(&raw_target),
                        })
                    }
                }
                continue;
            }
            tar::EntryType::Char => Kind::CharDev(dev.0, dev.1),
            tar::EntryType::Block => Kind::BlockDev(dev.0, dev.1),
            tar::EntryType::Fifo => Kind::Fifo,
            other => {
                return Err(ArchiveError::Unsupported {
                    archive: ctx.archive.clone(),
                    member: display(&raw),
                    kind: format!("{other:?}"),
                })
            }
        };
        ctx.insert(path, node)?;
    }
    if let TarContent::Spool(s) = content {
        s.finish().map_err(|e| ctx.io(e))?;
    }
    for (path, target, mut node) in hardlinks {
        if !ctx.seen_files.contains(&target) {
            return Err(ArchiveError::HardlinkOut {
                archive: ctx.archive.clone(),
                member: display(&path),
                target: display(&target),
            });
        }
        node.kind = Kind::Hardlink(target);
        ctx.insert(path, node)?;
    }
    Ok(())
}

fn read_zip(file: File, ctx: &mut Ctx, spool_dir: &Path) -> Result<(), ArchiveError> {
    let zip_err =
        |ctx: &Ctx, e: zip::result::ZipError| ArchiveError::Zip { archive: ctx.archive.clone(), err: e.to_string() };
    let mut z = zip::ZipArchive::new(BufReader::new(file)).map_err(|e| zip_err(ctx, e))?;
    let mut spool = Spool::create(spool_dir).map_err(|e| ctx.io(e))?;
    for i in 0..z.len() {
        let mut f = z.by_index(i).map_err(|e| zip_err(ctx, e))?;
        let raw = f.name_raw().to_vec();
        let Some(path) = ctx.member_path(&raw)? else {
            continue;
        };
        let unix = f.unix_mode();
        let is_link = unix.map(|m| m & 0o170000 == 0o120000).unwrap_or(false);
        let node = if f.is_dir() {
            Node::dir(unix.map(|m| m & 0o7777).filter(|m| *m != 0).unwrap_or(0o755))
        } else if is_link {
            let mut target = Vec::new();
            f.read_to_end(&mut target).map_err(|e| ctx.io(e))?;
            Node::new(Kind::Symlink(target), 0o777)
        } else {
            let mode = unix.map(|m| m & 0o7777).filter(|m| *m != 0).unwrap_or(0o644);
            let (offset, size) = spool.add(&mut f).map_err(|e| ctx.io(e))?;
            Node::new(Kind::File { size, content: Content::Slice { file: spool.path.clone(), offset } }, mode)
        };
        drop(f);
        ctx.insert(path, node)?;
    }
    spool.finish().map_err(|e| ctx.io(e))?;
    let _ = z.into_inner().seek(io::SeekFrom::Start(0));
    Ok(())
}
