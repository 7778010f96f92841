//! Kernel databases: files of device code or tuning data for one GPU
//! target or group that libraries load by name at run time. A split moves
//! each to the device wheel of its target (or of its sub-family or family,
//! for files built for a group), at the same path under the package, so an
//! install of the host wheel plus its device extra puts it back where the
//! library looks. The layouts, as ROCm's splitter's database handlers
//! know them:
//! - Tensile (rocBLAS, hipBLASLt, hipSPARSELt), flat: `library/` files
//!   `.co`, `.hsaco`, `.dat` with the target in the name
//!   (`TensileLibrary_lazy_gfx90a.dat`, `Kernels.so-000-gfx90a-xnack-.hsaco`);
//!   per-target folders (`library/gfx942/...`, any file, the manifest too);
//! - MIOpen: `db/` files whose names glue the CU count to the target
//!   (`gfx942130.kdb`, `gfx90878.HIP.fdb.txt`), and the per-target CK
//!   libraries `libMIOpenCK<name>_<target>.so` (dlopen'd whole);
//! - AOTriton: `aotriton.images/amd-<dir>/...`, `<dir>` a target
//!   (`gfx942`) or a group (`gfx11xx` is the gfx11 family, `gfx120x` the
//!   gfx12_0 sub-family, `gfx110x` as it is);
//! - hipkernelprovider: `engines/arch_content/<engine>/<target or group>/...`.
//!
//! Files without a target (`TensileLibrary_fallback.dat`) stay in the host wheel.

use crate::code_objects::packaging_chain;
use crate::code_objects::target_id::{Setting, TargetId};

/// Where a kernel database goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The device wheel of a target.
    Target(TargetId),
    /// The device wheel of a sub-family or family key (`gfx110x`, `gfx11`).
    Group(String),
}

impl Route {
    /// Kept by a `--targets` filter: a target kept, or a group with a kept member.
    pub fn kept(&self, keep: &dyn Fn(&TargetId) -> bool) -> bool {
        match self {
            Route::Target(t) => keep(t),
            Route::Group(g) => packaging_chain::members(g).iter().any(|m| keep(&TargetId::bare(m))),
        }
    }
}

/// The kinds of file that are flat kernel databases, by extension.
const EXTENSIONS: &[&str] = &[".co", ".hsaco", ".dat", ".kdb", ".fdb.txt", ".db.txt", ".model"];

/// The directories flat databases live in: Tensile's `library/`, MIOpen's `db/`.
fn in_database_dir(path: &str) -> bool {
    let dirs: Vec<&str> = path.split('/').collect();
    dirs[..dirs.len().saturating_sub(1)].iter().any(|d| *d == "library" || *d == "db")
}

/// Tensile libraries with per-target `library/<target>/` folders.
const TENSILE_LIBRARIES: &[&str] = &["rocblas", "hipblaslt", "hipsparselt"];

/// AOTriton's group folders whose names are not rocm-bootstrap's keys.
const AOTRITON_GROUPS: &[(&str, &str)] = &[("gfx11xx", "gfx11"), ("gfx120x", "gfx12_0")];

/// Where the kernel database `path` goes, or None when it is not one.
pub fn route_of(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.split('/').collect();
    let (dirs, name) = parts.split_at(parts.len().saturating_sub(1));
    let name = name.first().copied().unwrap_or("");
    // Per-target folders: Tensile's library/<target>/, AOTriton's
    // aotriton.images/amd-<dir>/, hipkernelprovider's arch_content/<engine>/<dir>/.
    for (i, d) in dirs.iter().enumerate() {
        let next = dirs.get(i + 1).copied();
        let folder = match *d {
            "library" if i > 0 && TENSILE_LIBRARIES.contains(&dirs[i - 1]) => next,
            "aotriton.images" => next.and_then(|n| n.strip_prefix("amd-")),
            "arch_content" => dirs.get(i + 2).copied(),
            _ => None,
        };
        if let Some(route) = folder.and_then(|f| folder_route(f, *d == "aotriton.images")) {
            return Some(route);
        }
    }
    if let Some(t) = miopen_ck_library(name) {
        return Some(Route::Target(t));
    }
    if !in_database_dir(path) || !EXTENSIONS.iter().any(|e| name.ends_with(e)) {
        return None;
    }
    name_target(name).map(Route::Target)
}

