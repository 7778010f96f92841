//! The walk to a deflate stream's final block: [`last_block`] reads block
//! headers and steps over Huffman codes without producing any output.
//!
//! Built for speed, since every piece of every large member is walked:
//! the unread bits sit in a 64-bit register refilled by one unaligned
//! 8-byte load (libdeflate's scheme), table entries hold the total bits a
//! symbol takes (code plus extra bits) with its kind, and a literal is
//! followed by a second one without a refill. Near the end of the data a
//! cold path feeds zero bytes and counts them, which keeps the position
//! exact and stops a stream that ends inside a block.

/// Entries of a literal/length table's first lookup: 11 bits (8 KiB,
/// stays in L1); longer codes (rare) take a second lookup in a subtable.
const LITLEN_SIZE: usize = 1 << 11;
/// Entries of a distance table's first lookup: 8 bits (distance codes
/// are fewer).
const DIST_SIZE: usize = 1 << 8;
/// Code length codes are at most 7 bits: never a subtable.
const CODE_LENGTH_SIZE: usize = 1 << 7;

// A table entry: the bits the symbol takes with its extra bits (0-7) and
// its kind (8-11); a code length code's symbol (16-31). A link to a
// subtable holds the subtable's index bits (0-7) and offset (16-31).
// 0: no such code.
const LITERAL: u32 = 1 << 8;
const LENGTH: u32 = 1 << 9;
const END_OF_BLOCK: u32 = 1 << 10;
const LINK: u32 = 1 << 11;
/// Any valid distance or code length symbol.
const SYMBOL: u32 = LITERAL;

const ENDS_INSIDE: &str = "deflate stream ends inside a block";

/// Canonical Huffman decoding by table lookup: a primary table of `SIZE`
/// (a power of two) entries indexed by the next bits, and subtables.
struct Table<const SIZE: usize> {
    primary: Box<[u32; SIZE]>,
    sub: Vec<u32>,
}

impl<const SIZE: usize> Table<SIZE> {
    const BITS: u32 = SIZE.trailing_zeros();

    fn new() -> Self {
        const { assert!(SIZE.is_power_of_two()) };
        Table { primary: Box::new([0; SIZE]), sub: Vec::new() }
    }

    /// Rebuild for the code `lengths` (<= 15; 0: symbol not used);
    /// `kind(symbol)`: its entry's kind and extra bits (0: invalid symbol).
    fn build(&mut self, lengths: &[u8], kind: fn(usize) -> u32) -> Result<(), &'static str> {
        self.sub.clear();
        let mut count = [0u32; 16];
        for &l in lengths {
            *count.get_mut(usize::from(l)).ok_or("Huffman code length over 15")? += 1;
        }
        count[0] = 0;
        // Over-subscribed lengths (codes that would not fit) are invalid;
        // incomplete ones leave some entries at 0.
        let mut left = 1i64;
        for &c in &count[1..] {
            left = (left << 1) - i64::from(c);
            if left < 0 {
                return Err("over-subscribed Huffman code");
            }
        }
        if left > 0 {
            // Incomplete: the entries no code reaches must read as invalid.
            // (A complete code writes every primary entry below.)
            self.primary.fill(0);
        }
        let mut first = [0u32; 16];
        let mut code = 0u32;
        for bits in 1..16 {
            code = (code + count[bits - 1]) << 1;
            first[bits] = code;
        }
        let bits = Self::BITS as usize;
        let mask = SIZE - 1;
        // Codes longer than the primary index share a subtable per
        // prefix, sized for the longest code under it.
        if count[bits + 1..].iter().any(|&c| c > 0) {
            let mut sub_bits = [0u8; SIZE];
            let mut next = first;
            for (_, len, rev) in codes(lengths, &mut next).filter(|c| c.1 > bits) {
                let b = &mut sub_bits[rev & mask];
                *b = (*b).max((len - bits) as u8);
            }
            for (prefix, &b) in sub_bits.iter().enumerate().filter(|(_, &b)| b > 0) {
                self.primary[prefix] = (self.sub.len() as u32) << 16 | LINK | u32::from(b);
                self.sub.resize(self.sub.len() + (1 << b), 0);
            }
        }
        let mut next = first;
        for (sym, len, rev) in codes(lengths, &mut next) {
            // A code for an invalid symbol gets 0 entries.
            let entry = match kind(sym) {
                0 => 0,
                kind => kind + len as u32,
            };
            let (table, start, step, end) = if len <= bits {
                (&mut self.primary[..], rev, 1 << len, SIZE)
            } else {
                let link = self.primary[rev & mask];
                let base = (link >> 16) as usize;
                (&mut self.sub[..], base + (rev >> bits), 1 << (len - bits), base + (1 << (link & 0xff)))
            };
            for e in table.get_mut(start..end).ok_or("Huffman table overrun")?.iter_mut().step_by(step) {
                *e = entry;
            }
        }
        Ok(())
    }

    /// The entry of the code in the low bits of `bitbuf` (which holds at
    /// least 15 of them).
    #[inline(always)]
    fn lookup(&self, bitbuf: u64) -> u32 {
        // Masked by the array's fixed size: no bounds check.
        let e = self.primary[bitbuf as usize & (SIZE - 1)];
        if e & LINK == 0 {
            return e;
        }
        let index = (e >> 16) as usize + ((bitbuf >> Self::BITS) & ((1 << (e & 0xff)) - 1)) as usize;
        self.sub.get(index).copied().unwrap_or(0)
    }
}

