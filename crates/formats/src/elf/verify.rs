//! Integrity checks for ELF files after patching. patchelf has shipped
//! releases that wrote files the loader rejects (a PT_PHDR outside every
//! PT_LOAD, segments past the end of the file); such a file must be an error
//! before it goes into a wheel, not a crash on a user's machine.

use super::read::{dynamic_strings, read_data, vaddr_to_offset};
use super::{ElfError, ElfInfo};
use crate::splice::Splice;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::{Endianness, FileKind, ReadCache, ReadRef};
use std::path::Path;

/// Verify the ELF file at `path`; returns its facts when it is sound.
pub fn verify(path: &Path) -> Result<ElfInfo, ElfError> {
    let data = super::read::map(path)?;
    verify_bytes(&data, path)
}

/// Verify an ELF image held in memory; `path` names it in errors.
pub fn verify_bytes(data: &[u8], path: &Path) -> Result<ElfInfo, ElfError> {
    verify_data(data, path)
}

/// Verify an edited file described as a [`Splice`] (the bytes that will be
/// written), reading only the ranges the checks need; `path` names it in errors.
pub fn verify_splice(splice: &Splice, path: &Path) -> Result<ElfInfo, ElfError> {
    let cache = ReadCache::new(splice.reader());
    verify_data(&cache, path)
}

fn verify_data<'data, R: ReadRef<'data>>(data: R, path: &Path) -> Result<ElfInfo, ElfError> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf32) => check::<elf::FileHeader32<Endianness>, R>(data, path)?,
        Ok(FileKind::Elf64) => check::<elf::FileHeader64<Endianness>, R>(data, path)?,
        _ => return Err(ElfError::NotElf { path: path.to_path_buf() }),
    }
    read_data(data, path)
}

fn segment_name(t: elf::ProgramType) -> String {
    match t {
        elf::PT_LOAD => "PT_LOAD".into(),
        elf::PT_DYNAMIC => "PT_DYNAMIC".into(),
        elf::PT_INTERP => "PT_INTERP".into(),
        elf::PT_NOTE => "PT_NOTE".into(),
        elf::PT_PHDR => "PT_PHDR".into(),
        elf::PT_TLS => "PT_TLS".into(),
        elf::PT_GNU_EH_FRAME => "PT_GNU_EH_FRAME".into(),
        other => format!("segment type {:#x}", other.0),
    }
}

