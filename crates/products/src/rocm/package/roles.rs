//! Which artifact goes to which package, and the per-package tables of the
//! reference packager (ROCm's `build_python_packages.py`; see "Packaging
//! ROCm for pip" in docs/rocm-packaging.md):
//!
//! | package | artifacts |
//! |---|---|
//! | `rocm-sdk-core` | `lib`/`run` of [`CORE`]; `lib` of `rocjitsu-hotswap`; `dev` of `core-hip`/`core-ocl`; minus [`core_excludes`] |
//! | `rocm-profiler` | `lib`/`run` of `rocprofiler-compute`/`-systems`, only [`profiler_paths`] |
//! | `rocm-sdk-libraries[-<family>]` | `lib` of [`LIBRARIES`], generic (legacy: and the family's) |
//! | `rocm-sdk-device-<T>` (split) | `lib` of [`LIBRARIES`] but `rpp`, target T (xnack variants merged) |
//! | `rocm-sdk-devel` | every component of a name the runtime packages used, plus [`DEVEL_EXTRA`], minus the profiler's; split: no `test`, generic only |

use crate::rocm_artifacts::ArtifactName;

/// Components whose `lib` and `run` make up `rocm-sdk-core`.
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
    "hipfile",
    "hipify",
    "host-blas",
    "host-suite-sparse",
    "rocdecode",
    "rocgdb",
    "rocjpeg",
    "rocprofiler-sdk",
    "rocr-debug-agent",
    "sysdeps",
    "sysdeps-amd-mesa",
    "sysdeps-expat",
    "sysdeps-gmp",
    "sysdeps-mpfr",
    "sysdeps-ncurses",
    "sysdeps-util-linux",
    "wsl-rocdxg",
];

/// Profiler applications (`rocm-profiler`; never in devel).
pub const PROFILER: &[&str] = &["rocprofiler-compute", "rocprofiler-systems"];

/// Math and ML libraries: `rocm-sdk-libraries` (host) and device packages.
pub const LIBRARIES: &[&str] = &[
    "blas",
    "fft",
    "hipdnn",
    "miopen",
    "miopenprovider",
    "hipblasltprovider",
    "hipkernelprovider",
    "rand",
    "rccl",
    "rpp",
];

/// Header-only and build-only components added to devel.
pub const DEVEL_EXTRA: &[&str] =
    &["prim", "rocwmma", "libhipcxx", "flatbuffers", "nlohmann-json", "rocshmem", "hipthreads", "rocjitsu", "mirage"];

/// Left out of legacy devel packages (the reference's older component list).
pub const LEGACY_DEVEL_OMITS: &[&str] = &["libhipcxx", "rocshmem", "hipthreads"];

/// The package a runtime artifact feeds, for devel's component list.
pub fn is_core(a: &ArtifactName) -> bool {
    let runtime = CORE.contains(&a.name.as_str()) && matches!(a.component.as_str(), "lib" | "run");
    let hotswap = a.name == "rocjitsu-hotswap" && a.component == "lib";
    let hip_headers = matches!(a.name.as_str(), "core-hip" | "core-ocl") && a.component == "dev";
    runtime || hotswap || hip_headers
}

pub fn is_profiler(a: &ArtifactName) -> bool {
    PROFILER.contains(&a.name.as_str()) && matches!(a.component.as_str(), "lib" | "run")
}

/// Host code of the libraries package (`family`: legacy mode's family).
pub fn is_libraries(a: &ArtifactName, family: Option<&str>) -> bool {
    let target_ok = a.is_generic() || family.is_some_and(|f| a.target == f);
    LIBRARIES.contains(&a.name.as_str()) && a.component == "lib" && target_ok
}

/// A gfx target without its xnack variant (`gfx90a-xnack+` -> `gfx90a`).
pub fn base_target(target: &str) -> &str {
    for suffix in [":xnack+", ":xnack-", "-xnack+", "-xnack-", "_xnack+", "_xnack-"] {
        if let Some(t) = target.strip_suffix(suffix) {
            return t;
        }
    }
    target
}