/// Every used symbol with its code length and code, the code bit-reversed
/// (codes are sent MSB first, tables are indexed by the bits as read).
/// `next`: each length's first code.
fn codes<'a>(lengths: &'a [u8], next: &'a mut [u32; 16]) -> impl Iterator<Item = (usize, usize, usize)> + 'a {
    lengths.iter().enumerate().filter(|(_, &l)| l > 0).map(|(sym, &l)| {
        let len = usize::from(l) & 15;
        let code = next[len];
        next[len] += 1;
        (sym, len, (code.reverse_bits() >> (32 - len)) as usize)
    })
}

/// The stream's unread bits: `bitsleft` of them in `bitbuf` (the bits
/// above are the next bytes again, or zero), then `data[next..]`; `over`
/// zero bytes were fed past the end.
struct Reader<'a> {
    data: &'a [u8],
    next: usize,
    bitbuf: u64,
    bitsleft: u32,
    over: usize,
}

impl<'a> Reader<'a> {
    /// A reader at byte `at`.
    fn at(data: &'a [u8], at: usize) -> Self {
        Reader { data, next: at, bitbuf: 0, bitsleft: 0, over: 0 }
    }

    /// The bits consumed so far.
    fn pos(&self) -> usize {
        (self.next + self.over) * 8 - self.bitsleft as usize
    }

    /// Make at least 56 bits available; Err once the stream is consumed
    /// past its end.
    #[inline(always)]
    fn refill(&mut self) -> Result<(), &'static str> {
        let Some(word) = self.data.get(self.next..self.next + 8) else { return self.refill_slow() };
        let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        self.bitbuf |= word << self.bitsleft;
        let bytes = (63 - self.bitsleft) >> 3;
        self.next += bytes as usize;
        self.bitsleft += bytes << 3;
        Ok(())
    }

    #[cold]
    fn refill_slow(&mut self) -> Result<(), &'static str> {
        if self.pos() > self.data.len() * 8 {
            return Err(ENDS_INSIDE);
        }
        while self.bitsleft < 56 {
            let byte = match self.data.get(self.next) {
                Some(&b) => {
                    self.next += 1;
                    b
                }
                None => {
                    self.over += 1;
                    0
                }
            };
            self.bitbuf |= u64::from(byte) << self.bitsleft;
            self.bitsleft += 8;
        }
        // As the fast refill does: the bits above `bitsleft` are the next
        // byte's (a lookup made before the next refill may read them).
        if let Some(&b) = self.data.get(self.next) {
            self.bitbuf |= u64::from(b) << self.bitsleft;
        }
        Ok(())
    }

    /// Step over `n` bits (no more than were refilled).
    #[inline(always)]
    fn consume(&mut self, n: u32) {
        self.bitbuf >>= n;
        self.bitsleft -= n;
    }

    /// The next `n` (<= 32, no more than were refilled) bits, LSB first.
    #[inline(always)]
    fn take(&mut self, n: u32) -> u32 {
        let v = (self.bitbuf & ((1 << n) - 1)) as u32;
        self.consume(n);
        v
    }
}

