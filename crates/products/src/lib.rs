//! What users build besides images: GPU kernels compiled in a container for
//! a target list, cached and checked ([`kernel`]), and a ROCm build
//! flattened into a dist tree and packaged for pip ([`rocm`]).
//!
//! It sits on `quarry-image` (each product's provenance) and the crates
//! below; `kernel` and `rocm` do not use each other.

pub mod kernel;
pub mod rocm;

// The floors below under the names the modules have always used.
use quarry_base::{progress, splice, trace};
use quarry_engine::engine;
use quarry_formats::{code_objects, elf, layer, oci, zip};
use quarry_image::provenance;
use quarry_inputs::{rocm_artifacts, tools};
use quarry_store::{cache, signing};
use quarry_wheel::wheel;
