//! Native edits of an ELF file's dynamic entries — set or remove RPATH or
//! RUNPATH, set SONAME, replace or remove NEEDED names — made the way
//! patchelf 0.19 makes them, but returned as a [`Splice`]: the source
//! file's bytes, a few small overwrites and an appended tail. Nothing is
//! copied: the edited file can be streamed straight into an archive.
//!
//! Hand-written on `object`'s reader because no crate gives an edit in that
//! shape: `object::build::elf::Builder` (and `arwen` on top of it) parses
//! and rewrites the whole file in memory, `elb` edits a writable copy and
//! has no NEEDED renaming, `goblin` only reads.
//!
//! Strings that fit replace the old ones in place (NUL padded, only when
//! nothing else points into them); otherwise the string table grows into a
//! tail at the end of the file (see [`layout`]). A file this cannot edit
//! safely is refused with [`EditError::Unsupported`] and a reason, so the
//! caller can hand it to patchelf (the output is verified before it is
//! returned, as patchelf's is): 32-bit files, PN_XNUM program header
//! counts, both DT_RPATH and DT_RUNPATH, and more. A new entry goes into a
//! spare DT_NULL slot of `.dynamic`; with none spare, `.dynamic` moves into
//! the tail with one more entry (where patchelf 0.19.3 fails: "setSubstr:
//! write extends past end of section").

mod input;
mod layout;
mod strings;

use crate::elf::{verify_splice, ElfError, ElfInfo};
use crate::splice::{Part, Splice};
use input::{unsupported, Dyn, Input, Site};
use object::elf;
use object::pod::{bytes_of, bytes_of_slice};
use object::{I64, U64};
use std::path::{Path, PathBuf};
use strings::Strings;

/// The edits to make to one file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ElfEdits {
    /// Set DT_RPATH (forced: an existing DT_RUNPATH is retagged), as
    /// `patchelf --force-rpath --set-rpath`.
    pub set_rpath: Option<String>,
    /// Set DT_RUNPATH (an existing DT_RPATH is retagged), as `patchelf --set-rpath`.
    pub set_runpath: Option<String>,
    /// Set DT_SONAME (shared libraries only; a no-op elsewhere, as in patchelf).
    pub set_soname: Option<String>,
    /// Rename DT_NEEDED entries and the matching `.gnu.version_r` files.
    pub replace_needed: Vec<(String, String)>,
    /// Remove DT_NEEDED entries (`.gnu.version_r` is left alone, as patchelf does).
    pub remove_needed: Vec<String>,
    /// Remove DT_RPATH and DT_RUNPATH.
    pub remove_rpath: bool,
}

