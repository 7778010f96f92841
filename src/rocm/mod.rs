//! ROCm builds: reading artifact directories (`artifacts`; their overlay
//! into a dist tree is `source::rocm`) and packaging them as
//! pip-installable packages (`package`, with the `rocm_sdk` Python sources).

pub mod artifacts;
pub mod package;
pub mod python;
