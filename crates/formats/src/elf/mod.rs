//! ELF files read natively (no `readelf`, no running anything): the facts a
//! wheel check, a repair or a ROCm packager needs — machine and class,
//! PT_INTERP, SONAME, NEEDED, RPATH/RUNPATH, the symbol versions required
//! from each library (`.gnu.version_r`) — plus an integrity verifier for
//! patched files ([`verify`]), native edits of the dynamic entries made as
//! a splice of the source file ([`edit`]; patchelf, for the edits it
//! refuses, is driven by the `tools` module), a symbol stripper for
//! `wheel repair --strip` ([`strip`]), and the host-binary rewrite of a device split (kpack) HIP binary ([`kpack_ref`]).
//!
//! Parsing is done by the `object` crate's low-level ELF API; this module
//! only decides which facts to take and how to name what is wrong.

pub mod edit;
pub mod kpack_ref;
mod read;
pub mod strip;
mod verify;

pub use read::{is_elf, read, read_bytes};
pub use verify::{verify, verify_bytes, verify_splice};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read `{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{path}` is not an ELF file")]
    NotElf { path: PathBuf },
    #[error("`{path}` is a corrupted ELF file: {problem}")]
    Corrupt { path: PathBuf, problem: String },
    #[error("`{path}` cannot be kpack'd: {problem}")]
    Kpack { path: PathBuf, problem: kpack_ref::KpackProblem },
}

impl ElfError {
    pub(crate) fn corrupt(path: &Path, problem: impl Into<String>) -> Self {
        ElfError::Corrupt { path: path.to_path_buf(), problem: problem.into() }
    }
}

/// 32- or 64-bit ELF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ElfClass {
    Elf32,
    Elf64,
}

/// The base architectures a wheel platform tag can name, as the manylinux
/// policies name them (`x86_64`, `aarch64`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Architecture {
    I686,
    X86_64,
    Aarch64,
    Ppc64le,
    Ppc64,
    S390x,
    Armv7l,
    Riscv64,
    Loongarch64,
}

impl Architecture {
    pub const ALL: [Architecture; 9] = [
        Architecture::I686,
        Architecture::X86_64,
        Architecture::Aarch64,
        Architecture::Ppc64le,
        Architecture::Ppc64,
        Architecture::S390x,
        Architecture::Armv7l,
        Architecture::Riscv64,
        Architecture::Loongarch64,
    ];

    /// The name used in platform tags and in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::I686 => "i686",
            Architecture::X86_64 => "x86_64",
            Architecture::Aarch64 => "aarch64",
            Architecture::Ppc64le => "ppc64le",
            Architecture::Ppc64 => "ppc64",
            Architecture::S390x => "s390x",
            Architecture::Armv7l => "armv7l",
            Architecture::Riscv64 => "riscv64",
            Architecture::Loongarch64 => "loongarch64",
        }
    }

    /// The architecture a platform tag ends with (`manylinux_2_17_x86_64`).
    pub fn from_platform_tag(tag: &str) -> Option<Architecture> {
        // Longest names first: `ppc64le` must win over `ppc64`.
        let mut all = Architecture::ALL;
        all.sort_by_key(|a| std::cmp::Reverse(a.as_str().len()));
        all.into_iter().find(|a| tag.ends_with(&format!("_{}", a.as_str())))
    }
}

impl std::fmt::Display for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// x86-64 micro-architecture levels above the baseline (from the
/// GNU_PROPERTY_X86_ISA_1_NEEDED note), which older CPUs cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum X86IsaLevel {
    V2,
    V3,
    V4,
}

/// One DT_VERNEED entry: the versions required from one library.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VersionNeed {
    /// The library file name (`libc.so.6`).
    pub file: String,
    /// The version names (`GLIBC_2.14`), in file order.
    pub versions: Vec<String>,
}

/// What quarry needs to know about one ELF file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ElfInfo {
    pub class: ElfClass,
    pub little_endian: bool,
    /// `e_machine` (EM_X86_64 = 62, ...).
    pub machine: u16,
    /// `EI_OSABI`.
    pub os_abi: u8,
    pub e_flags: u32,
    /// `e_type` (ET_EXEC = 2, ET_DYN = 3).
    pub e_type: u16,
    /// PT_INTERP, the program interpreter (`/lib64/ld-linux-x86-64.so.2`).
    pub interpreter: Option<String>,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Option<String>,
    pub runpath: Option<String>,
    /// `.gnu.version_r`: the symbol versions required, per library.
    pub version_needs: Vec<VersionNeed>,
    /// Defined function symbols of the dynamic symbol table that look like a
    /// Python module's init function (`PyInit_*`, `init*`, `_cffi_pypyinit_*`).
    pub module_init_functions: Vec<String>,
    /// Undefined, non-weak dynamic symbols (what the file needs from others).
    pub undefined_symbols: BTreeSet<String>,
    /// The x86-64 ISA level the file declares it needs, above the baseline.
    pub x86_isa_needed: Option<X86IsaLevel>,
    /// The GNU_PROPERTY_X86_ISA_1_NEEDED bits were set but name no known level.
    pub x86_isa_unknown: bool,
}

