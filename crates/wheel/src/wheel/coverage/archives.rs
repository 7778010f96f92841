//! The archives a device-split binary's kernels are looked up in, as
//! ROCm's kpack loader opens them: the marker's search paths resolved from
//! the binary's directory within the install set, or archives on this
//! machine from `ROCM_KPACK_PATH` / `ROCM_KPACK_PATH_PREFIX`; each read
//! once, with its architectures.

use super::{loader, Runtime, Wheel};
use crate::code_objects::kpack;
use crate::code_objects::target_id::TargetId;
use crate::wheel::WheelError;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `dir/rel`, with `..` resolved; None when it leaves the tree.
pub(super) fn resolve(dir: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in rel.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// The architectures archives exist for, for a binary in `dir`.
pub(super) fn available_arches(tree: &BTreeMap<String, usize>, dir: &str, search_paths: &[String]) -> Vec<TargetId> {
    let mut out = Vec::new();
    for p in search_paths {
        let Some((before, after)) = p.split_once("@GFXARCH@") else { continue };
        let Some(prefix) = resolve(dir, &format!("{before}X")).map(|s| s[..s.len() - 1].to_string()) else { continue };
        for name in tree.keys().filter(|n| n.starts_with(&prefix) && n.ends_with(after)) {
            let arch = &name[prefix.len()..name.len() - after.len()];
            if !arch.contains('/') {
                out.extend(TargetId::parse(arch).ok());
            }
        }
    }
    out
}

/// Archives read so far: by member path, or `file:PATH` for one on disk
/// (`ROCM_KPACK_PATH`, `ROCM_KPACK_PATH_PREFIX`), with the wheel that
/// holds it (None on disk), its architectures and its bytes.
pub(super) struct Archives {
    pub cache: BTreeMap<String, ReadArchive>,
}

/// An archive read: the wheel holding it (None on disk), its
/// architectures, its bytes.
pub(super) type ReadArchive = (Option<usize>, Vec<String>, Vec<u8>);

/// Where the loader found a kernel: the wheel (None on disk) and the
/// archive's path; or why it found none.
pub(super) type Found = Result<(Option<usize>, Option<String>), String>;

/// Where the loader looks for an archive.
enum Source {
    /// A member of the install set.
    Tree(String),
    /// A file on this machine, from the environment.
    Disk(PathBuf),
}

impl Archives {
    /// The archives the loader opens for `candidate`, in order: with
    /// `ROCM_KPACK_PATH` those paths alone; else `ROCM_KPACK_PATH_PREFIX`'s,
    /// then the marker's search paths (`@GFXARCH@` expanded).
    fn sources(runtime: &Runtime, dir: &str, search_paths: &[String], candidate: &str) -> Vec<Source> {
        let disk = |paths: &[PathBuf]| -> Vec<Source> {
            paths
                .iter()
                .map(|p| Source::Disk(PathBuf::from(p.to_string_lossy().replace("@GFXARCH@", candidate))))
                .collect()
        };
        if !runtime.kpack_path.is_empty() {
            return disk(&runtime.kpack_path);
        }
        let mut out = disk(&runtime.kpack_path_prefix);
        out.extend(
            search_paths.iter().filter_map(|p| resolve(dir, &p.replacen("@GFXARCH@", candidate, 1))).map(Source::Tree),
        );
        out
    }

    /// Read (once) the archive `source` names, if it exists: its cache key.
    fn open(
        &mut self,
        set: &mut [Wheel],
        tree: &BTreeMap<String, usize>,
        source: &Source,
    ) -> Result<Option<String>, WheelError> {
        let (key, holder) = match source {
            Source::Tree(path) => match tree.get(path) {
                Some(&w) => (path.clone(), Some(w)),
                None => return Ok(None),
            },
            Source::Disk(path) if path.is_file() => (format!("file:{}", path.display()), None),
            Source::Disk(_) => return Ok(None),
        };
        if !self.cache.contains_key(&key) {
            let (data, label) = match (source, holder) {
                (Source::Tree(path), Some(w)) => (set[w].zip.read_member(path)?, format!("{}:{path}", set[w].label())),
                (Source::Disk(path), _) => (
                    std::fs::read(path).map_err(|source| WheelError::Io { path: path.clone(), source })?,
                    path.display().to_string(),
                ),
                _ => return Ok(None),
            };
            let arches =
                kpack::arches(&data).map_err(|e| WheelError::BadMetadata { file: label, why: e.to_string() })?;
            self.cache.insert(key.clone(), (holder, arches, data));
        }
        Ok(Some(key))
    }

    /// The wheel whose archive the loader takes `key` from on `mode` (None:
    /// an archive on disk), with a note when it fell through to it; or why
    /// the load fails.
    #[allow(clippy::too_many_arguments)]
    pub fn lookup(
        &mut self,
        set: &mut [Wheel],
        tree: &BTreeMap<String, usize>,
        dir: &str,
        search_paths: &[String],
        mode: &TargetId,
        key: &str,
        runtime: &Runtime,
    ) -> Result<Found, WheelError> {
        let loader = runtime.loader;
        let mut tried = Vec::new();
        // Archives that had the candidate but not the kernel (fall-through).
        let mut lacking = Vec::new();
        for candidate in loader::candidates(mode) {
            for source in Self::sources(runtime, dir, search_paths, &candidate) {
                let shown = match &source {
                    Source::Tree(p) => p.clone(),
                    Source::Disk(p) => p.display().to_string(),
                };
                tried.push(shown.clone());
                let Some(at) = self.open(set, tree, &source)? else { continue };
                let (w, arches, data) = &self.cache[&at];
                if !arches.contains(&candidate) {
                    continue;
                }
                let whose = match w {
                    Some(w) => set[*w].label(),
                    None => "on disk, from the environment".to_string(),
                };
                match kpack::has_kernel(data, key, &candidate) {
                    Ok(true) => {
                        let note = (!lacking.is_empty()).then(|| {
                            format!(
                                "kernel `{key}` comes from `{shown}` for {candidate}: {} lack it (the {} loader falls through; rocm-7 would fail)",
                                lacking.join(", "),
                                loader.name()
                            )
                        });
                        return Ok(Ok((*w, note)));
                    }
                    Ok(false) if loader.falls_through() => {
                        lacking.push(format!("`{shown}` ({whose}) for {candidate}"));
                        break;
                    }
                    Ok(false) => {
                        return Ok(Err(format!(
                        "`{shown}` ({whose}) has no kernel `{key}` for {candidate}; the {} loader stops at the first \
                             archive that matches and does not fall back to a less specific one",
                        loader.name()
                    )))
                    }
                    Err(e) => return Ok(Err(format!("`{shown}`: {e}"))),
                }
            }
        }
        tried.dedup();
        if !lacking.is_empty() {
            return Ok(Err(format!(
                "no kernel `{key}` in {}, nor in a less specific archive (the {} loader falls through to them)",
                lacking.join(", "),
                loader.name()
            )));
        }
        Ok(Err(if runtime.kpack_path.is_empty() {
            format!(
                "no archive holds `{key}`: none of {} is installed (install the device-{} extra)",
                tried.join(", "),
                mode.processor
            )
        } else {
            format!(
                "no archive holds `{key}`: none of {} exists (ROCM_KPACK_PATH replaces the marker's search paths)",
                tried.join(", ")
            )
        }))
    }
}