/// Device code of target `t` (split mode).
pub fn is_device(a: &ArtifactName, t: &str) -> bool {
    LIBRARIES.contains(&a.name.as_str()) && a.name != "rpp" && a.component == "lib" && base_target(&a.target) == t
}

/// Paths of core artifacts left out of core: CMake files (devel has them)
/// and what the profiler package ships.
pub fn core_excludes(rel: &str) -> bool {
    rel.split('/').any(|c| c == "cmake") || profiler_paths(rel)
}

/// The profiler package's allowlist.
pub fn profiler_paths(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    (rel.starts_with("bin/rocprof-"))
        || (rel.starts_with("lib/") && !rel[4..].contains('/') && name.starts_with("librocprof-sys"))
        || (rel.starts_with("lib/") && !rel[4..].contains('/') && name.starts_with("libprofiler-hub.so"))
        || rel.starts_with("libexec/rocprofiler-compute/")
        || rel.starts_with("libexec/rocprofiler-systems/")
        || rel.starts_with("share/rocprofiler-systems/")
        || rel.starts_with("share/rocprofiler-compute/")
        || (rel.starts_with("lib/python") && rel.contains("/site-packages/rocprofsys"))
}

/// Whether a devel artifact of `a` is taken (`names`: the runtime names).
pub fn is_devel(
    a: &ArtifactName,
    names: &std::collections::BTreeSet<String>,
    split: bool,
    family: Option<&str>,
) -> bool {
    let wanted = (names.contains(&a.name) || DEVEL_EXTRA.contains(&a.name.as_str()))
        && !PROFILER.contains(&a.name.as_str())
        && (split || !LEGACY_DEVEL_OMITS.contains(&a.name.as_str()));
    let target_ok = a.is_generic() || (!split && family.is_some_and(|f| a.target == f));
    let component_ok = !(split && a.component == "test");
    wanted && target_ok && component_ok
}

/// Library directories of `_rocm_sdk_core` each package's ELF files search
/// (after the entries they were built with), in order.
pub fn rpath_subdirs(kind: &str) -> &'static [&'static str] {
    match kind {
        "core" => &["lib/llvm/lib", "lib/rocm_sysdeps/lib"],
        "profiler" => &["lib", "lib/llvm/lib", "lib/rocm_sysdeps/lib"],
        "libraries" => &["lib", "lib/rocm_sysdeps/lib", "lib/host-math/lib", "lib/llvm/lib"],
        "device" => &["lib", "lib/rocm_sysdeps/lib"],
        _ => &[],
    }
}

/// `find_libraries` short names (kept with the wheels that preload them).
pub use crate::wheel::rocm_preload::SHORT_NAMES;

/// `rocm-sdk-core`'s console scripts: (name, path under the package, the
/// devel tree is expanded first).
pub const CORE_SCRIPTS: &[(&str, &str, bool)] = &[
    ("amdclang", "lib/llvm/bin/amdclang", true),
    ("amdclang++", "lib/llvm/bin/amdclang++", true),
    ("amdclang-cpp", "lib/llvm/bin/amdclang-cpp", true),
    ("amdclang-cl", "lib/llvm/bin/amdclang-cl", true),
    ("amdflang", "lib/llvm/bin/amdflang", true),
    ("amdlld", "lib/llvm/bin/amdlld", true),
    ("hipcc", "bin/hipcc", true),
    ("hipconfig", "bin/hipconfig", true),
    ("hipify-clang", "bin/hipify-clang", true),
    ("offload-arch", "lib/llvm/bin/offload-arch", true),
    ("roc-obj", "bin/roc-obj", true),
    ("roc-obj-extract", "bin/roc-obj-extract", true),
    ("roc-obj-ls", "bin/roc-obj-ls", true),
    ("amd-smi", "bin/amd-smi", false),
    ("hipify-perl", "bin/hipify-perl", true),
    ("rocm_agent_enumerator", "bin/rocm_agent_enumerator", false),
    ("rocminfo", "bin/rocminfo", false),
    ("rocm-smi", "bin/rocm-smi", false),
    ("roccoremerge", "bin/roccoremerge", true),
    ("rocgdb", "bin/rocgdb", true),
    ("rocpd", "bin/rocpd", true),
    ("rocpd2csv", "bin/rocpd2csv", true),
    ("rocpd2otf2", "bin/rocpd2otf2", true),
    ("rocpd2pftrace", "bin/rocpd2pftrace", true),
    ("rocpd2summary", "bin/rocpd2summary", true),
    ("rocprofv3", "bin/rocprofv3", true),
    ("rocprofv3-attach", "bin/rocprofv3-attach", true),
    ("rocprofv3-avail", "bin/rocprofv3-avail", true),
];

