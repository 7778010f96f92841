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

/// A slow reference walk: one bit at a time, each code decoded by counting
/// through the code lengths (zlib's puff), under the same rules as
/// `last_block`. Also counts the blocks of each type (stored, fixed,
/// dynamic), so the tests can tell which kinds they covered.
mod reference {
    pub type Walk = Result<((usize, usize), [usize; 3]), &'static str>;

    struct Bits<'a> {
        data: &'a [u8],
        pos: usize,
    }

    impl Bits<'_> {
        fn bits(&mut self, n: usize) -> Result<usize, &'static str> {
            let mut v = 0;
            for i in 0..n {
                let byte = self.data.get(self.pos / 8).ok_or("past the end")?;
                v |= usize::from(byte >> (self.pos % 8) & 1) << i;
                self.pos += 1;
            }
            Ok(v)
        }

        fn skip(&mut self, n: usize) -> Result<(), &'static str> {
            self.pos += n;
            if self.pos > self.data.len() * 8 {
                return Err("past the end");
            }
            Ok(())
        }
    }

    /// Codes per length, and the symbols in canonical order.
    struct Code {
        count: [usize; 16],
        symbols: Vec<usize>,
    }

    impl Code {
        fn new(lengths: &[u8]) -> Result<Code, &'static str> {
            let mut count = [0; 16];
            for &l in lengths {
                count[usize::from(l)] += 1;
            }
            let mut left = 1i64;
            for &c in &count[1..] {
                left = left * 2 - c as i64;
                if left < 0 {
                    return Err("over-subscribed");
                }
            }
            let mut symbols = Vec::new();
            for len in 1..16 {
                symbols.extend((0..lengths.len()).filter(|&s| usize::from(lengths[s]) == len));
            }
            Ok(Code { count, symbols })
        }

        fn decode(&self, bits: &mut Bits) -> Result<usize, &'static str> {
            let (mut code, mut first, mut index) = (0, 0, 0);
            for len in 1..16 {
                code |= bits.bits(1)?;
                let count = self.count[len];
                if code < first + count {
                    return Ok(self.symbols[index + code - first]);
                }
                index += count;
                first = (first + count) << 1;
                code <<= 1;
            }
            Err("no such code")
        }
    }

    const LENGTH_EXTRA: [usize; 29] =
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
    const ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

    fn symbols(bits: &mut Bits, litlen: &Code, dist: &Code) -> Result<(), &'static str> {
        loop {
            match litlen.decode(bits)? {
                0..=255 => {}
                256 => return Ok(()),
                s @ 257..=285 => {
                    bits.bits(LENGTH_EXTRA[s - 257])?;
                    let d = dist.decode(bits)?;
                    if d >= 30 {
                        return Err("invalid distance");
                    }
                    bits.bits(if d < 4 { 0 } else { d / 2 - 1 })?;
                }
                _ => return Err("invalid literal/length"),
            }
        }
    }

    fn dynamic(bits: &mut Bits) -> Result<(Code, Code), &'static str> {
        let hlit = bits.bits(5)? + 257;
        let hdist = bits.bits(5)? + 1;
        let hclen = bits.bits(4)? + 4;
        let mut cl = [0u8; 19];
        for &i in &ORDER[..hclen] {
            cl[i] = bits.bits(3)? as u8;
        }
        let cl = Code::new(&cl)?;
        let mut lengths = Vec::new();
        while lengths.len() < hlit + hdist {
            match cl.decode(bits)? {
                l @ 0..=15 => lengths.push(l as u8),
                16 => {
                    let prev = *lengths.last().ok_or("no previous length")?;
                    let n = 3 + bits.bits(2)?;
                    lengths.extend(std::iter::repeat_n(prev, n));
                }
                17 => lengths.extend(std::iter::repeat_n(0, 3 + bits.bits(3)?)),
                _ => lengths.extend(std::iter::repeat_n(0, 11 + bits.bits(7)?)),
            }
        }
        if lengths.len() > hlit + hdist {
            return Err("lengths overrun");
        }
        Ok((Code::new(&lengths[..hlit])?, Code::new(&lengths[hlit..])?))
    }

    pub fn last_block(data: &[u8]) -> Walk {
        let mut bits = Bits { data, pos: 0 };
        let mut kinds = [0; 3];
        loop {
            let header = bits.pos;
            let last = bits.bits(1)? == 1;
            let kind = bits.bits(2)?;
            match kind {
                0 => {
                    bits.pos = bits.pos.div_ceil(8) * 8;
                    let len = bits.bits(16)?;
                    if bits.bits(16)? != !len & 0xffff {
                        return Err("stored length");
                    }
                    bits.skip(len * 8)?;
                }
                1 => {
                    let mut l = [8u8; 288];
                    l[144..256].fill(9);
                    l[256..280].fill(7);
                    symbols(&mut bits, &Code::new(&l)?, &Code::new(&[5; 30])?)?;
                }
                2 => {
                    let (litlen, dist) = dynamic(&mut bits)?;
                    symbols(&mut bits, &litlen, &dist)?;
                }
                _ => return Err("reserved"),
            }
            kinds[kind] += 1;
            if last {
                return Ok(((header, bits.pos), kinds));
            }
        }
    }
}

