//! Where everything goes in the rewritten file: which fatbin pages leave
//! the file, how the PT_LOAD holding them is split, where the marker, the
//! program header table, `.shstrtab` and the section header table land,
//! and every offset shifted by the removal. Pure arithmetic on the headers
//! [`Input`] read; `super::kpack_host` turns a [`Plan`] into a splice.

use super::raw::*;
use super::read::Input;
use super::KpackProblem;
use crate::elf::ElfError;
use std::ops::Range;

/// The most zero padding an executable's moved program header table may
/// need to keep its address-offset delta (see [`Table::Tail`]).
const MAX_PADDING: u64 = 16 << 20;

/// Where the program header table goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    /// It grows where it is (there was room after it).
    InPlace,
    /// Into the first page of the removed fatbin range, mapped at that
    /// page's address by the piece before it (executables: see [`plan`]).
    Hole,
    /// After the marker, in a PT_LOAD of its own.
    Tail { offset: u64, vaddr: u64 },
}

#[derive(Debug)]
pub(super) struct Plan {
    /// Source bytes left out: the whole fatbin pages not reused.
    pub removed: Range<u64>,
    /// Source bytes `0..keep` are kept (less `removed`); after them only the
    /// old `.shstrtab` and section header table, which are replaced.
    pub keep: u64,
    /// Source ranges written over with zeros: what is left of the fatbin,
    /// the old program header table when it moved, and the old `.shstrtab`
    /// and section header table when they were not at the end.
    pub zero: Vec<Range<u64>>,
    pub marker_offset: u64,
    pub marker_vaddr: u64,
    pub table: Table,
    /// The new program header table and its output offset.
    pub phdrs: Vec<Phdr>,
    pub phoff: u64,
    /// The new section headers (the marker's last) and output offsets.
    pub sections: Vec<Shdr>,
    pub shstrtab_offset: u64,
    pub shoff: u64,
    /// The output's length.
    pub len: u64,
}

impl Plan {
    /// The output offset of source offset `at` (not inside `removed`).
    pub fn out(&self, at: u64) -> u64 {
        if at >= self.removed.end {
            at - (self.removed.end - self.removed.start)
        } else {
            at
        }
    }
}

fn unsupported(input: &Input, why: impl Into<String>) -> ElfError {
    ElfError::Kpack { path: input.path.clone(), problem: KpackProblem::Unsupported(why.into()) }
}

fn overlaps(at: u64, len: u64, r: &Range<u64>) -> bool {
    len > 0 && at < r.end && r.start < at.saturating_add(len)
}

/// The PT_LOAD `load` holding the fatbin pages `pages` (page-aligned
/// addresses), split around them: the part before (grown by `table_len`
/// bytes of program header table placed at the first page), the pages as
/// memory only, and the part after (memory-only tails, bss, kept). `at` is
/// the output offset where the bytes after the removed pages start.
fn split(load: &Phdr, pages: &Range<u64>, table_len: u64, at: u64, align_after: u64) -> Vec<Phdr> {
    let (v0, file_end, mem_end) = (load.p_vaddr, load.p_vaddr + load.p_filesz, load.p_vaddr + load.p_memsz);
    let piece = |vaddr: u64, offset: u64, filesz: u64, memsz: u64, p_align: u64| Phdr {
        p_offset: offset,
        p_vaddr: vaddr,
        p_paddr: load.p_paddr.wrapping_add(vaddr - v0),
        p_filesz: filesz,
        p_memsz: memsz,
        p_align,
        ..*load
    };
    let mut out = Vec::new();
    let before = pages.start + table_len - v0;
    if before > 0 {
        out.push(piece(v0, load.p_offset, before, before, load.p_align));
    }
    let memory_only = pages.start + round_up(table_len, PAGE);
    if pages.end > memory_only {
        out.push(piece(memory_only, at, 0, pages.end - memory_only, align_after));
    }
    if mem_end > pages.end {
        let filesz = file_end.saturating_sub(pages.end);
        out.push(piece(pages.end, at, filesz, mem_end - pages.end, align_after));
    }
    out
}

