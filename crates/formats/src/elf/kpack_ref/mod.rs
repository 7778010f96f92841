//! The host-binary half of a device split ("kpack"): a HIP binary whose GPU
//! code moves out to `.kpack` archives is rewritten so the HIP runtime
//! fetches its code objects from there instead of from `.hip_fatbin`.
//!
//! What the runtime expects (CLR `__hipRegisterFatBinary` and
//! `StatCO::DigestFatBinary`, the kpack loader): each
//! `__CudaFatBinaryWrapper` in `.hipFatBinSegment` carries the magic HIPK
//! instead of HIPF, its `binary` pointer points at a MessagePack marker
//! (`{"kpack_search_paths": [..], "kernel_name": ".."}`, see [`KpackRef`])
//! and its `dummy1` holds the wrapper's index, which the loader appends to
//! `kernel_name` (`name#i`) to find that wrapper's code objects.
//!
//! So [`kpack_host`] (for x86-64 ELF64: shared libraries, PIE and non-PIE
//! executables):
//! - adds `.rocm_kpack_ref`, the marker, in a read-only PT_LOAD of its own
//!   above every other segment;
//! - rewrites every wrapper: magic, pointer (in place *and* in the RELA
//!   entry that sets it at load time; a RELR slot's in-place value is its
//!   addend; a non-PIE file has only the in-place value) and index;
//! - drops `.hip_fatbin`'s whole pages from the file (the section becomes
//!   SHT_NOBITS; the PT_LOAD holding it is split into the part before, the
//!   pages as memory only, and the part after, bss included), and zeroes
//!   the partial pages left;
//! - writes one new `.shstrtab` and one new section header table at the end
//!   in place of the old ones, and moves the program header table at most
//!   once (see [`layout::plan`]).
//!
//! That is the middle layout, for a default link. A file linked with
//! [`FATBIN_LAST_LINK_SCRIPT`] has `.hip_fatbin` last, in a PT_LOAD of its
//! own, and takes the tail layout instead (`tail`): the fatbin's PT_LOAD
//! becomes the marker's, the sections after it move up, the symbols in it
//! and the GNU build-id are recomputed, so the output depends on the host
//! parts only and shard builds for different GPU targets can be proved
//! identical. Which layout was taken is [`Kpacked::layout`].
//!
//! ROCm's reference rewrite (rocm-kpack's Python `kpack_offload_binary`) is
//! the model, less its defects: it zeroes a non-PIE file's pointer, ignores
//! RELR, drops memory-only tails of the split segment, leaves the old
//! section table, `.shstrtab`, marker copy and sometimes program header
//! table as dead bytes, and holds the whole file in memory. Here the result
//! is a [`Splice`] of the source: only headers, tables, `.hipFatBinSegment`
//! and the relocation tables are read, and the output is verified with
//! [`verify_splice`] before it is returned. The same input gives the same bytes.

mod build_id;
mod layout;
mod raw;
mod read;
mod tail;

pub use raw::{HIPF_MAGIC, HIPK_MAGIC};

use crate::elf::{verify_splice, ElfError};
use crate::splice::{Part, Source, Splice};
use layout::{Table, MARKER_NAME};
use raw::{Phdr, Shdr, WRAPPER_LEN};
use read::{Input, Reloc};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What is wrong with a file asked to be kpack'd.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KpackProblem {
    #[error("only little-endian x86-64 ELF64 executables and shared libraries can be kpack'd ({0})")]
    NotX86_64(String),
    #[error("it has no .hip_fatbin section")]
    NoFatbin,
    #[error(".hip_fatbin is SHT_NOBITS: the file was kpack'd already")]
    AlreadyKpacked,
    #[error("it has .hip_fatbin but no .hipFatBinSegment")]
    NoSegment,
    #[error(".hipFatBinSegment is {0} bytes, not a multiple of the 24-byte wrapper")]
    WrapperSize(u64),
    #[error("wrapper {index} has magic {magic:#010x}, neither HIPF (0x48495046) nor HIPK (0x4b504948)")]
    UnknownMagic { index: usize, magic: u32 },
    #[error("wrapper {index} has version {version}; the HIP runtime accepts only 1")]
    Version { index: usize, version: u32 },
    #[error("wrapper {index} points at {pointer:#x}, outside .hip_fatbin ({start:#x}..{end:#x})")]
    PointerOutside { index: usize, pointer: u64, start: u64, end: u64 },
    #[error("wrapper {index}'s pointer cannot be resolved: {reason}")]
    Unresolved { index: usize, reason: String },
    #[error("the marker is {0} bytes; the HIP runtime reads at most 65536")]
    MarkerTooLarge(usize),
    #[error("{0}")]
    Unsupported(String),
}