/// An edited file.
#[derive(Debug)]
pub struct Edited {
    pub splice: Splice,
    /// The string table grew into a tail at the end of the file.
    pub grew: bool,
    /// The facts of the edited file, read back from the splice after the
    /// same integrity checks as [`crate::elf::verify`].
    pub info: ElfInfo,
}

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("`{path}` cannot be edited natively: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error(transparent)]
    Elf(#[from] ElfError),
}

/// Make `edits` to the ELF file at `src`. The output depends only on the
/// input bytes and the edits.
pub fn edit(src: &Path, edits: &ElfEdits) -> Result<Edited, EditError> {
    let input = Input::read(src)?;
    let e = input.endian;
    let mut dynamic = input.dynamic.clone();
    // `.dynamic` had no spare slot for a new entry and moves into the tail.
    let mut dynamic_moves = false;
    let mut strings = Strings::new(&input);
    let mut verneed_writes: Vec<(u64, u32)> = Vec::new();

    let path_edit = match (&edits.set_rpath, &edits.set_runpath) {
        (Some(_), Some(_)) => return Err(unsupported(src, "both an RPATH and a RUNPATH were asked for")),
        (Some(_), _) | (_, Some(_)) if edits.remove_rpath => {
            return Err(unsupported(src, "both setting and removing the search path were asked for"))
        }
        (Some(r), None) => Some((r, elf::DT_RPATH)),
        (None, Some(r)) => Some((r, elf::DT_RUNPATH)),
        (None, None) => None,
    };
    if let Some((new, tag)) = path_edit {
        let existing = match (input.find(&dynamic, elf::DT_RPATH), input.find(&dynamic, elf::DT_RUNPATH)) {
            (Some(_), Some(_)) => return Err(unsupported(src, "it has both DT_RPATH and DT_RUNPATH")),
            (a, b) => a.or(b),
        };
        set_string(&input, &mut dynamic, &mut dynamic_moves, &mut strings, existing, tag, new)?;
    }
    if let Some(new) = &edits.set_soname {
        if input.header.e_type.get(e) == elf::ET_DYN {
            let existing = input.find(&dynamic, elf::DT_SONAME);
            set_string(&input, &mut dynamic, &mut dynamic_moves, &mut strings, existing, elf::DT_SONAME, new)?;
        }
    }
    // Each entry is renamed at most once, by the first pair naming it (as
    // patchelf's one pass over the entries): an entry renamed already
    // points into the grown table, not at an old name.
    let mut renamed_files: Vec<u64> = Vec::new();
    for (old, new) in &edits.replace_needed {
        let mut at = None;
        for (i, d) in dynamic.iter_mut().enumerate() {
            if input.tag(d) == elf::DT_NULL {
                break;
            }
            // An entry past the input's (a new one, `.dynamic` grown) is not the input's.
            let untouched = input.dynamic.get(i).is_some_and(|orig| bytes_of(d) == bytes_of(orig));
            if untouched && input.tag(d) == elf::DT_NEEDED && input.string_at(d.d_val.get(e))? == old.as_bytes() {
                let to = *at.get_or_insert_with(|| strings.place(new, None));
                d.d_val = U64::new(e, to);
                strings.repoint(Site::Dyn(i), to);
            }
        }
        let files: Vec<(u64, u64)> = input
            .refs
            .iter()
            .filter_map(|&(s, r)| match s {
                Site::VerneedFile(entry) => Some((entry, r)),
                _ => None,
            })
            .collect();
        for (entry, r) in files {
            if renamed_files.contains(&entry) || input.string_at(r)? != old.as_bytes() {
                continue;
            }
            renamed_files.push(entry);
            if !input.verneed_linked {
                return Err(unsupported(src, ".gnu.version_r names a string table other than .dynstr"));
            }
            let to = *at.get_or_insert_with(|| strings.place(new, None));
            let to32 = u32::try_from(to).map_err(|_| unsupported(src, "the string table passes 4 GiB"))?;
            verneed_writes.push((entry + 4, to32)); // vn_file follows vn_version and vn_cnt
            strings.repoint(Site::VerneedFile(entry), to);
        }
    }

    // Removals last: the entries after a removed one move up, DT_NULL fills the end.
    let removed = |d: &Dyn| {
        let tag = input.tag(d);
        (edits.remove_rpath && (tag == elf::DT_RPATH || tag == elf::DT_RUNPATH))
            || (tag == elf::DT_NEEDED
                && input.string_at(d.d_val.get(e)).is_ok_and(|n| edits.remove_needed.iter().any(|r| r.as_bytes() == n)))
    };
    let end = dynamic.iter().position(|d| input.tag(d) == elf::DT_NULL).unwrap_or(dynamic.len());
    let kept: Vec<Dyn> = dynamic[..end].iter().filter(|d| !removed(d)).copied().collect();
    if kept.len() < end {
        dynamic.fill(Dyn { d_tag: I64::new(e, elf::DT_NULL), d_val: U64::new(e, 0) });
        dynamic[..kept.len()].copy_from_slice(&kept);
    }

    let mut splice = Splice::file(src).map_err(|source| ElfError::Io { path: src.to_path_buf(), source })?;
    let grew = !strings.appended.is_empty() || dynamic_moves;
    let mut strtab_offset = input.strtab_offset;
    if grew {
        let dynstr_len = (strings.current.len() + strings.appended.len()) as u64;
        let dynamic_len = dynamic_moves.then_some(size_of_val(dynamic.as_slice()) as u64);
        let layout = layout::place(&input, dynamic_len, dynstr_len)?;
        set_value(&input, &mut dynamic, elf::DT_STRTAB, layout.dynstr_vaddr);
        set_value(&input, &mut dynamic, elf::DT_STRSZ, dynstr_len);
        let mut header = input.header;
        header.e_phoff = U64::new(e, layout.phoff);
        header.e_phnum = object::U16::new(e, layout.phdrs.len() as u16);
        splice.overwrite(0, bytes_of(&header).to_vec());
        let source = splice.source().expect("a file splice has a source");
        splice.push(Part::Zeros(layout.padding));
        if layout.phdrs_in_tail {
            splice.push(Part::Bytes(bytes_of_slice(&layout.phdrs).into()));
            splice.push(Part::Zeros(layout.phdrs_padding));
        } else {
            splice.overwrite(layout.phoff, bytes_of_slice(&layout.phdrs).to_vec());
        }
        if let Some((offset, vaddr)) = layout.dynamic_at {
            splice.push(Part::Zeros(layout.dynamic_padding));
            splice.push(Part::Bytes(bytes_of_slice(&dynamic).into()));
            if let Some(i) = input.sections.iter().position(|s| s.sh_type.get(e) == elf::SHT_DYNAMIC) {
                let mut section = input.sections[i];
                section.sh_offset = U64::new(e, offset);
                section.sh_addr = U64::new(e, vaddr);
                section.sh_size = U64::new(e, size_of_val(dynamic.as_slice()) as u64);
                let at = input.header.e_shoff.get(e) + i as u64 * u64::from(input.header.e_shentsize.get(e));
                splice.overwrite(at, bytes_of(&section).to_vec());
            }
        }
        let len = input.dynstr.len() as u64;
        splice.push(Part::File { source, offset: input.strtab_offset, len });
        splice.push(Part::Bytes(std::mem::take(&mut strings.appended).into()));
        if let Some(i) = input.dynstr_section {
            let mut section = input.sections[i];
            section.sh_offset = U64::new(e, layout.dynstr_offset);
            section.sh_addr = U64::new(e, layout.dynstr_vaddr);
            section.sh_size = U64::new(e, dynstr_len);
            let at = input.header.e_shoff.get(e) + i as u64 * u64::from(input.header.e_shentsize.get(e));
            splice.overwrite(at, bytes_of(&section).to_vec());
        }
        strtab_offset = layout.dynstr_offset;
    }
    for (at, bytes) in std::mem::take(&mut strings.writes) {
        splice.overwrite(strtab_offset + at, bytes);
    }
    for (at, value) in verneed_writes {
        splice.overwrite(at, bytes_of(&object::U32::<_>::new(e, value)).to_vec());
    }
    if !dynamic_moves && bytes_of_slice(&dynamic) != bytes_of_slice(&input.dynamic) {
        splice.overwrite(input.dyn_offset, bytes_of_slice(&dynamic).to_vec());
    }
    let edited = PathBuf::from(format!("{} (as edited)", src.display()));
    let info = verify_splice(&splice, &edited)?;
    Ok(Edited { splice, grew, info })
}

/// Point the entry `existing` (or a new entry with `tag`) at `new`.
fn set_string(
    input: &Input,
    dynamic: &mut Vec<Dyn>,
    moves: &mut bool,
    strings: &mut Strings,
    existing: Option<usize>,
    tag: elf::DynamicTag,
    new: &str,
) -> Result<(), EditError> {
    let e = input.endian;
    let i = match existing {
        Some(i) => {
            let old = dynamic[i].d_val.get(e);
            dynamic[i].d_tag = I64::new(e, tag);
            if input.string_at(old)? == new.as_bytes() {
                return Ok(());
            }
            let at = strings.place(new, Some((old, Site::Dyn(i))));
            dynamic[i].d_val = U64::new(e, at);
            i
        }
        None => {
            let first_null = dynamic.iter().position(|d| input.tag(d) == elf::DT_NULL).unwrap_or(dynamic.len());
            let at = strings.place(new, None);
            let entry = Dyn { d_tag: I64::new(e, tag), d_val: U64::new(e, at) };
            if dynamic.len() >= first_null + 2 {
                dynamic[first_null] = entry;
            } else {
                // No spare slot (one DT_NULL must stay): `.dynamic` grows and moves.
                dynamic.insert(first_null, entry);
                if dynamic.last().is_none_or(|d| input.tag(d) != elf::DT_NULL) {
                    dynamic.push(Dyn { d_tag: I64::new(e, elf::DT_NULL), d_val: U64::new(e, 0) });
                }
                *moves = true;
            }
            first_null
        }
    };
    strings.repoint(Site::Dyn(i), dynamic[i].d_val.get(e));
    Ok(())
}

fn set_value(input: &Input, dynamic: &mut [Dyn], tag: elf::DynamicTag, value: u64) {
    if let Some(i) = input.find(dynamic, tag) {
        dynamic[i].d_val = U64::new(input.endian, value);
    }
}

#[cfg(test)]
mod tests;
