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

mod archives;
pub mod loader;
mod requirements;

use super::archive::WheelZip;
use super::WheelError;
use crate::code_objects::target_id::{uncovered, TargetId};
use crate::code_objects::{bundle, compressed};
use crate::elf::kpack_ref;
use archives::{available_arches, Archives};
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
        let mut meta = Metadata::parse(&String::from_utf8_lossy(&text));
        let variant_json = format!("{dist_info}/variant.json");
        if zip.file_names()?.contains(&variant_json) {
            meta.variant_properties = requirements::variant_properties(&zip.read_file(&variant_json)?);
        }
        if let Some(other) = set.iter().find(|w: &&Wheel| w.meta.name == meta.name) {
            return Err(WheelError::BadMetadata {
                file: path.display().to_string(),
                why: format!(
                    "`{}` is {} too: an install set holds one wheel of each project (of variant wheels, the one \
                     an installer picks for the machine); check each set on its own",
                    other.path.display(),
                    meta.shown
                ),
            });
        }
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
