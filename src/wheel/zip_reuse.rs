//! Copying the unchanged stretch of an edited member's original deflate
//! stream into the rewritten zip, instead of compressing it again.
//!
//! An ELF edit changes a few places near a file's start and end and may
//! append a tail; a 1 GiB library keeps almost all its bytes where they
//! were. Where the edited file equals the original over a long run, the
//! original blocks that begin at least 32 KiB into that run (so every
//! back-reference they make lands in unchanged bytes) and end inside it
//! decode exactly as before after any new prefix. The rewritten stream is:
//! the new prefix compressed, those blocks copied bit for bit (realigned
//! to a byte boundary and closed with an empty stored block), the rest
//! compressed. The block boundaries come from
//! [`super::inflate_index`], noted when the member was extracted.

use super::inflate_index::{Boundary, FileStamp, StreamIndex};
use crate::splice::{Part, Splice};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// The deflate window: how far back a block may refer.
const HISTORY: u64 = 32 << 10;
/// Shorter unchanged stretches are compressed again (not worth a copy).
pub const MIN_COPY: u64 = 4 << 20;
/// Compressed bytes copied per piece.
pub const COPY_PIECE: u64 = 4 << 20;

/// An edited member whose original stream may be partly copied.
#[derive(Debug, Clone)]
pub struct Original {
    pub index: StreamIndex,
    /// The extracted member: the splice's parts that read it at the same
    /// offset are the unchanged bytes.
    pub extracted: PathBuf,
}

/// The original blocks to copy: from `start` up to (not including) the
/// block that begins at `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: Boundary,
    pub end: Boundary,
}

/// The longest run of `splice` that reads `original.extracted` at the same
/// offset, as `[from, to)`.
fn unchanged_run(splice: &Splice, original: &Original) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    let mut run: Option<(u64, u64)> = None;
    let mut at = 0u64;
    for part in splice.parts() {
        let same = matches!(part, Part::File { source, offset, .. }
            if *offset == at && source.path() == original.extracted);
        let len = part.len();
        run = match (same, run) {
            (true, Some((from, to))) if to == at => Some((from, at + len)),
            (true, _) => Some((at, at + len)),
            (false, _) => None,
        };
        if let Some((from, to)) = run {
            if best.is_none_or(|(f, t)| to - from > t - f) {
                best = Some((from, to));
            }
        }
        at += len;
    }
    best
}

/// The blocks of the original stream that can be copied into `splice`'s
/// stream, if they cover at least [`MIN_COPY`] bytes.
pub fn window(splice: &Splice, original: &Original) -> Option<Window> {
    // The extracted file must be as it was written, or its bytes are not
    // the original's.
    let stamp = FileStamp::of(&original.extracted).ok();
    if stamp.is_none() || stamp != original.index.extracted {
        return None;
    }
    let (from, to) = unchanged_run(splice, original)?;
    let b = &original.index.boundaries;
    let first = b.partition_point(|x| x.out < from + HISTORY);
    let last = b.partition_point(|x| x.out <= to).checked_sub(1)?;
    let (start, end) = (*b.get(first)?, *b.get(last)?);
    (end.out >= start.out + MIN_COPY && end.bit > start.bit).then_some(Window { start, end })
}

