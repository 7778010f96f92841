//! What quarry builds from: parsed image definitions ([`definition`]), the
//! content of a layer's sources ([`source`]: files, directories, wheels,
//! ROCm artifacts read through [`rocm_artifacts`]), Debian and Ubuntu
//! archives and the trees their packages make ([`distro`], whose
//! maintainer scripts run in the engine-less [`sandbox`]), PyPI
//! ([`pypi`]) and the pinned programs quarry fetches and runs ([`tools`]).
//!
//! It sits on `quarry-store`, `quarry-formats` and `quarry-base`: it reads
//! and fetches, verified and cached, and runs no container (the engine is
//! above it).

pub mod definition;
pub mod distro;
pub mod pypi;
pub mod rocm_artifacts;
pub mod sandbox;
pub mod source;
pub mod tools;

// The floors below under the names the modules above have always used.
use quarry_base::{progress, trace};
use quarry_formats::{elf, layer, oci, platform};
use quarry_store::cache;
