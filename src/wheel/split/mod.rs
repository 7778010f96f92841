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

mod databases;
mod extract;
pub mod packages;

pub use packages::{Families, Level};

use super::archive::{pack_dir_with, write_wheel};
use super::unpack::unpack;
use super::WheelError;
use crate::code_objects::kpack_writer::Scheme;
use crate::code_objects::target_id::TargetId;
use crate::elf::kpack_ref::{self, KpackRef};
use crate::zip::write::ZipEntry;
use extract::{Archives, BinaryCode};
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
    /// Architectures found in the wheel and left out by `--targets`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// Does the ELF file at `path` have a `.hip_fatbin` section? (Code
/// objects and other machines' files are ELF too; only host binaries with
/// device code are split.)
fn has_fatbin(path: &Path) -> Result<bool, SplitError> {
    use object::Object;
    let file = std::fs::File::open(path).map_err(|e| SplitError::io(path, e))?;
    // SAFETY: the file is in the split's own scratch directory, not changed while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| SplitError::io(path, e))?;
    Ok(object::File::parse(&*map).is_ok_and(|f| f.section_by_name(".hip_fatbin").is_some()))
}

/// What goes into one device wheel.
struct Package {
    level: Level,
    entries: Vec<ZipEntry>,
    kpacks: BTreeMap<String, u32>,
    databases: Vec<String>,
}

impl Package {
    fn new(level: Level) -> Package {
        Package { level, entries: Vec::new(), kpacks: BTreeMap::new(), databases: Vec::new() }
    }
}

/// What every device wheel of one split shares.
struct DeviceOf<'a> {
    /// The host project's name and version.
    name: &'a str,
    version: &'a str,
    prefix: &'a str,
    overlay: &'a str,
    /// The host wheel's file name: the device wheels take its tags.
    wheel: &'a super::name::WheelName,
    time: zip::DateTime,
}

impl DeviceOf<'_> {
    /// Write the device wheel of `key` into `dir`.
    fn write(&self, dir: &Path, key: String, p: Package, requires: Vec<String>) -> Result<DeviceWheel, SplitError> {
        let Package { level, mut entries, kpacks, databases } = p;
        let (version, n) = (self.version, self.wheel);
        let dist = packages::dist_name(self.prefix, &key);
        let stem = format!("{}-{version}", dist.replace('-', "_"));
        let dist_info = format!("{stem}.dist-info");
        let meta = packages::device_metadata(&dist, version, self.name, &key, &requires, self.prefix);
        let wheel_file = format!(
            "Wheel-Version: 1.0\nGenerator: quarry {}\nRoot-Is-Purelib: false\n{}",
            env!("CARGO_PKG_VERSION"),
            n.expanded_tags().iter().map(|t| format!("Tag: {t}\n")).collect::<String>()
        );
        entries.push(ZipEntry::bytes(format!("{dist_info}/METADATA"), meta));
        entries.push(ZipEntry::bytes(format!("{dist_info}/WHEEL"), wheel_file));
        if !self.overlay.is_empty() {
            let top = format!("{}\n", self.overlay.trim_end_matches('/'));
            entries.push(ZipEntry::bytes(format!("{dist_info}/top_level.txt"), top));
        }
        let tags = format!("{}-{}-{}", n.python_tags.join("."), n.abi_tags.join("."), n.platform_tags.join("."));
        let out = dir.join(format!("{stem}-{tags}.whl"));
        write_wheel(&out, &dist_info, entries, self.time)?;
        Ok(DeviceWheel { wheel: out, name: dist, key, level, kpacks, databases, requires })
    }
}

/// A fat binary of the wheel: its path in the wheel, on disk, and its wrappers.
type Fat = (String, PathBuf, kpack_ref::FatBinary);