impl ElfInfo {
    /// The base architecture, or None when the machine/class/endianness is
    /// not one a wheel tag can name (or an armv7l file is not EABI5 hard-float).
    pub fn architecture(&self) -> Option<Architecture> {
        use object::elf::*;
        // e_flags bits of 32-bit ARM: EABI version 5, hard-float calling convention.
        const EF_ARM_EABIMASK: u32 = 0xff00_0000;
        const EF_ARM_EABI_VER5: u32 = 0x0500_0000;
        const EF_ARM_ABI_FLOAT_HARD: u32 = 0x400;
        let arch = match (Machine(self.machine), self.class, self.little_endian) {
            (EM_386, ElfClass::Elf32, true) => Architecture::I686,
            (EM_X86_64, ElfClass::Elf64, true) => Architecture::X86_64,
            (EM_PPC64, ElfClass::Elf64, true) => Architecture::Ppc64le,
            (EM_PPC64, ElfClass::Elf64, false) => Architecture::Ppc64,
            (EM_RISCV, ElfClass::Elf64, true) => Architecture::Riscv64,
            (EM_AARCH64, ElfClass::Elf64, true) => Architecture::Aarch64,
            (EM_S390, ElfClass::Elf64, false) => Architecture::S390x,
            (EM_ARM, ElfClass::Elf32, true) => {
                let eabi5 = self.e_flags & EF_ARM_EABIMASK == EF_ARM_EABI_VER5;
                let hard_float = self.e_flags & EF_ARM_ABI_FLOAT_HARD == EF_ARM_ABI_FLOAT_HARD;
                if !(eabi5 && hard_float) {
                    return None;
                }
                Architecture::Armv7l
            }
            (EM_LOONGARCH, ElfClass::Elf64, true) => Architecture::Loongarch64,
            _ => return None,
        };
        Some(arch)
    }

    /// Whether a library with `other`'s header can be loaded into a process
    /// of this file's kind (the dynamic loader's compatibility rule).
    pub fn is_compatible(&self, other: &ElfInfo) -> bool {
        use object::elf::{ELFOSABI_GNU, ELFOSABI_NONE};
        let abi_ok = |a: u8| a == ELFOSABI_NONE.0 || a == ELFOSABI_GNU.0;
        (self.os_abi == other.os_abi || (abi_ok(self.os_abi) && abi_ok(other.os_abi)))
            && self.class == other.class
            && self.little_endian == other.little_endian
            && self.machine == other.machine
    }

    /// Required symbol versions per library (`libc.so.6` -> `GLIBC_2.14`...),
    /// leaving out the dynamic loader itself as auditwheel does.
    pub fn required_versions(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for need in &self.version_needs {
            if is_dynamic_loader(&need.file) {
                continue;
            }
            out.entry(need.file.clone()).or_default().extend(need.versions.iter().cloned());
        }
        out
    }

    /// The runtime search path the loader uses: RUNPATH wins over RPATH.
    pub fn effective_search_path(&self) -> Option<&str> {
        self.runpath.as_deref().or(self.rpath.as_deref())
    }
}

