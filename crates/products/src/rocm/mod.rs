//! ROCm builds packaged as pip-installable packages (`package`, with the
//! `rocm_sdk` Python sources). The artifact directories they start from are
//! read by [`crate::rocm_artifacts`] (below both this and `source::rocm`,
//! which overlays them into a dist tree).

pub mod package;
pub mod python;
