//! A wheel opened for splitting (or merging): unpacked, its name and
//! version read, its fat binaries found and numbered.

use super::extract;
use super::SplitError;
use crate::code_objects::target_id::TargetId;
use crate::elf::kpack_ref;
use crate::wheel::unpack::{unpack, Unpacked};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A fat binary of the wheel: its path in the wheel, on disk, and its wrappers.
pub struct Fat {
    pub rel: String,
    pub path: PathBuf,
    pub layout: kpack_ref::FatBinary,
    /// Bytes of device code per architecture (a full target id), from the
    /// bundles' headers.
    pub device: BTreeMap<String, u64>,
}

/// One input wheel, unpacked in scratch space beside the output.
pub struct Opened {
    pub wheel: PathBuf,
    pub unpacked: Unpacked,
    pub time: zip::DateTime,
    pub metadata_path: PathBuf,
    pub metadata: String,
    pub name: String,
    pub version: String,
    /// Fat binaries, in no particular order (see [`order`]).
    pub fat: Vec<Fat>,
}

impl Opened {
    /// The error for something wrong with the wheel as a whole.
    pub fn error(&self, why: String) -> SplitError {
        SplitError::Wheel { wheel: self.wheel.clone(), why }
    }

    /// `e`, said of the member `rel`.
    pub fn in_member(&self, rel: &str, e: SplitError) -> SplitError {
        SplitError::Member { wheel: self.wheel.clone(), member: rel.to_string(), source: Box::new(e) }
    }

    /// Architectures (full target ids) its fat binaries hold code for.
    pub fn architectures(&self) -> BTreeSet<String> {
        self.fat.iter().flat_map(|f| f.device.keys().cloned()).collect()
    }
}

/// What an ELF file's `.hip_fatbin` says of it. (Code objects and other
/// machines' files are ELF too; only host binaries with device code are
/// split.)
#[derive(PartialEq, Eq)]
enum Fatbin {
    /// No `.hip_fatbin`.
    None,
    /// Device code in `.hip_fatbin`: a fat binary.
    Fat,
    /// A `.rocm_kpack_ref` marker: the host binary of a split already.
    Split,
    /// `.hip_fatbin` without bytes (SHT_NOBITS) and no marker: a separated
    /// debug file (`objcopy --only-keep-debug`, `*_dbg`, `.debug`), whose
    /// sections keep their headers but not their bytes. Left as it is.
    Debug,
}

fn fatbin_of(path: &Path) -> Result<Fatbin, SplitError> {
    use object::{Object, ObjectSection};
    let file = std::fs::File::open(path).map_err(|e| SplitError::io(path, e))?;
    // SAFETY: the file is in the split's own scratch directory, not changed while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| SplitError::io(path, e))?;
    let Ok(elf) = object::File::parse(&*map) else { return Ok(Fatbin::None) };
    let Some(fatbin) = elf.section_by_name(".hip_fatbin") else { return Ok(Fatbin::None) };
    Ok(if elf.section_by_name(".rocm_kpack_ref").is_some() {
        Fatbin::Split
    } else if fatbin.file_range().is_none() {
        Fatbin::Debug
    } else {
        Fatbin::Fat
    })
}