/// A host binary's fat-binary layout, read from its headers and small tables only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatBinary {
    /// `.hip_fatbin`'s file offset, size and address.
    pub fatbin_offset: u64,
    pub fatbin_size: u64,
    pub fatbin_vaddr: u64,
    /// Per `__CudaFatBinaryWrapper` in `.hipFatBinSegment` (in order): the
    /// offset within `.hip_fatbin` of the bundle its pointer points at, as
    /// the file's relocations set it (RELA: RELATIVE addend or R_X86_64_64
    /// symbol value plus addend; RELR or non-PIE: the in-place value).
    pub wrappers: Vec<u64>,
    /// Linked with `.hip_fatbin` last ([`FATBIN_LAST_LINK_SCRIPT`]): the
    /// rewrite takes the tail layout, which depends on the host parts only.
    pub linked_last: bool,
}

/// None when the file has no `.hip_fatbin`. A file kpack'd already (its
/// `.hip_fatbin` is SHT_NOBITS) is [`KpackProblem::AlreadyKpacked`].
pub fn read_fat_binary(path: &Path) -> Result<Option<FatBinary>, ElfError> {
    let Some(input) = Input::read(path)? else {
        return Ok(None);
    };
    let fat = input.sections[input.fatbin];
    let end = fat.sh_addr + fat.sh_size;
    let mut wrappers = Vec::new();
    for (index, w) in input.wrappers.iter().enumerate() {
        if !(fat.sh_addr..end).contains(&w.target) {
            let problem = KpackProblem::PointerOutside { index, pointer: w.target, start: fat.sh_addr, end };
            return Err(ElfError::Kpack { path: path.to_path_buf(), problem });
        }
        wrappers.push(w.target - fat.sh_addr);
    }
    let linked_last = tail::fatbin_last(&input).is_some();
    Ok(Some(FatBinary {
        fatbin_offset: fat.sh_offset,
        fatbin_size: fat.sh_size,
        fatbin_vaddr: fat.sh_addr,
        wrappers,
        linked_last,
    }))
}

/// The marker's content, which the kpack loader reads through each wrapper's pointer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KpackRef {
    /// `.kpack` archive paths, relative to the binary's directory; the
    /// loader replaces `@GFXARCH@` with each candidate target.
    pub kpack_search_paths: Vec<String>,
    /// The binary's path below its package root (the archives' TOC key).
    pub kernel_name: String,
}

impl KpackRef {
    /// The MessagePack map, keys in field order, strings as str.
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a struct of strings always encodes")
    }
}

/// A rewritten host binary and where its parts went.
#[derive(Debug)]
pub struct Kpacked {
    pub splice: Splice,
    /// The marker's address (each wrapper's pointer) and file offset.
    pub marker_vaddr: u64,
    pub marker_offset: u64,
    /// Bytes of `.hip_fatbin` left out of the file: its whole pages in the
    /// middle layout, all of it in the tail layout.
    pub removed: u64,
    /// The program header table moved to the end of the file, or into the
    /// first fatbin page (executables), rather than growing in place
    /// (never in the tail layout).
    pub table_moved: bool,
    /// Which layout the rewrite took.
    pub layout: KpackLayout,
}

/// The two layouts of the rewrite, chosen from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KpackLayout {
    /// `.hip_fatbin` sits among the host sections (a default link): its
    /// whole pages leave the file, the PT_LOAD holding it is split, the
    /// marker goes above every segment (see `layout::plan`).
    Middle,
    /// `.hip_fatbin` comes last (linked with [`FATBIN_LAST_LINK_SCRIPT`]):
    /// its PT_LOAD becomes the marker's and the output depends on the host
    /// parts only, never on the fatbin's size or content (see `tail`).
    Tail,
}

/// A GNU ld script (pass it as `-Wl,-T,file`) that puts `.hip_fatbin`
/// after `.bss`, in a read-only PT_LOAD of its own: last in memory and last
/// among the file's loaded bytes (only the non-alloc sections and the
/// section header table follow it).
///
/// Why: shard builds (one project compiled for different GPU targets on
/// different machines) are merged, and their host parts must be proved
/// identical after the rewrite. In a default link `.hip_fatbin` sits after
/// `.rodata`, before `.eh_frame_hdr` and `.data`, so its size shifts every
/// later address and shard hosts can never be identical. Linked with this
/// script, a file takes the [`KpackLayout::Tail`] rewrite, whose output
/// depends on the host parts only.
pub const FATBIN_LAST_LINK_SCRIPT: &str = "\
SECTIONS
{
  .hip_fatbin ALIGN(0x1000) : { KEEP(*(.hip_fatbin)) }
}
INSERT AFTER .bss;
";

/// The rewritten host binary, as a splice over the source.
pub fn kpack_host(path: &Path, marker: &KpackRef) -> Result<Splice, ElfError> {
    kpack_host_layout(path, marker).map(|k| k.splice)
}

