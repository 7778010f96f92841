//! The bytes of zip headers as quarry's zip writer writes them: local
//! headers, central directory headers and the end records, with ZIP64 fields where an entry, an offset or the entry
//! count needs them. UTF-8 names, one fixed time, Unix modes 0644/0755.

use zip::DateTime;

/// Entries at or above this size get ZIP64 headers (with room for deflate
/// to grow an incompressible entry past 4 GiB).
pub const ZIP64_ENTRY: u64 = 0xF000_0000;

/// What the central directory says of an entry.
pub struct Central {
    pub name: String,
    pub crc: u32,
    pub compressed: u64,
    pub size: u64,
    pub offset: u64,
    pub executable: bool,
    pub stored: bool,
}

/// An entry's local header (patched once its CRC and sizes are known).
pub fn local_header(name: &str, time: DateTime, crc: u32, compressed: u64, size: u64, stored: bool) -> Vec<u8> {
    let zip64 = size >= ZIP64_ENTRY;
    let mut h = Vec::with_capacity(30 + name.len() + 20);
    h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    h.extend_from_slice(&(if zip64 { 45u16 } else { 20 }).to_le_bytes());
    h.extend_from_slice(&(1u16 << 11).to_le_bytes()); // UTF-8 names
    h.extend_from_slice(&(if stored { 0u16 } else { 8 }).to_le_bytes());
    h.extend_from_slice(&time.timepart().to_le_bytes());
    h.extend_from_slice(&time.datepart().to_le_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    if zip64 {
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        h.extend_from_slice(&u32::MAX.to_le_bytes());
    } else {
        h.extend_from_slice(&(compressed as u32).to_le_bytes());
        h.extend_from_slice(&(size as u32).to_le_bytes());
    }
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(&(if zip64 { 20u16 } else { 0 }).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    if zip64 {
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&16u16.to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h.extend_from_slice(&compressed.to_le_bytes());
    }
    h
}

/// An entry's central directory header.
pub fn central_header(c: &Central, time: DateTime) -> Vec<u8> {
    let big_size = c.size >= ZIP64_ENTRY;
    let big_offset = c.offset >= u64::from(u32::MAX);
    let mut extra = Vec::new();
    if big_size {
        extra.extend_from_slice(&c.size.to_le_bytes());
        extra.extend_from_slice(&c.compressed.to_le_bytes());
    }
    if big_offset {
        extra.extend_from_slice(&c.offset.to_le_bytes());
    }
    let zip64 = !extra.is_empty();
    let mut h = Vec::with_capacity(46 + c.name.len() + 28);
    h.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    h.extend_from_slice(&(0x0300u16 | if zip64 { 45 } else { 20 }).to_le_bytes()); // made on Unix
    h.extend_from_slice(&(if zip64 { 45u16 } else { 20 }).to_le_bytes());
    h.extend_from_slice(&(1u16 << 11).to_le_bytes());
    h.extend_from_slice(&(if c.stored { 0u16 } else { 8 }).to_le_bytes());
    h.extend_from_slice(&time.timepart().to_le_bytes());
    h.extend_from_slice(&time.datepart().to_le_bytes());
    h.extend_from_slice(&c.crc.to_le_bytes());
    let clip = |v: u64, big: bool| if big { u32::MAX } else { v as u32 };
    h.extend_from_slice(&clip(c.compressed, big_size).to_le_bytes());
    h.extend_from_slice(&clip(c.size, big_size).to_le_bytes());
    h.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
    h.extend_from_slice(&(if zip64 { extra.len() as u16 + 4 } else { 0 }).to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes()); // comment
    h.extend_from_slice(&0u16.to_le_bytes()); // disk
    h.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
    let mode: u32 = 0o100000 | if c.executable { 0o755 } else { 0o644 };
    h.extend_from_slice(&(mode << 16).to_le_bytes());
    h.extend_from_slice(&clip(c.offset, big_offset).to_le_bytes());
    h.extend_from_slice(c.name.as_bytes());
    if zip64 {
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        h.extend_from_slice(&extra);
    }
    h
}

/// The end of central directory record (with the ZIP64 record and locator
/// before it when needed), for `count` entries whose directory of
/// `cd_size` bytes starts at `cd_start`; `position`: where it is written.
pub fn end_of_central_directory(count: u64, cd_start: u64, cd_size: u64, position: u64) -> Vec<u8> {
    let zip64 = count >= 0xffff || cd_start >= u64::from(u32::MAX) || cd_size >= u64::from(u32::MAX);
    let mut end = Vec::new();
    if zip64 {
        let record_at = position;
        end.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
        end.extend_from_slice(&44u64.to_le_bytes());
        end.extend_from_slice(&0x032du16.to_le_bytes());
        end.extend_from_slice(&45u16.to_le_bytes());
        end.extend_from_slice(&0u32.to_le_bytes());
        end.extend_from_slice(&0u32.to_le_bytes());
        end.extend_from_slice(&count.to_le_bytes());
        end.extend_from_slice(&count.to_le_bytes());
        end.extend_from_slice(&cd_size.to_le_bytes());
        end.extend_from_slice(&cd_start.to_le_bytes());
        end.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
        end.extend_from_slice(&0u32.to_le_bytes());
        end.extend_from_slice(&record_at.to_le_bytes());
        end.extend_from_slice(&1u32.to_le_bytes());
    }
    end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    let n16 = count.min(0xffff) as u16;
    end.extend_from_slice(&n16.to_le_bytes());
    end.extend_from_slice(&n16.to_le_bytes());
    end.extend_from_slice(&(cd_size.min(u64::from(u32::MAX)) as u32).to_le_bytes());
    end.extend_from_slice(&(cd_start.min(u64::from(u32::MAX)) as u32).to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    end
}