/// A folder named for a target (`gfx942`, `gfx90a-xnack+`) or a group.
fn folder_route(folder: &str, aotriton: bool) -> Option<Route> {
    let key =
        if aotriton { AOTRITON_GROUPS.iter().find(|(a, _)| *a == folder).map_or(folder, |(_, k)| *k) } else { folder };
    if !packaging_chain::members(key).is_empty() {
        return Some(Route::Group(key.to_string()));
    }
    let t = name_target(key)?;
    // The whole folder name is the target: `gfx942`, not `gfx942_old`.
    let spelled = key.replace(['-', ':'], "");
    let id = t.to_string().replace(['-', ':'], "");
    (spelled == id).then_some(Route::Target(t))
}

/// `libMIOpenCK<name>_<target>.so` (or `.dll`): the target, for a CK library.
fn miopen_ck_library(name: &str) -> Option<TargetId> {
    let rest = name.strip_prefix("lib").unwrap_or(name).strip_prefix("MIOpenCK")?;
    let stem = rest.strip_suffix(".so").or_else(|| rest.strip_suffix(".dll"))?;
    let (_, arch) = stem.rsplit_once('_')?;
    let t = name_target(arch)?;
    (t.to_string().replace(['-', ':'], "") == arch.replace(['-', ':'], "")).then_some(t)
}

/// The longest known processor name at a `gfx` in `name` (MIOpen appends
/// the CU count, so digits may follow), with an xnack setting spelled
/// after it (`-xnack+`, `:xnack-`).
fn name_target(name: &str) -> Option<TargetId> {
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
        match route_of(p)? {
            Route::Target(t) => Some(t.to_string()),
            Route::Group(_) => None,
        }
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

    fn r(p: &str) -> Option<String> {
        route_of(p).map(|r| match r {
            Route::Target(t) => t.to_string(),
            Route::Group(g) => format!("group {g}"),
        })
    }

    #[test]
    fn each_layout_routes_to_its_target_or_group() {
        // Tensile per-target folders: any file, the manifest too.
        assert_eq!(r("torch/lib/hipblaslt/library/gfx942/TensileManifest.txt").as_deref(), Some("gfx942"));
        assert_eq!(r("torch/lib/hipsparselt/library/gfx950/x_fallback.dat").as_deref(), Some("gfx950"));
        assert_eq!(r("torch/lib/rocblas/library/gfx90a-xnack+/k.co").as_deref(), Some("gfx90a:xnack+"));
        // A library/ folder of another library is no per-target layout.
        assert_eq!(r("torch/lib/other/library/gfx942/notes.txt"), None);
        // AOTriton: targets and groups.
        assert_eq!(r("torch/lib/aotriton.images/amd-gfx942/flash/attn_fwd/k.aks2").as_deref(), Some("gfx942"));
        assert_eq!(r("torch/lib/aotriton.images/amd-gfx11xx/flash/bwd/k.aks2").as_deref(), Some("group gfx11"));
        assert_eq!(r("torch/lib/aotriton.images/amd-gfx110x/flash/bwd/k.aks2").as_deref(), Some("group gfx110x"));
        assert_eq!(r("torch/lib/aotriton.images/amd-gfx120x/flash/bwd/k.aks2").as_deref(), Some("group gfx12_0"));
        // MIOpen: CU counts glued on; CK per-target libraries.
        assert_eq!(r("torch/share/miopen/db/gfx90878.HIP.fdb.txt").as_deref(), Some("gfx908"));
        assert_eq!(r("torch/share/miopen/db/gfx1030_36.db.txt").as_deref(), Some("gfx1030"));
        assert_eq!(r("torch/lib/libMIOpenCKGroupConv_gfx942.so").as_deref(), Some("gfx942"));
        assert_eq!(r("torch/lib/libMIOpen.so"), None);
        // hipkernelprovider.
        assert_eq!(r("hkp/engines/arch_content/gemm/gfx1100/a.bin").as_deref(), Some("gfx1100"));
        assert_eq!(r("hkp/engines/arch_content/gemm/gfx11/a.bin").as_deref(), Some("group gfx11"));
        assert_eq!(r("hkp/engines/arch_content/gemm/common/a.bin"), None);
    }
}
