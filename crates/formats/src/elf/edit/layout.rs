//! Where a grown string table (and a grown `.dynamic`, when it had no
//! spare slot for a new entry) goes, as patchelf 0.19 places them: in a tail
//! mapped by the last PT_LOAD (extended when it is a plain read-write
//! segment that ends the file, as quarry's own output does) or by a new
//! PT_LOAD; the program header table grows in place when the bytes after it
//! are free, else moves to the start of the tail (never back to offset 64,
//! the pre-0.19 patchelf bug).

use super::input::{unsupported, Input, Phdr};
use super::EditError;
use object::elf;
use object::read::elf::{ProgramHeader, SectionHeader};
use object::{U32, U64};

/// Most zero padding an executable's tail may need to keep its
/// address-offset delta (see [`place`]).
const MAX_PADDING: u64 = 16 << 20;

/// The tail and the program headers that map it.
pub(super) struct Layout {
    /// File offset and address of the grown string table.
    pub dynstr_offset: u64,
    pub dynstr_vaddr: u64,
    /// Zero bytes before a moved `.dynamic` (8-byte aligned), its offset and address.
    pub dynamic_padding: u64,
    pub dynamic_at: Option<(u64, u64)>,
    /// Zero bytes between the end of the source and the tail.
    pub padding: u64,
    /// The program header table as written, and where.
    pub phdrs: Vec<Phdr>,
    pub phoff: u64,
    /// The table is written in the tail (before the string table).
    pub phdrs_in_tail: bool,
    /// Zero bytes between a moved table and the string table.
    pub phdrs_padding: u64,
}

/// patchelf's `getPageSize`.
fn page_size(machine: elf::Machine) -> u64 {
    match machine {
        elf::EM_ALPHA
        | elf::EM_IA_64
        | elf::EM_MIPS
        | elf::EM_PPC
        | elf::EM_PPC64
        | elf::EM_AARCH64
        | elf::EM_TILEGX
        | elf::EM_LOONGARCH => 0x10000,
        elf::EM_SPARC | elf::EM_SPARCV9 => 0x2000,
        _ => 0x1000,
    }
}

fn read_write() -> elf::ProgramFlags {
    elf::ProgramFlags(elf::PF_R.0 | elf::PF_W.0)
}

fn round_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

/// Where the tail's parts go from `start` (a file offset): a moved
/// `.dynamic` of `dynamic_len` bytes, 8-aligned, then the string table.
/// Returns (padding before `.dynamic`, its offset, the table's offset, the end).
fn tail_parts(start: u64, dynamic_len: Option<u64>, dynstr_len: u64) -> (u64, Option<u64>, u64, u64) {
    match dynamic_len {
        Some(n) => {
            let at = round_up(start, 8);
            (at - start, Some(at), at + n, at + n + dynstr_len)
        }
        None => (0, None, start, start + dynstr_len),
    }
}

/// Point PT_DYNAMIC at a moved `.dynamic`.
fn move_dynamic(input: &Input, phdrs: &mut [Phdr], at: Option<(u64, u64)>, len: Option<u64>) {
    let e = input.endian;
    let (Some((offset, vaddr)), Some(len)) = (at, len) else {
        return;
    };
    for p in phdrs.iter_mut().filter(|p| p.p_type(e) == elf::PT_DYNAMIC) {
        p.p_offset = U64::new(e, offset);
        p.p_vaddr = U64::new(e, vaddr);
        p.p_paddr = U64::new(e, vaddr);
        p.p_filesz = U64::new(e, len);
        p.p_memsz = U64::new(e, len);
    }
}

