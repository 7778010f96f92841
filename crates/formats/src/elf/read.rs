//! Reading the facts of an ELF file (see [`super::ElfInfo`]).
//!
//! The dynamic section is read the way the dynamic loader reads it: through
//! PT_DYNAMIC, with DT_STRTAB translated from a virtual address to a file
//! offset through the PT_LOAD segments, so a file whose section headers were
//! stripped or made stale by a patch is still read as it will be loaded.

use super::{ElfClass, ElfError, ElfInfo, VersionNeed, X86IsaLevel};
use object::elf;
use object::read::elf::{Dyn, FileHeader, NoteIterator, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::{Endianness, FileKind, ReadRef};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// True when the file starts with the ELF magic. Unreadable files are "not ELF".
pub fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == elf::ELFMAG
}

/// Map a file into memory (large ROCm libraries are hundreds of MB; the page
/// cache holds them, not the heap).
pub(super) fn map(path: &Path) -> Result<memmap2::Mmap, ElfError> {
    let file = File::open(path).map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?;
    let len = file.metadata().map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?.len();
    if len < 16 {
        return Err(ElfError::NotElf { path: path.to_path_buf() });
    }
    // SAFETY: the mapping is read-only and private to this call; a file
    // truncated by someone else meanwhile would fault, which no caller of a
    // build tool does to its own inputs.
    unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ElfError::Io { path: path.to_path_buf(), source })
}

/// Read the facts of the ELF file at `path`.
pub fn read(path: &Path) -> Result<ElfInfo, ElfError> {
    let data = map(path)?;
    read_bytes(&data, path)
}

/// Read the facts of an ELF image held in memory; `path` names it in errors.
pub fn read_bytes(data: &[u8], path: &Path) -> Result<ElfInfo, ElfError> {
    read_data(data, path)
}

/// Read the facts of an ELF image through any `object` reader (bytes in
/// memory, or a `ReadCache` over a file or a splice).
pub(super) fn read_data<'data, R: ReadRef<'data>>(data: R, path: &Path) -> Result<ElfInfo, ElfError> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf32) => read_generic::<elf::FileHeader32<Endianness>, R>(data, path),
        Ok(FileKind::Elf64) => read_generic::<elf::FileHeader64<Endianness>, R>(data, path),
        _ => Err(ElfError::NotElf { path: path.to_path_buf() }),
    }
}

