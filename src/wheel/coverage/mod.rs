//! `quarry wheel check --targets`: does an install set (a host wheel and
//! its device, family and `rocm-sdk-device-*` wheels, or a fat wheel) hold
//! code the HIP runtime would load on each target, and does installing the
//! host wheel's `device-<target>` extra pull every wheel that code is in?
//!
//! The wheels are laid over each other as pip installs them (one tree, by
//! member path). Fat binaries are checked per wrapper as the runtime
//! registers them; device-split binaries through their marker, as ROCm's
//! kpack loader resolves it (`loader`). Each problem names the binary, the
//! target (the device mode, when the request leaves a feature open) and
//! what is missing.

pub mod loader;
mod requirements;

use super::archive::WheelZip;
use super::WheelError;
use crate::code_objects::target_id::{uncovered, TargetId};
use crate::code_objects::{bundle, compressed, kpack};
use crate::elf::kpack_ref;
use object::{Object, ObjectSection};
use requirements::Metadata;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One thing an install set lacks.
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct Problem {
    /// The requested target, or the device mode it was checked as.
    pub target: String,
    /// `WHEEL:MEMBER` of the binary (or the wheel, for requirements).
    pub binary: String,
    pub why: String,
}

/// What `check_targets` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CoverageReport {
    pub targets: Vec<String>,
    /// The kpack loader modelled (`rocm-7`, `rocm-10`).
    pub loader: &'static str,
    /// Binaries with GPU code, `WHEEL:MEMBER`.
    pub binaries: Vec<String>,
    pub problems: Vec<Problem>,
    /// Kernels found only by falling through to a less specific archive:
    /// fine on the loader checked, a failure on `rocm-7`.
    pub notes: Vec<Problem>,
}

/// One wheel of the set.
struct Wheel {
    path: PathBuf,
    zip: WheelZip,
    meta: Metadata,
}

