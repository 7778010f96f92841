//! `quarry wheel merge`: wheels of one project and version, each built for
//! its own GPU targets (one shard per machine), become the host wheel and
//! device wheels that `wheel split` makes of a fat build of all of them.
//!
//! Every shard is opened as a split opens a wheel, and its fat binaries are
//! rewritten the same way; the host parts must then be identical: every
//! file but RECORD, the kernel databases and the fat binaries byte for
//! byte, each fat binary as rewritten (marker, wrappers, no device code)
//! byte for byte. That is what makes the merge safe, and it is proved, not
//! assumed: a difference is an error naming the file, the first differing
//! section and both shards' build keys. (A normal link places
//! `.hip_fatbin` before the data, so its size moves every later address:
//! shards are identical only when linked with
//! [`crate::elf::kpack_ref::FATBIN_LAST_LINK_SCRIPT`], as `wheel build`
//! does for builds that are split or merged.)
//!
//! Each architecture's code comes from the one shard built for it (two
//! shards with code for the same architecture are refused); binaries are
//! ranked by their device code summed over the shards, as the split of
//! the fat build ranks binaries linked `.hip_fatbin` last (`split::input::
//! order`), so the archives are the same bytes too.

mod compare;

use super::split::extract::{Archives, BinaryCode};
use super::split::input::{self, Fat, Opened};
use super::split::output::{self, Naming, Packages};
use super::split::{self, DeviceWheel, Families, SplitError};
use crate::code_objects::kpack_writer::Scheme;
use crate::zip::write::ZipEntry;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One shard: its wheel, and the key of the build that made it when known
/// (a matrix cell's, or the local cache's record of it).
#[derive(Debug, Clone)]
pub struct Shard {
    pub wheel: PathBuf,
    pub build_key: Option<String>,
}

impl Shard {
    fn named(&self) -> String {
        let key = self.build_key.as_deref().unwrap_or("unknown");
        format!("`{}` (build key {key})", self.wheel.display())
    }
}

#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Device wheels are `{prefix}-{key}`; default `{name}-device`.
    pub device_prefix: Option<String>,
    pub families: Families,
    pub scheme: Scheme,
    /// More `Requires-Dist` of each device wheel (`@GFXARCH@`: its target).
    pub device_requires: Vec<String>,
    /// PEP 817 variant host wheels too, one per target, in this schema.
    pub variants: Option<split::VariantSchema>,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("no shard wheels given")]
    Empty,
    #[error(transparent)]
    Split(#[from] SplitError),
    #[error("{a} and {b} are not shards of one build: {why}")]
    NotShards { a: String, b: String, why: String },
    #[error("{a} and {b} both hold code for {arch}: shards are built for disjoint targets")]
    Overlap { a: String, b: String, arch: String },
    #[error(
        "{a} and {b} differ in host code: `{member}`, {difference}. Shards must come from one build that \
         differs only in its GPU targets (the same sources, compiler and flags, and the link that `wheel build` \
         gives split builds)"
    )]
    HostDiffers { a: String, b: String, member: String, difference: String },
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// One shard as the merge used it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardReport {
    pub wheel: PathBuf,
    pub build_key: Option<String>,
    /// Architectures (full target ids) its code was taken for.
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MergeReport {
    pub shards: Vec<ShardReport>,
    pub host: PathBuf,
    /// Fat binaries, with their code objects per architecture over all shards.
    pub binaries: BTreeMap<String, BinaryCode>,
    pub device: Vec<DeviceWheel>,
    /// With `--variants`: the variant host wheels and `-variants.json`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variants_json: Option<PathBuf>,
}

/// Do `a` and `b` look like shards of one build, before any byte is compared?
fn same_build(a: &Opened, b: &Opened, sa: &Shard, sb: &Shard) -> Result<(), MergeError> {
    let differ = |why: String| MergeError::NotShards { a: sa.named(), b: sb.named(), why };
    if (a.name.as_str(), a.version.as_str()) != (b.name.as_str(), b.version.as_str()) {
        return Err(differ(format!("{} {} and {} {}", a.name, a.version, b.name, b.version)));
    }
    if a.wheel.file_name() != b.wheel.file_name() {
        return Err(differ("their wheel file names (tags) differ".into()));
    }
    let rels = |o: &Opened| o.fat.iter().map(|f| f.rel.clone()).collect::<BTreeSet<_>>();
    let (ra, rb) = (rels(a), rels(b));
    if let Some(rel) = ra.symmetric_difference(&rb).next() {
        return Err(differ(format!("`{rel}` has device code in one and not in the other")));
    }
    Ok(())
}

