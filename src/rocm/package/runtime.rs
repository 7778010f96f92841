//! The layout of a runtime package (core, libraries, device) from its
//! overlaid tree, following the rules for runtime wheels:
//! - a shared library appears once, under its SONAME; its other names are
//!   recorded as aliases, not copied;
//! - a symlink to an executable becomes a launcher (see `launcher`);
//! - dangling symlinks and symlinks to directories are dropped (listed in
//!   the report);
//! - a symlink to any other file becomes a copy of that file;
//! - so no wheel holds a symlink.

use super::collect::{file_name, join_link, parent, relative, Item, Resolved, Staged};
use super::PackageError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// EM_X86_64: the host architecture of the `linux_x86_64` wheels.
const EM_X86_64: u16 = 62;

#[derive(Debug, Clone)]
pub enum Payload {
    /// A file of an artifact, copied as is (or patched, for ELF files).
    Copy(PathBuf),
    /// A native launcher that execs this target, relative to its own directory.
    Launcher(String),
}

#[derive(Debug, Clone)]
pub struct Placed {
    pub payload: Payload,
    pub executable: bool,
    /// A dynamically linked x86-64 ELF file: it gets the package's RPATH.
    pub host_elf: bool,
    /// DT_SONAME of a shared library.
    pub soname: Option<String>,
    /// DT_RPATH/DT_RUNPATH as built (its `$ORIGIN` entries are kept).
    pub rpath: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Dropped {
    pub path: String,
    pub reason: String,
}

/// Paths below are relative to the install root, which is also the
/// package directory's root (`lib/libamdhip64.so.7`).
#[derive(Debug, Default, Clone)]
pub struct RuntimeLayout {
    pub files: BTreeMap<String, Placed>,
    /// Install path of every regular file taken -> its path in the package.
    pub placed: BTreeMap<String, String>,
    /// Alias (another name of a shared library) -> the SONAME file's path.
    pub aliases: BTreeMap<String, String>,
    /// Launcher path -> its relative target.
    pub launchers: BTreeMap<String, String>,
    pub dropped: Vec<Dropped>,
}

struct FileFacts {
    src: PathBuf,
    executable: bool,
    host_elf: bool,
    soname: Option<String>,
    rpath: Option<String>,
}

fn facts(src: &Path, executable: bool) -> Result<FileFacts, PackageError> {
    let mut f = FileFacts { src: src.to_path_buf(), executable, host_elf: false, soname: None, rpath: None };
    if crate::elf::is_elf(src) {
        let info = crate::elf::read(src)?;
        f.host_elf = info.machine == EM_X86_64 && (info.e_type == 3 || info.interpreter.is_some());
        if f.host_elf {
            f.soname = info.soname.clone();
            f.rpath = info.rpath.clone().or(info.runpath.clone());
        }
    }
    Ok(f)
}

/// Lay out a runtime package from its overlaid tree.
pub fn layout(staged: &Staged) -> Result<RuntimeLayout, PackageError> {
    let mut out = RuntimeLayout::default();
    let files: Vec<(&String, &PathBuf, bool)> = staged
        .items
        .iter()
        .filter_map(|(p, it)| match it {
            Item::File { src, executable } => Some((p, src, *executable)),
            _ => None,
        })
        .collect();
    let facts: Vec<FileFacts> = {
        use rayon::prelude::*;
        files.par_iter().map(|(_, src, x)| facts(src, *x)).collect::<Result<_, _>>()?
    };
    let mut by_path: BTreeMap<&str, &FileFacts> = BTreeMap::new();
    // Pass 1: regular files, shared libraries under their SONAME.
    for ((path, _, _), f) in files.iter().zip(&facts) {
        by_path.insert(path.as_str(), f);
        let mut dest = path.to_string();
        if let Some(soname) = &f.soname {
            let name = file_name(path);
            let candidate = join_link(parent(path), soname).unwrap_or_default();
            let is_versioned_name = name.starts_with(soname.as_str());
            let linked = staged.resolve(&candidate) == Resolved::File(path.to_string());
            let taken = matches!(staged.items.get(&candidate), Some(Item::File { .. }));
            if name != soname
                && !soname.contains('/')
                && !taken
                && (is_versioned_name || linked)
                && !out.files.contains_key(&candidate)
            {
                dest = candidate;
            }
        }
        if dest != **path {
            out.aliases.insert(path.to_string(), dest.clone());
        }
        out.placed.insert(path.to_string(), dest.clone());
        out.files.insert(
            dest,
            Placed {
                payload: Payload::Copy(f.src.clone()),
                executable: f.executable,
                host_elf: f.host_elf,
                soname: f.soname.clone(),
                rpath: f.rpath.clone(),
            },
        );
    }
    // Pass 2: symlinks.
    for (path, item) in &staged.items {
        let Item::Symlink(_) = item else { continue };
        let drop = |reason: &str| Dropped { path: path.clone(), reason: reason.into() };
        match staged.resolve(path) {
            Resolved::Dangling => out.dropped.push(drop("dangling symlink (its target is not in this package)")),
            Resolved::Dir(_) => out.dropped.push(drop("symlink to a directory (wheels cannot hold symlinks)")),
            Resolved::File(target) => {
                let f = by_path[target.as_str()];
                let dest = out.placed[&target].clone();
                if dest == *path || out.files.contains_key(path) {
                    continue; // the file itself sits here
                }
                if f.soname.is_some() {
                    out.aliases.insert(path.clone(), dest);
                } else if f.executable {
                    let rel = relative(parent(path), &dest);
                    out.launchers.insert(path.clone(), rel.clone());
                    out.files.insert(
                        path.clone(),
                        Placed {
                            payload: Payload::Launcher(rel),
                            executable: true,
                            host_elf: true,
                            soname: None,
                            rpath: None,
                        },
                    );
                } else {
                    out.files.insert(
                        path.clone(),
                        Placed {
                            payload: Payload::Copy(f.src.clone()),
                            executable: false,
                            host_elf: f.host_elf,
                            soname: None,
                            rpath: f.rpath.clone(),
                        },
                    );
                }
            }
        }
    }
    Ok(out)
}

/// `libamdhip64.so.7` -> `amdhip64` (the short names `find_libraries` takes).
pub fn short_name(soname: &str) -> Option<&str> {
    let stem = soname.strip_prefix("lib")?;
    let end = stem.find(".so")?;
    (end > 0).then(|| &stem[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert_eq!(short_name("libamdhip64.so.7"), Some("amdhip64"));
        assert_eq!(short_name("librocblas.so"), Some("rocblas"));
        assert_eq!(short_name("ld-linux.so.2"), None);
    }
}
