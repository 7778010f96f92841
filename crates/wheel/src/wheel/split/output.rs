//! The wheels a split (or merge) writes: the finished `.kpack` archives and
//! the kernel databases grouped into device packages by key, the host
//! wheel's METADATA gaining its extras, every wheel written in scratch
//! space and all renamed into place at the end (a failure leaves nothing in
//! the output directory).

use super::databases;
use super::extract::Archives;
use super::input::Opened;
use super::packages::{self, Families, Level};
use super::variants::{self, Schema};
use super::{DeviceWheel, SplitError};
use crate::code_objects::target_id::TargetId;
use crate::wheel::archive::{pack_dir_with, write_wheel};
use crate::zip::write::ZipEntry;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What goes into one device wheel.
pub struct Package {
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

/// Device packages by key (`gfx942`, `gfx11`).
pub type Packages = BTreeMap<String, Package>;

/// How the wheels of one split are named and placed.
pub struct Naming<'a> {
    /// Archives and rewritten binaries are placed from here (`torch/`).
    pub overlay: &'a str,
    /// Device wheels are `{prefix}-{key}`.
    pub prefix: &'a str,
    /// Archive file names start with it (`{group}_{arch}.kpack`).
    pub group: &'a str,
    pub families: Families,
    /// `--device-requires-dist`: more `Requires-Dist` of each device wheel.
    pub device_requires: &'a [String],
    /// `--variants`: a PEP 817 variant host wheel per target, in this schema.
    pub variants: Option<Schema>,
}

/// The wheels (and variant metadata) one split or merge wrote.
pub struct Wrote {
    pub host: PathBuf,
    pub device: Vec<DeviceWheel>,
    pub variants: Vec<PathBuf>,
    pub variants_json: Option<PathBuf>,
}

/// Finish every archive of `archives` into the package of its key.
pub fn finish_archives(archives: &mut Archives, naming: &Naming, by_key: &mut Packages) -> Result<(), SplitError> {
    for (arch, w) in std::mem::take(&mut archives.writers) {
        let count = w.len();
        let file = archives.dir.join(format!("{}_{arch}.kpack", naming.group));
        w.finish().and_then(|b| b.into_inner().map_err(|e| e.into_error())).map_err(|e| SplitError::io(&file, e))?;
        let target =
            TargetId::parse(&arch).map_err(|e| SplitError::Binary { file: file.clone(), why: e.to_string() })?;
        let (key, level) = packages::key_of(&target, naming.families);
        let member = format!("{}.kpack/{}_{arch}.kpack", naming.overlay, naming.group);
        let package = by_key.entry(key).or_insert_with(|| Package::new(level));
        // Stored: the archive's kernels are zstd frames already.
        package.entries.push(ZipEntry::file(member.clone(), file, false).stored());
        package.kpacks.insert(member, count);
    }
    Ok(())
}

/// The kernel database `rel` of `from` (routed by `route`) into its package:
/// moved out of the unpacked tree (so the host wheel leaves it out) into
/// `from`'s scratch space.
pub fn add_database(
    from: &Opened,
    rel: &str,
    route: &databases::Route,
    families: Families,
    by_key: &mut Packages,
) -> Result<(), SplitError> {
    let (key, level) = match route {
        databases::Route::Target(target) => packages::key_of(target, families),
        databases::Route::Group(g) if families == Families::Auto => {
            let level =
                if crate::code_objects::packaging_chain::is_family(g) { Level::Family } else { Level::SubFamily };
            (g.clone(), level)
        }
        // Without the packaging chain a group's files get a wheel of their own key.
        databases::Route::Group(g) => (g.clone(), Level::Generic),
    };
    let src = from.unpacked.root.join(rel);
    let dst = from.unpacked.work.path().join("databases").join(rel);
    std::fs::create_dir_all(dst.parent().expect("a file")).map_err(|e| SplitError::io(&dst, e))?;
    std::fs::rename(&src, &dst).map_err(|e| SplitError::io(&src, e))?;
    let package = by_key.entry(key).or_insert_with(|| Package::new(level));
    package.entries.push(ZipEntry::file(rel.to_string(), dst, false));
    package.databases.push(rel.to_string());
    Ok(())
}

/// Every kernel database of `from` whose target `keep` keeps, into its package.
pub fn add_databases(
    from: &Opened,
    keep: &dyn Fn(&TargetId) -> bool,
    families: Families,
    by_key: &mut Packages,
) -> Result<(), SplitError> {
    for rel in &from.unpacked.scan.extracted {
        if let Some(route) = databases::route_of(rel).filter(|r| r.kept(keep)) {
            add_database(from, rel, &route, families, by_key)?;
        }
    }
    Ok(())
}

/// What every device wheel of one split shares.
struct DeviceOf<'a> {
    host: &'a Opened,
    naming: &'a Naming<'a>,
}