impl Wheel {
    fn label(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// A binary with GPU code.
enum Binary {
    /// Per wrapper, the target ids of its bundle's code objects.
    Fat(Vec<Vec<String>>),
    /// The marker's search paths and kernel name, and the wrapper count.
    Split { search_paths: Vec<String>, kernel_name: String, wrappers: usize },
}

#[derive(serde::Deserialize)]
struct Marker {
    kpack_search_paths: Vec<String>,
    kernel_name: String,
}

/// How the runtime that loads the set is set up.
#[derive(Debug, Clone, Default)]
pub struct Runtime {
    pub loader: loader::Loader,
    /// `ROCM_KPACK_DISABLE` is set: device-split binaries are refused.
    pub kpack_disabled: bool,
    /// `ROCM_KPACK_PATH`: archives on this machine that replace the
    /// marker's search paths.
    pub kpack_path: Vec<PathBuf>,
    /// `ROCM_KPACK_PATH_PREFIX`: archives looked at before the marker's.
    pub kpack_path_prefix: Vec<PathBuf>,
}

/// Check `wheels` (one install set) for every target in `targets`.
pub fn check_targets(wheels: &[PathBuf], targets: &[String], runtime: Runtime) -> Result<CoverageReport, WheelError> {
    let requested: Vec<TargetId> = targets
        .iter()
        .map(|t| {
            TargetId::parse(t).map_err(|e| WheelError::BadMetadata { file: "--targets".into(), why: e.to_string() })
        })
        .collect::<Result<_, _>>()?;
    let mut set = Vec::new();
    for path in wheels {
        let mut zip = WheelZip::open(path)?;
        let dist_info = zip.dist_info_dir()?;
        let text = zip.read_file(&format!("{dist_info}/METADATA"))?;
        let meta = Metadata::parse(&String::from_utf8_lossy(&text));
        set.push(Wheel { path: path.clone(), zip, meta });
    }
    // The installed tree: member path -> the wheel that puts it there.
    let mut tree: BTreeMap<String, usize> = BTreeMap::new();
    for (i, w) in set.iter().enumerate() {
        for name in w.zip.file_names()? {
            tree.insert(name, i);
        }
    }
    let scratch = tempfile::tempdir().map_err(|source| WheelError::Io { path: std::env::temp_dir(), source })?;
    let mut binaries = Vec::new();
    for (name, &i) in &tree {
        if let Some(b) = read_binary(&mut set[i], name, scratch.path())? {
            binaries.push((name.clone(), i, b));
        }
    }
    let mut archives = Archives { cache: BTreeMap::new() };
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    for t in &requested {
        for (name, i, b) in &binaries {
            let label = format!("{}:{name}", set[*i].label());
            match b {
                Binary::Fat(wrappers) => {
                    for (w, codes) in wrappers.iter().enumerate() {
                        for missing in uncovered(&t.to_string(), codes).unwrap_or_default() {
                            let why =
                                format!("wrapper {w} has no code object that runs there (it has {})", or_none(codes));
                            problems.push(Problem { target: missing, binary: label.clone(), why });
                        }
                    }
                }
                Binary::Split { .. } if runtime.kpack_disabled => {
                    let why = "ROCM_KPACK_DISABLE is set: the runtime refuses device-split (HIPK) binaries; \
                               unset it, or install fat wheels"
                        .to_string();
                    problems.push(Problem { target: t.to_string(), binary: label.clone(), why });
                }
                Binary::Split { search_paths, kernel_name, wrappers } => {
                    let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
                    let available = available_arches(&tree, dir, search_paths);
                    let mut needed = BTreeSet::new();
                    for mode in loader::modes(t, &available) {
                        for w in 0..*wrappers {
                            let key = format!("{kernel_name}#{w}");
                            match archives.lookup(&mut set, &tree, dir, search_paths, &mode, &key, &runtime)? {
                                Ok((holder, fell_through)) => {
                                    // An archive on disk needs no wheel pulled.
                                    needed.extend(holder);
                                    if let Some(why) = fell_through {
                                        notes.push(Problem { target: mode.to_string(), binary: label.clone(), why });
                                    }
                                }
                                Err(why) => {
                                    problems.push(Problem { target: mode.to_string(), binary: label.clone(), why })
                                }
                            }
                        }
                    }
                    problems.extend(
                        requirements::pulled(&set.iter().map(|w| &w.meta).collect::<Vec<_>>(), *i, &needed, t)
                            .into_iter()
                            .map(|why| Problem { target: t.to_string(), binary: label.clone(), why }),
                    );
                }
            }
        }
    }
    problems.dedup();
    notes.dedup();
    Ok(CoverageReport {
        targets: requested.iter().map(|t| t.to_string()).collect(),
        loader: runtime.loader.name(),
        binaries: binaries.iter().map(|(n, i, _)| format!("{}:{n}", set[*i].label())).collect(),
        problems,
        notes,
    })
}

fn or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The member `name` as a binary with GPU code, if it is one.
fn read_binary(w: &mut Wheel, name: &str, scratch: &Path) -> Result<Option<Binary>, WheelError> {
    if name.split('/').next().is_some_and(|top| top.ends_with(".dist-info")) || name.ends_with(".kpack") {
        return Ok(None);
    }
    let data = w.zip.read_member(name)?;
    if !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let Ok(elf) = object::File::parse(&*data) else { return Ok(None) };
    let bad = |why: String| WheelError::BadMetadata { file: format!("{}:{name}", w.label()), why };
    if let Some(marker) = elf.section_by_name(".rocm_kpack_ref") {
        let m: Marker = rmp_serde::from_slice(marker.data().unwrap_or_default())
            .map_err(|e| bad(format!("its .rocm_kpack_ref does not parse: {e}")))?;
        let wrappers = elf.section_by_name(".hipFatBinSegment").map_or(0, |s| s.size() as usize / 24);
        return Ok(Some(Binary::Split { search_paths: m.kpack_search_paths, kernel_name: m.kernel_name, wrappers }));
    }
    let fat = elf.section_by_name(".hip_fatbin").filter(|s| s.file_range().is_some());
    if fat.is_none() {
        return Ok(None);
    }
    // The wrappers' bundles, found as the splitter finds them (from a file).
    let file = scratch.join("binary");
    std::fs::write(&file, &data).map_err(|source| WheelError::Io { path: file.clone(), source })?;
    let Some(f) = kpack_ref::read_fat_binary(&file)? else { return Ok(None) };
    let section = &data[f.fatbin_offset as usize..(f.fatbin_offset + f.fatbin_size) as usize];
    let mut wrappers = Vec::new();
    for &at in &f.wrappers {
        let mut ids = Vec::new();
        let rest = &section[at as usize..];
        let read = if rest.starts_with(bundle::MAGIC) {
            bundle::read(&mut &rest[..], Some(rest.len() as u64))
        } else {
            compressed::read(rest).map(|c| c.bundle)
        };
        let b = read.map_err(|e| bad(format!("the bundle at offset {at:#x} of .hip_fatbin: {e}")))?;
        for e in &b.entries {
            let Some(id) = bundle::EntryId::parse(&e.id) else { continue };
            if !id.is_host() && e.size > 0 {
                ids.extend(TargetId::parse(&id.target).ok().map(|t| t.to_string()));
            }
        }
        wrappers.push(ids);
    }
    Ok(Some(Binary::Fat(wrappers)))
}

/// `dir/rel`, with `..` resolved; None when it leaves the tree.
fn resolve(dir: &str, rel: &str) -> Option<String> {
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
fn available_arches(tree: &BTreeMap<String, usize>, dir: &str, search_paths: &[String]) -> Vec<TargetId> {
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
struct Archives {
    cache: BTreeMap<String, (Option<usize>, Vec<String>, Vec<u8>)>,
}

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
    fn lookup(
        &mut self,
        set: &mut [Wheel],
        tree: &BTreeMap<String, usize>,
        dir: &str,
        search_paths: &[String],
        mode: &TargetId,
        key: &str,
        runtime: &Runtime,
    ) -> Result<Result<(Option<usize>, Option<String>), String>, WheelError> {
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