/// The kernel databases of every shard: each path once, from the first
/// shard holding it; a path two shards hold with different bytes is an error.
fn add_databases(
    opened: &[Opened],
    shards: &[Shard],
    families: Families,
    by_key: &mut Packages,
) -> Result<(), MergeError> {
    let mut first: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = Vec::new();
    for (i, o) in opened.iter().enumerate() {
        for rel in &o.unpacked.scan.extracted {
            let Some(target) = split::databases::route_of(rel) else { continue };
            match first.get(rel) {
                None => {
                    first.insert(rel.clone(), i);
                    found.push((i, rel.clone(), target));
                }
                Some(&j) => {
                    let (a, b) = (opened[j].unpacked.root.join(rel), o.unpacked.root.join(rel));
                    if !compare::same_file(&a, &b).map_err(|source| MergeError::Io { path: b.clone(), source })? {
                        return Err(MergeError::NotShards {
                            a: shards[j].named(),
                            b: shards[i].named(),
                            why: format!("both hold the kernel database `{rel}`, with different bytes"),
                        });
                    }
                }
            }
        }
    }
    for (i, rel, target) in found {
        output::add_database(&opened[i], &rel, &target, families, by_key)?;
    }
    Ok(())
}

/// Every plain file (not RECORD, not a kernel database, not a fat binary)
/// the same in `b` as in `a`.
fn same_plain_files(a: &Opened, b: &Opened, sa: &Shard, sb: &Shard) -> Result<(), MergeError> {
    let record = format!("{}/RECORD", a.unpacked.dist_info);
    let fat: BTreeSet<&str> = a.fat.iter().map(|f| f.rel.as_str()).collect();
    let plain = |o: &Opened| -> BTreeSet<String> {
        o.unpacked
            .scan
            .extracted
            .iter()
            .filter(|r| **r != record && !fat.contains(r.as_str()) && split::databases::route_of(r).is_none())
            .cloned()
            .collect()
    };
    let (pa, pb) = (plain(a), plain(b));
    if let Some(rel) = pa.symmetric_difference(&pb).next() {
        return Err(MergeError::NotShards {
            a: sa.named(),
            b: sb.named(),
            why: format!("`{rel}` is in one and not in the other"),
        });
    }
    for rel in &pa {
        let (x, y) = (a.unpacked.root.join(rel), b.unpacked.root.join(rel));
        if !compare::same_file(&x, &y).map_err(|source| MergeError::Io { path: y.clone(), source })? {
            return Err(MergeError::HostDiffers {
                a: sa.named(),
                b: sb.named(),
                member: rel.clone(),
                difference: "its bytes".into(),
            });
        }
    }
    Ok(())
}

