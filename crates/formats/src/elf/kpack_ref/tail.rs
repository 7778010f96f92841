//! The rewrite of a file whose `.hip_fatbin` comes last: linked with
//! [`super::FATBIN_LAST_LINK_SCRIPT`], which puts it after `.bss` in a
//! read-only PT_LOAD of its own, highest in memory and last among the
//! file's loaded bytes.
//!
//! Why a second layout: shard builds (one project compiled for different
//! GPU targets on different machines) are merged, and their host parts
//! must be proved identical after the rewrite. With the fatbin last, no
//! host address depends on it, but the other layout would still leave its
//! trace: `.hip_fatbin`'s size and its PT_LOAD's, the file offsets of the
//! non-alloc sections after it, ld's build-id (which hashed the device
//! code) and a marker placed above the fatbin. Here the output depends on
//! the host parts only, never on the fatbin's size or content:
//! - source bytes before the fatbin's PT_LOAD are kept, and that PT_LOAD
//!   becomes the marker's (read-only, at the same offset and address, the
//!   marker's length, the same alignment), so the program header table
//!   keeps its size and place;
//! - `.hip_fatbin` becomes SHT_NOBITS of size 0, at the marker's offset;
//! - the sections after it in the file (`.comment`, `.symtab`, `.strtab`,
//!   ...) are laid out again after the marker, in their order, each at its
//!   alignment; then the new `.shstrtab` and the section header table;
//! - symbols defined in `.hip_fatbin` (a sized fatbin array; `_end`, which
//!   ld sets after the last section) get its address and size 0, in
//!   `.symtab` and `.dynsym`: their old values told the fatbin's size;
//! - a GNU build-id is recomputed over the output (see [`super::build_id`]);
//! - the wrappers and their relocations are rewritten as in the other layout.

use super::raw::*;
use super::read::Input;
use super::{build_id, rewrite_wrappers, KpackLayout, KpackProblem, Kpacked, MARKER_NAME};
use crate::elf::ElfError;
use crate::splice::{Part, Source, Splice};
use std::sync::Arc;

/// The largest section alignment the tail layout keeps (larger ones, which
/// linkers never give non-alloc sections, take the other layout).
const MAX_ALIGN: u64 = 1 << 20;

/// The index of the fatbin's PT_LOAD when `.hip_fatbin` comes last; None
/// otherwise. Last means: that PT_LOAD holds nothing but `.hip_fatbin`, no
/// other program header reaches its file bytes or its addresses or beyond,
/// every SHF_ALLOC section's bytes and addresses come before it, only
/// non-alloc sections (`.shstrtab` and the section header table among them)
/// follow it in the file, and the program header table precedes it.
pub(super) fn fatbin_last(input: &Input) -> Option<usize> {
    let h = &input.header;
    let fat = input.sections[input.fatbin];
    let li = input.load_holding(fat.sh_addr, fat.sh_offset, fat.sh_size)?;
    let load = input.phdrs[li];
    let (start, end) = (load.p_offset, load.p_offset + load.p_filesz);
    let segments = input.phdrs.iter().enumerate().all(|(i, p)| {
        i == li
            || ((p.p_filesz == 0 || p.p_offset.saturating_add(p.p_filesz) <= start)
                && (p.p_memsz == 0 || p.p_vaddr.saturating_add(p.p_memsz) <= load.p_vaddr))
    });
    let names = usize::from(h.e_shstrndx);
    let sections = input.sections.iter().enumerate().all(|(i, s)| {
        if i == input.fatbin {
            return true;
        }
        let alloc = s.sh_flags & SHF_ALLOC != 0;
        let before = s.sh_offset.saturating_add(s.sh_size) <= start;
        let file = if s.in_file() { before || (!alloc && s.sh_offset >= end) } else { true };
        let memory = !alloc || s.sh_addr.saturating_add(s.sh_size) <= load.p_vaddr;
        let moved = s.sh_offset >= start;
        file && memory && (i != names || moved) && (!moved || s.sh_addralign <= MAX_ALIGN)
    });
    let table = h.e_phoff.saturating_add(u64::from(h.e_phnum) * PHDR_LEN) <= start;
    (segments && sections && table && h.e_shoff >= end).then_some(li)
}

