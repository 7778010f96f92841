//! Reading a .deb: an `ar` archive holding `debian-binary`, `control.tar.*`
//! and `data.tar.*` (uncompressed, gz, xz or zstd). The control files are
//! kept in memory (they are small); the data tar is copied to the spool
//! and read into a layer tree by `tarball::archive`, which refuses `..`,
//! absolute paths, writes through symlinks and hardlinks out of the tree.

use super::control::{parse_paragraphs, Paragraph};
use super::DistroError;
use crate::layer::archive::{read_into, Placement};
use crate::layer::stream::{decoder, sniff, Checks, Format};
use crate::layer::Tree;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// A .deb, opened.
pub struct Deb {
    /// The `control` paragraph.
    pub control: Paragraph,
    /// Every control member but `control` itself (md5sums, conffiles,
    /// maintainer scripts, triggers, shlibs, symbols, templates...).
    pub control_files: BTreeMap<String, Vec<u8>>,
    /// The `control` member as written.
    pub control_text: String,
    /// The data tar's members, as written (normalized, relative).
    pub data: Tree,
    /// The data tar's member paths in archive order (dpkg's `.list` order).
    pub order: Vec<Vec<u8>>,
}

fn bad(deb: &Path, message: impl Into<String>) -> DistroError {
    DistroError::Deb { deb: deb.display().to_string(), message: message.into() }
}

fn decompress(name: &str, bytes: Vec<u8>, deb: &Path) -> Result<Vec<u8>, DistroError> {
    let format = match Format::of_name(name) {
        Some(Format::Tar) => return Ok(bytes),
        Some(f @ (Format::Gzip | Format::Xz | Format::Zstd)) => f,
        Some(Format::Zip) | None => return Err(bad(deb, format!("member `{name}` has an unsupported compression"))),
    };
    let mut out = Vec::new();
    decoder(format, &bytes[..], Checks::Verify)
        .and_then(|mut d| d.read_to_end(&mut out))
        .map_err(|e| bad(deb, format!("member `{name}`: {e}")))?;
    Ok(out)
}

/// Open `deb`; its data tar is spooled under `spool`.
pub fn read_deb(deb: &Path, spool: &Path) -> Result<Deb, DistroError> {
    let file = std::fs::File::open(deb).map_err(|e| DistroError::io(deb, e))?;
    let mut ar = ar::Archive::new(std::io::BufReader::new(file));
    let mut control_tar = None;
    let mut data = None;
    let mut order = Vec::new();
    while let Some(entry) = ar.next_entry() {
        let mut entry = entry.map_err(|e| bad(deb, format!("not a valid .deb (ar) archive: {e}")))?;
        let name = String::from_utf8_lossy(entry.header().identifier()).trim_end_matches('/').to_string();
        if name.starts_with("control.tar") {
            let mut v = Vec::new();
            entry.read_to_end(&mut v).map_err(|e| DistroError::io(deb, e))?;
            control_tar = Some(decompress(&name, v, deb)?);
        } else if name.starts_with("data.tar") {
            // The tree reader sniffs the compression from the bytes.
            let mut tmp =
                tempfile::Builder::new().prefix("data-").tempfile_in(spool).map_err(|e| DistroError::io(spool, e))?;
            std::io::copy(&mut entry, &mut tmp).map_err(|e| DistroError::io(deb, e))?;
            let mut tree = Tree::new();
            // verified: the .deb matched its pinned sha256 when fetched.
            let place = Placement { record_order: true, verified: true, ..Default::default() };
            let report = read_into(tmp.path(), &mut tree, &place, spool)
                .map_err(|e| bad(deb, format!("data member `{name}`: {e}")))?;
            order = report.order;
            // An uncompressed data tar is read in place: keep its file for
            // the build (the spool directory goes when the build ends).
            if sniff(tmp.path()).map_err(|e| DistroError::io(tmp.path(), e))? == Format::Tar {
                tmp.keep().map_err(|e| DistroError::io(spool, e.error))?;
            }
            data = Some(tree);
        }
    }
    let control_tar = control_tar.ok_or_else(|| bad(deb, "has no control.tar member"))?;
    let data = data.ok_or_else(|| bad(deb, "has no data.tar member"))?;
    let mut control = None;
    let mut control_text = String::new();
    let mut control_files = BTreeMap::new();
    let mut t = tar::Archive::new(&control_tar[..]);
    for e in t.entries().map_err(|e| bad(deb, format!("control.tar: {e}")))? {
        let mut e = e.map_err(|e| bad(deb, format!("control.tar: {e}")))?;
        if e.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let raw = e.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).trim_start_matches("./").to_string();
        if name.contains('/') || name.is_empty() {
            continue;
        }
        let mut v = Vec::new();
        e.read_to_end(&mut v).map_err(|e| bad(deb, format!("control.tar: {e}")))?;
        if name == "control" {
            control_text = String::from_utf8_lossy(&v).into_owned();
            control = parse_paragraphs(&control_text).into_iter().next();
        } else {
            control_files.insert(name, v);
        }
    }
    let control = control.ok_or_else(|| bad(deb, "has no `control` file"))?;
    Ok(Deb { control, control_files, control_text, data, order })
}