/// The bits `[from, to)` of the original stream, moved to start on a byte
/// boundary; `close`: followed by an empty non-final stored block, which
/// ends the copy on a byte boundary (otherwise `to - from` must be a
/// multiple of 8).
pub fn copy_bits(index: &StreamIndex, from: u64, to: u64, close: bool) -> io::Result<Vec<u8>> {
    let first = from / 8;
    let shift = (from % 8) as u32;
    let bits = to - from;
    let last = to.div_ceil(8); // one past the last byte holding a copied bit
    let mut src = vec![0u8; (last - first) as usize + 1];
    let n = src.len() - 1;
    File::open(&index.zip)?.read_exact_at(&mut src[..n], index.data_start + first)?;
    let mut out: Vec<u8> = src
        .windows(2)
        .take(bits.div_ceil(8) as usize)
        .map(|w| {
            let pair = u16::from_le_bytes([w[0], w[1]]);
            (pair >> shift) as u8
        })
        .collect();
    let used = (bits % 8) as u32;
    if used != 0 {
        if let Some(b) = out.last_mut() {
            *b &= (1u8 << used) - 1; // what follows the copy starts as zeros
        }
    }
    if close {
        // Three zero bits (a non-final stored block), padding to the byte,
        // then LEN 0 and NLEN 0xffff.
        out.resize((bits + 3).div_ceil(8) as usize, 0);
        out.extend_from_slice(&[0, 0, 0xff, 0xff]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copied_bits_are_realigned_and_closed() {
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("z");
        std::fs::write(&zip, [0xAAu8, 0b1011_0110, 0xFF, 0x01, 0x80]).unwrap();
        let index = StreamIndex { zip, data_start: 1, compressed: 4, size: 0, boundaries: Vec::new(), extracted: None };
        // Bits 3..19 of the stream (from the byte 0b1011_0110 on).
        assert_eq!(copy_bits(&index, 3, 19, false).unwrap(), [0b1111_0110, 0b0011_1111]);
        // Bits 1..6, closed: 5 copied bits, the stored header's 3 zero bits
        // fill the byte, then LEN/NLEN.
        assert_eq!(copy_bits(&index, 1, 6, true).unwrap(), [0b0001_1011, 0, 0, 0xff, 0xff]);
        // 7 copied bits: the header spills into a second byte.
        assert_eq!(copy_bits(&index, 0, 7, true).unwrap(), [0b0011_0110, 0, 0, 0, 0xff, 0xff]);
    }

    #[test]
    fn the_window_is_the_blocks_inside_the_longest_unchanged_run() {
        let dir = tempfile::tempdir().unwrap();
        let extracted = dir.path().join("lib.so");
        let mib = 1u64 << 20;
        std::fs::File::create(&extracted).unwrap().set_len(40 * mib).unwrap();
        let boundaries = (0..8).map(|k| Boundary { out: k * 5 * mib, bit: k * 16 * mib }).collect();
        let stamp = FileStamp::of(&extracted).ok();
        let index = StreamIndex {
            zip: dir.path().join("z"),
            data_start: 0,
            compressed: 0,
            size: 40 * mib,
            boundaries,
            extracted: stamp,
        };
        let original = Original { index, extracted: extracted.clone() };
        let b = |k: u64| Boundary { out: k * 5 * mib, bit: k * 16 * mib };

        // Edits at the start and near the end, and a tail: the blocks from
        // the first boundary 32 KiB into the run to the last one inside it.
        let mut splice = Splice::file(&extracted).unwrap();
        splice.overwrite(100, vec![1; 4]);
        splice.overwrite(38 * mib, vec![2; 8]);
        splice.push(Part::Zeros(4096));
        assert_eq!(window(&splice, &original), Some(Window { start: b(1), end: b(7) }));
        // A boundary less than 32 KiB into the run is not a start.
        let mut splice = Splice::file(&extracted).unwrap();
        splice.overwrite(5 * mib - 10, vec![1; 4]);
        assert_eq!(window(&splice, &original).map(|w| w.start), Some(b(2)));
        // Runs shorter than MIN_COPY between boundaries: nothing to copy.
        let mut splice = Splice::file(&extracted).unwrap();
        for k in 1..8 {
            splice.overwrite(k * 5 * mib + mib, vec![3; 4]);
        }
        assert_eq!(window(&splice, &original), None);
        // Another file's bytes never count as unchanged.
        let other = dir.path().join("other.so");
        std::fs::copy(&extracted, &other).unwrap();
        assert_eq!(window(&Splice::file(&other).unwrap(), &original), None);
        // Nor does the extracted file once changed in place (stripped, patched).
        let splice = Splice::file(&extracted).unwrap();
        assert!(window(&splice, &original).is_some());
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::OpenOptions::new().write(true).open(&extracted).unwrap().write_all_at(b"x", 7).unwrap();
        assert_eq!(window(&splice, &original), None);
    }
}
