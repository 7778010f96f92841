//! Kernel databases: files of device code or tuning data for one GPU
//! target that libraries load by name at run time (rocBLAS/hipBLASLt
//! Tensile `library/` files: `.co`, `.hsaco`, `.dat`; MIOpen's `.kdb`
//! kernel databases and per-target find/perf databases). A split moves each
//! to the device wheel of its target, at the same path under the package,
//! so an install of the host wheel plus its device extra puts it back
//! where the library looks. Files without a target in their name
//! (`TensileLibrary_fallback.dat`) stay in the host wheel.

use crate::code_objects::target_id::{Setting, TargetId};

/// The kinds of file that are kernel databases, by extension.
const EXTENSIONS: &[&str] = &[".co", ".hsaco", ".dat", ".kdb", ".fdb.txt", ".db.txt", ".model"];

/// The directories they live in: Tensile's `library/`, MIOpen's `db/`.
fn in_database_dir(path: &str) -> bool {
    let dirs: Vec<&str> = path.split('/').collect();
    dirs[..dirs.len().saturating_sub(1)].iter().any(|d| *d == "library" || *d == "db")
}

/// The target a kernel database file is for (`rocblas/library/
/// TensileLibrary_lazy_gfx90a.dat` -> gfx90a, `Kernels.so-000-gfx90a-xnack-.hsaco`
/// -> gfx90a:xnack-, `miopen/db/gfx942130.kdb` -> gfx942), or None when
/// it is not one.
pub fn target_of(path: &str) -> Option<TargetId> {
    if !in_database_dir(path) || !EXTENSIONS.iter().any(|e| path.ends_with(e)) {
        return None;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    // The longest known processor name at a `gfx` in the file name:
    // MIOpen appends the CU count (`gfx942130`), so digits may follow.
    let mut found: Option<(usize, &str)> = None;
    for (at, _) in name.match_indices("gfx") {
        let rest = &name[at..];
        let best = crate::code_objects::amdgpu::processor_names()
            .filter(|p| rest.starts_with(p) && !p.ends_with("-generic"))
            .max_by_key(|p| p.len());
        if let Some(p) = best {
            found = Some((at, p));
            break;
        }
    }
    let (at, processor) = found?;
    let mut id = TargetId::bare(processor);
    let after = &name[at + processor.len()..];
    for (tag, on) in [("-xnack+", true), ("-xnack-", false), (":xnack+", true), (":xnack-", false)] {
        if after.starts_with(tag) {
            id.xnack = if on { Setting::On } else { Setting::Off };
        }
    }
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: &str) -> Option<String> {
        target_of(p).map(|t| t.to_string())
    }

    #[test]
    fn databases_are_found_by_directory_extension_and_target() {
        assert_eq!(t("torch/lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat").as_deref(), Some("gfx90a"));
        assert_eq!(t("x/rocblas/library/Kernels.so-000-gfx90a-xnack-.hsaco").as_deref(), Some("gfx90a:xnack-"));
        assert_eq!(t("x/hipblaslt/library/extop_gfx1100.co").as_deref(), Some("gfx1100"));
        assert_eq!(t("torch/share/miopen/db/gfx942130.kdb").as_deref(), Some("gfx942"));
        assert_eq!(t("x/rocblas/library/TensileLibrary_fallback.dat"), None);
        assert_eq!(t("x/lib/libgfx90a_helpers.so"), None);
        assert_eq!(t("x/library/readme_gfx90a.txt"), None);
    }
}