/// The dynamic loader's own file names (`ld-linux-x86-64.so.2`, `ld64.so.2`).
pub fn is_dynamic_loader(soname: &str) -> bool {
    soname.contains("ld-linux") || soname == "ld64.so.2" || soname == "ld64.so.1"
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::process::Command;

    /// A tiny shared library built with the system C compiler, or None when
    /// there is none (CI installs gcc).
    fn tiny_lib(dir: &Path) -> Option<PathBuf> {
        let src = dir.join("tiny.c");
        std::fs::write(&src, "#include <string.h>\n#include <math.h>\nvoid *tiny(void *d, const void *s, size_t n, double x) { return memcpy(d, s, n + (size_t)sqrt(x)); }\nint PyInit_tiny(void) { return 0; }\n").unwrap();
        let out = dir.join("libtiny.so.1");
        let ok = Command::new("cc")
            .args([
                "-shared",
                "-fPIC",
                "-O1",
                "-Wl,-soname,libtiny.so.1",
                "-Wl,--disable-new-dtags",
                "-Wl,-rpath,$ORIGIN/../lib",
            ])
            .arg(&src)
            .arg("-lm")
            .arg("-o")
            .arg(&out)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            assert!(std::env::var_os("CI").is_none(), "CI is set but `cc` cannot build a shared library");
            eprintln!("skipping: no C compiler");
            return None;
        }
        Some(out)
    }

    #[test]
    fn reads_a_real_library() {
        let dir = tempfile::tempdir().unwrap();
        let Some(lib) = tiny_lib(dir.path()) else {
            return;
        };
        let info = verify(&lib).unwrap();
        assert_eq!(info.soname.as_deref(), Some("libtiny.so.1"));
        assert!(info.needed.contains(&"libm.so.6".to_string()), "{:?}", info.needed);
        assert!(info.needed.contains(&"libc.so.6".to_string()), "{:?}", info.needed);
        assert_eq!(info.rpath.as_deref(), Some("$ORIGIN/../lib"));
        assert_eq!(info.runpath, None);
        assert!(info.module_init_functions.contains(&"PyInit_tiny".to_string()));
        assert!(info.undefined_symbols.contains("memcpy") && info.undefined_symbols.contains("sqrt"));
        let versions = info.required_versions();
        assert!(versions["libc.so.6"].iter().all(|v| v.starts_with("GLIBC_")), "{versions:?}");
        assert_eq!(info.interpreter, None);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(info.architecture(), Some(Architecture::X86_64));
            // memcpy@GLIBC_2.14 is the x86_64 symbol version since glibc 2.14.
            assert!(versions["libc.so.6"].contains("GLIBC_2.14"), "{versions:?}");
        }
    }

    #[test]
    fn reads_an_executable_interpreter() {
        let exe = std::env::current_exe().unwrap();
        let info = verify(&exe).unwrap();
        assert!(info.interpreter.as_deref().is_some_and(|i| i.contains("ld")), "{:?}", info.interpreter);
        assert!(info.needed.contains(&"libc.so.6".to_string()));
    }

    /// Offsets of the program headers of a 64-bit little-endian file.
    fn phdr_offsets(data: &[u8]) -> Vec<(usize, object::elf::ProgramType)> {
        let h = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
        let e = h.endian().unwrap();
        let base = h.e_phoff(e) as usize;
        let size = h.e_phentsize(e) as usize;
        h.program_headers(e, data).unwrap().iter().enumerate().map(|(i, p)| (base + i * size, p.p_type(e))).collect()
    }

    #[test]
    fn corrupted_files_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let Some(lib) = tiny_lib(dir.path()) else {
            return;
        };
        if !cfg!(all(target_arch = "x86_64", target_endian = "little")) {
            return;
        }
        let good = std::fs::read(&lib).unwrap();

        // Truncated: segments run past the end of the file.
        let truncated = dir.path().join("truncated.so");
        std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
        let err = verify(&truncated).unwrap_err().to_string();
        assert!(err.contains("truncated.so") && err.contains("corrupted"), "{err}");

        // PT_DYNAMIC moved outside every PT_LOAD (p_offset and p_vaddr far away).
        let mut bad = good.clone();
        let (at, _) = *phdr_offsets(&bad).iter().find(|(_, t)| *t == object::elf::PT_DYNAMIC).unwrap();
        let far = (good.len() as u64 - 16).to_le_bytes();
        bad[at + 8..at + 16].copy_from_slice(&far); // p_offset
        bad[at + 16..at + 24].copy_from_slice(&0x4000_0000u64.to_le_bytes()); // p_vaddr
        bad[at + 32..at + 40].copy_from_slice(&16u64.to_le_bytes()); // p_filesz
        let path = dir.path().join("dynamic.so");
        std::fs::write(&path, &bad).unwrap();
        let err = verify(&path).unwrap_err().to_string();
        assert!(err.contains("PT_DYNAMIC") && err.contains("not covered"), "{err}");

        // A PT_LOAD whose offset and address disagree modulo the page size.
        let mut bad = good.clone();
        let (at, _) = *phdr_offsets(&bad).iter().find(|(_, t)| *t == object::elf::PT_LOAD).unwrap();
        let vaddr = u64::from_le_bytes(bad[at + 16..at + 24].try_into().unwrap());
        bad[at + 16..at + 24].copy_from_slice(&(vaddr + 8).to_le_bytes());
        let path = dir.path().join("load.so");
        std::fs::write(&path, &bad).unwrap();
        let err = verify(&path).unwrap_err().to_string();
        assert!(err.contains("PT_LOAD"), "{err}");

        // Not ELF at all.
        let path = dir.path().join("text.so");
        std::fs::write(&path, "not an ELF file, just text").unwrap();
        assert!(matches!(verify(&path), Err(ElfError::NotElf { .. })));
    }

    #[test]
    fn platform_tag_architectures() {
        assert_eq!(Architecture::from_platform_tag("manylinux_2_17_x86_64"), Some(Architecture::X86_64));
        assert_eq!(Architecture::from_platform_tag("linux_ppc64le"), Some(Architecture::Ppc64le));
        assert_eq!(Architecture::from_platform_tag("linux_ppc64"), Some(Architecture::Ppc64));
        assert_eq!(Architecture::from_platform_tag("any"), None);
    }
}