fn corrupt(path: &Path, what: &str, e: impl std::fmt::Display) -> ElfError {
    ElfError::corrupt(path, format!("{what}: {e}"))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Translate a virtual address to a file offset through the PT_LOAD
/// segments' file-backed ranges; `len` bytes must lie inside one segment.
pub(super) fn vaddr_to_offset<Elf: FileHeader>(
    phdrs: &[Elf::ProgramHeader],
    endian: Elf::Endian,
    addr: u64,
    len: u64,
) -> Option<u64> {
    phdrs.iter().filter(|p| p.p_type(endian) == elf::PT_LOAD).find_map(|p| {
        let vaddr: u64 = p.p_vaddr(endian).into();
        let filesz: u64 = p.p_filesz(endian).into();
        let end = addr.checked_add(len)?;
        if addr >= vaddr && end <= vaddr.checked_add(filesz)? {
            Some(Into::<u64>::into(p.p_offset(endian)) + (addr - vaddr))
        } else {
            None
        }
    })
}

/// The dynamic entries that name strings, resolved.
#[derive(Default)]
pub(super) struct DynamicStrings {
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Option<String>,
    pub runpath: Option<String>,
}

/// Read PT_DYNAMIC and resolve its string entries through DT_STRTAB. Returns
/// None when the file has no PT_DYNAMIC (static executables, objects).
pub(super) fn dynamic_strings<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    header: &Elf,
    endian: Endianness,
    data: R,
    path: &Path,
) -> Result<Option<DynamicStrings>, ElfError> {
    let phdrs = header.program_headers(endian, data).map_err(|e| corrupt(path, "program headers", e))?;
    let Some(dyn_ph) = phdrs.iter().find(|p| p.p_type(endian) == elf::PT_DYNAMIC) else {
        return Ok(None);
    };
    let entries = dyn_ph.dynamic(endian, data).map_err(|e| corrupt(path, "PT_DYNAMIC segment", e))?.unwrap_or(&[]);
    let mut strtab: Option<u64> = None;
    let mut strsz: Option<u64> = None;
    for d in entries {
        match d.d_tag(endian) {
            elf::DT_NULL => break,
            elf::DT_STRTAB => strtab = Some(d.d_val(endian).into()),
            elf::DT_STRSZ => strsz = Some(d.d_val(endian).into()),
            _ => {}
        }
    }
    let mut out = DynamicStrings::default();
    let string_tags = [elf::DT_NEEDED, elf::DT_SONAME, elf::DT_RPATH, elf::DT_RUNPATH];
    let has_strings =
        entries.iter().take_while(|d| d.d_tag(endian) != elf::DT_NULL).any(|d| string_tags.contains(&d.d_tag(endian)));
    if !has_strings {
        return Ok(Some(out));
    }
    let (Some(strtab), Some(strsz)) = (strtab, strsz) else {
        return Err(ElfError::corrupt(path, "the dynamic section names strings but has no DT_STRTAB/DT_STRSZ"));
    };
    let offset = vaddr_to_offset::<Elf>(phdrs, endian, strtab, strsz).ok_or_else(|| {
        ElfError::corrupt(
            path,
            format!(
                "the dynamic string table (DT_STRTAB {strtab:#x}, {strsz} bytes) is not inside any PT_LOAD segment"
            ),
        )
    })?;
    let table = data
        .read_bytes_at(offset, strsz)
        .ok()
        .ok_or_else(|| ElfError::corrupt(path, "the dynamic string table lies past the end of the file"))?;
    for d in entries.iter().take_while(|d| d.d_tag(endian) != elf::DT_NULL) {
        let tag = d.d_tag(endian);
        if !string_tags.contains(&tag) {
            continue;
        }
        let at: u64 = d.d_val(endian).into();
        let s = usize::try_from(at)
            .ok()
            .and_then(|at| table.get(at..))
            .and_then(|rest| rest.iter().position(|&b| b == 0).map(|n| &rest[..n]))
            .ok_or_else(|| {
                ElfError::corrupt(
                    path,
                    format!(
                        "dynamic entry {} points at string offset {at}, outside the {strsz}-byte string table",
                        tag_name(tag)
                    ),
                )
            })?;
        let s = lossy(s);
        match tag {
            elf::DT_NEEDED => out.needed.push(s),
            elf::DT_SONAME => out.soname = Some(s),
            elf::DT_RPATH => out.rpath = Some(s),
            elf::DT_RUNPATH => out.runpath = Some(s),
            _ => {}
        }
    }
    Ok(Some(out))
}

pub(super) fn tag_name(tag: elf::DynamicTag) -> &'static str {
    match tag {
        elf::DT_NEEDED => "DT_NEEDED",
        elf::DT_SONAME => "DT_SONAME",
        elf::DT_RPATH => "DT_RPATH",
        elf::DT_RUNPATH => "DT_RUNPATH",
        _ => "DT_?",
    }
}

fn read_generic<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    data: R,
    path: &Path,
) -> Result<ElfInfo, ElfError> {
    let header = Elf::parse(data).map_err(|e| corrupt(path, "ELF header", e))?;
    let endian = header.endian().map_err(|e| corrupt(path, "ELF header", e))?;
    let phdrs = header.program_headers(endian, data).map_err(|e| corrupt(path, "program headers", e))?;

    let mut interpreter = None;
    for p in phdrs {
        if let Some(interp) = p.interpreter(endian, data).map_err(|e| corrupt(path, "PT_INTERP", e))? {
            interpreter = Some(lossy(interp));
            break;
        }
    }
    let dynamic = dynamic_strings(header, endian, data, path)?.unwrap_or_default();

    let sections = header.sections(endian, data).map_err(|e| corrupt(path, "section headers", e))?;
    let version_needs = version_needs::<Elf, R>(&sections, endian, data, path)?;
    let (module_init_functions, undefined_symbols) = dynamic_symbols::<Elf, R>(&sections, endian, data, path)?;
    let (x86_isa_needed, x86_isa_unknown) = if header.e_machine(endian) == elf::EM_X86_64 {
        x86_isa_level::<Elf, R>(&sections, endian, data, path)?
    } else {
        (None, false)
    };

    Ok(ElfInfo {
        class: if header.is_class_64() { ElfClass::Elf64 } else { ElfClass::Elf32 },
        little_endian: header.is_little_endian(),
        machine: header.e_machine(endian).0,
        os_abi: header.e_ident().os_abi.0,
        e_flags: header.e_flags(endian).0,
        e_type: header.e_type(endian).0,
        interpreter,
        soname: dynamic.soname,
        needed: dynamic.needed,
        rpath: dynamic.rpath,
        runpath: dynamic.runpath,
        version_needs,
        module_init_functions,
        undefined_symbols,
        x86_isa_needed,
        x86_isa_unknown,
    })
}

