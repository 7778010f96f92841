//! `--strip`: remove the static symbol table and debug sections from an ELF
//! file, as `strip -s` does, without binutils (quarry brings what it needs).
//! The `object` crate's ELF builder reads the file, drops those sections
//! (none of them is loaded: the loader never reads them) and writes it back
//! with every loadable segment where it was; the result is verified before
//! it replaces the file.

use super::ElfError;
use object::build::elf::Builder;
use object::elf;
use std::path::Path;

/// True for the sections `strip -s` removes: the static symbol table and
/// its strings, and debug information, when not loaded.
fn strippable(name: &[u8], sh_type: u32, flags: u64) -> bool {
    if flags & elf::SHF_ALLOC.0 != 0 {
        return false;
    }
    sh_type == elf::SHT_SYMTAB.0
        || name == b".strtab"
        || name.starts_with(b".debug")
        || name.starts_with(b".zdebug")
        || name.starts_with(b".gnu.debuglto_")
        || name == b".gnu_debuglink"
}

/// Strip `path` in place; returns whether anything was removed.
pub fn strip_file(path: &Path) -> Result<bool, ElfError> {
    let data = std::fs::read(path).map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?;
    let stripped = strip_bytes(&data, path)?;
    let Some(bytes) = stripped else { return Ok(false) };
    std::fs::write(path, bytes).map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?;
    Ok(true)
}

/// The stripped image of `data`, or None when there is nothing to strip.
pub fn strip_bytes(data: &[u8], path: &Path) -> Result<Option<Vec<u8>>, ElfError> {
    let mut b = Builder::read(data).map_err(|e| ElfError::corrupt(path, format!("cannot be read to strip it: {e}")))?;
    let mut changed = false;
    for s in b.sections.iter_mut() {
        if strippable(&s.name, s.sh_type.0, s.sh_flags.0) {
            s.delete = true;
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    for sym in b.symbols.iter_mut() {
        sym.delete = true;
    }
    b.delete_orphans();
    let mut out = Vec::with_capacity(data.len());
    b.write(&mut out).map_err(|e| ElfError::corrupt(path, format!("cannot be written stripped: {e}")))?;
    super::verify_bytes(&out, path)?;
    Ok(Some(out))
}