const LENGTH_EXTRA: [u8; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_EXTRA: [u8; 30] =
    [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
const CODE_LENGTH_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

fn litlen_kind(sym: usize) -> u32 {
    match sym {
        0..=255 => LITERAL,
        256 => END_OF_BLOCK,
        _ => LENGTH_EXTRA.get(sym - 257).map_or(0, |&e| LENGTH | u32::from(e)),
    }
}

fn dist_kind(sym: usize) -> u32 {
    DIST_EXTRA.get(sym).map_or(0, |&e| SYMBOL | u32::from(e))
}

fn code_length_kind(sym: usize) -> u32 {
    SYMBOL | (sym as u32) << 16
}

/// Step over one block's symbols up to its end-of-block code: the hot
/// loop of the walk. Each turn refills once, which covers two literals
/// (15 bits each) or a length and its distance (20 + 28 bits).
/// The reader's state is kept in locals here (written back at the end
/// and around the cold refill): through `&mut Reader` every symbol paid a
/// store and a reload on its critical path. The next turn's first entry
/// is looked up before the refill (as libdeflate's decoder does), so the
/// refill is off the chain of dependent lookups: a refill leaves all 64
/// bits of `bitbuf` holding stream bits, and a turn consumes at most 48,
/// so the 15 a lookup reads are already there.
fn skip_symbols(r: &mut Reader, litlen: &Table<LITLEN_SIZE>, dist: &Table<DIST_SIZE>) -> Result<(), &'static str> {
    let data = r.data;
    let (mut next, mut bitbuf, mut bitsleft) = (r.next, r.bitbuf, r.bitsleft);
    let mut refill = |next: &mut usize, bitbuf: &mut u64, bitsleft: &mut u32| -> Result<(), &'static str> {
        if let Some(word) = data.get(*next..*next + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            *bitbuf |= word << *bitsleft;
            let bytes = (63 - *bitsleft) >> 3;
            *next += bytes as usize;
            *bitsleft += bytes << 3;
            Ok(())
        } else {
            (r.next, r.bitbuf, r.bitsleft) = (*next, *bitbuf, *bitsleft);
            r.refill_slow()?;
            (*next, *bitbuf, *bitsleft) = (r.next, r.bitbuf, r.bitsleft);
            Ok(())
        }
    };
    let result = refill(&mut next, &mut bitbuf, &mut bitsleft).and_then(|()| {
        let mut e = litlen.lookup(bitbuf);
        loop {
            bitbuf >>= e & 0xff;
            bitsleft -= e & 0xff;
            if e & LITERAL != 0 {
                let e2 = litlen.lookup(bitbuf);
                // Branch-free (whether a second literal follows is data,
                // which a branch mispredicts): its bits, or none.
                let n2 = (e2 & 0xff) & 0u32.wrapping_sub((e2 & LITERAL) >> LITERAL.trailing_zeros());
                bitbuf >>= n2;
                bitsleft -= n2;
            } else if e & LENGTH != 0 {
                let d = dist.lookup(bitbuf);
                if d == 0 {
                    return Err("invalid distance code");
                }
                bitbuf >>= d & 0xff;
                bitsleft -= d & 0xff;
            } else if e & END_OF_BLOCK != 0 {
                return Ok(());
            } else {
                return Err("invalid literal/length code");
            }
            e = litlen.lookup(bitbuf);
            refill(&mut next, &mut bitbuf, &mut bitsleft)?;
        }
    });
    (r.next, r.bitbuf, r.bitsleft) = (next, bitbuf, bitsleft);
    result
}

