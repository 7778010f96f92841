//! Reading what the rewrite needs, and only that: the file header, the
//! program and section header tables, `.shstrtab`, `.hipFatBinSegment`, the
//! relocation tables (streamed in fixed-size chunks, so a library with
//! millions of relocations costs no more memory than a small one) and, for
//! an `R_X86_64_64` at a wrapper, one dynamic symbol. `.hip_fatbin` itself
//! is never read.

use super::raw::*;
use super::KpackProblem;
use crate::elf::ElfError;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// How a wrapper's pointer gets its value when the file is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reloc {
    /// A RELA entry at this file offset (RELATIVE, or R_X86_64_64 against a symbol).
    Rela { entry: u64 },
    /// A RELR entry covers the slot: its in-place value is the addend.
    Relr,
    /// No relocation (a non-PIE executable): the in-place value is final.
    InPlace,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Wrapper {
    /// The address the pointer holds once relocated (without the load bias).
    pub target: u64,
    pub reloc: Reloc,
}

/// The parts of the source file the rewrite reads or rewrites.
pub(super) struct Input {
    pub path: PathBuf,
    pub len: u64,
    /// The source's file header, as bytes (rewritten fields are patched in).
    pub header_bytes: Vec<u8>,
    pub header: Ehdr,
    pub phdrs: Vec<Phdr>,
    pub sections: Vec<Shdr>,
    pub shstrtab: Vec<u8>,
    /// Index of `.hip_fatbin` and of `.hipFatBinSegment`.
    pub fatbin: usize,
    pub segment: usize,
    pub wrappers: Vec<Wrapper>,
}

struct Reader<'a> {
    path: &'a Path,
    file: File,
    len: u64,
}

impl Reader<'_> {
    fn bytes(&self, offset: u64, len: u64, what: &str) -> Result<Vec<u8>, ElfError> {
        let end = offset.checked_add(len).filter(|&end| end <= self.len);
        if end.is_none() || len > isize::MAX as u64 {
            return Err(ElfError::corrupt(
                self.path,
                format!("{what} ({len} bytes at {offset:#x}) runs past the end of the {}-byte file", self.len),
            ));
        }
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, offset).map_err(|source| self.io(source))?;
        Ok(buf)
    }

    fn io(&self, source: std::io::Error) -> ElfError {
        ElfError::Io { path: self.path.to_path_buf(), source }
    }

    /// Call `each(entry offset, entry bytes)` for every `entsize`-byte entry
    /// of the section, reading at most 64 KiB at a time.
    fn entries(
        &self,
        s: &Shdr,
        entsize: u64,
        what: &str,
        mut each: impl FnMut(u64, &[u8]) -> Result<(), ElfError>,
    ) -> Result<(), ElfError> {
        if !s.sh_size.is_multiple_of(entsize) {
            return Err(ElfError::corrupt(self.path, format!("{what} is {} bytes, not whole entries", s.sh_size)));
        }
        let chunk = (65536 / entsize) * entsize;
        let mut at = 0;
        while at < s.sh_size {
            let n = chunk.min(s.sh_size - at);
            let buf = self.bytes(s.sh_offset + at, n, what)?;
            for (i, entry) in buf.chunks_exact(entsize as usize).enumerate() {
                each(s.sh_offset + at + i as u64 * entsize, entry)?;
            }
            at += n;
        }
        Ok(())
    }
}

fn problem(path: &Path, problem: KpackProblem) -> ElfError {
    ElfError::Kpack { path: path.to_path_buf(), problem }
}

fn unsupported(path: &Path, why: impl Into<String>) -> ElfError {
    problem(path, KpackProblem::Unsupported(why.into()))
}

