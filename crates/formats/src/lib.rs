//! The file formats quarry reads and writes, knowing nothing of where the
//! files come from or what a build wants of them: OCI digests, blob
//! directories and image layouts ([`oci`]); layer trees, deterministic tars,
//! compression and safe extraction ([`layer`]); OCI and docker archives
//! ([`export`]); the deterministic parallel zip engine ([`zip`]); ELF
//! reading, verification and native edits ([`elf`]); AMD GPU code objects,
//! offload bundles, `.kpack` archives and target ids ([`code_objects`]);
//! the platform an image is for and every name of its architecture
//! ([`platform`]).
//!
//! It sits on `quarry-base` only; the modules below may use each other as
//! ARCHITECTURE.md's floors say (`layer` and `export` on `oci`, none on
//! `elf` or `code_objects`).

pub mod code_objects;
pub mod elf;
pub mod export;
pub mod layer;
pub mod oci;
pub mod platform;
pub mod zip;

// The ground floor under the names the modules above have always used.
use quarry_base::{read_once, splice, trace};