/// [`kpack_host`], with where the rewrite put things.
///
/// The layout is chosen from the file: [`KpackLayout::Tail`] when
/// `.hip_fatbin` comes last (linked with [`FATBIN_LAST_LINK_SCRIPT`]; see
/// `tail` for the exact conditions), [`KpackLayout::Middle`] otherwise.
pub fn kpack_host_layout(path: &Path, marker: &KpackRef) -> Result<Kpacked, ElfError> {
    let problem = |problem| ElfError::Kpack { path: path.to_path_buf(), problem };
    let bytes = marker.to_msgpack();
    if bytes.len() > 65536 {
        return Err(problem(KpackProblem::MarkerTooLarge(bytes.len())));
    }
    let input = Input::read(path)?.ok_or_else(|| problem(KpackProblem::NoFatbin))?;
    let io = |source| ElfError::Io { path: path.to_path_buf(), source };
    let whole = Splice::file(path).map_err(io)?;
    if whole.len() != input.len {
        return Err(io(std::io::Error::other("the file changed while it was read")));
    }
    let source = whole.source().expect("a file splice has a source");
    let kpacked = match tail::fatbin_last(&input) {
        Some(load) => tail::rewrite(&input, load, &bytes, source)?,
        None => middle(&input, bytes, source)?,
    };
    let edited = PathBuf::from(format!("{} (kpack'd)", path.display()));
    verify_splice(&kpacked.splice, &edited)?;
    Ok(kpacked)
}

/// The rewrite of a file whose `.hip_fatbin` sits among the host sections
/// (see [`layout::plan`]).
fn middle(input: &Input, bytes: Vec<u8>, source: Arc<Source>) -> Result<Kpacked, ElfError> {
    let plan = layout::plan(input, bytes.len() as u64)?;
    let file = |offset: u64, end: u64| Part::File { source: source.clone(), offset, len: end - offset };

    let mut out = Splice::default();
    out.push(file(0, plan.removed.start));
    out.push(file(plan.removed.end, plan.keep));
    out.push(Part::Zeros(plan.marker_offset - out.len()));
    out.push(Part::Bytes(bytes.into()));
    let table = table_bytes(&plan.phdrs);
    if let Table::Tail { offset, .. } = plan.table {
        out.push(Part::Zeros(offset - out.len()));
        out.push(Part::Bytes(table.clone().into()));
    }
    debug_assert_eq!(out.len(), plan.shstrtab_offset);
    let mut names = input.shstrtab.clone();
    names.extend_from_slice(MARKER_NAME);
    out.push(Part::Bytes(names.into()));
    out.push(Part::Zeros(plan.shoff - out.len()));
    let mut sht = Vec::with_capacity(plan.sections.len() * 64);
    plan.sections.iter().for_each(|s: &Shdr| s.write(&mut sht));
    out.push(Part::Bytes(sht.into()));
    debug_assert_eq!(out.len(), plan.len);

    for r in &plan.zero {
        out.overwrite(plan.out(r.start), vec![0; (r.end - r.start) as usize]);
    }
    let mut header = input.header;
    (header.e_phoff, header.e_phnum) = (plan.phoff, plan.phdrs.len() as u16);
    (header.e_shoff, header.e_shnum) = (plan.shoff, plan.sections.len() as u16);
    out.overwrite(0, header.write_into(&input.header_bytes));
    if !matches!(plan.table, Table::Tail { .. }) {
        out.overwrite(plan.phoff, table);
    }
    rewrite_wrappers(&mut out, input, plan.marker_vaddr, |at| plan.out(at));
    Ok(Kpacked {
        splice: out,
        marker_vaddr: plan.marker_vaddr,
        marker_offset: plan.marker_offset,
        removed: plan.removed.end - plan.removed.start,
        table_moved: plan.table != Table::InPlace,
        layout: KpackLayout::Middle,
    })
}

/// Rewrite every wrapper (magic HIPK, pointer at `marker_vaddr`, index in
/// `dummy1`) and the RELA entry setting its pointer, if any, into a
/// RELATIVE one to the marker. `out_of` maps a source offset to the output.
fn rewrite_wrappers(out: &mut Splice, input: &Input, marker_vaddr: u64, out_of: impl Fn(u64) -> u64) {
    let segment = out_of(input.sections[input.segment].sh_offset);
    for (i, w) in input.wrappers.iter().enumerate() {
        let mut wrapper = Vec::with_capacity(WRAPPER_LEN as usize);
        wrapper.extend_from_slice(&HIPK_MAGIC.to_le_bytes());
        wrapper.extend_from_slice(&1u32.to_le_bytes());
        wrapper.extend_from_slice(&marker_vaddr.to_le_bytes());
        wrapper.extend_from_slice(&(i as u64).to_le_bytes());
        out.overwrite(segment + i as u64 * WRAPPER_LEN, wrapper);
        if let Reloc::Rela { entry } = w.reloc {
            // r_info: R_X86_64_RELATIVE, no symbol; r_addend: the marker.
            let mut rela = u64::from(raw::R_X86_64_RELATIVE).to_le_bytes().to_vec();
            rela.extend_from_slice(&marker_vaddr.to_le_bytes());
            out.overwrite(out_of(entry) + 8, rela);
        }
    }
}

fn table_bytes(phdrs: &[Phdr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(phdrs.len() * 56);
    phdrs.iter().for_each(|p| p.write(&mut out));
    out
}

#[cfg(test)]
mod tests;
