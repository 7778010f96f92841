//! Repairing a wheel against the image it was built in. The libraries its
//! ELF files need are the ones that image's loader finds (`ldd` run there,
//! with the image's LD_LIBRARY_PATH and ld.so cache); they are copied out
//! into a mirror of their image paths, with the image's /etc/ld.so.conf,
//! which the resolver then searches instead of this machine. quarry's own
//! static patchelf (for the image's architecture) is copied in to edit the
//! files there; the image needs none of its own. Files go in and out through the engine's archive API,
//! never bind mounts, and each container is removed however the step ends.

use super::ldd::{is_libpython, SystemPaths};
use super::WheelError;
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::run::{shell_quote, Network, RunOptions};
use crate::engine::{Engine, EngineError};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the wheel's files are in the container.
const WHEEL_DIR: &str = "/quarry/wheel";
/// Where the libraries are gathered before they are copied out.
const LIBS_DIR: &str = "/quarry/libs";

/// Where quarry's patchelf is put in the container.
const PATCHELF: &str = "/quarry/bin/patchelf";

/// Prints the machine (`uname -m`), the image's LD_LIBRARY_PATH, then
/// `ldd`'s report of each file (the arguments), every line prefixed so
/// nothing is mistaken.
const RESOLVE: &str = r#"printf 'machine\t%s\n' "$(uname -m)"
printf 'ld_library_path\t%s\n' "${LD_LIBRARY_PATH:-}"
if ! command -v ldd >/dev/null 2>&1; then printf 'no-ldd\n'; exit 0; fi
for f; do
  printf 'file\t%s\n' "$f"
  ldd "/quarry/wheel/$f" 2>&1 | while IFS= read -r l; do printf 'ldd\t%s\n' "$l"; done
done"#;

/// Copies each library (arguments: the paths ldd printed) and the
/// ld.so.conf files under /quarry/libs at their own paths, printing
/// `lib PATH REALPATH` for each.
const GATHER: &str = r#"set -e
mkdir -p /quarry/libs/etc
[ ! -f /etc/ld.so.conf ] || cp -L /etc/ld.so.conf /quarry/libs/etc/
[ ! -d /etc/ld.so.conf.d ] || cp -RL /etc/ld.so.conf.d /quarry/libs/etc/
for p; do
  real=$(readlink -f "$p")
  printf 'lib\t%s\t%s\n' "$p" "$real"
  mkdir -p "/quarry/libs$(dirname "$real")"
  [ -e "/quarry/libs$real" ] || cp "$real" "/quarry/libs$real"
done"#;

/// An image to repair against, already in the engine.
pub struct RepairImage<'e> {
    pub engine: &'e Engine,
    /// Its engine reference.
    pub image: String,
}

/// What the image provides for a repair.
pub struct ImageLibraries {
    /// Search paths into the mirror.
    pub system_paths: SystemPaths,
    /// What `uname -m` printed there (`x86_64`).
    pub machine: String,
    /// The image's packages that hold those libraries (image path -> package).
    pub packages: std::collections::BTreeMap<PathBuf, super::provides::Package>,
}

fn sh(script: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    ["sh", "-c", script, "sh"].into_iter().map(String::from).chain(args).collect()
}