/// The tail-layout rewrite of `input` (read from `source`), whose
/// `.hip_fatbin` is last in PT_LOAD `li` (see [`fatbin_last`]), with the
/// marker `marker`.
pub(super) fn rewrite(input: &Input, li: usize, marker: &[u8], source: Arc<Source>) -> Result<Kpacked, ElfError> {
    let h = &input.header;
    let unsupported =
        |why: &str| ElfError::Kpack { path: input.path.clone(), problem: KpackProblem::Unsupported(why.into()) };
    if u64::from(h.e_shnum) + 1 >= u64::from(SHN_LORESERVE) {
        return Err(unsupported("too many section headers"));
    }
    let load = input.phdrs[li];
    let fat = input.sections[input.fatbin];
    let names_index = usize::from(h.e_shstrndx);
    let names = input.sections[names_index];
    if names.sh_size > u64::from(u32::MAX) {
        return Err(unsupported(".shstrtab is over 4 GiB"));
    }
    let marker_len = marker.len() as u64;
    let (marker_offset, marker_vaddr) = (load.p_offset, load.p_vaddr);

    // The host bytes, the marker, then the sections after the fatbin again.
    let mut out = Splice::default();
    out.push(Part::File { source: source.clone(), offset: 0, len: marker_offset });
    out.push(Part::Bytes(marker.into()));
    let place = |out: &mut Splice, align: u64, part: Part| {
        let at = out.len().next_multiple_of(align.max(1));
        out.push(Part::Zeros(at - out.len()));
        out.push(part);
        at
    };
    let mut sections = input.sections.clone();
    let mut moved: Vec<usize> = (1..sections.len())
        .filter(|&i| i != input.fatbin && i != names_index && sections[i].sh_offset >= marker_offset)
        .collect();
    moved.sort_by_key(|&i| (sections[i].sh_offset, i));
    for i in moved {
        let s = &mut sections[i];
        let len = if s.in_file() { s.sh_size } else { 0 };
        s.sh_offset = place(&mut out, s.sh_addralign, Part::File { source: source.clone(), offset: s.sh_offset, len });
    }
    let mut new_names = input.shstrtab.clone();
    new_names.extend_from_slice(MARKER_NAME);
    let names_len = new_names.len() as u64;
    let names_offset = place(&mut out, names.sh_addralign, Part::Bytes(new_names.into()));
    (sections[names_index].sh_offset, sections[names_index].sh_size) = (names_offset, names_len);
    let s = &mut sections[input.fatbin];
    (s.sh_type, s.sh_size, s.sh_offset) = (SHT_NOBITS, 0, marker_offset);
    sections.push(Shdr::marker(names.sh_size as u32, marker_offset, marker_vaddr, marker_len));
    let mut sht = Vec::with_capacity(sections.len() * SHDR_LEN as usize);
    sections.iter().for_each(|s| s.write(&mut sht));
    let shoff = place(&mut out, 8, Part::Bytes(sht.into()));

    // The headers, in place: the fatbin's PT_LOAD becomes the marker's.
    let mut header = input.header;
    (header.e_shoff, header.e_shnum) = (shoff, sections.len() as u16);
    out.overwrite(0, header.write_into(&input.header_bytes));
    let phdr = Phdr { p_filesz: marker_len, p_memsz: marker_len, p_flags: PF_R, ..load };
    let mut bytes = Vec::with_capacity(PHDR_LEN as usize);
    phdr.write(&mut bytes);
    out.overwrite(h.e_phoff + li as u64 * PHDR_LEN, bytes);
    // Everything rewritten lies before the fatbin: offsets are the source's.
    rewrite_wrappers(&mut out, input, marker_vaddr, |at| at);

    let io = |source| ElfError::Io { path: input.path.clone(), source };
    empty_fatbin_symbols(&mut out, &sections, input.fatbin as u16, fat.sh_addr).map_err(io)?;
    if let Some((at, len)) = build_id::find(&out, &sections).map_err(io)? {
        build_id::recompute(&mut out, at, len).map_err(io)?;
    }
    Ok(Kpacked {
        splice: out,
        marker_vaddr,
        marker_offset,
        removed: fat.sh_size,
        table_moved: false,
        layout: KpackLayout::Tail,
    })
}