impl DeviceOf<'_> {
    /// Write the device wheel of `key` into `dir`.
    fn write(&self, dir: &Path, key: String, p: Package, requires: Vec<String>) -> Result<DeviceWheel, SplitError> {
        let Package { level, mut entries, kpacks, databases } = p;
        let (version, n, prefix) = (&self.host.version, &self.host.unpacked.name, self.naming.prefix);
        let dist = packages::dist_name(prefix, &key);
        let stem = format!("{}-{version}", dist.replace('-', "_"));
        let dist_info = format!("{stem}.dist-info");
        let extra = packages::device_requires(self.naming.device_requires, &key, level);
        let meta = packages::device_metadata(&dist, version, &self.host.name, &key, &requires, prefix, &extra);
        let wheel_file = format!(
            "Wheel-Version: 1.0\nGenerator: quarry {}\nRoot-Is-Purelib: false\n{}",
            env!("CARGO_PKG_VERSION"),
            n.expanded_tags().iter().map(|t| format!("Tag: {t}\n")).collect::<String>()
        );
        entries.push(ZipEntry::bytes(format!("{dist_info}/METADATA"), meta));
        entries.push(ZipEntry::bytes(format!("{dist_info}/WHEEL"), wheel_file));
        let overlay = self.naming.overlay;
        if !overlay.is_empty() {
            let top = format!("{}\n", overlay.trim_end_matches('/'));
            entries.push(ZipEntry::bytes(format!("{dist_info}/top_level.txt"), top));
        }
        let tags = format!("{}-{}-{}", n.python_tags.join("."), n.abi_tags.join("."), n.platform_tags.join("."));
        let out = dir.join(format!("{stem}-{tags}.whl"));
        write_wheel(&out, &dist_info, entries, self.host.time)?;
        Ok(DeviceWheel { wheel: out, name: dist, key, level, kpacks, databases, requires })
    }
}

/// Write the host wheel (`host`'s tree with `substitutes` for its
/// rewritten binaries and METADATA gaining the extras of `by_key`), its
/// variant wheels when asked, and every device wheel into `out_dir`: all
/// in scratch first, then renamed.
pub fn write(
    host: &Opened,
    out_dir: &Path,
    naming: &Naming,
    substitutes: Vec<ZipEntry>,
    by_key: Packages,
) -> Result<Wrote, SplitError> {
    let keys: BTreeSet<String> = by_key.keys().cloned().collect();
    let lines = packages::host_metadata_lines(naming.prefix, &host.version, &keys, naming.families);
    let metadata_path = &host.metadata_path;
    std::fs::write(metadata_path, packages::add_to_metadata(&host.metadata, &lines))
        .map_err(|e| SplitError::io(metadata_path, e))?;
    let done = host.unpacked.work.path().join("done");
    std::fs::create_dir_all(&done).map_err(|e| SplitError::io(&done, e))?;
    let file_name = host.wheel.file_name().expect("a wheel file name").to_string_lossy().into_owned();
    let u = &host.unpacked;
    let mut staged = Vec::new();
    if let Some(schema) = naming.variants {
        staged = write_variants(host, &done, &lines, &substitutes, schema)?;
    }
    pack_dir_with(&u.root, &u.dist_info, &done.join(&file_name), host.time, substitutes)?;
    let parents = packages::parents(&keys, naming.families);
    let device_of = DeviceOf { host, naming };
    let mut device = Vec::new();
    for (key, package) in by_key {
        let requires = parents[&key].clone();
        device.push(device_of.write(&done, key, package, requires)?);
    }
    let place = |name: &str| -> Result<PathBuf, SplitError> {
        let to = out_dir.join(name);
        std::fs::rename(done.join(name), &to).map_err(|e| SplitError::io(&to, e))?;
        Ok(to)
    };
    for d in &mut device {
        d.wheel = place(&d.wheel.file_name().expect("named").to_string_lossy())?;
    }
    let mut variant_wheels = Vec::new();
    let mut variants_json = None;
    for name in staged {
        let to = place(&name)?;
        if name.ends_with(".json") {
            variants_json = Some(to);
        } else {
            variant_wheels.push(to);
        }
    }
    Ok(Wrote { host: place(&file_name)?, device, variants: variant_wheels, variants_json })
}

/// One host wheel per target of `lines`' extras, labelled with it, into
/// `dir` (see [`variants`]), and `{name}-{version}-variants.json`; their
/// file names. Same tree as the classic host wheel but METADATA (with the
/// variant markers) and `variant.json`.
fn write_variants(
    host: &Opened,
    dir: &Path,
    lines: &[String],
    substitutes: &[ZipEntry],
    schema: Schema,
) -> Result<Vec<String>, SplitError> {
    let targets = variants::targets(lines);
    if targets.is_empty() {
        return Err(host.error(
            "--variants: no GPU target of this wheel can be a variant label ([0-9a-z._], at most 16 characters)".into(),
        ));
    }
    let u = &host.unpacked;
    let metadata = packages::add_to_metadata(&host.metadata, &variants::with_markers(lines, &targets));
    let stem = host.wheel.file_name().expect("a wheel file name").to_string_lossy();
    let stem = stem.strip_suffix(".whl").unwrap_or(&stem).to_string();
    let mut names = Vec::new();
    for t in &targets {
        let mut entries = substitutes.to_vec();
        entries.push(ZipEntry::bytes(format!("{}/METADATA", u.dist_info), metadata.clone()));
        entries.push(ZipEntry::bytes(
            format!("{}/variant.json", u.dist_info),
            variants::document(&targets, Some(t), schema),
        ));
        let name = format!("{stem}-{t}.whl");
        pack_dir_with(&u.root, &u.dist_info, &dir.join(&name), host.time, entries)?;
        names.push(name);
    }
    // `{name}-{version}` as the wheel file name spells it.
    let namever = stem.splitn(3, '-').take(2).collect::<Vec<_>>().join("-");
    let index = format!("{namever}-variants.json");
    std::fs::write(dir.join(&index), variants::document(&targets, None, schema))
        .map_err(|e| SplitError::io(&dir.join(&index), e))?;
    names.push(index);
    Ok(names)
}
