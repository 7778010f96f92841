//! `quarry wheel split`: a fat ROCm wheel becomes one host wheel and one
//! device wheel per GPU target (plus sub-family and family wheels for code
//! built for generic processors), as ROCm's framework wheels now ship.
//!
//! Every ELF file with a `.hip_fatbin` is a fat binary. Its code objects go
//! into one `.kpack` archive per architecture (`extract`), under
//! `{package}/.kpack/{group}_{arch}.kpack` of that architecture's device
//! wheel; the binary itself is rewritten for the runtime's kpack lookup
//! (`elf::kpack_ref`: a marker naming the archives and itself, the
//! wrappers retargeted, `.hip_fatbin`'s pages removed), streamed into the
//! host wheel as a splice over the original. Kernel databases (`databases`)
//! move to their target's device wheel. The host wheel keeps its name and
//! gains a `device-<target>` extra per target (`packages`). Every wheel is
//! written by the one zip engine: sorted members, fixed modes and times,
//! a RECORD of urlsafe-base64 hashes that lists itself; the same input
//! gives the same bytes. Every wheel is written in scratch space and all
//! are renamed into place at the end: a failure leaves nothing behind.

pub(crate) mod databases;
pub(crate) mod extract;
pub(crate) mod input;
pub(crate) mod output;
pub mod packages;
pub mod variants;

pub use packages::{Families, Level};
pub use variants::Schema as VariantSchema;

