//! The wheels a split (or merge) writes: the finished `.kpack` archives and
//! the kernel databases grouped into device packages by key, the host
//! wheel's METADATA gaining its extras, every wheel written in scratch
//! space and all renamed into place at the end (a failure leaves nothing in
//! the output directory).

use super::databases;
use super::extract::Archives;
use super::input::Opened;
use super::packages::{self, Families, Level};
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
/// rewritten binaries and METADATA gaining the extras of `by_key`) and
/// every device wheel into `out_dir`: all in scratch first, then renamed.
pub fn write(
    host: &Opened,
    out_dir: &Path,
    naming: &Naming,
    substitutes: Vec<ZipEntry>,
    by_key: Packages,
) -> Result<(PathBuf, Vec<DeviceWheel>), SplitError> {
    let keys: BTreeSet<String> = by_key.keys().cloned().collect();
    let lines = packages::host_metadata_lines(naming.prefix, &host.version, &keys, naming.families);
    let metadata_path = &host.metadata_path;
    std::fs::write(metadata_path, packages::add_to_metadata(&host.metadata, &lines))
        .map_err(|e| SplitError::io(metadata_path, e))?;
    let done = host.unpacked.work.path().join("done");
    std::fs::create_dir_all(&done).map_err(|e| SplitError::io(&done, e))?;
    let file_name = host.wheel.file_name().expect("a wheel file name");
    let u = &host.unpacked;
    pack_dir_with(&u.root, &u.dist_info, &done.join(file_name), host.time, substitutes)?;
    let parents = packages::parents(&keys, naming.families);
    let device_of = DeviceOf { host, naming };
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
    let to = out_dir.join(file_name);
    std::fs::rename(done.join(file_name), &to).map_err(|e| SplitError::io(&to, e))?;
    Ok((to, device))
}