/// `rocm-profiler`'s console scripts: (name, path under `_rocm_profiler`).
pub const PROFILER_SCRIPTS: &[(&str, &str)] = &[
    ("rocprof-compute", "bin/rocprof-compute"),
    ("rocprof-sys-attach", "bin/rocprof-sys-attach"),
    ("rocprof-sys-avail", "bin/rocprof-sys-avail"),
    ("rocprof-sys-causal", "bin/rocprof-sys-causal"),
    ("rocprof-sys-instrument", "bin/rocprof-sys-instrument"),
    ("rocprof-sys-run", "bin/rocprof-sys-run"),
    ("rocprof-sys-sample", "bin/rocprof-sys-sample"),
    ("rocprof-sys-python", "bin/rocprof-sys-python"),
];

/// Devel links the expansion keeps as symlinks (compiler drivers find their
/// resource directory through their own path).
pub const DEVEL_KEEP_SYMLINKS: &[&str] =
    &["amdclang", "amdclang++", "amdclang-cl", "amdclang-cpp", "amdflang", "amdlld", "amdllvm"];

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
        assert!(is_core(&n("sysdeps-expat_lib_generic")));
        assert!(!is_core(&n("sysdeps-zstd_lib_generic")));
        assert!(is_core(&n("core-hip_dev_generic")));
        assert!(is_core(&n("rocjitsu-hotswap_lib_generic")));
        assert!(!is_core(&n("core-runtime_dev_generic")));
        assert!(is_libraries(&n("blas_lib_generic"), None));
        assert!(!is_libraries(&n("blas_lib_gfx942"), None));
        assert!(is_libraries(&n("blas_lib_gfx94X-dcgpu"), Some("gfx94X-dcgpu")));
        assert!(is_device(&n("blas_lib_gfx942"), "gfx942"));
        assert!(is_device(&n("blas_lib_gfx90a-xnack+"), "gfx90a"));
        assert!(!is_device(&n("rpp_lib_gfx942"), "gfx942"));
        assert!(!is_device(&n("miopen_run_gfx942"), "gfx942"));
        assert!(core_excludes("lib/cmake/hip/hip-config.cmake"));
        assert!(core_excludes("bin/rocprof-sys-run"));
        assert!(!core_excludes("bin/rocprofv3"));
        assert!(profiler_paths("lib/libprofiler-hub.so.1"));
        assert!(profiler_paths("libexec/rocprofiler-compute/x.py"));
        assert!(!profiler_paths("lib/libamdhip64.so.7"));
        let names = ["blas".to_string(), "rocprofiler-systems".to_string()].into_iter().collect();
        assert!(is_devel(&n("blas_dev_generic"), &names, true, None));
        assert!(is_devel(&n("blas_dbg_generic"), &names, true, None));
        assert!(!is_devel(&n("blas_test_generic"), &names, true, None));
        assert!(is_devel(&n("blas_test_generic"), &names, false, None));
        assert!(is_devel(&n("prim_dev_generic"), &names, true, None));
        assert!(!is_devel(&n("rocprofiler-systems_dev_generic"), &names, true, None));
        assert!(!is_devel(&n("blas_dev_gfx942"), &names, true, None));
        assert!(!is_devel(&n("fft_dev_generic"), &names, true, None));
        assert_eq!(CORE_SCRIPTS.len(), 28);
    }
}