impl Input {
    /// Read the file at `path`; None when it has no `.hip_fatbin`.
    pub fn read(path: &Path) -> Result<Option<Input>, ElfError> {
        let file = File::open(path).map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?;
        let len = file.metadata().map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?.len();
        let r = Reader { path, file, len };
        if len < EHDR_LEN {
            return Err(ElfError::NotElf { path: path.to_path_buf() });
        }
        let header_bytes = r.bytes(0, EHDR_LEN, "the file header")?;
        if header_bytes[..4] != *b"\x7fELF" {
            return Err(ElfError::NotElf { path: path.to_path_buf() });
        }
        let header = Ehdr::parse(&header_bytes);
        let (class, data) = (header_bytes[4], header_bytes[5]);
        if class != 2 || data != 1 || header.e_machine != EM_X86_64 {
            return Err(problem(
                path,
                KpackProblem::NotX86_64(format!("class {class}, data {data}, machine {}", header.e_machine)),
            ));
        }
        if header.e_type != ET_DYN && header.e_type != ET_EXEC {
            return Err(problem(path, KpackProblem::NotX86_64(format!("e_type {}", header.e_type))));
        }
        if u64::from(header.e_phentsize) != PHDR_LEN || u64::from(header.e_shentsize) != SHDR_LEN {
            return Err(ElfError::corrupt(path, "program or section header entries of an unexpected size"));
        }
        if header.e_shnum == 0 || header.e_shstrndx >= header.e_shnum || header.e_phnum == 0xffff {
            return Err(unsupported(path, "extended section or segment numbering (or no section headers)"));
        }
        let table = r.bytes(header.e_phoff, u64::from(header.e_phnum) * PHDR_LEN, "the program header table")?;
        let phdrs: Vec<Phdr> = table.chunks_exact(PHDR_LEN as usize).map(Phdr::parse).collect();
        let table = r.bytes(header.e_shoff, u64::from(header.e_shnum) * SHDR_LEN, "the section header table")?;
        let sections: Vec<Shdr> = table.chunks_exact(SHDR_LEN as usize).map(Shdr::parse).collect();
        check_tables(path, len, &phdrs, &sections)?;
        let names = sections[usize::from(header.e_shstrndx)];
        if names.sh_type == SHT_NOBITS {
            return Err(ElfError::corrupt(path, ".shstrtab has no bytes"));
        }
        let shstrtab = r.bytes(names.sh_offset, names.sh_size, ".shstrtab")?;
        let name_of = |s: &Shdr| -> &[u8] {
            let from = (s.sh_name as usize).min(shstrtab.len());
            let rest = &shstrtab[from..];
            &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
        };
        let Some(fatbin) = sections.iter().position(|s| name_of(s) == b".hip_fatbin") else {
            return Ok(None);
        };
        if sections[fatbin].sh_type == SHT_NOBITS {
            return Err(problem(path, KpackProblem::AlreadyKpacked));
        }
        let segment = sections
            .iter()
            .position(|s| name_of(s) == b".hipFatBinSegment")
            .ok_or_else(|| problem(path, KpackProblem::NoSegment))?;
        if fatbin == usize::from(header.e_shstrndx) || segment == usize::from(header.e_shstrndx) {
            return Err(ElfError::corrupt(path, "e_shstrndx names .hip_fatbin or .hipFatBinSegment"));
        }
        let mut input = Input {
            path: path.to_path_buf(),
            len,
            header_bytes,
            header,
            phdrs,
            sections,
            shstrtab,
            fatbin,
            segment,
            wrappers: Vec::new(),
        };
        input.wrappers = input.read_wrappers(&r)?;
        Ok(Some(input))
    }

    pub fn is_executable(&self) -> bool {
        self.header.e_type == ET_EXEC || self.phdrs.iter().any(|p| p.p_type == PT_INTERP)
    }

    /// The PT_LOAD whose file bytes hold `size` bytes at address `addr`,
    /// read from file offset `offset`.
    pub fn load_holding(&self, addr: u64, offset: u64, size: u64) -> Option<usize> {
        self.phdrs.iter().position(|p| {
            p.is_load()
                && p.p_vaddr <= addr
                && addr.checked_add(size).is_some_and(|end| end <= p.p_vaddr + p.p_filesz)
                && p.p_offset + (addr - p.p_vaddr) == offset
        })
    }