/// Unpack `wheel` under `out_dir` (`purpose` names the scratch directory)
/// and find its fat binaries; a wheel without any is an error.
pub fn open(wheel: &Path, out_dir: &Path, purpose: &str) -> Result<Opened, SplitError> {
    let unpacked = unpack(wheel, out_dir, purpose)?;
    let time = unpacked.zip_time()?;
    let metadata_path = unpacked.root.join(&unpacked.dist_info).join("METADATA");
    let metadata = std::fs::read_to_string(&metadata_path).map_err(|e| SplitError::io(&metadata_path, e))?;
    let field = |k: &str| crate::wheel::metadata::header_values(&metadata, k).first().map(|v| v.trim().to_string());
    let (name, version) = match (field("Name"), field("Version")) {
        (Some(n), Some(v)) => (n, v),
        _ => {
            return Err(SplitError::Wheel {
                wheel: wheel.to_path_buf(),
                why: "its METADATA has no Name or Version".into(),
            })
        }
    };
    let mut opened =
        Opened { wheel: wheel.to_path_buf(), unpacked, time, metadata_path, metadata, name, version, fat: Vec::new() };
    let mut split_already = Vec::new();
    for rel in &opened.unpacked.scan.extracted {
        let path = opened.unpacked.root.join(rel);
        let in_member = |e: SplitError| opened.in_member(rel, e);
        // A kernel database that is ELF (MIOpen's per-target CK libraries) moves whole.
        if !crate::elf::is_elf(&path) || super::databases::route_of(rel).is_some() {
            continue;
        }
        match fatbin_of(&path).map_err(in_member)? {
            Fatbin::Fat => {}
            Fatbin::Split => {
                split_already.push(rel.clone());
                continue;
            }
            Fatbin::None | Fatbin::Debug => continue,
        }
        if let Some(layout) = kpack_ref::read_fat_binary(&path).map_err(|e| in_member(e.into()))? {
            let device = extract::device_bytes(&path, &layout).map_err(in_member)?;
            opened.fat.push(Fat { rel: rel.clone(), path, layout, device });
        }
    }
    if opened.fat.is_empty() && !split_already.is_empty() {
        return Err(opened.error(format!(
            "it was split already: {} carries a .rocm_kpack_ref marker and its device code is in .kpack archives; \
             split the fat wheel it came from (splitting again would give a host wheel with no archives)",
            split_already.join(", ")
        )));
    }
    if opened.fat.is_empty() {
        return Err(
            opened.error("it holds no fat binary (no ELF file with a .hip_fatbin section): nothing to split".into())
        );
    }
    Ok(opened)
}

/// How a binary ranks when kernels are numbered (largest first).
pub enum Rank {
    /// ROCm's splitter numbers the largest file first; so does quarry, so
    /// the archives' tables of contents are the reference's, ordinals too.
    FileSize(u64),
    /// For binaries linked with `.hip_fatbin` last (split builds and merge
    /// shards, made by quarry): the bytes of device code kept. Unlike the
    /// file's size it adds up over shard builds for disjoint targets, so a
    /// merge numbers kernels exactly as the split of the fat build does.
    DeviceCode(BTreeMap<String, u64>),
}

/// The order binaries' kernels are numbered in each archive: by file size,
/// or, when every binary was linked `.hip_fatbin` last, by device code (of
/// the architectures kept); ties by path, so the order is the same on
/// every machine.
pub fn order(ranked: Vec<(String, Rank)>, keep: &dyn Fn(&TargetId) -> bool) -> Vec<String> {
    let by_device = ranked.iter().all(|(_, r)| matches!(r, Rank::DeviceCode(_)));
    let mut sized: Vec<(u64, String)> = ranked
        .into_iter()
        .map(|(rel, rank)| {
            let n = match rank {
                Rank::FileSize(n) if !by_device => n,
                Rank::FileSize(_) => 0,
                Rank::DeviceCode(device) => device
                    .into_iter()
                    .filter(|(arch, _)| TargetId::parse(arch).is_ok_and(|t| keep(&t)))
                    .map(|(_, n)| n)
                    .sum(),
            };
            (n, rel)
        })
        .collect();
    sized.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    sized.into_iter().map(|(_, rel)| rel).collect()
}

impl Fat {
    /// This binary's rank (see [`order`]).
    pub fn rank(&self) -> Rank {
        match self.layout.linked_last {
            true => Rank::DeviceCode(self.device.clone()),
            false => Rank::FileSize(std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)),
        }
    }
}

/// Where archives and rewritten binaries are placed from: the package
/// directory that holds the fat binaries (`torch/`), or the wheel's root
/// if several do.
pub fn overlay_of<'a>(rels: impl Iterator<Item = &'a str> + Clone) -> String {
    let tops: BTreeSet<&str> = rels.clone().map(|rel| rel.split('/').next().unwrap_or("")).collect();
    let mut all = rels;
    match tops.iter().next() {
        Some(top) if tops.len() == 1 && all.all(|rel| rel.contains('/')) => format!("{top}/"),
        _ => String::new(),
    }
}