/// The tables a walk builds, kept across its blocks.
struct Tables {
    litlen: Table<LITLEN_SIZE>,
    dist: Table<DIST_SIZE>,
    code_length: Table<CODE_LENGTH_SIZE>,
    fixed: Option<(Table<LITLEN_SIZE>, Table<DIST_SIZE>)>,
}

/// Read a dynamic block's code lengths into `t.litlen` and `t.dist`.
fn dynamic_tables(r: &mut Reader, t: &mut Tables) -> Result<(), &'static str> {
    r.refill()?;
    let hlit = r.take(5) as usize + 257;
    let hdist = r.take(5) as usize + 1;
    let hclen = r.take(4) as usize + 4;
    let mut cl = [0u8; 19];
    for &i in &CODE_LENGTH_ORDER[..hclen] {
        r.refill()?;
        cl[i] = r.take(3) as u8;
    }
    t.code_length.build(&cl, code_length_kind)?;
    let mut lengths = [0u8; 288 + 32];
    let mut n = 0;
    while n < hlit + hdist {
        r.refill()?;
        let e = t.code_length.lookup(r.bitbuf);
        if e == 0 {
            return Err("invalid code length code");
        }
        r.consume(e & 0xff);
        let (len, repeat) = match e >> 16 {
            len @ 0..=15 => (len as u8, 1),
            16 => (*lengths[..n].last().ok_or("repeat with no previous length")?, 3 + r.take(2)),
            17 => (0, 3 + r.take(3)),
            _ => (0, 11 + r.take(7)),
        };
        let end = n + repeat as usize;
        if end > hlit + hdist {
            return Err("code lengths run past their count");
        }
        lengths[n..end].fill(len);
        n = end;
    }
    t.litlen.build(&lengths[..hlit], litlen_kind)?;
    t.dist.build(&lengths[hlit..n], dist_kind)
}

/// The bit positions of the final block's header and of its end, in a
/// complete raw deflate stream.
pub fn last_block(stream: &[u8]) -> Result<(usize, usize), super::DeflateError> {
    walk(stream).map_err(super::DeflateError::Stream)
}

fn walk(stream: &[u8]) -> Result<(usize, usize), &'static str> {
    let end = stream.len() * 8;
    let mut r = Reader::at(stream, 0);
    let mut t = Tables { litlen: Table::new(), dist: Table::new(), code_length: Table::new(), fixed: None };
    loop {
        r.refill()?;
        let header = r.pos();
        let last = r.take(1) == 1;
        match r.take(2) {
            0 => {
                let start = r.pos().div_ceil(8);
                let lens = stream.get(start..start + 4).ok_or(ENDS_INSIDE)?;
                let len = usize::from(u16::from_le_bytes([lens[0], lens[1]]));
                if len != usize::from(!u16::from_le_bytes([lens[2], lens[3]])) {
                    return Err("stored block length check failed");
                }
                if start + 4 + len > stream.len() {
                    return Err("stored block past the end");
                }
                r = Reader::at(stream, start + 4 + len);
            }
            1 => {
                if t.fixed.is_none() {
                    let mut lengths = [8u8; 288];
                    lengths[144..256].fill(9);
                    lengths[256..280].fill(7);
                    let (mut litlen, mut dist) = (Table::new(), Table::new());
                    litlen.build(&lengths, litlen_kind)?;
                    dist.build(&[5; 30], dist_kind)?;
                    t.fixed = Some((litlen, dist));
                }
                let (litlen, dist) = t.fixed.as_ref().expect("just built");
                skip_symbols(&mut r, litlen, dist)?;
            }
            2 => {
                dynamic_tables(&mut r, &mut t)?;
                skip_symbols(&mut r, &t.litlen, &t.dist)?;
            }
            _ => return Err("reserved block type"),
        }
        if r.pos() > end {
            return Err(ENDS_INSIDE);
        }
        if last {
            return Ok((header, r.pos()));
        }
    }
}
