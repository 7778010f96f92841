//! Reading what an edit needs from the source file, the way the dynamic
//! loader reads it: PT_DYNAMIC, DT_STRTAB through the PT_LOADs, the symbol
//! version tables through DT_VERNEED/DT_VERDEF. Read through
//! `object::ReadCache`, which reads only the ranges asked for (a large
//! library is never mapped or read whole).

use super::EditError;
use crate::elf::read::vaddr_to_offset;
use crate::elf::ElfError;
use object::elf::{self, Dyn64, FileHeader64, ProgramHeader64, SectionHeader64, Sym64};
use object::read::elf::{FileHeader, SectionHeader};
use object::{Endianness, ReadCache, ReadRef};
use std::fs::File;
use std::path::{Path, PathBuf};

pub(super) type Header = FileHeader64<Endianness>;
pub(super) type Phdr = ProgramHeader64<Endianness>;
pub(super) type Shdr = SectionHeader64<Endianness>;
pub(super) type Dyn = Dyn64<Endianness>;

/// Where a reference into the dynamic string table is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Site {
    /// The `d_val` of dynamic entry `i`.
    Dyn(usize),
    /// `vn_file` of the Verneed record at this file offset.
    VerneedFile(u64),
    /// Anything else (symbol names, version names): never edited.
    Other,
}

/// The parts of the source file an edit reads or rewrites.
pub(super) struct Input {
    pub path: PathBuf,
    pub len: u64,
    pub endian: Endianness,
    pub header: Header,
    pub phdrs: Vec<Phdr>,
    pub sections: Vec<Shdr>,
    /// Index of the section whose bytes are the dynamic string table.
    pub dynstr_section: Option<usize>,
    pub dyn_offset: u64,
    /// Every slot of PT_DYNAMIC, DT_NULL padding included.
    pub dynamic: Vec<Dyn>,
    pub strtab_offset: u64,
    pub dynstr: Vec<u8>,
    /// Every reference into the string table.
    pub refs: Vec<(Site, u64)>,
    /// False when some table referencing strings could not be enumerated.
    pub refs_complete: bool,
    /// False when a `.gnu.version_r` section names another string table.
    pub verneed_linked: bool,
}

pub(super) fn unsupported(path: &Path, reason: impl Into<String>) -> EditError {
    EditError::Unsupported { path: path.to_path_buf(), reason: reason.into() }
}

/// Dynamic tags whose value is an offset into the string table.
const STRING_TAGS: [elf::DynamicTag; 9] = [
    elf::DT_NEEDED,
    elf::DT_SONAME,
    elf::DT_RPATH,
    elf::DT_RUNPATH,
    elf::DT_AUXILIARY,
    elf::DT_FILTER,
    elf::DT_AUDIT,
    elf::DT_DEPAUDIT,
    elf::DT_CONFIG,
];

/// Largest p_align handled (patchelf refuses larger ones too).
const MAX_ALIGN: u64 = 16 << 20;

