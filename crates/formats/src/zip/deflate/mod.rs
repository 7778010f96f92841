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
//! in `walk`, which reads block headers and Huffman codes but produces no
//! output. Pieces depend only on their bytes and the level, so the stream
//! is the same whatever the thread count.

use super::DeflateError;
use libdeflater::{CompressionLvl, Compressor};

mod walk;

pub use walk::last_block;

/// libdeflate's level: 6 is as fast as its 4 on ROCm binaries and smaller
/// than zlib's default level 6 output.
pub const LEVEL: i32 = 6;

/// Compress one piece; `last`: the member's final piece (stream left as is).
pub fn compress_piece(c: &mut Compressor, data: &[u8], last: bool) -> Result<Vec<u8>, DeflateError> {
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
    pub fn compress_piece(&mut self, data: &[u8], last: bool) -> Result<Vec<u8>, DeflateError> {
        let bound = self.compressor.deflate_compress_bound(data.len());
        if self.buffer.len() < bound {
            self.buffer.resize(bound, 0);
        }
        let n = self.compressor.deflate_compress(data, &mut self.buffer).map_err(DeflateError::Compress)?;
        finish_piece(self.buffer[..n].to_vec(), last)
    }
}

impl Default for PieceCompressor {
    fn default() -> Self {
        Self::new()
    }
}

/// libdeflate's complete stream of `data` (its last block marked final).
pub fn compress(c: &mut Compressor, data: &[u8]) -> Result<Vec<u8>, DeflateError> {
    let mut out = vec![0u8; c.deflate_compress_bound(data.len())];
    let n = c.deflate_compress(data, &mut out).map_err(DeflateError::Compress)?;
    out.truncate(n);
    Ok(out)
}

/// Make a complete stream a piece the next one can follow (unless `last`):
/// the final mark cleared, closed by an empty stored block.
pub fn finish_piece(mut out: Vec<u8>, last: bool) -> Result<Vec<u8>, DeflateError> {
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

#[cfg(test)]
mod tests;