use super::WheelError;
use crate::code_objects::kpack_writer::Scheme;
use crate::code_objects::target_id::TargetId;
use crate::elf::kpack_ref::{self, KpackRef};
use crate::splice::Splice;
use extract::{Archives, BinaryCode};
use input::{Fat, Opened};
use output::Naming;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a split failed; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{file}`: {why}")]
    Binary { file: PathBuf, why: String },
    #[error("kernel `{key}`, bundle entry `{id}`: {why}")]
    Entry { key: String, id: String, why: String },
    #[error("wheel `{wheel}`: {why}")]
    Wheel { wheel: PathBuf, why: String },
    #[error(transparent)]
    Elf(#[from] crate::elf::ElfError),
    #[error(transparent)]
    Other(#[from] WheelError),
    /// What went wrong with one member, named as the wheel holds it.
    #[error("wheel `{wheel}`, member `{member}`: {source}")]
    Member { wheel: PathBuf, member: String, source: Box<SplitError> },
}

impl SplitError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> SplitError {
        SplitError::Io { path: path.to_path_buf(), source }
    }
}

/// How to split.
#[derive(Debug, Clone)]
pub struct SplitOptions {
    /// Device wheels are `{prefix}-{key}`; default `{name}-device`.
    pub device_prefix: Option<String>,
    /// Keep only these processors' code (default: every target found).
    pub targets: Option<Vec<String>>,
    pub families: Families,
    pub scheme: Scheme,
    /// More `Requires-Dist` of each device wheel (`@GFXARCH@`: its target).
    pub device_requires: Vec<String>,
    /// PEP 817 variant host wheels too, one per target, in this schema.
    pub variants: Option<VariantSchema>,
}

/// One wheel a split wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceWheel {
    pub wheel: PathBuf,
    pub name: String,
    pub key: String,
    pub level: Level,
    /// Archives (path in the wheel) and their kernel counts.
    pub kpacks: BTreeMap<String, u32>,
    /// Kernel database files moved here.
    pub databases: Vec<String>,
    pub requires: Vec<String>,
}

/// What a split did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitReport {
    pub input: PathBuf,
    pub host: PathBuf,
    /// Fat binaries rewritten, with their code objects per architecture.
    pub binaries: BTreeMap<String, BinaryCode>,
    pub device: Vec<DeviceWheel>,
    /// With `--variants`: the variant host wheels and `-variants.json`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variants_json: Option<PathBuf>,
    /// Architectures found in the wheel and left out by `--targets`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// The archive file names' group: the project's name, lowercase, `_` for `-`.
pub(crate) fn group_of(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// Device wheels are `{prefix}-{key}`: the one given, else `{name}-device`.
pub(crate) fn prefix_of(given: Option<&str>, name: &str) -> String {
    given.map(str::to_string).unwrap_or_else(|| format!("{}-device", super::name::normalize_name(name)))
}

/// One fat binary rewritten: its code objects into `archives` (those
/// `keep` keeps), and the host binary as a splice over the original, its
/// marker naming the archives beside it under `naming.overlay`.
pub(crate) struct Rewritten {
    pub code: BinaryCode,
    pub splice: Splice,
    pub executable: bool,
}

pub(crate) fn rewrite(
    from: &Opened,
    f: &Fat,
    naming: &Naming,
    archives: &mut Archives,
    keep: &mut dyn FnMut(&TargetId) -> bool,
) -> Result<Rewritten, SplitError> {
    let in_package = &f.rel[naming.overlay.len()..];
    let in_member = |e: SplitError| from.in_member(&f.rel, e);
    let code = extract::extract(&f.path, in_package, &f.layout, archives, keep).map_err(in_member)?;
    let depth = in_package.matches('/').count();
    let marker = KpackRef {
        kpack_search_paths: vec![format!("{}.kpack/{}_@GFXARCH@.kpack", "../".repeat(depth), naming.group)],
        kernel_name: in_package.to_string(),
    };
    let splice = kpack_ref::kpack_host(&f.path, &marker).map_err(|e| in_member(e.into()))?;
    let executable = std::fs::metadata(&f.path)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
        .unwrap_or(false);
    Ok(Rewritten { code, splice, executable })
}

/// Split `wheel` into `out_dir`.
pub fn split(wheel: &Path, out_dir: &Path, options: &SplitOptions) -> Result<SplitReport, SplitError> {
    let opened = input::open(wheel, out_dir, "split")?;
    let group = group_of(&opened.name);
    let prefix = prefix_of(options.device_prefix.as_deref(), &opened.name);

    let wanted: Option<BTreeSet<String>> = options.targets.as_ref().map(|t| t.iter().cloned().collect());
    let keep = |t: &TargetId| wanted.as_ref().is_none_or(|w| w.contains(&t.processor));
    let found: BTreeSet<String> =
        opened.architectures().iter().filter_map(|a| TargetId::parse(a).ok()).map(|t| t.processor).collect();
    if let Some(w) = &wanted {
        let missing: Vec<&str> = w.iter().filter(|t| !found.contains(*t)).map(String::as_str).collect();
        if !missing.is_empty() {
            return Err(opened.error(format!(
                "--targets names {} but its fat binaries hold code for {} only",
                missing.join(", "),
                found.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let dropped: Vec<String> = found.iter().filter(|t| !keep(&TargetId::bare(t))).cloned().collect();

    let by_rel: BTreeMap<&str, &Fat> = opened.fat.iter().map(|f| (f.rel.as_str(), f)).collect();
    let ranked = opened.fat.iter().map(|f| (f.rel.clone(), f.rank())).collect();
    let order = input::order(ranked, &keep);
    let overlay = input::overlay_of(by_rel.keys().copied());
    let naming = Naming {
        overlay: &overlay,
        prefix: &prefix,
        group: &group,
        families: options.families,
        device_requires: &options.device_requires,
        variants: options.variants,
    };
    let staging = opened.unpacked.work.path().join("kpack");
    std::fs::create_dir_all(&staging).map_err(|e| SplitError::io(&staging, e))?;
    let mut archives =
        Archives { dir: staging, group: group.clone(), scheme: options.scheme, writers: BTreeMap::new() };
    let mut binaries = BTreeMap::new();
    let mut substitutes = Vec::new();
    for rel in &order {
        let f = by_rel[rel.as_str()];
        let r = rewrite(&opened, f, &naming, &mut archives, &mut |t| keep(t))?;
        substitutes.push(crate::zip::write::ZipEntry::splice(rel.clone(), Arc::new(r.splice), r.executable));
        binaries.insert(rel.clone(), r.code);
    }
    let mut by_key = output::Packages::new();
    output::finish_archives(&mut archives, &naming, &mut by_key)?;
    output::add_databases(&opened, &keep, options.families, &mut by_key)?;
    let w = output::write(&opened, out_dir, &naming, substitutes, by_key)?;
    Ok(SplitReport {
        input: wheel.to_path_buf(),
        host: w.host,
        binaries,
        device: w.device,
        variants: w.variants,
        variants_json: w.variants_json,
        dropped,
    })
}
