//! Raw deflate of one member in independent pieces, so a large file is
//! compressed on every core and still forms one deflate stream.
//!
//! Each piece is compressed by libdeflate (about twice zlib's speed at a
//! better ratio), which only makes complete streams: its last block is
//! marked final. A piece that is not the member's last has that mark
//! cleared and is closed with an empty stored block (the "sync flush"
//! marker zlib writes), which ends it on a byte boundary, so the next piece
//! can simply follow. Finding the final block means walking the piece's
//! blocks ([`last_block`]): no crate exposes that, hence the small decoder
//! below, which reads block headers and Huffman codes but produces no
//! output. Pieces depend only on their bytes and the level, so the stream
//! is the same whatever the thread count.

use libdeflater::{CompressionLvl, Compressor};

/// libdeflate's level: 6 is as fast as its 4 on ROCm binaries and smaller
/// than zlib's default level 6 output.
pub const LEVEL: i32 = 6;

/// Compress one piece; `last`: the member's final piece (stream left as is).
pub fn compress_piece(c: &mut Compressor, data: &[u8], last: bool) -> Result<Vec<u8>, String> {
    finish_piece(compress(c, data)?, last)
}

/// A compressor with its output buffer, kept by a worker across pieces (a
/// fresh worst-case buffer per piece costs a page-faulted, zeroed 2 MiB).
pub struct PieceCompressor {
    compressor: Compressor,
    buffer: Vec<u8>,
}

impl PieceCompressor {
    pub fn new() -> PieceCompressor {
        PieceCompressor { compressor: compressor(), buffer: Vec::new() }
    }

    /// [`compress_piece`] through the kept buffer.
    pub fn compress_piece(&mut self, data: &[u8], last: bool) -> Result<Vec<u8>, String> {
        let bound = self.compressor.deflate_compress_bound(data.len());
        if self.buffer.len() < bound {
            self.buffer.resize(bound, 0);
        }
        let n = self.compressor.deflate_compress(data, &mut self.buffer).map_err(|e| format!("deflate: {e:?}"))?;
        finish_piece(self.buffer[..n].to_vec(), last)
    }
}

impl Default for PieceCompressor {
    fn default() -> Self {
        Self::new()
    }
}

/// libdeflate's complete stream of `data` (its last block marked final).
pub fn compress(c: &mut Compressor, data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; c.deflate_compress_bound(data.len())];
    let n = c.deflate_compress(data, &mut out).map_err(|e| format!("deflate: {e:?}"))?;
    out.truncate(n);
    Ok(out)
}

/// Make a complete stream a piece the next one can follow (unless `last`):
/// the final mark cleared, closed by an empty stored block.
pub fn finish_piece(mut out: Vec<u8>, last: bool) -> Result<Vec<u8>, String> {
    if last {
        return Ok(out);
    }
    let (header, end) = last_block(&out)?;
    out[header / 8] &= !(1u8 << (header % 8)); // not final any more
                                               // Three zero bits (a non-final stored block header), then padding to the
                                               // byte boundary, then LEN 0 and NLEN 0xffff.
    let keep = (end + 3).div_ceil(8);
    out.resize(keep, 0);
    let used_in_last = end % 8;
    if used_in_last != 0 && end / 8 < out.len() {
        out[end / 8] &= (1u8 << used_in_last) - 1; // the bits after `end` are zero
    }
    out.extend_from_slice(&[0, 0, 0xff, 0xff]);
    Ok(out)
}

/// A compressor at [`LEVEL`].
pub fn compressor() -> Compressor {
    Compressor::new(CompressionLvl::new(LEVEL).expect("LEVEL is a valid libdeflate level"))
}

struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bits<'_> {
    fn bit_len(&self) -> usize {
        self.data.len() * 8
    }

    /// The next `n` (<= 16) bits, LSB first, without consuming them.
    fn peek(&self, n: usize) -> u32 {
        peek_at(self.data, self.pos, n)
    }

    /// Step over `n` bits.
    #[inline]
    fn skip(&mut self, n: usize) -> Result<(), String> {
        self.pos += n;
        if self.pos > self.bit_len() {
            return Err("deflate stream ends inside a block".into());
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<u32, String> {
        let v = self.peek(n);
        self.skip(n)?;
        Ok(v)
    }
}

/// Bits the first table lookup reads: its table (4 KiB) stays in the L1
/// cache; longer codes (rare) take a second lookup in a subtable.
const PRIMARY: usize = 10;
/// Marks a primary entry that links to a subtable (in its length field,
/// with the subtable's extra index bits in the low seven).
const LINK: u32 = 0x80;

/// Canonical Huffman decoding by table lookup. An entry packs the symbol
/// (bits 0-15), its code length (16-23, 0: no such code) and the extra
/// bits that follow it (24-31), so the walk steps over a length or
/// distance and its extra bits in one move. A primary entry whose length
/// field has [`LINK`] set holds a subtable's offset instead of a symbol.
struct Huffman {
    table: Vec<u32>,
    primary: usize,
}

impl Huffman {
    /// `extra(symbol)`: how many extra bits follow the symbol.
    fn new(lengths: &[u8], extra: fn(usize) -> u32) -> Result<Huffman, String> {
        let max = lengths.iter().copied().max().unwrap_or(0) as usize;
        if max == 0 {
            return Ok(Huffman { table: vec![0], primary: 0 });
        }
        let mut count = [0u32; 16];
        for &l in lengths {
            count[l as usize] += 1;
        }
        count[0] = 0;
        let mut next = [0u32; 16];
        let mut code = 0u32;
        for bits in 1..16 {
            code = (code + count[bits - 1]) << 1;
            next[bits] = code;
        }
        // Every symbol's code, reversed (codes are sent MSB first and the
        // tables are indexed by the bits as read).
        let mut codes = Vec::with_capacity(lengths.len());
        for (sym, &len) in lengths.iter().enumerate() {
            let len = len as usize;
            if len == 0 {
                continue;
            }
            let c = next[len];
            next[len] += 1;
            if c >= 1 << len {
                return Err("over-subscribed Huffman code".into());
            }
            codes.push((sym, len, (c.reverse_bits() >> (32 - len)) as usize));
        }
        let primary = max.min(PRIMARY);
        let mask = (1usize << primary) - 1;
        // Each subtable's index bits: the longest code under its prefix.
        let mut sub_bits = vec![0usize; 1 << primary];
        for &(_, len, rev) in codes.iter().filter(|c| c.1 > primary) {
            let b = &mut sub_bits[rev & mask];
            *b = (*b).max(len - primary);
        }
        let mut table = vec![0u32; 1 << primary];
        for (prefix, &bits) in sub_bits.iter().enumerate().filter(|(_, &b)| b > 0) {
            table[prefix] = table.len() as u32 | (LINK | bits as u32) << 16;
            table.resize(table.len() + (1 << bits), 0);
        }
        for (sym, len, rev) in codes {
            let entry = sym as u32 | (len as u32) << 16 | extra(sym) << 24;
            let (start, step, end) = if len <= primary {
                (rev, 1 << len, 1 << primary)
            } else {
                let link = table[rev & mask];
                let base = (link & 0xffff) as usize;
                let bits = ((link >> 16) & 0x7f) as usize;
                (base + (rev >> primary), 1 << (len - primary), base + (1 << bits))
            };
            let mut i = start;
            while i < end {
                table[i] = entry;
                i += step;
            }
        }
        Ok(Huffman { table, primary })
    }

    /// The next code's symbol, consumed with its extra bits.
    fn next(&self, bits: &mut Bits) -> Result<u32, String> {
        let entry = lookup(bits.data, bits.pos, &self.table, self.primary);
        let len = (entry >> 16) & 0xff;
        if len == 0 {
            return Err("invalid Huffman code".into());
        }
        bits.skip((len + (entry >> 24)) as usize)?;
        Ok(entry & 0xffff)
    }
}

/// The `n` (<= 25) bits at bit `pos`, LSB first (zeros past the end): one
/// unaligned 8-byte load where the data allows.
#[inline(always)]
fn peek_at(data: &[u8], pos: usize, n: usize) -> u32 {
    let byte = pos / 8;
    let word = match data.get(byte..byte + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut w = [0u8; 8];
            let rest = data.get(byte..).unwrap_or(&[]);
            w[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(w)
        }
    };
    ((word >> (pos % 8)) as u32) & ((1u32 << n) - 1)
}

/// The table entry of the code at bit `pos` (0: no such code).
#[inline(always)]
fn lookup(data: &[u8], pos: usize, table: &[u32], primary: usize) -> u32 {
    let entry = table.get(peek_at(data, pos, primary) as usize).copied().unwrap_or(0);
    let len = (entry >> 16) & 0xff;
    if len & LINK == 0 {
        return entry;
    }
    let sub = (len & 0x7f) as usize;
    let index = (entry & 0xffff) as usize + (peek_at(data, pos, primary + sub) >> primary) as usize;
    table.get(index).copied().unwrap_or(0)
}

const LENGTH_EXTRA: [u8; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_EXTRA: [u8; 30] =
    [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
const CODE_LENGTH_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

fn litlen_extra(sym: usize) -> u32 {
    sym.checked_sub(257).and_then(|i| LENGTH_EXTRA.get(i)).map_or(0, |&e| u32::from(e))
}

fn dist_extra(sym: usize) -> u32 {
    DIST_EXTRA.get(sym).map_or(0, |&e| u32::from(e))
}

fn no_extra(_: usize) -> u32 {
    0
}

/// Step over one block's symbols up to its end-of-block code. The hot
/// loop of the walk: the position stays in a local, the tables are read
/// directly, and a length code's distance follows in the same turn.
fn skip_symbols(bits: &mut Bits, litlen: &Huffman, dist: &Huffman) -> Result<(), String> {
    let data = bits.data;
    let end = data.len() * 8;
    let mut pos = bits.pos;
    let (lt, lp, dt, dp) = (&litlen.table[..], litlen.primary, &dist.table[..], dist.primary);
    let result: Result<(), &str> = loop {
        let e = lookup(data, pos, lt, lp);
        let len = (e >> 16) & 0xff;
        if len == 0 {
            break Err("invalid Huffman code");
        }
        pos += (len + (e >> 24)) as usize;
        match e & 0xffff {
            0..=255 => {}
            256 => break Ok(()),
            257..=285 => {
                let d = lookup(data, pos, dt, dp);
                let dlen = (d >> 16) & 0xff;
                if dlen == 0 || d & 0xffff >= 30 {
                    break Err("invalid distance code");
                }
                pos += (dlen + (d >> 24)) as usize;
            }
            _ => break Err("invalid literal/length code"),
        }
        if pos > end {
            break Err("deflate stream ends inside a block");
        }
    };
    bits.pos = pos;
    if result.is_ok() && pos > end {
        return Err("deflate stream ends inside a block".into());
    }
    result.map_err(String::from)
}

fn dynamic_tables(bits: &mut Bits) -> Result<(Huffman, Huffman), String> {
    let hlit = bits.take(5)? as usize + 257;
    let hdist = bits.take(5)? as usize + 1;
    let hclen = bits.take(4)? as usize + 4;
    let mut cl = [0u8; 19];
    for &i in &CODE_LENGTH_ORDER[..hclen] {
        cl[i] = bits.take(3)? as u8;
    }
    let cl = Huffman::new(&cl, no_extra)?;
    let mut lengths = Vec::with_capacity(hlit + hdist);
    while lengths.len() < hlit + hdist {
        match cl.next(bits)? {
            l @ 0..=15 => lengths.push(l as u8),
            16 => {
                let prev = *lengths.last().ok_or("repeat with no previous length")?;
                let n = 3 + bits.take(2)? as usize;
                lengths.extend(std::iter::repeat_n(prev, n));
            }
            17 => {
                let n = 3 + bits.take(3)? as usize;
                lengths.extend(std::iter::repeat_n(0, n));
            }
            _ => {
                let n = 11 + bits.take(7)? as usize;
                lengths.extend(std::iter::repeat_n(0, n));
            }
        }
    }
    if lengths.len() != hlit + hdist {
        return Err("code lengths run past their count".into());
    }
    Ok((Huffman::new(&lengths[..hlit], litlen_extra)?, Huffman::new(&lengths[hlit..], dist_extra)?))
}

/// The bit positions of the final block's header and of its end, in a
/// complete raw deflate stream.
pub fn last_block(stream: &[u8]) -> Result<(usize, usize), String> {
    let mut bits = Bits { data: stream, pos: 0 };
    let mut fixed: Option<(Huffman, Huffman)> = None;
    loop {
        let header = bits.pos;
        let last = bits.take(1)? == 1;
        match bits.take(2)? {
            0 => {
                bits.pos = bits.pos.div_ceil(8) * 8;
                let len = bits.take(16)? as usize;
                let nlen = bits.take(16)? as usize;
                if len != !nlen & 0xffff {
                    return Err("stored block length check failed".into());
                }
                bits.pos += len * 8;
                if bits.pos > bits.bit_len() {
                    return Err("stored block past the end".into());
                }
            }
            1 => {
                if fixed.is_none() {
                    let mut l = [8u8; 288];
                    l[144..256].fill(9);
                    l[256..280].fill(7);
                    fixed = Some((Huffman::new(&l, litlen_extra)?, Huffman::new(&[5u8; 30], dist_extra)?));
                }
                let (litlen, dist) = fixed.as_ref().expect("just built");
                skip_symbols(&mut bits, litlen, dist)?;
            }
            2 => {
                let (litlen, dist) = dynamic_tables(&mut bits)?;
                skip_symbols(&mut bits, &litlen, &dist)?;
            }
            _ => return Err("reserved block type".into()),
        }
        if last {
            return Ok((header, bits.pos));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn inflate(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(data).read_to_end(&mut out).unwrap();
        out
    }

    /// Text-like, binary-like and incompressible pieces (stored blocks).
    fn sample(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match (i / 50_000) % 3 {
                    0 => b"int rocblas_answer(void) { return 42; }\n"[i % 40],
                    1 => (i % 251) as u8 ^ ((x >> 60) as u8),
                    _ => (x >> 33) as u8,
                }
            })
            .collect()
    }

    #[test]
    fn pieces_join_into_one_stream() {
        let mut c = compressor();
        for (size, piece) in [(1_000_000, 100_000), (300_000, 65_536), (10, 3), (200_000, 200_000)] {
            let data = sample(size, size as u64);
            let chunks: Vec<&[u8]> = data.chunks(piece).collect();
            let mut stream = Vec::new();
            for (i, ch) in chunks.iter().enumerate() {
                stream.extend(compress_piece(&mut c, ch, i + 1 == chunks.len()).unwrap());
            }
            assert_eq!(inflate(&stream), data, "size {size}, pieces of {piece}");
        }
    }

    #[test]
    fn walks_fixed_dynamic_and_stored_blocks() {
        for data in [b"a".to_vec(), sample(70_000, 1), vec![0u8; 1 << 20]] {
            for level in [1, 6, 12] {
                let mut c = Compressor::new(CompressionLvl::new(level).unwrap());
                let mut out = vec![0u8; c.deflate_compress_bound(data.len())];
                let n = c.deflate_compress(&data, &mut out).unwrap();
                let (header, end) = last_block(&out[..n]).unwrap();
                assert!(header < end && end <= n * 8 && n * 8 - end < 8, "{header} {end} {n}");
            }
        }
        assert!(last_block(&[0xff]).is_err());
        assert!(last_block(&[]).is_err());
    }
}