    fn read_wrappers(&self, r: &Reader) -> Result<Vec<Wrapper>, ElfError> {
        let path = &self.path;
        let seg = self.sections[self.segment];
        let fat = self.sections[self.fatbin];
        if !seg.sh_size.is_multiple_of(WRAPPER_LEN) {
            return Err(problem(path, KpackProblem::WrapperSize(seg.sh_size)));
        }
        if !seg.in_file() || self.load_holding(seg.sh_addr, seg.sh_offset, seg.sh_size).is_none() {
            return Err(ElfError::corrupt(path, ".hipFatBinSegment is not file bytes mapped by a PT_LOAD"));
        }
        if self.load_holding(fat.sh_addr, fat.sh_offset, fat.sh_size).is_none() {
            return Err(ElfError::corrupt(path, ".hip_fatbin is not file bytes mapped by a PT_LOAD"));
        }
        let bytes = r.bytes(seg.sh_offset, seg.sh_size, ".hipFatBinSegment")?;
        // Pointer slot address -> wrapper index.
        let slots: BTreeMap<u64, usize> =
            (0..(seg.sh_size / WRAPPER_LEN) as usize).map(|i| (seg.sh_addr + i as u64 * WRAPPER_LEN + 8, i)).collect();
        let found = self.find_relocations(r, &slots)?;
        let mut out = Vec::new();
        for (i, w) in bytes.chunks_exact(WRAPPER_LEN as usize).enumerate() {
            let (magic, version, in_place) = (u32_at(w, 0), u32_at(w, 4), u64_at(w, 8));
            if magic != HIPF_MAGIC && magic != HIPK_MAGIC {
                return Err(problem(path, KpackProblem::UnknownMagic { index: i, magic }));
            }
            if version != 1 {
                return Err(problem(path, KpackProblem::Version { index: i, version }));
            }
            let unresolved = |reason: String| problem(path, KpackProblem::Unresolved { index: i, reason });
            let (target, reloc) = match found.get(&i) {
                Some(Found::Rela { entry, target }) => (*target, Reloc::Rela { entry: *entry }),
                Some(Found::Relr) => (in_place, Reloc::Relr),
                Some(Found::Bad(reason)) => return Err(unresolved(reason.clone())),
                None if self.header.e_type == ET_EXEC => (in_place, Reloc::InPlace),
                None => return Err(unresolved("no relocation sets it in a position-independent file".into())),
            };
            let end = fat.sh_addr + fat.sh_size;
            if magic == HIPF_MAGIC && !(fat.sh_addr..end).contains(&target) {
                return Err(problem(
                    path,
                    KpackProblem::PointerOutside { index: i, pointer: target, start: fat.sh_addr, end },
                ));
            }
            out.push(Wrapper { target, reloc });
        }
        Ok(out)
    }