impl RepairImage<'_> {
    fn run_options(&self) -> RunOptions {
        // As root, so the files copied in (owned by root) can be rewritten
        // whatever user the image names.
        RunOptions { image: self.image.clone(), network: Network::None, user: Some("0:0".into()), ..Default::default() }
    }

    fn failed(&self, what: &str, source: EngineError) -> WheelError {
        WheelError::Image { image: self.image.clone(), what: what.to_string(), source: Box::new(source) }
    }

    fn unusable(&self, why: String) -> WheelError {
        WheelError::ImageUnusable { image: self.image.clone(), why }
    }

    /// Resolve the libraries of `elf_files` (paths inside the wheel
    /// unpacked at `root`) in the image and mirror them under `mirror` (a
    /// new directory).
    pub fn libraries(&self, root: &Path, elf_files: &[String], mirror: &Path) -> Result<ImageLibraries, WheelError> {
        let copy_in: Vec<CopyIn> =
            elf_files.iter().map(|f| CopyIn { host: root.join(f), dest: format!("{WHEEL_DIR}/{f}") }).collect();
        let opts = self.run_options();
        let (report, gathered, owners) = self
            .engine
            .guarded(async |s| {
                let id = s.start_idle(&opts, copy_in.clone()).await?;
                let args = elf_files.iter().cloned();
                let (code, out) = s.exec(&id, sh(RESOLVE, args), vec![], None, ExecOutput::Capture).await?;
                if code != 0 {
                    return Err(EngineError::Invalid(format!("resolving libraries exited with {code}")));
                }
                let report = parse_resolve(&String::from_utf8_lossy(&out));
                if report.no_ldd {
                    return Ok((report, String::new(), String::new()));
                }
                let paths = report.libraries.iter().cloned();
                let (code, out) = s.exec(&id, sh(GATHER, paths), vec![], None, ExecOutput::Capture).await?;
                if code != 0 {
                    return Err(EngineError::Invalid(format!("gathering libraries exited with {code}")));
                }
                s.copy_out(&id, LIBS_DIR, mirror).await?;
                // For the SBOM; a failure here only loses that detail.
                let paths = report.libraries.iter().cloned();
                let owners =
                    match s.exec(&id, sh(super::provides::SCRIPT, paths), vec![], None, ExecOutput::Capture).await {
                        Ok((_, o)) => String::from_utf8_lossy(&o).into_owned(),
                        Err(_) => String::new(),
                    };
                s.remove_container(&id).await;
                Ok((report, String::from_utf8_lossy(&out).into_owned(), owners))
            })
            .map_err(|e| self.failed("resolving the wheel's libraries", e))?;
        if report.no_ldd {
            return Err(self.unusable(
                "it has no `ldd` on its PATH: quarry asks the image's loader which libraries the wheel needs; \
                 use an image with glibc's ldd (any manylinux or Debian image has it)"
                    .into(),
            ));
        }
        for line in gathered.lines() {
            let mut parts = line.split('\t');
            if let (Some("lib"), Some(path), Some(real)) = (parts.next(), parts.next(), parts.next()) {
                link_in_mirror(mirror, path, real)
                    .map_err(|source| WheelError::Io { path: mirror.join(path.trim_start_matches('/')), source })?;
            }
        }
        Ok(ImageLibraries {
            system_paths: SystemPaths::from_image(mirror, &report.ld_library_path),
            machine: report.machine,
            packages: super::provides::parse(&owners),
        })
    }

    /// Run `patchelf` (a static program of this machine's cache, for the
    /// image's architecture) in the image: each `(file, args)` in order, on
    /// the files (inside the wheel unpacked at `root`) copied in; the
    /// results are copied back over them.
    pub fn patch(&self, root: &Path, edits: &[(String, Vec<String>)], patchelf: &Path) -> Result<(), WheelError> {
        if edits.is_empty() {
            return Ok(());
        }
        let files: BTreeSet<&String> = edits.iter().map(|(f, _)| f).collect();
        let mut copy_in: Vec<CopyIn> =
            files.iter().map(|f| CopyIn { host: root.join(f), dest: format!("{WHEEL_DIR}/{f}") }).collect();
        copy_in.push(CopyIn { host: patchelf.to_path_buf(), dest: PATCHELF.into() });
        let mut script = String::from("cd /quarry/wheel\n");
        for (file, args) in edits {
            let command = std::iter::once(PATCHELF).chain(args.iter().map(String::as_str)).chain([file.as_str()]);
            let quoted: Vec<String> = command.clone().map(shell_quote).collect();
            let shown = shell_quote(&format!("quarry: `{}` failed", command.collect::<Vec<_>>().join(" ")));
            script.push_str(&format!("{} || {{ printf '%s\\n' {shown} >&2; exit 1; }}\n", quoted.join(" ")));
        }
        let opts = self.run_options();
        self.engine
            .guarded(async |s| {
                let id = s.start_idle(&opts, copy_in.clone()).await?;
                let (code, _) = s.exec(&id, sh(&script, []), vec![], None, ExecOutput::Stderr).await?;
                if code != 0 {
                    return Err(EngineError::Invalid(format!("patchelf exited with {code}; its output is above")));
                }
                for f in &files {
                    s.copy_out(&id, &format!("{WHEEL_DIR}/{f}"), &root.join(f)).await?;
                }
                s.remove_container(&id).await;
                Ok(())
            })
            .map_err(|e| self.failed("running patchelf", e))
    }
}

/// What the resolve script reported.
#[derive(Debug, Default, PartialEq)]
struct Resolved {
    /// `uname -m`.
    machine: String,
    ld_library_path: String,
    no_ldd: bool,
    /// Absolute paths of the libraries found outside the wheel, sorted.
    libraries: BTreeSet<String>,
}

