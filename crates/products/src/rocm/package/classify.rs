//! What kind of file the reference packager takes a file for (it asks
//! `file(1)`; quarry reads the ELF header natively): the kind decides
//! whether a file is a shared library (shipped only under its SONAME), an
//! executable (a symlink to it becomes a launcher) and whether it gets an
//! RPATH.

use super::PackageError;
use std::path::Path;

/// EM_X86_64: the host architecture of the `linux_x86_64` wheels.
const EM_X86_64: u16 = 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `.txt`, `.h`, `.hpp`: never looked into.
    Text,
    /// `.co`, `.hsaco`: GPU code objects (ELF, but never patched).
    CodeObject,
    Archive,
    Executable,
    SharedObject,
    Other,
}

#[derive(Debug, Clone)]
pub struct Facts {
    pub kind: Kind,
    pub soname: Option<String>,
    /// DT_RPATH, else DT_RUNPATH, as built.
    pub built_rpath: Option<String>,
    /// A dynamically linked x86-64 ELF file: patchelf can give it an RPATH
    /// (static executables have no dynamic section to hold one).
    pub patchable: bool,
}

/// Classify the file at `path` (named `name`, which decides by suffix first).
pub fn classify(path: &Path, name: &str) -> Result<Facts, PackageError> {
    let mut f = Facts { kind: Kind::Other, soname: None, built_rpath: None, patchable: false };
    let by_suffix = |s: &str| name.ends_with(s);
    if by_suffix(".txt") || by_suffix(".h") || by_suffix(".hpp") {
        f.kind = Kind::Text;
        return Ok(f);
    }
    if by_suffix(".hsaco") || by_suffix(".co") {
        f.kind = Kind::CodeObject;
        return Ok(f);
    }
    if by_suffix(".lib") {
        f.kind = Kind::Archive;
        return Ok(f);
    }
    if !crate::elf::is_elf(path) {
        let mut magic = [0u8; 8];
        if let Ok(mut file) = std::fs::File::open(path) {
            let _ = std::io::Read::read(&mut file, &mut magic);
        }
        f.kind = if &magic == b"!<arch>\n" {
            Kind::Archive
        } else if by_suffix(".exe") {
            Kind::Executable
        } else {
            Kind::Other
        };
        return Ok(f);
    }
    let info = crate::elf::read(path)?;
    // ET_EXEC, or ET_DYN with an interpreter and no SONAME (a PIE program):
    // what file(1) calls an executable; other ET_DYN files are shared objects.
    f.kind = match info.e_type {
        2 => Kind::Executable,
        3 if info.interpreter.is_some() && info.soname.is_none() => Kind::Executable,
        3 => Kind::SharedObject,
        _ => Kind::Other,
    };
    if by_suffix(".exe") {
        f.kind = Kind::Executable;
    }
    f.soname = info.soname.clone();
    f.built_rpath = info.rpath.clone().or(info.runpath.clone());
    f.patchable = info.machine == EM_X86_64
        && matches!(f.kind, Kind::Executable | Kind::SharedObject)
        && (info.e_type == 3 || info.interpreter.is_some());
    Ok(f)
}
