//! The layout of a runtime package (core, profiler, libraries, device)
//! from its overlaid tree, by the reference's rules (no wheel holds a
//! symlink):
//! - a shared library whose SONAME is not its file name is not shipped: it
//!   is recorded as an alias of the SONAME;
//! - a symlink is resolved in its artifact: dangling or to a directory ->
//!   dropped; to a shared library -> a copy under the link's name if that
//!   name is the SONAME, else an alias; to an executable -> a launcher that
//!   execs `<its own dir>/<the raw link text>`; to anything else -> a copy;
//! - every shipped ELF executable or shared object gets the RPATH of
//!   [`rpath_for`]; launchers, code objects and archives do not.

use super::classify::{Facts, Kind};
use super::collect::{backtrack, file_name, Item, Staged, Target};
use super::PackageError;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub enum Payload {
    /// A file of an artifact, copied as is (or patched, when `rpath` is set).
    Copy(PathBuf),
    /// A native launcher that execs this text, relative to its own directory.
    Launcher(String),
}

#[derive(Debug, Clone)]
pub struct Placed {
    pub payload: Payload,
    pub executable: bool,
    /// The DT_RPATH to write (ELF executables and shared objects).
    pub rpath: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Dropped {
    pub path: String,
    pub reason: String,
}

/// Paths below are relative to the package directory (`lib/libamdhip64.so.7`).
#[derive(Debug, Default, Clone)]
pub struct RuntimeLayout {
    pub files: BTreeMap<String, Placed>,
    /// Path not shipped -> the SONAME it is another name of.
    pub aliases: BTreeMap<String, String>,
    /// Launcher path -> the link text it execs.
    pub launchers: BTreeMap<String, String>,
    pub dropped: Vec<Dropped>,
}

/// The RPATH of a file at `relpath` of a package: the entries it was built
/// with, in order and as they are (a file built with none gets `$ORIGIN`,
/// as ROCm's own builds have it: without it a library could not find its
/// siblings, which Debian's builds rely on the system paths for), then
/// `$ORIGIN/<up to site-packages>/<core>/<sub>` for each of `subs`.
pub fn rpath_for(relpath: &str, built: Option<&str>, core_dir: &str, subs: &[&str]) -> String {
    let up = backtrack(relpath);
    let up = up.trim_end_matches('/');
    let mut entries: Vec<String> = Vec::new();
    match built.filter(|b| !b.is_empty()) {
        Some(b) => entries.push(b.to_string()),
        None => entries.push("$ORIGIN".into()),
    }
    for s in subs {
        entries.push(format!("$ORIGIN/{up}/{core_dir}/{s}"));
    }
    entries.join(":")
}

/// Facts of every regular file and symlink target of `staged`, by source path.
pub fn facts(staged: &Staged) -> Result<HashMap<PathBuf, Facts>, PackageError> {
    let mut sources: Vec<(PathBuf, String)> = Vec::new();
    for (rel, item) in &staged.items {
        match item {
            Item::File { src, .. } => sources.push((src.clone(), file_name(rel).to_string())),
            Item::Symlink { target: Target::File { src, .. }, .. } => {
                let name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                sources.push((src.clone(), name));
            }
            _ => {}
        }
    }
    sources.sort();
    sources.dedup_by(|a, b| a.0 == b.0);
    sources.par_iter().map(|(src, name)| super::classify::classify(src, name).map(|f| (src.clone(), f))).collect()
}

/// Lay out a runtime package whose ELF files search `subs` of `core_dir`.
pub fn layout(
    staged: &Staged,
    facts: &HashMap<PathBuf, Facts>,
    core_dir: &str,
    subs: &[&str],
) -> Result<RuntimeLayout, PackageError> {
    let mut out = RuntimeLayout::default();
    let place = |out: &mut RuntimeLayout, rel: &str, src: &PathBuf, executable: bool, f: &Facts| {
        let rpath = f.patchable.then(|| rpath_for(rel, f.built_rpath.as_deref(), core_dir, subs));
        out.files.insert(rel.to_string(), Placed { payload: Payload::Copy(src.clone()), executable, rpath });
    };
    for (rel, item) in &staged.items {
        match item {
            Item::Dir => {}
            Item::File { src, executable } => {
                let f = &facts[src];
                match (&f.kind, &f.soname) {
                    (Kind::SharedObject, Some(soname)) if soname != file_name(rel) => {
                        out.aliases.insert(rel.clone(), soname.clone());
                    }
                    _ => place(&mut out, rel, src, *executable, f),
                }
            }
            Item::Symlink { text, target } => match target {
                Target::Dangling => out.dropped.push(Dropped {
                    path: rel.clone(),
                    reason: "dangling symlink (its target is not in its artifact)".into(),
                }),
                Target::Dir => out.dropped.push(Dropped {
                    path: rel.clone(),
                    reason: "symlink to a directory (wheels cannot hold symlinks)".into(),
                }),
                Target::File { src, executable } => {
                    let f = &facts[src];
                    match (&f.kind, &f.soname) {
                        (Kind::SharedObject, Some(soname)) if soname == file_name(rel) => {
                            place(&mut out, rel, src, *executable, f)
                        }
                        (Kind::SharedObject, Some(soname)) => {
                            out.aliases.insert(rel.clone(), soname.clone());
                        }
                        (Kind::Executable, _) => {
                            out.launchers.insert(rel.clone(), text.clone());
                            out.files.insert(
                                rel.clone(),
                                Placed { payload: Payload::Launcher(text.clone()), executable: true, rpath: None },
                            );
                        }
                        _ => place(&mut out, rel, src, *executable, f),
                    }
                }
            },
        }
    }
    Ok(out)
}

/// A device package's layout: every file, and every symlink to a file, is
/// a copy (no SONAME rule: device code is data); ELF files get the RPATH.
pub fn device_layout(staged: &Staged, facts: &HashMap<PathBuf, Facts>, core_dir: &str, subs: &[&str]) -> RuntimeLayout {
    let mut out = RuntimeLayout::default();
    for (rel, item) in &staged.items {
        let (src, executable) = match item {
            Item::File { src, executable } => (src, *executable),
            Item::Symlink { target: Target::File { src, executable }, .. } => (src, *executable),
            Item::Symlink { .. } => {
                out.dropped.push(Dropped { path: rel.clone(), reason: "symlink to no file of its artifact".into() });
                continue;
            }
            Item::Dir => continue,
        };
        let f = &facts[src];
        let rpath = f.patchable.then(|| rpath_for(rel, f.built_rpath.as_deref(), core_dir, subs));
        out.files.insert(rel.clone(), Placed { payload: Payload::Copy(src.clone()), executable, rpath });
    }
    out
}

/// The profiler package also ships each real `lib/librocprof-sys*.so.*` and
/// `lib/libprofiler-hub*.so.*` under its unversioned name (a second copy).
pub fn add_unversioned_profiler_copies(layout: &mut RuntimeLayout) {
    let mut extra = Vec::new();
    for (rel, placed) in &layout.files {
        let Some(name) = rel.strip_prefix("lib/").filter(|n| !n.contains('/')) else { continue };
        if !(name.starts_with("librocprof-sys") || name.starts_with("libprofiler-hub")) {
            continue;
        }
        if let Some(i) = name.find(".so.") {
            let plain = format!("lib/{}.so", &name[..i]);
            if !layout.files.contains_key(&plain) {
                extra.push((plain, placed.clone()));
            }
        }
    }
    for (rel, placed) in extra {
        layout.files.entry(rel).or_insert(placed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpath_strings_as_the_reference_writes_them() {
        let core = ["lib/llvm/lib", "lib/rocm_sysdeps/lib"];
        assert_eq!(
            rpath_for("lib/libamdhip64.so.7", Some("$ORIGIN"), "_rocm_sdk_core", &core),
            "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib/llvm/lib:$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib"
        );
        assert_eq!(
            rpath_for("lib/llvm/bin/clang-20", Some("$ORIGIN/../lib:/build/x"), "_rocm_sdk_core", &core[..1]),
            "$ORIGIN/../lib:/build/x:$ORIGIN/../../../../_rocm_sdk_core/lib/llvm/lib"
        );
        assert_eq!(rpath_for("x.so", None, "_rocm_sdk_core", &["lib"]), "$ORIGIN:$ORIGIN/../_rocm_sdk_core/lib");
    }
}
