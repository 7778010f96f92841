//! Python wheels ([`wheel`]): the format (archive, RECORD, metadata), the
//! checks (manylinux policy, the Stable ABI, GPU target coverage), repair
//! (vendoring libraries, as auditwheel does), the split of a ROCm wheel
//! into per-GPU-target wheels and their merge in ROCm's kpack layout, and
//! wheel builds from sdists in containers.
//!
//! It sits on `quarry-engine` (builds and repairs run in containers) and
//! the crates below; it knows no image plan.

pub mod wheel;

// The floors below under the names the module has always used.
use quarry_base::{epoch, progress, purl, splice, trace};
use quarry_engine::engine;
use quarry_formats::{code_objects, elf, layer, oci, zip};
use quarry_inputs::{pypi, tools};
use quarry_store::cache;
