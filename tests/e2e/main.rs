//! The end-to-end tests, one binary: each module is one area, run against
//! the built `quarry` binary, the real Docker Engine and real inputs (see
//! docs/development.md). One binary links the crate once, not once per area;
//! `cargo test --test e2e AREA::` runs one area.

mod common;
mod wheel_fixtures;

mod build_core;
mod cache_prune;
mod cache_registry;
mod code_objects;
mod commands_doc;
mod debian_fidelity;
mod dockerfile_build;
mod dockerfiles;
mod elf_edit;
mod engine;
mod engines;
mod faults;
mod hip_extension;
mod kernel_build;
mod matrix;
mod matrix_emit;
mod matrix_merge;
mod pack_digests;
mod packages_images;
mod packages_local;
mod packages_scripts;
mod packaging_chain;
mod plan;
mod readme;
mod rebuild;
mod registry;
mod rocm_debian13;
mod rocm_flatten;
mod rocm_package;
mod rocm_package_debian;
mod rocm_package_patchelf;
mod rocm_sdk_contract;
mod rocm_test_image;
mod rocm_wheel;
mod sbom;
mod shipped_images;
mod shipped_locks;
mod signing;
mod threads;
mod toolchain;
mod wheel_abi3;
mod wheel_build;
mod wheel_check;
mod wheel_corpus;
mod wheel_merge;
mod wheel_repair;
mod wheel_repair_flags;
mod wheel_split;