/// Give every symbol defined in section `fatbin` (in the symbol tables
/// among `sections`, at their output offsets) the value `addr` and size 0:
/// the section is empty now, and the old values (a fatbin array's size,
/// `_end` after it) told the fatbin's size. The tables are read in 64 KiB
/// chunks; only the symbols changed are written.
fn empty_fatbin_symbols(out: &mut Splice, sections: &[Shdr], fatbin: u16, addr: u64) -> std::io::Result<()> {
    const SYM_LEN: usize = 24;
    let mut edits = Vec::new();
    let mut buf = vec![0u8; 65536 / SYM_LEN * SYM_LEN];
    for s in sections.iter().filter(|s| (s.sh_type == SHT_SYMTAB || s.sh_type == SHT_DYNSYM) && s.in_file()) {
        let mut done = 0;
        while done < s.sh_size {
            let n = (s.sh_size - done).min(buf.len() as u64) as usize;
            out.read_at(s.sh_offset + done, &mut buf[..n])?;
            for (k, sym) in buf[..n].chunks_exact(SYM_LEN).enumerate() {
                let shndx = u16::from_le_bytes([sym[6], sym[7]]);
                if shndx == fatbin && (u64_at(sym, 8) != addr || u64_at(sym, 16) != 0) {
                    edits.push(s.sh_offset + done + (k * SYM_LEN) as u64 + 8);
                }
            }
            done += n as u64;
        }
    }
    let mut value = addr.to_le_bytes().to_vec();
    value.extend_from_slice(&0u64.to_le_bytes());
    for at in edits {
        out.overwrite(at, value.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn section(sh_type: u32, flags: u64, offset: u64, addr: u64, size: u64) -> Shdr {
        let (sh_link, sh_info, sh_addralign, sh_entsize) = (0, 0, 1, 0);
        Shdr {
            sh_name: 0,
            sh_type,
            sh_flags: flags,
            sh_addr: addr,
            sh_offset: offset,
            sh_size: size,
            sh_link,
            sh_info,
            sh_addralign,
            sh_entsize,
        }
    }

    /// Code at 0x100, the fatbin in PT_LOAD 1 (offset 0x2000, address
    /// 0x3000), then `.comment`, `.shstrtab` and the section header table.
    fn input() -> Input {
        let sections = vec![
            section(SHT_NULL, 0, 0, 0, 0),
            section(SHT_PROGBITS, SHF_ALLOC, 0x100, 0x100, 0x100),
            section(SHT_PROGBITS, SHF_ALLOC, 0x2000, 0x3000, 0x100),
            section(SHT_PROGBITS, 0, 0x2100, 0, 0x10),
            section(3, 0, 0x2110, 0, 0x20),
        ];
        let header = Ehdr {
            e_type: ET_DYN,
            e_machine: EM_X86_64,
            e_phoff: 0x40,
            e_shoff: 0x2130,
            e_phentsize: 56,
            e_phnum: 2,
            e_shentsize: 64,
            e_shnum: 5,
            e_shstrndx: 4,
        };
        Input {
            path: PathBuf::from("synthetic.so"),
            len: 0x2130 + 5 * 64,
            header_bytes: vec![0; 64],
            header,
            phdrs: vec![Phdr::read_only_load(0, 0, 0x2000), Phdr::read_only_load(0x2000, 0x3000, 0x100)],
            sections,
            shstrtab: vec![0; 0x20],
            fatbin: 2,
            segment: 1,
            wrappers: Vec::new(),
        }
    }

    #[test]
    fn a_fatbin_is_last_only_when_nothing_host_follows_it() {
        assert_eq!(fatbin_last(&input()), Some(1));
        let mut i = input();
        i.sections[4].sh_offset = 0x1f00; // `.shstrtab` before the fatbin
        assert_eq!(fatbin_last(&i), None);
        let mut i = input();
        i.header.e_shoff = 0x1c00; // the section header table before it
        assert_eq!(fatbin_last(&i), None);
        let mut i = input();
        i.phdrs.push(Phdr::read_only_load(0x2200, 0x5200, 0x10)); // a segment above
        assert_eq!(fatbin_last(&i), None);
        let mut i = input();
        i.sections[1].sh_addr = 0x3100; // an alloc section above it in memory
        assert_eq!(fatbin_last(&i), None);
        let mut i = input();
        i.sections[3].sh_offset = 0x2080; // a section inside its file bytes
        assert_eq!(fatbin_last(&i), None);
        let mut i = input();
        i.sections[3].sh_addralign = 1 << 21; // an alignment that would pad megabytes
        assert_eq!(fatbin_last(&i), None);
    }
}
