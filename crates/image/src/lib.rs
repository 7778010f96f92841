//! Images: the [`plan`] of a definition (its layers, their cache keys and
//! pins), the [`build`] that makes each layer or takes it from the cache
//! and writes the OCI layout, what the image holds ([`sbom`]) and what it
//! was made from ([`provenance`]), the equivalent [`dockerfile`], and the
//! comparison of two images or locks ([`diff`]).
//!
//! It sits on `quarry-wheel` (an SBOM lists the wheels an image holds) and
//! the crates below. Within it, `build` uses `provenance`, which uses
//! `sbom`, which uses `plan`.

pub mod build;
pub mod diff;
pub mod dockerfile;
pub mod plan;
pub mod provenance;
pub mod sbom;

// The floors below under the names the modules have always used.
use quarry_base::{epoch, progress, purl, trace};
use quarry_engine::engine;
use quarry_formats::{code_objects, elf, layer, oci};
use quarry_inputs::{definition, distro, pypi, source};
use quarry_store::{cache, registry, signing};
use quarry_wheel::wheel;