fn version_needs<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
    path: &Path,
) -> Result<Vec<VersionNeed>, ElfError> {
    let bad = |e: object::Error| corrupt(path, ".gnu.version_r", e);
    let Some((mut iter, link)) = sections.gnu_verneed(endian, data).map_err(bad)? else {
        return Ok(Vec::new());
    };
    let strings = sections.strings(endian, data, link).map_err(bad)?;
    let mut out = Vec::new();
    while let Some((need, mut aux)) = iter.next().map_err(bad)? {
        let file = lossy(need.file(endian, strings).map_err(bad)?);
        let mut versions = Vec::new();
        while let Some(a) = aux.next().map_err(bad)? {
            versions.push(lossy(a.name(endian, strings).map_err(bad)?));
        }
        out.push(VersionNeed { file, versions });
    }
    Ok(out)
}

type SymbolFacts = (Vec<String>, BTreeSet<String>);

fn dynamic_symbols<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
    path: &Path,
) -> Result<SymbolFacts, ElfError> {
    let bad = |e: object::Error| corrupt(path, ".dynsym", e);
    let symbols = sections.symbols(endian, data, elf::SHT_DYNSYM).map_err(bad)?;
    let strings = symbols.strings();
    let mut inits = Vec::new();
    let mut undefined = BTreeSet::new();
    for sym in symbols.iter().skip(1) {
        let name = sym.name(endian, strings).map_err(bad)?;
        if name.is_empty() {
            continue;
        }
        if sym.st_shndx(endian) == elf::SHN_UNDEF {
            if sym.st_bind() != elf::STB_WEAK {
                undefined.insert(lossy(name));
            }
        } else if sym.st_type() == elf::STT_FUNC
            && (name.starts_with(b"PyInit_") || name.starts_with(b"init") || name.starts_with(b"_cffi_pypyinit_"))
        {
            inits.push(lossy(name));
        }
    }
    Ok((inits, undefined))
}

/// The x86-64 ISA level from the first GNU property note that has one, read
/// the way auditwheel reads it.
fn x86_isa_level<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    sections: &SectionTable<'data, Elf, R>,
    endian: Endianness,
    data: R,
    path: &Path,
) -> Result<(Option<X86IsaLevel>, bool), ElfError> {
    let bad = |e: object::Error| corrupt(path, "note section", e);
    for section in sections.iter() {
        let Some(mut notes): Option<NoteIterator<'data, Elf>> = section.notes(endian, data).map_err(bad)? else {
            continue;
        };
        while let Some(note) = notes.next().map_err(bad)? {
            if note.n_type(endian) != elf::NT_GNU_PROPERTY_TYPE_0 || note.name() != elf::ELF_NOTE_GNU {
                continue;
            }
            let Some(mut props) = note.gnu_properties(endian) else {
                return Ok((None, false));
            };
            while let Some(prop) = props.next().map_err(bad)? {
                if prop.pr_type() != elf::GNU_PROPERTY_X86_ISA_1_NEEDED || prop.pr_data().len() != 4 {
                    continue;
                }
                let bits = prop.data_u32(endian).map_err(bad)? & !1; // bit 0 is the baseline
                return Ok(match bits {
                    b if b & 8 != 0 => (Some(X86IsaLevel::V4), false),
                    b if b & 4 != 0 => (Some(X86IsaLevel::V3), false),
                    b if b & 2 != 0 => (Some(X86IsaLevel::V2), false),
                    0 => (None, false),
                    _ => (None, true),
                });
            }
            // auditwheel stops at the first GNU property note.
            return Ok((None, false));
        }
    }
    Ok((None, false))
}
