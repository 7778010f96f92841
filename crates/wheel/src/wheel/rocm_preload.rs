//! Which of ROCm's libraries a wheel built on ROCm's Python packages
//! preloads (`_rocm_init.py`, see `rocm_init`): by default every library the
//! packages provide that the wheel's ELF files need (their DT_NEEDED), by
//! the short name `rocm_sdk` finds it under; with `--preload`, the names
//! given, and a warning for each needed library they leave out (its import
//! would fail where no system ROCm is: `cannot open shared object file`).

use std::collections::BTreeSet;
use std::path::Path;

/// `find_libraries` short names: (short name, package kind, file-name
/// prefix, directory under the package).
pub const SHORT_NAMES: &[(&str, &str, &str, &str)] = &[
    ("amdhip64", "core", "libamdhip64.so", "lib"),
    ("hipfile", "core", "libhipfile.so", "lib"),
    ("hiprtc", "core", "libhiprtc.so", "lib"),
    ("roctx64", "core", "libroctx64.so", "lib"),
    ("rocprofiler-sdk", "core", "librocprofiler-sdk.so", "lib"),
    ("rocprofiler-sdk-roctx", "core", "librocprofiler-sdk-roctx.so", "lib"),
    ("roctracer64", "core", "libroctracer64.so", "lib"),
    ("amd_comgr", "core", "libamd_comgr.so", "lib"),
    ("rocm_kpack", "core", "librocm_kpack.so", "lib"),
    ("rocm_smi64", "core", "librocm_smi64.so", "lib"),
    ("rocdecode", "core", "librocdecode.so", "lib"),
    ("rocjpeg", "core", "librocjpeg.so", "lib"),
    ("amd_smi", "core", "libamd_smi.so", "lib"),
    ("rocdxg", "core", "librocdxg.so", "lib"),
    ("rocm_sysdeps_liblzma", "core", "librocm_sysdeps_liblzma.so", "lib/rocm_sysdeps/lib"),
    ("rocm-openblas", "core", "librocm-openblas.so", "lib/host-math/lib"),
    ("rpp", "libraries", "librpp.so", "lib"),
    ("hipblas", "libraries", "libhipblas.so", "lib"),
    ("hipblaslt", "libraries", "libhipblaslt.so", "lib"),
    ("hipfft", "libraries", "libhipfft.so", "lib"),
    ("hiprand", "libraries", "libhiprand.so", "lib"),
    ("hipsparse", "libraries", "libhipsparse.so", "lib"),
    ("hipsparselt", "libraries", "libhipsparselt.so", "lib"),
    ("hipsolver", "libraries", "libhipsolver.so", "lib"),
    ("rccl", "libraries", "librccl.so", "lib"),
    ("miopen", "libraries", "libMIOpen.so", "lib"),
    ("origami", "libraries", "liborigami.so", "lib"),
    ("hipdnn", "libraries", "libhipdnn_backend.so", "lib"),
];

/// The short name `rocm_sdk` knows a library by (`libamdhip64.so.5` -> `amdhip64`).
pub fn short_name(soname: &str) -> Option<&'static str> {
    SHORT_NAMES
        .iter()
        .find(|(_, _, prefix, _)| soname == *prefix || soname.strip_prefix(prefix).is_some_and(|r| r.starts_with('.')))
        .map(|(short, ..)| *short)
}

/// The libraries of `provided` (the packages' sonames) that the ELF files
/// under `root` need, with the file (relative to `root`) that needs each first.
pub fn needed(root: &Path, provided: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in walkdir::WalkDir::new(root).sort_by_file_name().into_iter().filter_map(Result::ok) {
        if !e.file_type().is_file() || !crate::elf::is_elf(e.path()) {
            continue;
        }
        let Ok(info) = crate::elf::read(e.path()) else { continue };
        let rel = e.path().strip_prefix(root).unwrap_or(e.path()).display().to_string();
        for n in info.needed.iter().filter(|n| provided.contains(*n)) {
            if !out.iter().any(|(s, _)| s == n) {
                out.push((n.clone(), rel.clone()));
            }
        }
    }
    out.sort();
    out
}

/// What to preload: `given` when there is one (with a warning for each
/// needed library it leaves out), else the short names of `needed`. A
/// needed library `rocm_sdk` has no short name for is said once; the
/// loader then finds it only if its own search does.
pub fn choose(given: &[String], needed: &[(String, String)]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (soname, by) in needed {
        match short_name(soname) {
            Some(s) if !given.is_empty() && !given.iter().any(|g| g == s) => log::warn!(
                "--preload leaves out `{s}` ({soname}), which `{by}` needs: importing it fails where no system ROCm is; add `{s}`, or leave --preload out (the default preloads every ROCm library the wheel needs)"
            ),
            Some(s) => {
                if !names.iter().any(|n| n == s) {
                    names.push(s.to_string());
                }
            }
            None => log::warn!("`{by}` needs {soname}, which ROCm's packages provide but rocm_sdk cannot preload by name"),
        }
    }
    if given.is_empty() {
        names
    } else {
        given.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_and_the_default() {
        assert_eq!(short_name("libamdhip64.so.5"), Some("amdhip64"));
        assert_eq!(short_name("libamdhip64.so"), Some("amdhip64"));
        assert_eq!(short_name("libamdhip64x.so.5"), None);
        assert_eq!(short_name("libMIOpen.so.1"), Some("miopen"));
        let needed = vec![
            ("libamdhip64.so.5".to_string(), "pkg/_c.so".to_string()),
            ("librocblas.so.0".to_string(), "pkg/_c.so".to_string()),
        ];
        // rocBLAS has no short name in rocm_sdk's table: only HIP is preloaded by default.
        assert_eq!(choose(&[], &needed), ["amdhip64"]);
        assert_eq!(choose(&["hipblas".into()], &needed), ["hipblas"], "what is given is kept");
    }
}