/// The wheel's fat binaries, in the order their kernels are numbered.
fn fat_binaries(wheel: &Path, u: &super::unpack::Unpacked) -> Result<Vec<Fat>, SplitError> {
    let mut fat = Vec::new();
    for rel in &u.scan.extracted {
        let path = u.root.join(rel);
        let in_member =
            |e: SplitError| SplitError::Member { wheel: wheel.to_path_buf(), member: rel.clone(), source: Box::new(e) };
        if !crate::elf::is_elf(&path) || !has_fatbin(&path).map_err(in_member)? {
            continue;
        }
        if let Some(f) = kpack_ref::read_fat_binary(&path).map_err(|e| in_member(e.into()))? {
            fat.push((rel.clone(), path, f));
        }
    }
    // Largest first, as ROCm's splitter numbers them (its ordinals then
    // match ours), ties by path: the order is the same on every machine.
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    fat.sort_by(|a, b| size(&b.1).cmp(&size(&a.1)).then_with(|| a.0.cmp(&b.0)));
    if fat.is_empty() {
        return Err(SplitError::Wheel {
            wheel: wheel.to_path_buf(),
            why: "it holds no fat binary (no ELF file with a .hip_fatbin section): nothing to split".into(),
        });
    }
    Ok(fat)
}

/// Where archives and rewritten binaries are placed from: the package
/// directory that holds the fat binaries (`torch/`), or the wheel's root
/// if several do.
fn overlay_of(fat: &[Fat]) -> String {
    let tops: BTreeSet<&str> = fat.iter().map(|(rel, _, _)| rel.split('/').next().unwrap_or("")).collect();
    match tops.iter().next() {
        Some(top) if tops.len() == 1 && fat.iter().all(|(rel, _, _)| rel.contains('/')) => format!("{top}/"),
        _ => String::new(),
    }
}

