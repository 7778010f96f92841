//! Containers: the Docker Engine API as Docker and Podman serve it
//! ([`engine`]: endpoints, loading layouts, step layers, runs with AMD GPUs
//! passed through, cleanup after signals and `gc`).
//!
//! It sits on `quarry-inputs` (a step's definition) and the crates below;
//! nothing under it starts a container.

pub mod engine;

// The floors below under the names the module has always used.
use quarry_formats::{code_objects, export, layer, oci};
use quarry_inputs::definition;
use quarry_store::registry;
