//! ROCm builds: artifact directories -> the dist tree (`flatten`) and, later,
//! -> pip-installable packages.

pub mod artifacts;
pub mod flatten;
pub mod package;
pub mod python;