/// Split `wheel` into `out_dir`.
pub fn split(wheel: &Path, out_dir: &Path, options: &SplitOptions) -> Result<SplitReport, SplitError> {
    let wheel_err = |why: String| SplitError::Wheel { wheel: wheel.to_path_buf(), why };
    let u = unpack(wheel, out_dir, "split")?;
    let time = u.zip_time()?;
    let metadata_path = u.root.join(&u.dist_info).join("METADATA");
    let metadata = std::fs::read_to_string(&metadata_path).map_err(|e| SplitError::io(&metadata_path, e))?;
    let field = |k: &str| super::metadata::header_values(&metadata, k).first().map(|v| v.trim().to_string());
    let (name, version) = match (field("Name"), field("Version")) {
        (Some(n), Some(v)) => (n, v),
        _ => return Err(wheel_err("its METADATA has no Name or Version".into())),
    };
    let group = name.to_lowercase().replace('-', "_");
    let prefix =
        options.device_prefix.clone().unwrap_or_else(|| format!("{}-device", super::name::normalize_name(&name)));

    let fat = fat_binaries(wheel, &u)?;
    let overlay = overlay_of(&fat);

    let wanted: Option<BTreeSet<String>> = options.targets.as_ref().map(|t| t.iter().cloned().collect());
    let mut found: BTreeSet<String> = BTreeSet::new();
    let keep = |t: &TargetId| wanted.as_ref().is_none_or(|w| w.contains(&t.processor));
    let staging = u.work.path().join("kpack");
    std::fs::create_dir_all(&staging).map_err(|e| SplitError::io(&staging, e))?;
    let mut archives =
        Archives { dir: staging.clone(), group: group.clone(), scheme: options.scheme, writers: BTreeMap::new() };
    let mut binaries = BTreeMap::new();
    let mut substitutes = Vec::new();
    for (rel, path, f) in &fat {
        let in_package = &rel[overlay.len()..];
        let mut all = |t: &TargetId| {
            found.insert(t.processor.clone());
            keep(t)
        };
        let in_member =
            |e: SplitError| SplitError::Member { wheel: wheel.to_path_buf(), member: rel.clone(), source: Box::new(e) };
        let code = extract::extract(path, in_package, f, &mut archives, &mut all).map_err(in_member)?;
        let depth = in_package.matches('/').count();
        let marker = KpackRef {
            kpack_search_paths: vec![format!("{}.kpack/{group}_@GFXARCH@.kpack", "../".repeat(depth))],
            kernel_name: in_package.to_string(),
        };
        let splice = kpack_ref::kpack_host(path, &marker).map_err(|e| in_member(e.into()))?;
        let executable = std::fs::metadata(path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
            .unwrap_or(false);
        substitutes.push(ZipEntry::splice(rel.clone(), Arc::new(splice), executable));
        binaries.insert(rel.clone(), code);
    }
    if let Some(w) = &wanted {
        let missing: Vec<&String> = w.iter().filter(|t| !found.contains(*t)).collect();
        if !missing.is_empty() {
            return Err(wheel_err(format!(
                "--targets names {} but its fat binaries hold code for {} only",
                missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                found.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let dropped: Vec<String> = found.iter().filter(|t| !keep(&TargetId::bare(t))).cloned().collect();

    // Finish the archives; group them (and the kernel databases) by package key.
    let mut by_key: BTreeMap<String, Package> = BTreeMap::new();
    for (arch, w) in std::mem::take(&mut archives.writers) {
        let count = w.len();
        let file = staging.join(format!("{group}_{arch}.kpack"));
        w.finish().and_then(|b| b.into_inner().map_err(|e| e.into_error())).map_err(|e| SplitError::io(&file, e))?;
        let (key, level) =
            packages::key_of(&TargetId::parse(&arch).map_err(|e| wheel_err(e.to_string()))?, options.families);
        let member = format!("{overlay}.kpack/{group}_{arch}.kpack");
        let package = by_key.entry(key).or_insert_with(|| Package::new(level));
        // Stored: the archive's kernels are zstd frames already.
        package.entries.push(ZipEntry::file(member.clone(), file, false).stored());
        package.kpacks.insert(member, count);
    }
    let db_dir = u.work.path().join("databases");
    for rel in &u.scan.extracted {
        let Some(target) = databases::target_of(rel) else { continue };
        if !keep(&target) {
            continue;
        }
        let (key, level) = packages::key_of(&target, options.families);
        let (src, dst) = (u.root.join(rel), db_dir.join(rel));
        std::fs::create_dir_all(dst.parent().expect("a file")).map_err(|e| SplitError::io(&dst, e))?;
        std::fs::rename(&src, &dst).map_err(|e| SplitError::io(&src, e))?;
        let package = by_key.entry(key).or_insert_with(|| Package::new(level));
        package.entries.push(ZipEntry::file(rel.clone(), dst, false));
        package.databases.push(rel.clone());
    }

    // Every wheel is written in the scratch directory, then all are renamed
    // into place: a failure leaves nothing in `out_dir`.
    let keys: BTreeSet<String> = by_key.keys().cloned().collect();
    let lines = packages::host_metadata_lines(&prefix, &version, &keys, options.families);
    std::fs::write(&metadata_path, packages::add_to_metadata(&metadata, &lines))
        .map_err(|e| SplitError::io(&metadata_path, e))?;
    let done = u.work.path().join("done");
    std::fs::create_dir_all(&done).map_err(|e| SplitError::io(&done, e))?;
    let file_name = wheel.file_name().expect("a wheel file name");
    pack_dir_with(&u.root, &u.dist_info, &done.join(file_name), time, substitutes)?;
    let parents = packages::parents(&keys, options.families);
    let device_of =
        DeviceOf { name: &name, version: &version, prefix: &prefix, overlay: &overlay, wheel: &u.name, time };
    let mut device = Vec::new();
    for (key, package) in by_key {
        let requires = parents[&key].clone();
        device.push(device_of.write(&done, key, package, requires)?);
    }
    for d in &mut device {
        let to = out_dir.join(d.wheel.file_name().expect("named"));
        std::fs::rename(&d.wheel, &to).map_err(|e| SplitError::io(&to, e))?;
        d.wheel = to;
    }
    let host = out_dir.join(file_name);
    std::fs::rename(done.join(file_name), &host).map_err(|e| SplitError::io(&host, e))?;
    Ok(SplitReport { input: wheel.to_path_buf(), host, binaries, device, dropped })
}
