//! Build matrices ([`matrix`]): a matrix file's cells (images, kernels,
//! wheels over axes), the plan of which cells the cache lacks, one cell
//! run per scheduler task, the job description a scheduler takes (Slurm,
//! Kubernetes, GitHub Actions) and the collection of what the cells pushed.
//!
//! It sits on `quarry-products` and every crate below; only the command
//! line is above it.

pub mod matrix;

// The floors below under the names the module has always used.
use quarry_base::{epoch, progress, trace};
use quarry_engine::engine;
use quarry_formats::{code_objects, oci};
use quarry_image::{build, plan};
use quarry_inputs::{definition, pypi, tools};
use quarry_products::kernel;
use quarry_store::{cache, registry};
use quarry_wheel::wheel;
