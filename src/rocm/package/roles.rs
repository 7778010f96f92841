//! Which artifact goes to which package, decided by the artifact's name,
//! component and target. The tables follow the package split ROCm's own
//! build uses:
//!
//! | artifact | package |
//! |---|---|
//! | `lib`/`run` of a core component ([`CORE`], or any `sysdeps-*`), generic | `rocm-sdk-core` |
//! | `dev` of `core-hip`/`core-ocl` (headers hiprtc needs; `cmake/` left out) | `rocm-sdk-core` |
//! | `lib` of a math/ML library ([`LIBRARIES`]), generic | `rocm-sdk-libraries` (split) / every `rocm-sdk-libraries-<family>` (legacy) |
//! | `lib` of any component, one gfx target (split mode) | `rocm-sdk-device-<gfx>`, overlaid into the libraries package |
//! | `lib` of any component, one family (legacy mode) | `rocm-sdk-libraries-<family>` |
//! | generic `lib`, `run`, `dev`, `doc` of every component | `rocm-sdk-devel` (what a runtime package holds becomes a link to it) |
//!
//! Left out of every package: `dbg` and `test` components, and per-target
//! artifacts of components other than `lib`. Generic `lib`/`run` artifacts
//! of components in neither table ship in devel only.

use crate::rocm::artifacts::ArtifactName;

/// Components whose runtime files make up `rocm-sdk-core`.
pub const CORE: &[&str] = &[
    "amd-dbgapi",
    "amd-llvm",
    "aqlprofile",
    "base",
    "core-amdsmi",
    "core-hip",
    "core-hipinfo",
    "core-kpack",
    "core-ocl",
    "core-runtime",
    "hipify",
    "host-blas",
    "host-suite-sparse",
    "rocdecode",
    "rocgdb",
    "rocjpeg",
    "rocprofiler-sdk",
    "rocr-debug-agent",
    "sysdeps",
];

/// Math and ML libraries whose host code makes up `rocm-sdk-libraries`.
pub const LIBRARIES: &[&str] = &[
    "blas",
    "fft",
    "hipblaslt",
    "hipblasltprovider",
    "hipdnn",
    "miopen",
    "miopen-plugin",
    "miopenprovider",
    "rand",
    "rccl",
    "solver",
    "sparse",
];

/// Components that go into the devel package.
pub const DEVEL_COMPONENTS: &[&str] = &["lib", "run", "dev", "doc"];

fn is_core_name(name: &str) -> bool {
    CORE.contains(&name) || name.starts_with("sysdeps-")
}

/// A generic artifact that belongs in `rocm-sdk-core`.
pub fn is_core(a: &ArtifactName) -> bool {
    if !a.is_generic() {
        return false;
    }
    let runtime = is_core_name(&a.name) && matches!(a.component.as_str(), "lib" | "run");
    let hip_headers = matches!(a.name.as_str(), "core-hip" | "core-ocl") && a.component == "dev";
    runtime || hip_headers
}

/// A generic artifact holding library host code.
pub fn is_libraries(a: &ArtifactName) -> bool {
    a.is_generic() && LIBRARIES.contains(&a.name.as_str()) && a.component == "lib"
}

/// A per-target artifact holding device code (or, in legacy mode, a
/// family's code) for `target`.
pub fn is_target_code(a: &ArtifactName, target: &str) -> bool {
    a.target == target && a.component == "lib"
}

/// A generic artifact that belongs in the devel package.
pub fn is_devel(a: &ArtifactName) -> bool {
    a.is_generic() && DEVEL_COMPONENTS.contains(&a.component.as_str())
}

/// Paths of core artifacts left out of the core package (cmake files,
/// including redirects some core artifacts put in `lib/`): devel has them.
pub fn core_excludes(rel: &str) -> bool {
    rel.split('/').any(|c| c == "cmake")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> ArtifactName {
        ArtifactName::parse(s).unwrap()
    }

    #[test]
    fn table() {
        assert!(is_core(&n("core-runtime_lib_generic")));
        assert!(is_core(&n("amd-llvm_run_generic")));
        assert!(is_core(&n("sysdeps-zstd_lib_generic")));
        assert!(is_core(&n("core-hip_dev_generic")));
        assert!(!is_core(&n("core-runtime_dev_generic")));
        assert!(!is_core(&n("blas_lib_generic")));
        assert!(is_libraries(&n("blas_lib_generic")));
        assert!(!is_libraries(&n("blas_lib_gfx942")));
        assert!(!is_libraries(&n("blas_dev_generic")));
        assert!(is_target_code(&n("blas_lib_gfx942"), "gfx942"));
        assert!(!is_target_code(&n("blas_test_gfx942"), "gfx942"));
        assert!(is_devel(&n("blas_dev_generic")));
        assert!(is_devel(&n("core-hip_lib_generic")));
        assert!(!is_devel(&n("blas_dbg_generic")));
        assert!(!is_devel(&n("blas_lib_gfx942")));
        assert!(core_excludes("lib/cmake/hip/hip-config.cmake"));
        assert!(!core_excludes("lib/libamdhip64.so.7"));
    }
}
