//! Native launchers: a wheel cannot hold a symlink, so a symlink to an
//! executable (`bin/hipcc -> hipcc.pl`, `bin/hipinfo -> hipinfo-real`)
//! becomes a small program that finds its own location through
//! `/proc/self/exe` and execs the relative target with the same argv.
//!
//! The program is compiled once per packaging run with `cc`; each launcher
//! is the program's image whose fixed-size placeholder holds its target (so every
//! launcher with the same target has the same bytes, and the same compiler
//! gives the same launcher on every run).

use super::PackageError;
use std::path::Path;
use std::process::Command;

/// Marks the placeholder in the compiled program.
const MARKER: &[u8] = b"@@QUARRY_LAUNCHER_TARGET@@";
/// Room for the target, NUL included.
const SLOT: usize = 4096;

const SOURCE: &str = r#"/* quarry launcher: exec a relative target next to this file. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((used)) static const char TARGET[4096] = "@@QUARRY_LAUNCHER_TARGET@@";

int main(int argc, char **argv) {
    /* Read the placeholder through a volatile pointer so the compiler
       cannot fold the (patched later) contents at build time. */
    const char *volatile slot = TARGET;
    char target[4096];
    size_t i;
    for (i = 0; i + 1 < sizeof target && slot[i]; i++) target[i] = slot[i];
    target[i] = 0;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        fprintf(stderr, "%s: cannot find its own location (/proc/self/exe): %s\n", argv[0], strerror(errno));
        return 127;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) slash[1] = 0; else self[0] = 0;
    char path[PATH_MAX + 4096];
    snprintf(path, sizeof path, "%s%s", self, target);
    (void)argc;
    execv(path, argv);
    fprintf(stderr, "%s: cannot run %s: %s\n", argv[0], path, strerror(errno));
    return 127;
}
"#;

/// The compiled program and where its placeholder sits.
pub struct Launcher {
    image: Vec<u8>,
    slot_offset: usize,
}

impl Launcher {
    /// Compile the launcher in `scratch` with `cc` (or `$CC`).
    pub fn compile(scratch: &Path) -> Result<Launcher, PackageError> {
        let dir = scratch.join("launcher");
        std::fs::create_dir_all(&dir).map_err(|source| PackageError::Io { path: dir.clone(), source })?;
        let src = dir.join("launcher.c");
        std::fs::write(&src, SOURCE).map_err(|source| PackageError::Io { path: src.clone(), source })?;
        let cc = std::env::var("CC").ok().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| "cc".into());
        // Relative names and no debug info: nothing of the scratch path
        // ends up in the binary.
        let out =
            Command::new(&cc).current_dir(&dir).args(["-O2", "-s", "-o", "launcher", "launcher.c"]).output().map_err(
                |e| PackageError::Compiler {
                    cc: cc.clone(),
                    why: format!("{e}; install a C compiler (`apt-get install gcc`) or set CC"),
                },
            )?;
        if !out.status.success() {
            return Err(PackageError::Compiler { cc, why: String::from_utf8_lossy(&out.stderr).trim().to_string() });
        }
        let bin = dir.join("launcher");
        let image = std::fs::read(&bin).map_err(|source| PackageError::Io { path: bin.clone(), source })?;
        let hits: Vec<usize> =
            image.windows(MARKER.len()).enumerate().filter(|(_, w)| *w == MARKER).map(|(i, _)| i).collect();
        match hits.as_slice() {
            [one] if one + SLOT <= image.len() => Ok(Launcher { image, slot_offset: *one }),
            _ => Err(PackageError::Compiler {
                cc,
                why: format!("the compiled launcher holds its placeholder {} times, not once", hits.len()),
            }),
        }
    }

    /// The launcher for `target` (relative to the launcher's directory).
    pub fn image(&self, target: &str) -> Result<Vec<u8>, PackageError> {
        if target.len() >= SLOT || target.as_bytes().contains(&0) {
            return Err(PackageError::LauncherTarget(target.to_string()));
        }
        let mut image = self.image.clone();
        let slot = &mut image[self.slot_offset..self.slot_offset + SLOT];
        slot.fill(0);
        slot[..target.len()].copy_from_slice(target.as_bytes());
        Ok(image)
    }
}
