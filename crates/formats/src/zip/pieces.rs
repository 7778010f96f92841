//! The pieces an entry is cut into for the zip writer (see `write`):
//! what each stands for in the entry's stream (deflated, copied from an
//! original stream, a bridge to such a copy) and how its bytes are read.

use super::entry::{EntrySource, ZipEntry};
use super::reuse::{self, Original, Window};
use super::ZipError;
use crate::read_once;
use std::fs::File;
use std::io;
use std::sync::Arc;

/// Bytes per piece compressed on its own.
pub const PIECE: u64 = 2 << 20;

/// A piece of an entry: `len` bytes at `offset` read (hashed in order),
/// and what its compressed bytes are.
pub(super) struct Piece {
    pub(super) entry: usize,
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) job: Job,
    /// The entry's first and last pieces.
    pub(super) first: bool,
    pub(super) last: bool,
}

pub(super) enum Job {
    /// The bytes deflated; `final_block`: the stream's end.
    Deflate { final_block: bool },
    /// The bytes only hashed: a copy stands for them.
    Hash,
    /// The bytes as the literals of a bridge to a copy (see [`reuse::Bridge`]).
    Bridge(reuse::Bridge),
    /// Bits of the original stream (see [`reuse::copy_bits`]).
    Copy { original: Arc<Original>, from: u64, to: u64, close: bool },
}

/// What an entry copies from its original stream.
pub(super) struct Reuse {
    pub(super) original: Arc<Original>,
    pub(super) window: Window,
    pub(super) bridge: reuse::Bridge,
}

/// Cut entry `entry` (of `size` bytes) into pieces; `window`: original
/// blocks copied in place of its unchanged stretch.
pub(super) fn plan_pieces(pieces: &mut Vec<Piece>, entry: usize, size: u64, reuse: Option<Reuse>) {
    let at = pieces.len();
    let deflate = |pieces: &mut Vec<Piece>, from: u64, to: u64, final_block: bool| {
        let n = (to - from).div_ceil(PIECE).max(1);
        for k in 0..n {
            let offset = from + k * PIECE;
            let len = (to - offset).min(PIECE) as usize;
            let job = Job::Deflate { final_block: final_block && k + 1 == n };
            pieces.push(Piece { entry, offset, len, job, first: false, last: false });
        }
    };
    match reuse {
        None => deflate(pieces, 0, size, true),
        Some(Reuse { original, window: w, bridge }) => {
            let literals_at = w.start.out - bridge.literals;
            deflate(pieces, 0, literals_at, false);
            let (offset, len, job) = (literals_at, bridge.literals as usize, Job::Bridge(bridge));
            pieces.push(Piece { entry, offset, len, job, first: false, last: false });
            let mut offset = w.start.out;
            while offset < w.end.out {
                let len = (w.end.out - offset).min(PIECE) as usize;
                pieces.push(Piece { entry, offset, len, job: Job::Hash, first: false, last: false });
                offset += len as u64;
            }
            let mut from = bridge.copy_from;
            while from < w.end.bit {
                let to = (from + 8 * reuse::COPY_PIECE).min(w.end.bit);
                let job = Job::Copy { original: original.clone(), from, to, close: to == w.end.bit };
                pieces.push(Piece { entry, offset: w.end.out, len: 0, job, first: false, last: false });
                from = to;
            }
            deflate(pieces, w.end.out, size, true);
        }
    }
    pieces[at].first = true;
    if let Some(p) = pieces.last_mut() {
        p.last = true;
    }
}

/// The file of a [`EntrySource::Path`] entry being read, held open across
/// its pieces, with how its pieces are read (see [`read_once::read_directly`]).
pub(super) struct OpenFile {
    entry: usize,
    file: File,
    direct: bool,
}

pub(super) fn read_piece(e: &ZipEntry, p: &Piece, open: &mut Option<OpenFile>) -> Result<Vec<u8>, ZipError> {
    if p.len == 0 {
        return Ok(Vec::new());
    }
    match &e.source {
        EntrySource::Bytes(b) => Ok(b[p.offset as usize..p.offset as usize + p.len].to_vec()),
        EntrySource::Splice(s) | EntrySource::Reused(s, _) => {
            let mut buf = vec![0u8; p.len];
            let path = || s.source().map(|src| src.path().to_path_buf()).unwrap_or_else(|| e.name.clone().into());
            s.read_at(p.offset, &mut buf).map_err(|source| ZipError::Io { path: path(), source })?;
            Ok(buf)
        }
        EntrySource::Path(path) => {
            let io = |source| ZipError::Io { path: path.clone(), source };
            let f = match open.take() {
                Some(f) if f.entry == p.entry => f,
                _ => {
                    let file = File::open(path).map_err(io)?;
                    OpenFile { entry: p.entry, direct: read_once::read_directly(&file), file }
                }
            };
            let mut buf = vec![0u8; p.len];
            let read = read_once::read_exact_at(&f.file, f.direct, &mut buf, p.offset);
            let found = || f.file.metadata().map(|m| m.len()).unwrap_or(0);
            match read {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    let expected = p.offset + p.len as u64;
                    return Err(ZipError::Changed { path: path.clone(), expected, found: found() });
                }
                Err(e) => return Err(io(e)),
            }
            *open = Some(f);
            Ok(buf)
        }
    }
}