impl Input {
    pub fn read(path: &Path) -> Result<Input, EditError> {
        let io = |source| EditError::Elf(ElfError::Io { path: path.to_path_buf(), source });
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let cache = ReadCache::new(file);
        let data = &cache;
        let corrupt = |what: &str, e: object::Error| EditError::Elf(ElfError::corrupt(path, format!("{what}: {e}")));
        match object::FileKind::parse(data) {
            Ok(object::FileKind::Elf64) => {}
            Ok(object::FileKind::Elf32) => {
                return Err(unsupported(path, "32-bit ELF files are not edited natively"));
            }
            _ => return Err(EditError::Elf(ElfError::NotElf { path: path.to_path_buf() })),
        }
        let header = Header::parse(data).map_err(|e| corrupt("ELF header", e))?;
        let endian = header.endian().map_err(|e| corrupt("ELF header", e))?;
        if header.e_phnum.get(endian) == elf::PN_XNUM {
            return Err(unsupported(path, "e_phnum is PN_XNUM (the program header count lives in section 0)"));
        }
        let phdrs = header.program_headers(endian, data).map_err(|e| corrupt("program headers", e))?.to_vec();
        if let Some(big) = phdrs.iter().map(|p| p.p_align.get(endian)).filter(|&a| a > MAX_ALIGN).max() {
            return Err(unsupported(path, format!("a segment is aligned to {big:#x}, above 16 MiB")));
        }
        let dyn_ph = phdrs
            .iter()
            .find(|p| p.p_type.get(endian) == elf::PT_DYNAMIC)
            .ok_or_else(|| unsupported(path, "it has no PT_DYNAMIC (a static file)"))?;
        let dyn_offset = dyn_ph.p_offset.get(endian);
        let count = dyn_ph.p_filesz.get(endian) / size_of::<Dyn>() as u64;
        let dynamic = data
            .read_slice_at::<Dyn>(dyn_offset, count as usize)
            .map_err(|()| EditError::Elf(ElfError::corrupt(path, "PT_DYNAMIC lies past the end of the file")))?
            .to_vec();
        let tag = |d: &Dyn| d.d_tag.get(endian);
        let value = |t: elf::DynamicTag| {
            dynamic.iter().take_while(|d| tag(d) != elf::DT_NULL).find(|d| tag(d) == t).map(|d| d.d_val.get(endian))
        };
        if value(elf::DT_MIPS_RLD_MAP_REL).is_some() {
            return Err(unsupported(path, "it has DT_MIPS_RLD_MAP_REL"));
        }
        let (Some(strtab), Some(strsz)) = (value(elf::DT_STRTAB), value(elf::DT_STRSZ)) else {
            return Err(unsupported(path, "it has no DT_STRTAB/DT_STRSZ"));
        };
        let strtab_offset = vaddr_to_offset::<Header>(&phdrs, endian, strtab, strsz)
            .ok_or_else(|| unsupported(path, "DT_STRTAB is not inside any PT_LOAD"))?;
        let dynstr = data
            .read_bytes_at(strtab_offset, strsz)
            .map_err(|()| {
                EditError::Elf(ElfError::corrupt(path, "the dynamic string table is past the end of the file"))
            })?
            .to_vec();

        let table = header.sections(endian, data).map_err(|e| corrupt("section headers", e))?;
        let sections: Vec<Shdr> = table.iter().cloned().collect();
        for s in &sections {
            if table.section_name(endian, s).is_ok_and(|n| n == b".note.nixos.ldcache") {
                return Err(unsupported(path, "it has a .note.nixos.ldcache section"));
            }
        }
        let dynstr_section =
            sections.iter().position(|s| s.sh_type(endian) == elf::SHT_STRTAB && s.sh_addr(endian) == strtab);
        if let Some(i) = dynstr_section {
            let s = &sections[i];
            if s.sh_size(endian) != strsz || s.sh_offset(endian) != strtab_offset {
                return Err(unsupported(path, "the .dynstr section disagrees with DT_STRTAB/DT_STRSZ"));
            }
        }

        let mut input = Input {
            path: path.to_path_buf(),
            len,
            endian,
            header: *header,
            phdrs,
            sections,
            dynstr_section,
            dyn_offset,
            dynamic,
            strtab_offset,
            dynstr,
            refs: Vec::new(),
            refs_complete: true,
            verneed_linked: true,
        };
        input.collect_refs(data)?;
        Ok(input)
    }

    pub fn tag(&self, d: &Dyn) -> elf::DynamicTag {
        d.d_tag.get(self.endian)
    }

    /// The first entry with tag `t` before DT_NULL.
    pub fn find(&self, dynamic: &[Dyn], t: elf::DynamicTag) -> Option<usize> {
        dynamic.iter().take_while(|d| self.tag(d) != elf::DT_NULL).position(|d| self.tag(d) == t)
    }

    /// The NUL-terminated string at `at` of the string table.
    pub fn string_at(&self, at: u64) -> Result<&[u8], EditError> {
        let rest = usize::try_from(at).ok().and_then(|at| self.dynstr.get(at..));
        rest.and_then(|r| memchr::memchr(0, r).map(|n| &r[..n])).ok_or_else(|| {
            EditError::Elf(ElfError::corrupt(&self.path, format!("string offset {at} is outside the string table")))
        })
    }

