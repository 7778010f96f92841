//! The target of an AMDGPU code object, read from its ELF header: the
//! processor from `e_flags & EF_AMDGPU_MACH`, the xnack/sramecc settings
//! from the feature bits (their meaning depends on the code object version
//! in `EI_ABIVERSION`), as LLVM's AMDGPU usage document specifies.
//!
//! Only the 64-byte header is read (often from a decompressing stream), so
//! the few fields are taken at their fixed offsets; the `object` crate has
//! no table of AMDGPU machines, which is why the table below is ours.

/// `e_machine` of AMD GPU code objects.
pub const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
const ELFOSABI_AMDGPU_PAL: u8 = 65;
const ELFOSABI_AMDGPU_MESA3D: u8 = 66;
/// Bytes of an ELF64 header: all that is needed to name the target.
pub const HEADER_LEN: usize = 64;

const EF_AMDGPU_MACH: u32 = 0x0ff;
const EF_AMDGPU_FEATURE_XNACK_V3: u32 = 0x100;
const EF_AMDGPU_FEATURE_SRAMECC_V3: u32 = 0x200;
const EF_AMDGPU_FEATURE_XNACK_V4: u32 = 0x300;
const EF_AMDGPU_FEATURE_SRAMECC_V4: u32 = 0xc00;
const EF_AMDGPU_GENERIC_VERSION_SHIFT: u32 = 24;

/// `EF_AMDGPU_MACH_AMDGCN_*` values and their processor names (LLVM's
/// llvm/BinaryFormat/ELF.h; the R600 values below 0x20 carry no HSA code).
const MACHINES: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x040, "gfx940"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x049, "gfx1250"),
    (0x04a, "gfx1151"),
    (0x04b, "gfx941"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
    (0x04f, "gfx950"),
    (0x050, "gfx1310"),
    (0x051, "gfx9-generic"),
    (0x052, "gfx10-1-generic"),
    (0x053, "gfx10-3-generic"),
    (0x054, "gfx11-generic"),
    (0x055, "gfx1152"),
    (0x057, "gfx1154"),
    (0x058, "gfx1153"),
    (0x059, "gfx12-generic"),
    (0x05a, "gfx1251"),
    (0x05b, "gfx12-5-generic"),
    (0x05c, "gfx1172"),
    (0x05d, "gfx1170"),
    (0x05e, "gfx1171"),
    (0x05f, "gfx9-4-generic"),
    (0x062, "gfx11-7-generic"),
    (0x063, "gfx13-generic"),
];

/// The processor name of an `EF_AMDGPU_MACH` value.
pub fn machine_name(mach: u32) -> Option<&'static str> {
    MACHINES.iter().find(|(m, _)| *m == mach).map(|(_, n)| *n)
}

/// Every processor name the table knows.
pub fn processor_names() -> impl Iterator<Item = &'static str> {
    MACHINES.iter().map(|(_, n)| *n)
}

/// What an AMDGPU code object's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The processor, e.g. `gfx942`.
    pub processor: String,
    /// Target features as in a target id, in LLVM's order: `sramecc+`,
    /// `xnack-`... A feature that is "any" or unsupported is not listed.
    pub features: Vec<String>,
    /// The code object version (2 to 6), from `EI_ABIVERSION`.
    pub code_object_version: u8,
    /// Generic targets (`gfx9-generic`): the generic version, else None.
    pub generic_version: Option<u8>,
}

