//! `$ORIGIN`-relative DT_RPATH for every host ELF file of a runtime
//! package, written with patchelf (0.19 or later, see `elf::patchelf`) and
//! checked with `elf::verify` afterwards.
//!
//! DT_RPATH rather than DT_RUNPATH: it applies to the whole dependency
//! chain and LD_LIBRARY_PATH cannot override it, so a library of
//! `_rocm_sdk_libraries` always finds `_rocm_sdk_core`'s copy of
//! libamdhip64 and never another one on the machine.

use super::collect::{parent, relative};
use super::PackageError;
use crate::elf::patchelf::Patchelf;
use std::path::Path;

/// One library directory a package searches: `(package dir, path under it)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibDir {
    pub package: String,
    pub dir: String,
}

impl LibDir {
    pub fn new(package: &str, dir: &str) -> LibDir {
        LibDir { package: package.into(), dir: dir.into() }
    }
}

/// The RPATH of `file` (a path under `package`): every search directory
/// relative to the file's own, then the `$ORIGIN` entries it was built
/// with (absolute build-tree entries are dropped).
pub fn rpath_for(package: &str, file: &str, dirs: &[LibDir], built: Option<&str>) -> String {
    let from = format!("{package}/{}", parent(file));
    let mut entries: Vec<String> = Vec::new();
    let mut push = |e: String| {
        if !entries.contains(&e) {
            entries.push(e);
        }
    };
    for d in dirs {
        let rel = relative(&from, &format!("{}/{}", d.package, d.dir));
        push(if rel.is_empty() { "$ORIGIN".to_string() } else { format!("$ORIGIN/{rel}") });
    }
    for e in built.unwrap_or("").split(':') {
        if e.starts_with("$ORIGIN") || e.starts_with("${ORIGIN}") {
            push(e.to_string());
        }
    }
    entries.join(":")
}

/// Set `rpath` on `file` and verify the result: the file must still be a
/// sound ELF (program headers inside a LOAD segment, segments inside the
/// file, dynamic section readable) carrying exactly that DT_RPATH.
pub fn patch_and_verify(patchelf: &Patchelf, file: &Path, rpath: &str) -> Result<(), PackageError> {
    patchelf.set_rpath(file, rpath)?;
    let info = crate::elf::verify(file)?;
    if info.rpath.as_deref() != Some(rpath) || info.runpath.is_some() {
        return Err(PackageError::RpathNotSet {
            file: file.to_path_buf(),
            expected: rpath.to_string(),
            found: format!(
                "DT_RPATH {:?}, DT_RUNPATH {:?}",
                info.rpath.unwrap_or_default(),
                info.runpath.unwrap_or_default()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_relative_entries() {
        let core = [LibDir::new("_rocm_sdk_core", "lib"), LibDir::new("_rocm_sdk_core", "lib/llvm/lib")];
        assert_eq!(rpath_for("_rocm_sdk_core", "lib/libamdhip64.so.7", &core, None), "$ORIGIN:$ORIGIN/llvm/lib");
        assert_eq!(
            rpath_for("_rocm_sdk_core", "bin/hipcc", &core, Some("$ORIGIN/../lib:/build/x")),
            "$ORIGIN/../lib:$ORIGIN/../lib/llvm/lib"
        );
        let libs = [LibDir::new("_rocm_sdk_libraries", "lib"), LibDir::new("_rocm_sdk_core", "lib")];
        assert_eq!(
            rpath_for("_rocm_sdk_libraries", "lib/librocblas.so.5", &libs, None),
            "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib"
        );
    }
}
