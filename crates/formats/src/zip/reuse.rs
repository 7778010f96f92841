//! Copying the unchanged stretch of an edited member's original deflate
//! stream into the rewritten zip, instead of compressing it again.
//!
//! An ELF edit changes a few places near a file's start and end and may
//! append a tail; a 1 GiB library keeps almost all its bytes where they
//! were. Where the edited file equals the original over a long run, the
//! original blocks that begin at least 32 KiB into that run (so every
//! back-reference they make lands in unchanged bytes) and end inside it
//! decode exactly as before after any new prefix. The rewritten stream is:
//! the new prefix compressed, a bridge, those blocks copied byte for byte
//! (closed with an empty stored block), the rest compressed. The blocks
//! must keep their bit alignment (a stored block pads its header to a byte
//! boundary), so the bridge brings the stream to the copy's first bit
//! modulo 8: fixed-Huffman blocks, one with the last few bytes before the
//! copy as literals when an odd number of bits is needed (a literal of 144
//! or more takes 9 bits), then empty ones (10 bits each). The block
//! boundaries come from [`super::inflate_index`], noted when the member
//! was extracted.

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

/// How the rewritten stream reaches the window's bit alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bridge {
    /// How many bytes just before the window go as literals (0: none).
    pub literals: u64,
    /// The original byte holding the window's first bit, and that bit.
    byte: u8,
    first_bit: u32,
    /// Where the byte-aligned copy starts, in bits of the original stream.
    pub copy_from: u64,
}

/// The bridge into window `w` of `splice`; None when an odd number of bits
/// is needed and no byte of 144 or more lies in the 32 KiB before it.
pub fn bridge(splice: &Splice, original: &Original, w: &Window) -> io::Result<Option<Bridge>> {
    let first_bit = (w.start.bit % 8) as u32;
    let mut byte = [0u8];
    File::open(&original.index.zip)?.read_exact_at(&mut byte, original.index.data_start + w.start.bit / 8)?;
    let literals = if first_bit.is_multiple_of(2) {
        0
    } else {
        let n = HISTORY.min(w.start.out);
        let mut before = vec![0u8; n as usize];
        splice.read_at(w.start.out - n, &mut before)?;
        match before.iter().rposition(|&b| b >= 144) {
            Some(i) => n - i as u64,
            None => return Ok(None),
        }
    };
    let copy_from = if first_bit == 0 { w.start.bit } else { (w.start.bit / 8 + 1) * 8 };
    Ok(Some(Bridge { literals, byte: byte[0], first_bit, copy_from }))
}

/// Bits written least significant first.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    fn put(&mut self, value: u64, bits: u32) {
        self.acc |= value << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code (sent most significant bit first).
    fn code(&mut self, code: u32, bits: u32) {
        self.put(u64::from(code.reverse_bits() >> (32 - bits)), bits);
    }

    /// A non-final fixed-Huffman block holding `literals`.
    fn fixed_block(&mut self, literals: &[u8]) {
        self.put(0b010, 3); // BFINAL 0, BTYPE 01
        for &b in literals {
            match b {
                0..=143 => self.code(0x30 + u32::from(b), 8),
                _ => self.code(0x190 + u32::from(b) - 144, 9),
            }
        }
        self.code(0, 7); // end of block
    }
}

/// The bridge's bytes (see [`Bridge`]); `literals`: the bytes it carries.
pub fn bridge_bytes(bridge: &Bridge, literals: &[u8]) -> Vec<u8> {
    let mut w = BitWriter::default();
    if !literals.is_empty() {
        w.fixed_block(literals);
    }
    while w.n % 8 != bridge.first_bit {
        w.fixed_block(&[]);
    }
    if bridge.first_bit != 0 {
        // The original byte's bits from the window's first one on.
        w.put(u64::from(bridge.byte >> bridge.first_bit), 8 - bridge.first_bit);
    }
    w.out
}

/// The bits `[from, to)` of the original stream (`from` a multiple of 8
/// in practice: see [`Bridge::copy_from`]), moved to start on a byte
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

    /// For every bit alignment of the window's start: a stream made of the
    /// bridge (with literals when the alignment is odd) and the original
    /// bytes from there inflates to the literals and the original's data,
    /// with a stored block right at the window's start (the case a shifted
    /// copy breaks).
    #[test]
    fn the_bridge_keeps_the_original_alignment() {
        use std::io::Read;
        for r in 0..8u32 {
            // The original: blocks up to bit alignment r, then a stored
            // block (the window's start) and a final fixed block.
            let mut o = BitWriter::default();
            if r % 2 == 1 {
                o.fixed_block(&[200]);
            }
            while o.n % 8 != r {
                o.fixed_block(&[]);
            }
            let start_bit = (o.out.len() * 8) as u64 + u64::from(o.n);
            o.put(0, 3); // a stored block, not final
            o.put(0, (8 - o.n % 8) % 8);
            for b in [5u8, 0, 0xfa, 0xff] {
                o.put(u64::from(b), 8);
            }
            for &b in b"HELLO" {
                o.put(u64::from(b), 8);
            }
            o.put(0b011, 3); // final fixed block
            for &b in b"XY" {
                o.code(0x30 + u32::from(b), 8);
            }
            o.code(0, 7);
            o.put(0, 7);
            let original = o.out;

            let literals: &[u8] = if r % 2 == 1 { &[250, 1, 2] } else { &[] };
            let copy_from = if r == 0 { start_bit } else { (start_bit / 8 + 1) * 8 };
            let bridge = Bridge {
                literals: literals.len() as u64,
                byte: original[(start_bit / 8) as usize],
                first_bit: r,
                copy_from,
            };
            let mut stream = bridge_bytes(&bridge, literals);
            stream.extend_from_slice(&original[(copy_from / 8) as usize..]);
            let mut got = Vec::new();
            flate2::read::DeflateDecoder::new(&stream[..]).read_to_end(&mut got).unwrap();
            assert_eq!(got, [literals, b"HELLOXY"].concat(), "alignment {r}");
        }
    }
}