fn check<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(data: R, path: &Path) -> Result<(), ElfError> {
    let fail = |p: String| Err(ElfError::corrupt(path, p));
    let header = Elf::parse(data).map_err(|e| ElfError::corrupt(path, format!("ELF header: {e}")))?;
    let endian = header.endian().map_err(|e| ElfError::corrupt(path, format!("ELF header: {e}")))?;
    let file_len = data.len().map_err(|()| ElfError::corrupt(path, "the file's length is unreadable"))?;
    let phdrs = header
        .program_headers(endian, data)
        .map_err(|e| ElfError::corrupt(path, format!("the program header table is not inside the file: {e}")))?;

    let mut last_load_vaddr: Option<u64> = None;
    for (i, p) in phdrs.iter().enumerate() {
        let ty = p.p_type(endian);
        let offset: u64 = p.p_offset(endian).into();
        let filesz: u64 = p.p_filesz(endian).into();
        if filesz > 0 && offset.checked_add(filesz).is_none_or(|end| end > file_len) {
            return fail(format!(
                "program header {i} ({}) covers bytes {offset:#x}..{:#x}, past the end of the {file_len}-byte file",
                segment_name(ty),
                offset.saturating_add(filesz)
            ));
        }
        if ty == elf::PT_LOAD {
            let vaddr: u64 = p.p_vaddr(endian).into();
            let memsz: u64 = p.p_memsz(endian).into();
            let align: u64 = p.p_align(endian).into();
            if filesz > memsz {
                return fail(format!("PT_LOAD {i} has p_filesz {filesz:#x} larger than p_memsz {memsz:#x}"));
            }
            if align > 1 && offset % align != vaddr % align {
                return fail(format!(
                    "PT_LOAD {i}: p_offset {offset:#x} and p_vaddr {vaddr:#x} are not congruent modulo p_align {align:#x}; the kernel cannot map it"
                ));
            }
            if last_load_vaddr.is_some_and(|last| vaddr < last) {
                return fail(format!(
                    "PT_LOAD {i} at {vaddr:#x} is out of order: loadable segments must be sorted by address"
                ));
            }
            last_load_vaddr = Some(vaddr);
        }
    }

    // Segments the loader reads from the mapped image must lie inside a
    // PT_LOAD, at the same place in the file and in memory.
    let must_be_loaded =
        [elf::PT_PHDR, elf::PT_INTERP, elf::PT_DYNAMIC, elf::PT_NOTE, elf::PT_GNU_EH_FRAME, elf::PT_TLS];
    for (i, p) in phdrs.iter().enumerate() {
        let ty = p.p_type(endian);
        if !must_be_loaded.contains(&ty) {
            continue;
        }
        let offset: u64 = p.p_offset(endian).into();
        let vaddr: u64 = p.p_vaddr(endian).into();
        let filesz: u64 = p.p_filesz(endian).into();
        if filesz == 0 {
            continue;
        }
        let covered = phdrs.iter().filter(|l| l.p_type(endian) == elf::PT_LOAD).any(|l| {
            let l_off: u64 = l.p_offset(endian).into();
            let l_vaddr: u64 = l.p_vaddr(endian).into();
            let l_filesz: u64 = l.p_filesz(endian).into();
            offset >= l_off && offset + filesz <= l_off + l_filesz && vaddr.wrapping_sub(l_vaddr) == offset - l_off
        });
        if !covered {
            return fail(format!(
                "program header {i} ({}, offset {offset:#x}, address {vaddr:#x}, {filesz:#x} bytes) is not covered by any PT_LOAD segment",
                segment_name(ty)
            ));
        }
        if ty == elf::PT_PHDR {
            let phoff: u64 = header.e_phoff(endian).into();
            let table = u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian));
            if offset != phoff || filesz < table {
                return fail(format!(
                    "PT_PHDR (offset {offset:#x}, {filesz:#x} bytes) does not describe the program header table (offset {phoff:#x}, {table:#x} bytes)"
                ));
            }
        }
    }

    // The dynamic section must be readable and its strings resolvable.
    dynamic_strings(header, endian, data, path)?;
    if let Some(dyn_ph) = phdrs.iter().find(|p| p.p_type(endian) == elf::PT_DYNAMIC) {
        let vaddr: u64 = dyn_ph.p_vaddr(endian).into();
        let filesz: u64 = dyn_ph.p_filesz(endian).into();
        if vaddr_to_offset::<Elf>(phdrs, endian, vaddr, filesz).is_none() {
            return fail(format!("PT_DYNAMIC at {vaddr:#x} is not mapped by any PT_LOAD segment"));
        }
    }

    // Section headers are optional for loading, but when present they must
    // describe the file (debuggers, strip and patchelf itself read them).
    let sections = header
        .sections(endian, data)
        .map_err(|e| ElfError::corrupt(path, format!("the section header table is unreadable: {e}")))?;
    for (i, s) in sections.iter().enumerate() {
        if s.sh_type(endian) == elf::SHT_NOBITS || s.sh_type(endian) == elf::SHT_NULL {
            continue;
        }
        let offset: u64 = s.sh_offset(endian).into();
        let size: u64 = s.sh_size(endian).into();
        if size > 0 && offset.checked_add(size).is_none_or(|end| end > file_len) {
            let name = sections.section_name(endian, s).map(String::from_utf8_lossy).unwrap_or_default();
            return fail(format!(
                "section {i} `{name}` covers bytes {offset:#x}..{:#x}, past the end of the {file_len}-byte file",
                offset.saturating_add(size)
            ));
        }
    }
    if let Some((_, strings_index)) = sections
        .dynamic(endian, data)
        .map_err(|e| ElfError::corrupt(path, format!("the .dynamic section is unreadable: {e}")))?
    {
        sections
            .strings(endian, data, strings_index)
            .map_err(|e| ElfError::corrupt(path, format!("the .dynamic section's string table is unreadable: {e}")))?;
    }
    Ok(())
}
