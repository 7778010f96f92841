//! The ELF64 little-endian records this module reads and writes, as plain
//! values with their byte encodings (x86-64 only, so no endian generics).

/// Page size of x86-64: congruence of offsets and addresses, the removed
/// fatbin pages and the new segments all use it.
pub(super) const PAGE: u64 = 0x1000;
pub(super) const EHDR_LEN: u64 = 64;
pub(super) const PHDR_LEN: u64 = 56;
pub(super) const SHDR_LEN: u64 = 64;

pub(super) const ET_EXEC: u16 = 2;
pub(super) const ET_DYN: u16 = 3;
pub(super) const EM_X86_64: u16 = 62;
pub(super) const PT_LOAD: u32 = 1;
pub(super) const PT_INTERP: u32 = 3;
pub(super) const PT_PHDR: u32 = 6;
pub(super) const PF_R: u32 = 4;
pub(super) const SHT_NULL: u32 = 0;
pub(super) const SHT_PROGBITS: u32 = 1;
pub(super) const SHT_SYMTAB: u32 = 2;
pub(super) const SHT_RELA: u32 = 4;
pub(super) const SHT_NOTE: u32 = 7;
pub(super) const SHT_NOBITS: u32 = 8;
pub(super) const SHT_REL: u32 = 9;
pub(super) const SHT_DYNSYM: u32 = 11;
pub(super) const SHT_RELR: u32 = 19;
pub(super) const SHF_ALLOC: u64 = 2;
pub(super) const SHN_LORESERVE: u16 = 0xff00;
pub(super) const R_X86_64_64: u32 = 1;
pub(super) const R_X86_64_RELATIVE: u32 = 8;

/// `__CudaFatBinaryWrapper::magic` before and after the rewrite.
pub const HIPF_MAGIC: u32 = 0x4849_5046;
pub const HIPK_MAGIC: u32 = 0x4B50_4948;
/// The wrapper: u32 magic, u32 version, u64 binary, u64 dummy1.
pub(super) const WRAPPER_LEN: u64 = 24;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(super) fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

pub(super) fn round_down(v: u64, to: u64) -> u64 {
    v / to * to
}

/// The fields of the file header this module reads or rewrites (the rest
/// are kept as the source's bytes).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ehdr {
    pub e_type: u16,
    pub e_machine: u16,
    pub e_phoff: u64,
    pub e_shoff: u64,
    pub e_phentsize: u16,
    pub e_phnum: u16,
    pub e_shentsize: u16,
    pub e_shnum: u16,
    pub e_shstrndx: u16,
}

impl Ehdr {
    /// `b` is the 64-byte header of a file already known to be ELF64 LE.
    pub fn parse(b: &[u8]) -> Ehdr {
        Ehdr {
            e_type: u16_at(b, 16),
            e_machine: u16_at(b, 18),
            e_phoff: u64_at(b, 32),
            e_shoff: u64_at(b, 40),
            e_phentsize: u16_at(b, 54),
            e_phnum: u16_at(b, 56),
            e_shentsize: u16_at(b, 58),
            e_shnum: u16_at(b, 60),
            e_shstrndx: u16_at(b, 62),
        }
    }

    /// `original` with this header's table offsets and counts written in.
    pub fn write_into(&self, original: &[u8]) -> Vec<u8> {
        let mut b = original[..EHDR_LEN as usize].to_vec();
        b[32..40].copy_from_slice(&self.e_phoff.to_le_bytes());
        b[40..48].copy_from_slice(&self.e_shoff.to_le_bytes());
        b[56..58].copy_from_slice(&self.e_phnum.to_le_bytes());
        b[60..62].copy_from_slice(&self.e_shnum.to_le_bytes());
        b
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Phdr {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

impl Phdr {
    pub fn parse(b: &[u8]) -> Phdr {
        Phdr {
            p_type: u32_at(b, 0),
            p_flags: u32_at(b, 4),
            p_offset: u64_at(b, 8),
            p_vaddr: u64_at(b, 16),
            p_paddr: u64_at(b, 24),
            p_filesz: u64_at(b, 32),
            p_memsz: u64_at(b, 40),
            p_align: u64_at(b, 48),
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.p_type.to_le_bytes());
        out.extend_from_slice(&self.p_flags.to_le_bytes());
        for v in [self.p_offset, self.p_vaddr, self.p_paddr, self.p_filesz, self.p_memsz, self.p_align] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    pub fn is_load(&self) -> bool {
        self.p_type == PT_LOAD
    }

    /// A read-only PT_LOAD of `len` bytes at `offset`, mapped at `vaddr`.
    pub fn read_only_load(offset: u64, vaddr: u64, len: u64) -> Phdr {
        Phdr {
            p_type: PT_LOAD,
            p_flags: PF_R,
            p_offset: offset,
            p_vaddr: vaddr,
            p_paddr: vaddr,
            p_filesz: len,
            p_memsz: len,
            p_align: PAGE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shdr {
    pub sh_name: u32,
    pub sh_type: u32,
    pub sh_flags: u64,
    pub sh_addr: u64,
    pub sh_offset: u64,
    pub sh_size: u64,
    pub sh_link: u32,
    pub sh_info: u32,
    pub sh_addralign: u64,
    pub sh_entsize: u64,
}

impl Shdr {
    /// The marker's section header: read-only data named at `name` in
    /// `.shstrtab`, `len` bytes at `offset`, mapped at `vaddr`.
    pub fn marker(name: u32, offset: u64, vaddr: u64, len: u64) -> Shdr {
        Shdr {
            sh_name: name,
            sh_type: SHT_PROGBITS,
            sh_flags: SHF_ALLOC,
            sh_addr: vaddr,
            sh_offset: offset,
            sh_size: len,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 1,
            sh_entsize: 0,
        }
    }

    pub fn parse(b: &[u8]) -> Shdr {
        Shdr {
            sh_name: u32_at(b, 0),
            sh_type: u32_at(b, 4),
            sh_flags: u64_at(b, 8),
            sh_addr: u64_at(b, 16),
            sh_offset: u64_at(b, 24),
            sh_size: u64_at(b, 32),
            sh_link: u32_at(b, 40),
            sh_info: u32_at(b, 44),
            sh_addralign: u64_at(b, 48),
            sh_entsize: u64_at(b, 56),
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.sh_name.to_le_bytes());
        out.extend_from_slice(&self.sh_type.to_le_bytes());
        for v in [self.sh_flags, self.sh_addr, self.sh_offset, self.sh_size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.sh_link.to_le_bytes());
        out.extend_from_slice(&self.sh_info.to_le_bytes());
        out.extend_from_slice(&self.sh_addralign.to_le_bytes());
        out.extend_from_slice(&self.sh_entsize.to_le_bytes());
    }

    /// Whether the section has bytes in the file.
    pub fn in_file(&self) -> bool {
        self.sh_type != SHT_NULL && self.sh_type != SHT_NOBITS && self.sh_size > 0
    }
}