    /// The relocation of each wrapper slot that has one, by wrapper index.
    fn find_relocations(&self, r: &Reader, slots: &BTreeMap<u64, usize>) -> Result<BTreeMap<usize, Found>, ElfError> {
        let mut found: BTreeMap<usize, Found> = BTreeMap::new();
        let dynamic = |s: &&Shdr| s.sh_flags & SHF_ALLOC != 0;
        for s in self.sections.iter().filter(dynamic).filter(|s| s.sh_type == SHT_RELA) {
            r.entries(s, 24, "a RELA relocation table", |entry, b| {
                let Some(&i) = slots.get(&u64_at(b, 0)) else {
                    return Ok(());
                };
                if found.contains_key(&i) {
                    return Ok(()); // the first entry wins, as the loader applies it first
                }
                let (info, addend) = (u64_at(b, 8), u64_at(b, 16));
                let (kind, symbol) = (info as u32, info >> 32);
                let result = match kind {
                    R_X86_64_RELATIVE => Found::Rela { entry, target: addend },
                    R_X86_64_64 => match self.symbol_value(r, s.sh_link, symbol)? {
                        Some(value) => Found::Rela { entry, target: value.wrapping_add(addend) },
                        None => Found::Bad(format!("R_X86_64_64 against undefined symbol {symbol}")),
                    },
                    other => Found::Bad(format!("relocation type {other} (only RELATIVE and R_X86_64_64 are known)")),
                };
                found.insert(i, result);
                Ok(())
            })?;
        }
        for s in self.sections.iter().filter(dynamic).filter(|s| s.sh_type == SHT_REL) {
            r.entries(s, 16, "a REL relocation table", |_, b| {
                if let Some(&i) = slots.get(&u64_at(b, 0)) {
                    found.entry(i).or_insert(Found::Bad("an SHT_REL relocation (not used on x86-64)".into()));
                }
                Ok(())
            })?;
        }
        for s in self.sections.iter().filter(dynamic).filter(|s| s.sh_type == SHT_RELR) {
            let mut next = 0u64;
            r.entries(s, 8, "a RELR relocation table", |_, b| {
                let word = u64_at(b, 0);
                let mut covered = |addr: u64| {
                    if let Some(&i) = slots.get(&addr) {
                        found.entry(i).or_insert(Found::Relr);
                    }
                };
                if word & 1 == 0 {
                    covered(word);
                    next = word.wrapping_add(8);
                } else {
                    for bit in 1..64 {
                        if word >> bit & 1 == 1 {
                            covered(next.wrapping_add((bit - 1) * 8));
                        }
                    }
                    next = next.wrapping_add(63 * 8);
                }
                Ok(())
            })?;
        }
        Ok(found)
    }

    /// The value of symbol `index` of the symbol table in section `table`;
    /// None when it is undefined.
    fn symbol_value(&self, r: &Reader, table: u32, index: u64) -> Result<Option<u64>, ElfError> {
        let s = self
            .sections
            .get(table as usize)
            .filter(|s| s.in_file())
            .ok_or_else(|| ElfError::corrupt(&self.path, format!("a relocation table links to section {table}")))?;
        if index.checked_mul(24).is_none_or(|at| at + 24 > s.sh_size) {
            return Err(ElfError::corrupt(&self.path, format!("a relocation names symbol {index}, past its table")));
        }
        let sym = r.bytes(s.sh_offset + index * 24, 24, "a symbol")?;
        let shndx = u16::from_le_bytes([sym[6], sym[7]]);
        Ok((shndx != 0).then(|| u64_at(&sym, 8)))
    }
}

/// Every range the rewrite computes with is inside the file and the
/// address space, so the arithmetic on them cannot overflow.
fn check_tables(path: &Path, len: u64, phdrs: &[Phdr], sections: &[Shdr]) -> Result<(), ElfError> {
    let fits = |at: u64, size: u64| at.checked_add(size).is_some_and(|end| end <= len);
    // x86-64 user space ends below 2^47; this leaves room for page rounding.
    let mapped = |at: u64, size: u64| at.checked_add(size).is_some_and(|end| end < 1 << 48);
    for (i, p) in phdrs.iter().enumerate() {
        if (p.p_filesz > 0 && !fits(p.p_offset, p.p_filesz)) || (p.is_load() && !mapped(p.p_vaddr, p.p_memsz)) {
            return Err(ElfError::corrupt(path, format!("program header {i} runs past the file or the address space")));
        }
        if p.is_load() && p.p_filesz > p.p_memsz {
            return Err(ElfError::corrupt(path, format!("PT_LOAD {i} has more file bytes than memory")));
        }
    }
    for (i, s) in sections.iter().enumerate() {
        if (s.in_file() && !fits(s.sh_offset, s.sh_size))
            || (s.sh_flags & SHF_ALLOC != 0 && !mapped(s.sh_addr, s.sh_size))
        {
            return Err(ElfError::corrupt(path, format!("section {i} runs past the file or the address space")));
        }
    }
    Ok(())
}

enum Found {
    Rela { entry: u64, target: u64 },
    Relr,
    Bad(String),
}
