//! quarry: hermetic, reproducible OCI images and GPU-ready containers for
//! ROCm builds. ARCHITECTURE.md at the repository's root maps the modules
//! and the data flow: definition -> plan -> build (layers) -> cache ->
//! oci layout -> export -> engine -> products.

pub mod build;
pub mod cache;
pub mod cli;
pub mod code_objects;
pub mod definition;
pub mod diagnostics;
pub mod diff;
pub mod distro;
pub mod dockerfile;
pub mod doctor;
pub mod elf;
pub mod engine;
pub mod epoch;
pub mod export;
pub mod kernel;
pub mod layer;
pub mod matrix;
pub mod oci;
pub mod plan;
pub mod progress;
pub mod provenance;
pub mod purl;
pub mod pypi;
pub mod read_once;
pub mod registry;
pub mod rocm;
pub mod rocm_artifacts;
pub mod sandbox;
pub mod sbom;
pub mod signing;
pub mod source;
pub mod splice;
pub mod tools;
pub mod trace;
pub mod verify;
pub mod wheel;
pub mod zip;