fn parse_resolve(out: &str) -> Resolved {
    let mut r = Resolved::default();
    for line in out.lines() {
        let (key, rest) = line.split_once('\t').unwrap_or((line, ""));
        match key {
            "machine" => r.machine = rest.trim().to_string(),
            "ld_library_path" => r.ld_library_path = rest.to_string(),
            "no-ldd" => r.no_ldd = true,
            "ldd" => {
                if let Some((soname, path)) = parse_ldd_line(rest) {
                    if !path.starts_with(&format!("{WHEEL_DIR}/")) && !is_libpython(&soname) {
                        r.libraries.insert(path);
                    }
                }
            }
            _ => {}
        }
    }
    r
}

/// `\tlibffi.so.8 => /lib/x86_64-linux-gnu/libffi.so.8 (0x...)` -> (soname,
/// path); the interpreter's line (`\t/lib64/ld-linux-x86-64.so.2 (0x...)`)
/// names itself; `not found`, the vDSO and messages give nothing.
fn parse_ldd_line(line: &str) -> Option<(String, String)> {
    let l = line.trim();
    let l = l.rsplit_once(" (0x").map(|(a, _)| a).unwrap_or(l).trim_end();
    match l.split_once(" => ") {
        Some((name, path)) if path.starts_with('/') => Some((name.trim().to_string(), path.to_string())),
        Some(_) => None,
        None if l.starts_with('/') => {
            let name = Path::new(l).file_name()?.to_string_lossy().into_owned();
            Some((name, l.to_string()))
        }
        None => None,
    }
}

/// Make the image path `path` lead to `real` (both absolute image paths)
/// in the mirror, as a relative symbolic link, unless something is there.
fn link_in_mirror(mirror: &Path, path: &str, real: &str) -> std::io::Result<()> {
    if path == real {
        return Ok(());
    }
    let link = mirror.join(path.trim_start_matches('/'));
    if link.symlink_metadata().is_ok() {
        return Ok(());
    }
    let parent = link.parent().unwrap_or(mirror);
    std::fs::create_dir_all(parent)?;
    let depth = Path::new(path).parent().map(|p| p.components().count().saturating_sub(1)).unwrap_or(0);
    let target: PathBuf = std::iter::repeat_n("..", depth).collect::<PathBuf>().join(real.trim_start_matches('/'));
    std::os::unix::fs::symlink(target, link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output() {
        let out = "machine\tx86_64\n\
                   ld_library_path\t/opt/x/lib\n\
                   file\tcffi/_cffi_backend.so\n\
                   ldd\t\tlinux-vdso.so.1 (0x00007ffd5a9f2000)\n\
                   ldd\t\tlibffi.so.8 => /lib/x86_64-linux-gnu/libffi.so.8 (0x00007f1c2a9e0000)\n\
                   ldd\t\tlibpython3.11.so.1.0 => /lib/x86_64-linux-gnu/libpython3.11.so.1.0 (0x00007f1c2a000000)\n\
                   ldd\t\tlibown.so => /quarry/wheel/cffi.libs/libown.so (0x00007f1c2a9e0000)\n\
                   ldd\t\tlibmissing.so.1 => not found\n\
                   ldd\t\t/lib64/ld-linux-x86-64.so.2 (0x00007f1c2aa00000)\n\
                   ldd\tldd: warning: you do not have execution permission for `x'\n";
        let r = parse_resolve(out);
        assert_eq!(r.machine, "x86_64");
        assert_eq!(r.ld_library_path, "/opt/x/lib");
        assert!(!r.no_ldd);
        let libs: Vec<&str> = r.libraries.iter().map(String::as_str).collect();
        assert_eq!(libs, ["/lib/x86_64-linux-gnu/libffi.so.8", "/lib64/ld-linux-x86-64.so.2"]);
        assert!(parse_resolve("machine\taarch64\nno-ldd\n").no_ldd);
    }

    #[test]
    fn mirror_links_are_relative() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("usr/lib/x86_64-linux-gnu/libffi.so.8.1.2");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        std::fs::write(&real, b"elf").unwrap();
        link_in_mirror(d.path(), "/lib/x86_64-linux-gnu/libffi.so.8", "/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2")
            .unwrap();
        let link = d.path().join("lib/x86_64-linux-gnu/libffi.so.8");
        assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from("../../usr/lib/x86_64-linux-gnu/libffi.so.8.1.2"));
        assert_eq!(std::fs::read(&link).unwrap(), b"elf");
        link_in_mirror(d.path(), "/libz.so.1", "/usr/lib/libz.so.1.2").unwrap();
        assert_eq!(std::fs::read_link(d.path().join("libz.so.1")).unwrap(), PathBuf::from("usr/lib/libz.so.1.2"));
    }
}