/// Merge `shards` into `out_dir`.
pub fn merge(shards: &[Shard], out_dir: &Path, options: &MergeOptions) -> Result<MergeReport, MergeError> {
    if shards.is_empty() {
        return Err(MergeError::Empty);
    }
    let opened: Vec<Opened> =
        shards.iter().map(|s| input::open(&s.wheel, out_dir, "merge")).collect::<Result<_, _>>()?;
    let first = &opened[0];
    for (i, o) in opened.iter().enumerate().skip(1) {
        same_build(first, o, &shards[0], &shards[i])?;
        same_plain_files(first, o, &shards[0], &shards[i])?;
    }
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    for (i, o) in opened.iter().enumerate() {
        for arch in o.architectures() {
            if let Some(j) = owner.insert(arch.clone(), i) {
                return Err(MergeError::Overlap { a: shards[j].named(), b: shards[i].named(), arch });
            }
        }
    }

    let fat_of = |o: &'_ Opened, rel: &str| -> usize { o.fat.iter().position(|f| f.rel == rel).expect("same set") };
    let rels: Vec<&str> = first.fat.iter().map(|f| f.rel.as_str()).collect();
    // Ranked as the fat binary would be: device code (or file sizes) summed over the shards.
    let rank = |rel: &str| {
        let mut device: BTreeMap<String, u64> = BTreeMap::new();
        let (mut size, mut last) = (0, true);
        for o in &opened {
            let f = &o.fat[fat_of(o, rel)];
            match f.rank() {
                input::Rank::DeviceCode(d) => d.into_iter().for_each(|(a, n)| *device.entry(a).or_default() += n),
                input::Rank::FileSize(n) => (size, last) = (size + n, false),
            }
        }
        (rel.to_string(), if last { input::Rank::DeviceCode(device) } else { input::Rank::FileSize(size) })
    };
    let order = input::order(rels.iter().map(|r| rank(r)).collect(), &|_| true);
    let overlay = input::overlay_of(rels.iter().copied());
    let (group, prefix) =
        (split::group_of(&first.name), split::prefix_of(options.device_prefix.as_deref(), &first.name));
    let naming = Naming {
        overlay: &overlay,
        prefix: &prefix,
        group: &group,
        families: options.families,
        device_requires: &options.device_requires,
        variants: options.variants,
    };
    let staging = first.unpacked.work.path().join("kpack");
    std::fs::create_dir_all(&staging).map_err(|e| SplitError::io(&staging, e))?;
    let mut archives =
        Archives { dir: staging, group: group.clone(), scheme: options.scheme, writers: BTreeMap::new() };

    let mut binaries: BTreeMap<String, BinaryCode> = BTreeMap::new();
    let mut substitutes = Vec::new();
    for rel in &order {
        let mut host: Option<(usize, split::Rewritten)> = None;
        for (i, o) in opened.iter().enumerate() {
            let f: &Fat = &o.fat[fat_of(o, rel)];
            let r = split::rewrite(o, f, &naming, &mut archives, &mut |_| true)?;
            let code = binaries.entry(rel.clone()).or_default();
            code.wrappers = r.code.wrappers;
            code.code_objects.extend(r.code.code_objects.clone());
            match &host {
                None => host = Some((i, r)),
                Some((j, h)) => differs(&opened[*j], o, &shards[*j], &shards[i], rel, &h.splice, &r.splice)?,
            }
        }
        let (_, h) = host.expect("at least one shard");
        substitutes.push(ZipEntry::splice(rel.clone(), Arc::new(h.splice), h.executable));
    }
    let mut by_key = Packages::new();
    output::finish_archives(&mut archives, &naming, &mut by_key)?;
    add_databases(&opened, shards, options.families, &mut by_key)?;
    let w = output::write(first, out_dir, &naming, substitutes, by_key)?;
    let reports = shards
        .iter()
        .enumerate()
        .map(|(i, s)| ShardReport {
            wheel: s.wheel.clone(),
            build_key: s.build_key.clone(),
            targets: owner.iter().filter(|(_, &o)| o == i).map(|(a, _)| a.clone()).collect(),
        })
        .collect();
    Ok(MergeReport {
        shards: reports,
        host: w.host,
        binaries,
        device: w.device,
        variants: w.variants,
        variants_json: w.variants_json,
    })
}

/// An error when the rewritten host binaries `x` (of `a`) and `y` (of `b`)
/// differ: both written out to find where.
#[allow(clippy::too_many_arguments)]
fn differs(
    a: &Opened,
    b: &Opened,
    sa: &Shard,
    sb: &Shard,
    rel: &str,
    x: &crate::splice::Splice,
    y: &crate::splice::Splice,
) -> Result<(), MergeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Io { path, source }
    };
    if compare::same_splice(x, y).map_err(io(&a.unpacked.root.join(rel)))? {
        return Ok(());
    }
    let write = |o: &Opened, s: &crate::splice::Splice| -> Result<PathBuf, MergeError> {
        let p = o.unpacked.work.path().join("differs");
        let mut f = std::fs::File::create(&p).map_err(io(&p))?;
        std::io::copy(&mut s.reader(), &mut f).map_err(io(&p))?;
        Ok(p)
    };
    let (pa, pb) = (write(a, x)?, write(b, y)?);
    let difference = compare::first_difference(&pa, &pb).map_err(io(&pa))?;
    Err(MergeError::HostDiffers { a: sa.named(), b: sb.named(), member: rel.to_string(), difference })
}
