//! patchelf on many files per process: patchelf applies the same options to
//! every file it is given, so files that get the same RPATH share one run
//! (a process per file costs more than the edit on small libraries).

use super::{args, Patchelf, PatchelfError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Files per patchelf run (keeps the command line short).
pub const BATCH: usize = 64;

/// Set DT_RPATH `rpath` (forced, see [`args::set_rpath`]) on every file of `files`.
pub fn set_rpath_many(patchelf: &Patchelf, rpath: &str, files: &[PathBuf]) -> Result<(), PatchelfError> {
    let options = args::set_rpath(rpath);
    for batch in files.chunks(BATCH) {
        let out = Command::new(patchelf.path())
            .args(&options)
            .args(batch)
            .output()
            .map_err(|source| PatchelfError::Spawn { path: patchelf.path().to_path_buf(), source })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            // Name the file patchelf complained about when it says which.
            let file = batch.iter().find(|f| stderr.contains(&*f.to_string_lossy())).unwrap_or(&batch[0]).clone();
            return Err(PatchelfError::Failed {
                patchelf: patchelf.path().to_path_buf(),
                args: options.join(" "),
                file,
                stderr,
            });
        }
    }
    Ok(())
}

/// Write `src` with DT_RPATH `rpath` to `out` in one patchelf run
/// (`--output`): for large files, saves copying the file before patching it.
pub fn set_rpath_into(patchelf: &Patchelf, rpath: &str, src: &Path, out: &Path) -> Result<(), PatchelfError> {
    let mut options = args::set_rpath(rpath);
    options.push("--output".into());
    options.push(out.to_string_lossy().into_owned());
    patchelf.run(src, &options)
}