/// Place a grown string table of `dynstr_len` bytes, after a moved
/// `.dynamic` of `dynamic_len` bytes when it moves.
pub(super) fn place(input: &Input, dynamic_len: Option<u64>, dynstr_len: u64) -> Result<Layout, EditError> {
    let e = input.endian;
    let path = &input.path;
    let mut phdrs = input.phdrs.clone();
    let is_load = |p: &Phdr| p.p_type(e) == elf::PT_LOAD;
    let align = phdrs
        .iter()
        .filter(|p| is_load(p))
        .map(|p| p.p_align(e))
        .fold(page_size(input.header.e_machine.get(e)), u64::max);
    let phoff = input.header.e_phoff.get(e);
    let entsize = u64::from(input.header.e_phentsize.get(e));
    if entsize != size_of::<Phdr>() as u64 {
        return Err(unsupported(path, format!("e_phentsize is {entsize}")));
    }

    // A. The highest PT_LOAD is a plain read-write segment that ends the file: extend it.
    let last_load = phdrs.iter().rposition(is_load);
    if let Some(i) = last_load {
        let p = &phdrs[i];
        let highest = phdrs.iter().filter(|q| is_load(q)).all(|q| q.p_vaddr(e) <= p.p_vaddr(e));
        if highest
            && p.p_flags(e) == read_write()
            && p.p_align(e) == align
            && p.p_filesz(e) == p.p_memsz(e)
            && p.p_offset(e) + p.p_filesz(e) == input.len
        {
            // Addresses in this segment are its offsets plus one delta.
            let delta = p.p_vaddr(e).wrapping_sub(p.p_offset(e));
            let (dynamic_padding, dynamic_offset, dynstr_offset, end) = tail_parts(input.len, dynamic_len, dynstr_len);
            let size = end - p.p_offset(e);
            phdrs[i].p_filesz = U64::new(e, size);
            phdrs[i].p_memsz = U64::new(e, size);
            let dynamic_at = dynamic_offset.map(|o| (o, o.wrapping_add(delta)));
            move_dynamic(input, &mut phdrs, dynamic_at, dynamic_len);
            return Ok(Layout {
                dynstr_offset,
                dynstr_vaddr: dynstr_offset.wrapping_add(delta),
                dynamic_padding,
                dynamic_at,
                padding: 0,
                phdrs,
                phoff,
                phdrs_in_tail: false,
                phdrs_padding: 0,
            });
        }
    }

    // B. A new PT_LOAD above every other one.
    let top = phdrs.iter().filter(|p| is_load(p)).map(|p| p.p_vaddr(e) + p.p_memsz(e)).max().unwrap_or(0);
    let (mut offset, mut vaddr) = (round_up(input.len, align), round_up(top, align));
    let executable = input.header.e_type.get(e) == elf::ET_EXEC || phdrs.iter().any(|p| p.p_type(e) == elf::PT_INTERP);
    if executable {
        // Kernels before 5.18 take AT_PHDR as load address + e_phoff: keep
        // the tail's address-offset delta equal to the first PT_LOAD's.
        let first = phdrs.iter().find(|p| is_load(p)).ok_or_else(|| unsupported(path, "it has no PT_LOAD"))?;
        let delta = first.p_vaddr(e).wrapping_sub(first.p_offset(e));
        if delta % align != 0 {
            return Err(unsupported(path, "an executable whose first PT_LOAD is not page-congruent"));
        }
        offset = offset.max(vaddr.wrapping_sub(delta));
        vaddr = offset.wrapping_add(delta);
        if vaddr < top || offset - input.len > MAX_PADDING {
            return Err(unsupported(path, "an executable whose tail would need more than 16 MiB of padding"));
        }
    }
    let phnum = phdrs.len() as u64;
    if phnum + 1 >= u64::from(elf::PN_XNUM) {
        return Err(unsupported(path, "the program header table is full"));
    }
    let grows_in_place = room_after_table(input, phoff + phnum * entsize, entsize);
    let table_len = (phnum + 1) * entsize;
    let (phdrs_in_tail, phdrs_padding, parts_start) = if grows_in_place {
        (false, 0, offset)
    } else {
        let padded = round_up(table_len, 8);
        (true, padded - table_len, offset + padded)
    };
    let (dynamic_padding, dynamic_offset, dynstr_offset, end) = tail_parts(parts_start, dynamic_len, dynstr_len);
    let dynstr_vaddr = vaddr + (dynstr_offset - offset);
    let dynamic_at = dynamic_offset.map(|o| (o, vaddr + (o - offset)));
    move_dynamic(input, &mut phdrs, dynamic_at, dynamic_len);
    let tail_len = end - offset;
    for p in phdrs.iter_mut().filter(|p| p.p_type(e) == elf::PT_PHDR) {
        if phdrs_in_tail {
            p.p_offset = U64::new(e, offset);
            p.p_vaddr = U64::new(e, vaddr);
            p.p_paddr = U64::new(e, vaddr);
        }
        p.p_filesz = U64::new(e, table_len);
        p.p_memsz = U64::new(e, table_len);
    }
    phdrs.push(Phdr {
        p_type: U32::new(e, elf::PT_LOAD),
        p_flags: U32::new(e, read_write()),
        p_offset: U64::new(e, offset),
        p_vaddr: U64::new(e, vaddr),
        p_paddr: U64::new(e, vaddr),
        p_filesz: U64::new(e, tail_len),
        p_memsz: U64::new(e, tail_len),
        p_align: U64::new(e, align),
    });
    Ok(Layout {
        dynstr_offset,
        dynstr_vaddr,
        dynamic_padding,
        dynamic_at,
        padding: offset - input.len,
        phdrs,
        phoff: if phdrs_in_tail { offset } else { phoff },
        phdrs_in_tail,
        phdrs_padding,
    })
}

/// Whether the `entsize` bytes at `at` (just after the program header
/// table) lie inside the PT_LOAD that maps the table and belong to nothing
/// else: no section, not the section header table, no other segment.
fn room_after_table(input: &Input, at: u64, entsize: u64) -> bool {
    let e = input.endian;
    let phoff = input.header.e_phoff.get(e);
    let end = at + entsize;
    let overlaps = |off: u64, len: u64| len > 0 && off < end && at < off + len;
    let Some(load) = input
        .phdrs
        .iter()
        .position(|p| p.p_type(e) == elf::PT_LOAD && p.p_offset(e) <= phoff && end <= p.p_offset(e) + p.p_filesz(e))
    else {
        return false;
    };
    let segments_clear = input
        .phdrs
        .iter()
        .enumerate()
        .all(|(i, p)| i == load || p.p_type(e) == elf::PT_PHDR || !overlaps(p.p_offset(e), p.p_filesz(e)));
    let sections_clear = input.sections.iter().all(|s| {
        let ty = s.sh_type(e);
        ty == elf::SHT_NULL || ty == elf::SHT_NOBITS || !overlaps(s.sh_offset(e), s.sh_size(e))
    });
    let shoff = input.header.e_shoff.get(e);
    let sht_len = u64::from(input.header.e_shnum.get(e)) * u64::from(input.header.e_shentsize.get(e));
    segments_clear && sections_clear && !overlaps(shoff, sht_len)
}