impl Target {
    /// The target id: `gfx942:sramecc+:xnack-`.
    pub fn id(&self) -> String {
        std::iter::once(self.processor.as_str())
            .chain(self.features.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// Why a header is not an AMDGPU code object's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("not an ELF file (bad magic)")]
    NotElf,
    #[error("truncated ELF header ({0} bytes)")]
    Truncated(usize),
    #[error("an ELF file for machine {0}, not an AMD GPU (EM_AMDGPU = 224)")]
    NotAmdgpu(u16),
    #[error("AMDGPU code objects are 64-bit little-endian ELF; this header says class {class}, data {data}")]
    Layout { class: u8, data: u8 },
    #[error("unknown EF_AMDGPU_MACH value {0:#05x} (e_flags {1:#010x}): a processor newer than this quarry, or a damaged header")]
    UnknownMachine(u32, u32),
    #[error("OS/ABI {0} is not AMDGPU HSA/PAL/Mesa")]
    OsAbi(u8),
}

/// True when `head` starts like an ELF file.
pub fn is_elf(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
}

/// The `e_machine` of an ELF header of either class and byte order, when
/// enough of it is there.
pub fn elf_machine(head: &[u8]) -> Option<u16> {
    if !is_elf(head) || head.len() < 20 {
        return None;
    }
    let b = [head[18], head[19]];
    Some(if head[5] == 2 { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) })
}

/// Read the target from the first bytes of a code object (64 are enough).
pub fn parse_header(head: &[u8]) -> Result<Target, HeaderError> {
    if !is_elf(head) {
        return Err(HeaderError::NotElf);
    }
    if head.len() < HEADER_LEN {
        return Err(HeaderError::Truncated(head.len()));
    }
    let machine = elf_machine(head).unwrap_or(0);
    if machine != EM_AMDGPU {
        return Err(HeaderError::NotAmdgpu(machine));
    }
    let (class, data) = (head[4], head[5]);
    if class != 2 || data != 1 {
        return Err(HeaderError::Layout { class, data });
    }
    let os_abi = head[7];
    if ![ELFOSABI_AMDGPU_HSA, ELFOSABI_AMDGPU_PAL, ELFOSABI_AMDGPU_MESA3D, 0].contains(&os_abi) {
        return Err(HeaderError::OsAbi(os_abi));
    }
    let flags = u32::from_le_bytes([head[48], head[49], head[50], head[51]]);
    let mach = flags & EF_AMDGPU_MACH;
    let processor = machine_name(mach).ok_or(HeaderError::UnknownMachine(mach, flags))?;
    // EI_ABIVERSION: 0 = v2, 1 = v3, 2 = v4, 3 = v5, 4 = v6 (HSA only; PAL
    // and Mesa objects use the v3 flag layout).
    let code_object_version = if os_abi == ELFOSABI_AMDGPU_HSA { head[8].saturating_add(2) } else { 3 };
    let mut features = Vec::new();
    match code_object_version {
        2 => {}
        3 => {
            // v3 has one bit per feature: set = on; clear = off or unsupported.
            if flags & EF_AMDGPU_FEATURE_SRAMECC_V3 != 0 {
                features.push("sramecc+".to_string());
            }
            if flags & EF_AMDGPU_FEATURE_XNACK_V3 != 0 {
                features.push("xnack+".to_string());
            }
        }
        _ => {
            // v4+: two bits each: unsupported, any, off, on.
            let setting = |bits: u32, any: u32, off: u32| -> Option<&'static str> {
                match bits {
                    b if b == off => Some("-"),
                    b if b == (off | any) => Some("+"),
                    _ => None,
                }
            };
            if let Some(s) = setting(flags & EF_AMDGPU_FEATURE_SRAMECC_V4, 0x400, 0x800) {
                features.push(format!("sramecc{s}"));
            }
            if let Some(s) = setting(flags & EF_AMDGPU_FEATURE_XNACK_V4, 0x100, 0x200) {
                features.push(format!("xnack{s}"));
            }
        }
    }
    let generic_version = (processor.ends_with("-generic") && code_object_version >= 6)
        .then_some((flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT) as u8)
        .filter(|v| *v > 0);
    Ok(Target { processor: processor.to_string(), features, code_object_version, generic_version })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal AMDGPU ELF header (v5 unless `abi` says otherwise).
    pub(crate) fn header(flags: u32, abi: u8) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_LEN];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[6] = 1;
        h[7] = ELFOSABI_AMDGPU_HSA;
        h[8] = abi;
        h[16] = 3; // ET_DYN
        h[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    #[test]
    fn targets_from_flags() {
        let t = parse_header(&header(0x04c | 0xc00 | 0x200, 3)).unwrap();
        assert_eq!(t.id(), "gfx942:sramecc+:xnack-");
        assert_eq!(t.code_object_version, 5);
        // "any" settings are not part of the id.
        assert_eq!(parse_header(&header(0x03f | 0x400 | 0x100, 2)).unwrap().id(), "gfx90a");
        assert_eq!(parse_header(&header(0x041, 3)).unwrap().id(), "gfx1100");
        assert_eq!(parse_header(&header(0x02f | 0x300 | 0x800, 2)).unwrap().id(), "gfx906:sramecc-:xnack+");
        // v3: one bit each.
        assert_eq!(parse_header(&header(0x02f | 0x100 | 0x200, 1)).unwrap().id(), "gfx906:sramecc+:xnack+");
        // v6 generic targets carry a version in the top byte.
        let g = parse_header(&header(0x051 | (1 << 24), 4)).unwrap();
        assert_eq!((g.processor.as_str(), g.generic_version), ("gfx9-generic", Some(1)));
    }

    #[test]
    fn bad_headers_say_why() {
        assert_eq!(parse_header(b"\x7fEL"), Err(HeaderError::NotElf));
        assert_eq!(parse_header(&header(0x04c, 3)[..40]), Err(HeaderError::Truncated(40)));
        let mut x86 = header(0, 3);
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert_eq!(parse_header(&x86), Err(HeaderError::NotAmdgpu(62)));
        assert!(matches!(parse_header(&header(0x0fe, 3)), Err(HeaderError::UnknownMachine(0xfe, _))));
        let mut be = header(0x04c, 3);
        be[5] = 2;
        assert!(matches!(parse_header(&be), Err(HeaderError::NotAmdgpu(_))));
    }
}
