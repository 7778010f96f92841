//! quarry: hermetic, reproducible OCI images and GPU-ready containers for
//! ROCm builds. ARCHITECTURE.md at the repository's root maps the modules
//! and the data flow: definition -> plan -> build (layers) -> cache ->
//! oci layout -> export -> engine -> products.

// The crates below, under the module names every path here uses.
pub use quarry_base::{diagnostics, epoch, progress, purl, read_once, splice, trace};
pub use quarry_engine::engine;
pub use quarry_formats::{code_objects, elf, export, layer, oci, platform, zip};
pub use quarry_image::{build, diff, dockerfile, plan, provenance, sbom};
pub use quarry_inputs::{definition, distro, pypi, rocm_artifacts, sandbox, source, tools};
pub use quarry_matrix::matrix;
pub use quarry_products::{kernel, rocm};
pub use quarry_store::{cache, registry, signing};
pub use quarry_wheel::wheel;

pub mod cli;
pub mod doctor;
pub mod verify;
