//! quarry: hermetic, reproducible OCI images and GPU-ready containers for
//! ROCm builds. See DESIGN.md for the data flow:
//! spec -> plan -> layers -> store -> export -> engine -> products.

pub mod build;
pub mod cli;
pub mod compress;
pub mod digest;
pub mod distro;
pub mod dockerfile;
pub mod elf;
pub mod engine;
pub mod export;
pub mod lockfile;
pub mod pack;
pub mod progress;
pub mod pypi;
pub mod registry;
pub mod rocm;
pub mod source;
pub mod spec;
pub mod store;
pub mod tarball;
pub mod wheel;
