//! Layouts no C compiler gives on demand: a program header table with room
//! to grow, a fatbin smaller than a page, one at the start of its segment
//! with a bss after it, segments aligned to 2 MiB.

use super::*;
use crate::elf::kpack_ref::read::Input;
use std::path::PathBuf;

fn load(offset: u64, vaddr: u64, filesz: u64, memsz: u64, align: u64) -> Phdr {
    Phdr {
        p_type: PT_LOAD,
        p_flags: PF_R,
        p_offset: offset,
        p_vaddr: vaddr,
        p_paddr: vaddr,
        p_filesz: filesz,
        p_memsz: memsz,
        p_align: align,
    }
}

fn section(sh_type: u32, offset: u64, addr: u64, size: u64) -> Shdr {
    Shdr {
        sh_name: 0,
        sh_type,
        sh_flags: if addr > 0 { SHF_ALLOC } else { 0 },
        sh_addr: addr,
        sh_offset: offset,
        sh_size: size,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 1,
        sh_entsize: 0,
    }
}

/// A shared library: one PT_LOAD at 0 with the header and a 2-entry table
/// (room up to 0x1000), `.hip_fatbin` at `fatbin` (offset = address) of
/// `size` bytes, a second read-write PT_LOAD after it, `.shstrtab` and the
/// section header table ending the file.
fn input(fatbin: u64, size: u64, loads: Vec<Phdr>) -> Input {
    let data_end = loads.iter().map(|p| p.p_offset + p.p_filesz).max().unwrap();
    let sections = vec![
        section(SHT_NULL, 0, 0, 0),
        section(SHT_PROGBITS, fatbin, fatbin, size),
        section(SHT_PROGBITS, data_end - 0x30, loads[1].p_vaddr + loads[1].p_filesz - 0x30, 0x30),
        section(3, data_end, 0, 0x20),
    ];
    let header = Ehdr {
        e_type: ET_DYN,
        e_machine: EM_X86_64,
        e_phoff: 0x40,
        e_shoff: data_end + 0x20,
        e_phentsize: 56,
        e_phnum: loads.len() as u16,
        e_shentsize: 64,
        e_shnum: sections.len() as u16,
        e_shstrndx: 3,
    };
    Input {
        path: PathBuf::from("synthetic.so"),
        len: data_end + 0x20 + 4 * 64,
        header_bytes: vec![0; 64],
        header,
        phdrs: loads,
        sections,
        shstrtab: vec![0; 0x20],
        fatbin: 1,
        segment: 2,
        wrappers: Vec::new(),
    }
}

#[test]
fn a_fatbin_under_a_page_is_zeroed_in_place_and_the_table_grows_where_it_is() {
    let i = input(0x1800, 0x800, vec![load(0, 0, 0x2000, 0x2000, PAGE), load(0x2000, 0x3000, 0x100, 0x100, PAGE)]);
    let plan = plan(&i, 0x50).unwrap();
    assert_eq!(plan.table, Table::InPlace);
    assert!(plan.removed.is_empty());
    assert!(plan.zero.contains(&(0x1800..0x2000)));
    assert_eq!(plan.phdrs.len(), 3);
    assert_eq!(plan.phdrs[..2], i.phdrs[..]);
    assert_eq!(plan.phdrs[2], Phdr::read_only_load(0x3000, 0x4000, 0x50));
    assert_eq!(plan.sections[1].sh_type, SHT_NOBITS);
    // The old .shstrtab and section header table (at the end) are replaced.
    assert_eq!(plan.keep, 0x2100);
    assert_eq!(plan.shstrtab_offset, 0x3050);
    assert_eq!(plan.len, plan.shoff + 5 * 64);
}

#[test]
fn a_fatbin_starting_its_segment_leaves_memory_and_the_bss_after() {
    // The read-write segment: 3 fatbin pages and 0x100 bytes, data, a bss.
    let rw = load(0x1000, 0x201000, 0x3200, 0x5000, 0x200000);
    let i = input(0x1000, 0x3100, vec![load(0, 0, 0x1000, 0x1000, 0x200000), rw]);
    let mut i = i;
    i.sections[1].sh_addr = 0x201000;
    let plan = plan(&i, 0x50).unwrap();
    assert_eq!(plan.table, Table::InPlace);
    assert_eq!(plan.removed, 0x1000..0x4000);
    let expected = [
        load(0, 0, 0x1000, 0x1000, 0x200000),
        // Pages as memory, then the rest with its bss; 3 pages moved the
        // offsets off 2 MiB congruence, so the pieces say 4 KiB.
        load(0x1000, 0x201000, 0, 0x3000, PAGE),
        load(0x1000, 0x204000, 0x200, 0x2000, PAGE),
        Phdr::read_only_load(0x2000, 0x206000, 0x50),
    ];
    assert_eq!(plan.phdrs, expected);
    assert_eq!(plan.sections[2].sh_offset, 0x4200 - 0x30 - 0x3000);
    assert_eq!(plan.zero, vec![0x1000..0x1000, 0x4000..0x4100]);
}

#[test]
fn a_full_table_moves_to_the_tail_once() {
    let mut i = input(0x1000, 0x3100, vec![load(0, 0, 0x4200, 0x4200, PAGE), load(0x4200, 0x5200, 0x100, 0x100, PAGE)]);
    // A section right after the table: no room.
    i.sections.push(section(SHT_PROGBITS, 0x40 + 2 * 56, 0x40 + 2 * 56, 8));
    i.header.e_shnum += 1;
    let plan = plan(&i, 0x50).unwrap();
    let Table::Tail { offset, vaddr } = plan.table else { panic!("{:?}", plan.table) };
    // Before the fatbin, its pages, after it, the other, the marker, the table's own.
    assert_eq!(plan.phdrs.len(), 6);
    assert_eq!(plan.phoff, offset);
    assert_eq!(offset % PAGE, vaddr % PAGE);
    assert_eq!(plan.phdrs[5], Phdr::read_only_load(offset, vaddr, 6 * 56));
    assert!(plan.zero.contains(&(0x40..0x40 + 2 * 56)), "{:?}", plan.zero);
}