/// Whether the table can grow from `phnum` to `n` entries where it is: the
/// bytes after it are inside the PT_LOAD mapping it and belong to nothing else.
fn room_in_place(input: &Input, n: u64) -> bool {
    let phoff = input.header.e_phoff;
    let grown = phoff + u64::from(input.header.e_phnum) * PHDR_LEN..phoff + n * PHDR_LEN;
    let len = grown.end - grown.start;
    let Some(load) =
        input.phdrs.iter().position(|p| p.is_load() && p.p_offset <= phoff && grown.end <= p.p_offset + p.p_filesz)
    else {
        return false;
    };
    let segments = input.phdrs.iter().enumerate().all(|(i, p)| {
        i == load || p.p_type == PT_PHDR || !overlaps(grown.start, len, &(p.p_offset..p.p_offset + p.p_filesz))
    });
    let sections = input.sections.iter().all(|s| !s.in_file() || !overlaps(s.sh_offset, s.sh_size, &grown));
    let sht = u64::from(input.header.e_shnum) * SHDR_LEN;
    segments && sections && !overlaps(input.header.e_shoff, sht, &grown)
}

/// Lay out the rewrite of `input` with a marker of `marker_len` bytes.
///
/// The program header table needs up to three more entries (the marker's
/// PT_LOAD, two more pieces of the split PT_LOAD) and rarely has room where
/// it is, so it moves once, to its final size. A shared library's goes to
/// the tail in a PT_LOAD of its own. An executable's cannot: kernels before
/// 5.18 pass AT_PHDR as the first PT_LOAD's address-offset delta plus
/// `e_phoff`, so the table must sit where that delta holds, and in the tail
/// that costs as much zero padding as the fatbin pages removed. It goes into
/// the first removed fatbin page instead (kept in the file; the piece
/// before the fatbin grows over it), whose delta is the first PT_LOAD's
/// whenever the fatbin sits in a read-only segment, as linkers place it.
pub(super) fn plan(input: &Input, marker_len: u64) -> Result<Plan, ElfError> {
    let h = &input.header;
    let fat = input.sections[input.fatbin];
    let li = input
        .load_holding(fat.sh_addr, fat.sh_offset, fat.sh_size)
        .ok_or_else(|| ElfError::corrupt(&input.path, ".hip_fatbin is not mapped by a PT_LOAD"))?;
    let load = input.phdrs[li];
    let fat_end = fat.sh_addr + fat.sh_size;
    let first = round_up(fat.sh_addr, PAGE);
    let pages = first..round_down(fat_end, PAGE).max(first);
    let pages_len = pages.end - pages.start;
    // Source offset of the first whole fatbin page.
    let hole = fat.sh_offset + (pages.start - fat.sh_addr);
    let phnum = u64::from(h.e_phnum);

    // The program header table: how many entries, and where.
    let count = |table_len: u64| phnum + split(&load, &pages, table_len, 0, PAGE).len() as u64;
    let unsplit = if pages_len > 0 { count(0) } else { phnum + 1 };
    let mut table = None;
    let mut n = unsplit;
    if room_in_place(input, unsplit) {
        table = Some(Table::InPlace);
    } else if input.is_executable() && pages_len > 0 {
        let first_load = input.phdrs.iter().find(|p| p.is_load()).expect("the fatbin's PT_LOAD exists");
        let same_delta =
            load.p_vaddr.wrapping_sub(load.p_offset) == first_load.p_vaddr.wrapping_sub(first_load.p_offset);
        let needed = count(count(unsplit * PHDR_LEN) * PHDR_LEN);
        if same_delta && round_up(needed * PHDR_LEN, PAGE) <= pages_len {
            (table, n) = (Some(Table::Hole), needed);
        }
    }
    let table_len_in_hole = if table == Some(Table::Hole) { n * PHDR_LEN } else { 0 };
    if table.is_none() {
        n = unsplit + 1; // the tail table's own PT_LOAD
    }
    if n >= 0xffff || u64::from(h.e_shnum) + 1 >= u64::from(SHN_LORESERVE) {
        return Err(unsupported(input, "too many program or section headers"));
    }

    let kept_page = round_up(table_len_in_hole, PAGE).min(pages_len);
    let removed = if pages_len > 0 { hole + kept_page..hole + pages_len } else { hole..hole };
    let removed_len = removed.end - removed.start;

    // What stays of the source: everything but an old `.shstrtab` and
    // section header table that end the file.
    let names = input.sections[usize::from(h.e_shstrndx)];
    let sht = h.e_shoff..h.e_shoff + u64::from(h.e_shnum) * SHDR_LEN;
    if overlaps(sht.start, sht.end - sht.start, &(fat.sh_offset..fat.sh_offset + fat.sh_size)) {
        return Err(ElfError::corrupt(&input.path, "the section header table overlaps .hip_fatbin"));
    }
    let described = input
        .sections
        .iter()
        .enumerate()
        .filter(|&(i, s)| i != usize::from(h.e_shstrndx) && s.in_file())
        .map(|(_, s)| s.sh_offset + s.sh_size)
        .chain(input.phdrs.iter().map(|p| p.p_offset + p.p_filesz))
        .chain([EHDR_LEN, h.e_phoff + phnum * PHDR_LEN])
        .max()
        .unwrap_or(EHDR_LEN);
    let at_end = names.sh_offset >= described
        && sht.start >= described
        && (names.sh_offset + names.sh_size).max(sht.end) == input.len;
    let keep = if at_end { described } else { input.len };
    let mut zero = Vec::new();
    if !at_end {
        zero.push(names.sh_offset..names.sh_offset + names.sh_size);
        zero.push(sht.clone());
    }
    if pages_len > 0 {
        zero.push(fat.sh_offset..removed.start);
        zero.push(removed.end..fat.sh_offset + fat.sh_size);
    } else {
        zero.push(fat.sh_offset..fat.sh_offset + fat.sh_size);
    }
    if table != Some(Table::InPlace) {
        // The old table's bytes stay: they sit inside the first PT_LOAD,
        // before the code, and removing them would move every segment off
        // its page congruence. Nothing reads them once e_phoff and PT_PHDR
        // name the new table (the loader finds the table through those, a
        // library's through the PT_LOAD holding e_phoff), so they are zeroed.
        zero.push(h.e_phoff..h.e_phoff + phnum * PHDR_LEN);
    }

    // The marker above every segment, then the table if it goes to the tail.
    let keep_out = keep - removed_len;
    let top = input.phdrs.iter().filter(|p| p.is_load()).map(|p| p.p_vaddr + p.p_memsz).max().unwrap_or(0);
    let marker_offset = round_up(keep_out, PAGE);
    let marker_vaddr = round_up(top, PAGE);
    let after_marker = marker_offset + marker_len;
    let table = match table {
        Some(t) => t,
        None => {
            let mut offset = round_up(after_marker, 8);
            let above = round_up(marker_vaddr + marker_len, PAGE);
            let vaddr = if input.is_executable() {
                let first_load = input.phdrs.iter().find(|p| p.is_load()).expect("a PT_LOAD exists");
                let delta = first_load.p_vaddr.wrapping_sub(first_load.p_offset);
                if delta % PAGE != 0 {
                    return Err(unsupported(input, "an executable whose first PT_LOAD is not page-congruent"));
                }
                offset = offset.max(above.wrapping_sub(delta));
                if offset - after_marker > MAX_PADDING {
                    return Err(unsupported(
                        input,
                        "an executable whose moved program headers need over 16 MiB of padding",
                    ));
                }
                offset.wrapping_add(delta)
            } else {
                above + offset % PAGE
            };
            Table::Tail { offset, vaddr }
        }
    };
    let table_end = match table {
        Table::Tail { offset, .. } => offset + n * PHDR_LEN,
        _ => after_marker,
    };
    let shstrtab_offset = table_end;
    let shoff = round_up(shstrtab_offset + names.sh_size + MARKER_NAME.len() as u64, 8);
    let len = shoff + (u64::from(h.e_shnum) + 1) * SHDR_LEN;

    let shift = |at: u64| {
        if at >= removed.end {
            at - removed_len
        } else if at > removed.start {
            removed.start
        } else {
            at
        }
    };
    let (phoff, table_vaddr) = match table {
        Table::InPlace => (shift(h.e_phoff), None),
        Table::Hole => (hole, Some(pages.start)),
        Table::Tail { offset, vaddr } => (offset, Some(vaddr)),
    };

    // Program headers: the split PT_LOAD in its place, the others shifted,
    // the new PT_LOADs after the last one.
    let mut phdrs = Vec::new();
    for (i, p) in input.phdrs.iter().enumerate() {
        if i == li && pages_len > 0 {
            let align_after = if removed_len % load.p_align.max(1) == 0 { load.p_align } else { PAGE };
            phdrs.extend(split(&load, &pages, table_len_in_hole, removed.start, align_after));
            continue;
        }
        if i != li && overlaps(p.p_offset, p.p_filesz, &removed) {
            return Err(unsupported(
                input,
                format!("program header {i} (type {:#x}) spans the fatbin pages", p.p_type),
            ));
        }
        let mut p = *p;
        if p.p_offset >= removed.end && removed_len > 0 && p.is_load() && removed_len % p.p_align.max(1) != 0 {
            p.p_align = PAGE;
        }
        p.p_offset = shift(p.p_offset);
        if p.p_type == PT_PHDR {
            if let Some(vaddr) = table_vaddr {
                (p.p_offset, p.p_vaddr, p.p_paddr) = (phoff, vaddr, vaddr);
            }
            (p.p_filesz, p.p_memsz) = (n * PHDR_LEN, n * PHDR_LEN);
        }
        phdrs.push(p);
    }
    let last_load = phdrs.iter().rposition(Phdr::is_load).map_or(phdrs.len(), |i| i + 1);
    let mut new_loads = vec![Phdr::read_only_load(marker_offset, marker_vaddr, marker_len)];
    if let Table::Tail { offset, vaddr } = table {
        new_loads.push(Phdr::read_only_load(offset, vaddr, n * PHDR_LEN));
    }
    phdrs.splice(last_load..last_load, new_loads);
    debug_assert_eq!(phdrs.len() as u64, n);

    // Section headers.
    let mut sections = Vec::new();
    for (i, s) in input.sections.iter().enumerate() {
        let mut s = *s;
        if i == input.fatbin {
            s.sh_type = SHT_NOBITS;
        } else if i == usize::from(h.e_shstrndx) {
            (s.sh_offset, s.sh_size) = (shstrtab_offset, s.sh_size + MARKER_NAME.len() as u64);
        } else {
            if s.in_file() && overlaps(s.sh_offset, s.sh_size, &removed) {
                return Err(unsupported(input, format!("section {i} overlaps the fatbin pages")));
            }
            s.sh_offset = shift(s.sh_offset);
        }
        sections.push(s);
    }
    sections.push(Shdr::marker(names.sh_size as u32, marker_offset, marker_vaddr, marker_len));
    if names.sh_size > u64::from(u32::MAX) {
        return Err(unsupported(input, ".shstrtab is over 4 GiB"));
    }

    Ok(Plan {
        removed,
        keep,
        zero,
        marker_offset,
        marker_vaddr,
        table,
        phdrs,
        phoff,
        sections,
        shstrtab_offset,
        shoff,
        len,
    })
}

/// The new section's name, as appended to `.shstrtab`.
pub(super) const MARKER_NAME: &[u8] = b".rocm_kpack_ref\0";

#[cfg(test)]
mod tests;