/// A deterministic generator (an LCG's high bits).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn text(n: usize) -> Vec<u8> {
    let words = ["rocblas", "hipMalloc", "(void)", "{ return", "42; }", "\n", "int", "gfx942", "kernel", " "];
    let mut rng = Rng(7);
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        out.extend_from_slice(words[rng.next() as usize % words.len()].as_bytes());
    }
    out.truncate(n);
    out
}

/// Like machine code: small values, repeated short runs.
fn binary(n: usize) -> Vec<u8> {
    let mut rng = Rng(11);
    let mut out = Vec::with_capacity(n + 64);
    while out.len() < n {
        if rng.next().is_multiple_of(4) && out.len() > 64 {
            let from = out.len() - 1 - rng.next() as usize % 64;
            let run: Vec<u8> = out[from..].iter().take(3 + rng.next() as usize % 20).copied().collect();
            out.extend(run);
        } else {
            out.push((rng.next() % 7) as u8 * (rng.next() % 40) as u8);
        }
    }
    out.truncate(n);
    out
}

fn libdeflate(level: i32, data: &[u8]) -> Vec<u8> {
    let mut c = Compressor::new(CompressionLvl::new(level).unwrap());
    compress(&mut c, data).unwrap()
}

/// The fast walk and the reference agree on every stream: the same
/// positions when valid, both Err when not.
fn agree(stream: &[u8]) -> Option<[usize; 3]> {
    let reference = reference::last_block(stream);
    let fast = last_block(stream);
    assert_eq!(fast.as_ref().ok(), reference.as_ref().ok().map(|r| &r.0), "{reference:?} {fast:?}");
    reference.ok().map(|r| r.1)
}

#[test]
fn the_walk_agrees_with_a_bit_by_bit_reference() {
    let n = 300_000;
    let mut kinds = [0; 3];
    let data = [text(n), binary(n), Rng(3).bytes(n), vec![0; n], text(40), b"a".to_vec(), Vec::new()];
    for (i, data) in data.iter().enumerate() {
        for level in [0, 1, 6, 12] {
            let stream = libdeflate(level, data);
            let seen = agree(&stream).unwrap_or_else(|| panic!("data {i}, level {level}: not walked"));
            let end = last_block(&stream).unwrap().1;
            assert!(stream.len() * 8 - end < 8, "data {i}, level {level}: ends at {end} of {}", stream.len() * 8);
            kinds.iter_mut().zip(seen).for_each(|(k, s)| *k += s);
        }
    }
    // zlib's fixed-Huffman and stored blocks are laid out differently.
    for level in [0, 1, 9] {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
        std::io::Write::write_all(&mut e, &text(5000)).unwrap();
        let seen = agree(&e.finish().unwrap()).unwrap();
        kinds.iter_mut().zip(seen).for_each(|(k, s)| *k += s);
    }
    let [stored, fixed, dynamic] = kinds;
    assert!(stored > 0 && fixed > 0 && dynamic > 0, "stored {stored}, fixed {fixed}, dynamic {dynamic}");
}

/// Garbage, truncated and corrupted streams end in Ok or Err (no panic, no
/// endless loop), and in the same result as the reference.
#[test]
fn any_bytes_end_in_a_result() {
    let mut rng = Rng(1);
    for i in 0..3000 {
        let mut bytes = rng.bytes(i % 300);
        if let Some(b) = bytes.first_mut() {
            // Mostly dynamic block headers, which reach deepest.
            *b = if i % 4 == 0 { *b } else { *b & !6 | 4 };
        }
        agree(&bytes);
    }
    for stream in [libdeflate(6, &text(3000)), libdeflate(1, &b"a few literals"[..]), libdeflate(0, &text(300))] {
        // The final block ends in the last byte: every cut ends inside it.
        for cut in 0..stream.len() {
            assert!(agree(&stream[..cut]).is_none(), "cut at {cut}");
        }
    }
    let stream = libdeflate(6, &binary(20_000));
    let mut walked = [0; 2];
    for _ in 0..2000 {
        let mut corrupt = stream.clone();
        let bit = rng.next() as usize % (corrupt.len() * 8);
        corrupt[bit / 8] ^= 1 << (bit % 8);
        walked[usize::from(agree(&corrupt).is_some())] += 1;
    }
    // libdeflate's codes are complete: most flips still walk, some break it.
    assert!(walked[0] > 0 && walked[1] > 0, "{walked:?}");
}
