//! A layout directory written in place atomically: staged beside its
//! destination (`stage_output`), then moved over it (`replace_output`), so
//! a reader never sees half a layout and two writers of one output both
//! succeed.

use super::layout_error::{bad, io_err, LayoutError};
use std::io;
use std::path::Path;

/// Check that `out` may be replaced (absent, empty or an OCI layout) and
/// make a staging directory beside it, on the same filesystem for the rename.
pub fn stage_output(out: &Path, prefix: &str) -> Result<tempfile::TempDir, LayoutError> {
    if out.exists() {
        let is_layout = out.join("oci-layout").is_file();
        let is_empty = std::fs::read_dir(out).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !is_layout && !is_empty {
            return Err(bad(out, "exists and is not an OCI layout; choose another output with -o or remove it"));
        }
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent, "cannot create the output's parent"))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(io_err(parent, "cannot create a staging directory"))
}

/// Move a finished staging directory over `out`; a previous layout is
/// replaced only once the new one is in place. Two processes writing the
/// same output at once (two `quarry run` of one definition) both succeed:
/// whichever moves last wins, and the layouts are the same image. Where
/// `out` exists the two directories are exchanged atomically
/// (`renameat2(RENAME_EXCHANGE)`: never a moment without an output, and no
/// race to lose), then the old one is removed; a file system without
/// exchange moves the old one aside first.
pub fn replace_output(staging: tempfile::TempDir, out: &Path) -> Result<(), LayoutError> {
    let staged = staging.keep();
    let fail = |what: &str, e: io::Error| {
        let _ = std::fs::remove_dir_all(&staged);
        io_err(out, what.to_string())(e)
    };
    // Each turn fails only when another writer changed `out` in between.
    for _ in 0..64 {
        match std::fs::rename(&staged, out) {
            Ok(()) => return Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {}
            Err(e) => return Err(fail("cannot move the new output in place", e)),
        }
        match exchange(&staged, out) {
            // `staged` now holds the previous output.
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&staged);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return move_aside_then_replace(&staged, out),
            Err(e) => return Err(fail("cannot move the new output in place", e)),
        }
    }
    Err(fail("cannot move the new output in place", io::Error::other("other writers keep replacing it")))
}

/// Swap two paths atomically (Linux `renameat2` with `RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two valid NUL-terminated paths, relative to the working directory.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Without an atomic exchange: move `out` aside, then `staged` in place.
fn move_aside_then_replace(staged: &Path, out: &Path) -> Result<(), LayoutError> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut moved_aside = Vec::new();
    let mut result = Err(io::Error::other("other writers keep replacing it"));
    for _ in 0..64 {
        // Unique across processes (pid) and across threads of this one (counter).
        static ASIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = ASIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let old = parent.join(format!(".quarry-old-{}-{n}", std::process::id()));
        match std::fs::rename(out, &old) {
            Ok(()) => moved_aside.push(old),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        match std::fs::rename(staged, out) {
            Ok(()) => {
                result = Ok(());
                break;
            }
            // Another writer put its output in place meanwhile: move that aside too.
            Err(e) if out.exists() => result = Err(e),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    for old in moved_aside {
        let _ = std::fs::remove_dir_all(old);
    }
    result.map_err(|e| {
        let _ = std::fs::remove_dir_all(staged);
        io_err(out, "cannot move the new output in place")(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several writers of one output at once all succeed and leave one whole
    /// layout and nothing else behind (two `quarry run` of one definition).
    #[test]
    fn concurrent_writers_of_one_output_all_succeed() {
        writers_all_succeed(replace_output);
    }

    /// The same where the file system cannot exchange two directories.
    #[test]
    fn concurrent_writers_succeed_without_an_exchange() {
        writers_all_succeed(|staging, out| {
            let staged = staging.keep();
            match std::fs::rename(&staged, out) {
                Ok(()) => Ok(()),
                Err(_) => move_aside_then_replace(&staged, out),
            }
        });
    }

    fn writers_all_succeed(replace: impl Fn(tempfile::TempDir, &Path) -> Result<(), LayoutError> + Sync) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("image");
        let ready = std::sync::Barrier::new(8);
        std::thread::scope(|scope| {
            for i in 0..8 {
                let (out, ready, replace) = (out.clone(), &ready, &replace);
                scope.spawn(move || {
                    let staging = stage_output(&out, ".quarry-new-").unwrap();
                    std::fs::write(staging.path().join("oci-layout"), format!("{i}")).unwrap();
                    ready.wait();
                    replace(staging, &out).unwrap();
                });
            }
        });
        assert!(out.join("oci-layout").is_file());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("image")], "{left:?}");
    }
}