    /// The file offset of `len` bytes at virtual address `addr`.
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        vaddr_to_offset::<Header>(&self.phdrs, self.endian, addr, len)
    }

    fn collect_refs<'data, R: ReadRef<'data>>(&mut self, data: R) -> Result<(), EditError> {
        let e = self.endian;
        let bad = |what: &str| EditError::Elf(ElfError::corrupt(&self.path, format!("{what} is unreadable")));
        for (i, d) in self.dynamic.iter().enumerate().take_while(|(_, d)| d.d_tag.get(e) != elf::DT_NULL) {
            if STRING_TAGS.contains(&d.d_tag.get(e)) {
                self.refs.push((Site::Dyn(i), d.d_val.get(e)));
            }
        }
        let value = |t: elf::DynamicTag| self.find(&self.dynamic, t).map(|i| self.dynamic[i].d_val.get(e));
        let symtab = value(elf::DT_SYMTAB);
        let verneed = (value(elf::DT_VERNEED), value(elf::DT_VERNEEDNUM));
        let verdef = (value(elf::DT_VERDEF), value(elf::DT_VERDEFNUM));
        // Symbol names, from the .dynsym section linked to this table.
        match self.sections.iter().find(|s| s.sh_type(e) == elf::SHT_DYNSYM) {
            Some(s) if Some(s.sh_link(e) as usize) == self.dynstr_section => {
                let n = s.sh_size(e) / size_of::<Sym64<Endianness>>() as u64;
                let syms =
                    data.read_slice_at::<Sym64<Endianness>>(s.sh_offset(e), n as usize).map_err(|()| bad(".dynsym"))?;
                self.refs.extend(syms.iter().map(|s| (Site::Other, u64::from(s.st_name.get(e)))));
            }
            _ => self.refs_complete &= symtab.is_none(),
        }
        // The version chains end where an entry's `next` is 0: a count that
        // claims more (found by fuzzing: a count of 2^32 over one entry
        // read the same entry until memory ran out) ends there too, and a
        // count the file could not hold is refused.
        let file_len = data.len().map_err(|()| bad("the file"))?;
        if let (Some(addr), Some(num)) = verneed {
            if num > file_len / 16 {
                return Err(bad("DT_VERNEEDNUM (more entries than the file holds)"));
            }
            let mut at = self.offset_of(addr, 16).ok_or_else(|| bad("DT_VERNEED"))?;
            for _ in 0..num {
                let need: &elf::Verneed<Endianness> = data.read_at(at).map_err(|()| bad(".gnu.version_r"))?;
                self.refs.push((Site::VerneedFile(at), u64::from(need.vn_file.get(e))));
                let mut aux_at = at + u64::from(need.vn_aux.get(e));
                for _ in 0..need.vn_cnt.get(e) {
                    let aux: &elf::Vernaux<Endianness> = data.read_at(aux_at).map_err(|()| bad(".gnu.version_r"))?;
                    self.refs.push((Site::Other, u64::from(aux.vna_name.get(e))));
                    match aux.vna_next.get(e) {
                        0 => break,
                        next => aux_at += u64::from(next),
                    }
                }
                match need.vn_next.get(e) {
                    0 => break,
                    next => at += u64::from(next),
                }
            }
            if let Some(s) = self.sections.iter().find(|s| s.sh_type(e) == elf::SHT_GNU_VERNEED) {
                self.verneed_linked = Some(s.sh_link(e) as usize) == self.dynstr_section;
            }
        }
        if let (Some(addr), Some(num)) = verdef {
            if num > file_len / 20 {
                return Err(bad("DT_VERDEFNUM (more entries than the file holds)"));
            }
            let mut at = self.offset_of(addr, 20).ok_or_else(|| bad("DT_VERDEF"))?;
            for _ in 0..num {
                let def: &elf::Verdef<Endianness> = data.read_at(at).map_err(|()| bad(".gnu.version_d"))?;
                let mut aux_at = at + u64::from(def.vd_aux.get(e));
                for _ in 0..def.vd_cnt.get(e) {
                    let aux: &elf::Verdaux<Endianness> = data.read_at(aux_at).map_err(|()| bad(".gnu.version_d"))?;
                    self.refs.push((Site::Other, u64::from(aux.vda_name.get(e))));
                    match aux.vda_next.get(e) {
                        0 => break,
                        next => aux_at += u64::from(next),
                    }
                }
                match def.vd_next.get(e) {
                    0 => break,
                    next => at += u64::from(next),
                }
            }
        }
        Ok(())
    }
}
