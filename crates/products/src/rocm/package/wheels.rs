//! Writing the planned packages: every ELF file's RPATH edited (natively,
//! as splices of the source: see [`super::edits`]), launchers made in
//! memory, then each wheel written by the crate's one wheel writer
//! (`wheel::archive::write_wheel`, parallel deflate) straight from the
//! sources, the devel tar too (described by parts, never written out), the
//! selector sdists. Everything goes to a scratch directory first and is
//! moved into `dist/` only once every package is done, so a failure leaves
//! no partial set of packages behind.

use super::plan::{Plan, RuntimePkg};
use super::runtime::Payload;
use super::{devel, edits, io, launcher, platform_tag, sdist};
use super::{DroppedEntry, Options, PackageEntry, PackageError, PackageReport, DEVEL_DIST};
use crate::layer::tree::Kind;
use crate::rocm::python::{script_function, CORE_CLI, DEVEL_CLI, PROFILER_CLI};
use crate::splice::Splice;
use crate::zip::write::{EntrySource, ZipEntry};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct Ctx<'a> {
    version: &'a str,
    plat: String,
    time: zip::DateTime,
    staging: PathBuf,
    info_text: String,
}

fn wheel_name(dist: &str) -> String {
    crate::wheel::name::normalize_name(dist)
}

fn metadata(dist: &str, version: &str, summary: &str, requires: &[String]) -> String {
    let mut s = format!(
        "Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: {summary}\nRequires-Python: >=3.8\n"
    );
    for r in requires {
        s.push_str(&format!("Requires-Dist: {r}\n"));
    }
    s
}

fn entry_points(pure: &str, scripts: &[&str]) -> String {
    let mut s = "[console_scripts]\n".to_string();
    for name in scripts {
        s.push_str(&format!("{name} = {pure}._cli:{}\n", script_function(name)));
    }
    s
}

/// The pure Python package's files (`rocm_sdk_core/...`).
fn pure_files(pure: &str, dist: &str, ctx: &Ctx, cli: Option<&str>) -> Vec<ZipEntry> {
    let doc = format!("\"\"\"{dist} {}: installed by the rocm packages; use `import rocm_sdk`.\"\"\"\n", ctx.version);
    let mut v = vec![
        ZipEntry::bytes(format!("{pure}/__init__.py"), doc),
        ZipEntry::bytes(format!("{pure}/_dist_info.py"), ctx.info_text.clone()),
    ];
    if let Some(cli) = cli {
        v.push(ZipEntry::bytes(format!("{pure}/_cli.py"), cli));
    }
    v
}

/// Write one wheel into `dir`; its report entry.
#[allow(clippy::too_many_arguments)]
fn finish(
    ctx: &Ctx,
    dir: &Path,
    kind: &str,
    dist: &str,
    summary: &str,
    requires: &[String],
    mut entries: Vec<ZipEntry>,
    scripts: Option<(&str, &[&str])>,
) -> Result<PackageEntry, PackageError> {
    let n = wheel_name(dist);
    let di = format!("{n}-{}.dist-info", ctx.version);
    entries.push(ZipEntry::bytes(format!("{di}/METADATA"), metadata(dist, ctx.version, summary, requires)));
    entries.push(ZipEntry::bytes(
        format!("{di}/WHEEL"),
        format!(
            "Wheel-Version: 1.0\nGenerator: quarry {}\nRoot-Is-Purelib: true\nTag: py3-none-{}\n",
            env!("CARGO_PKG_VERSION"),
            ctx.plat
        ),
    ));
    if let Some((pure, names)) = scripts {
        entries.push(ZipEntry::bytes(format!("{di}/entry_points.txt"), entry_points(pure, names)));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let out = dir.join(format!("{n}-{}-py3-none-{}.whl", ctx.version, ctx.plat));
    let rows = crate::wheel::archive::write_wheel(&out, &di, entries, ctx.time)?.rows;
    let sha256 = crate::oci::digest::sha256_file(&out).map_err(io(&out))?;
    let size = std::fs::metadata(&out).map_err(io(&out))?.len();
    Ok(PackageEntry {
        name: dist.to_string(),
        kind: kind.to_string(),
        package_dir: None,
        target: None,
        file: out,
        sha256,
        size,
        requires: requires.to_vec(),
        files: rows.into_iter().map(|r| r.path).collect(),
        aliases: BTreeMap::new(),
        launchers: BTreeMap::new(),
        rpaths: BTreeMap::new(),
        links: BTreeMap::new(),
    })
}

fn summary(p: &RuntimePkg) -> String {
    match p.kind {
        "core" => "ROCm SDK core: runtime, HIP, compiler and tools".into(),
        "profiler" => "ROCm profiler applications (rocprofiler-systems and rocprofiler-compute)".into(),
        "libraries" => "ROCm SDK math and ML libraries (host code)".into(),
        _ => format!("ROCm SDK device code for {}", p.target.as_deref().unwrap_or("")),
    }
}

fn runtime_wheel(
    ctx: &Ctx,
    p: &RuntimePkg,
    edited: &edits::Edits,
    launcher: Option<&launcher::Launcher>,
) -> Result<PackageEntry, PackageError> {
    let mut entries = Vec::new();
    let cli = match p.kind {
        "core" => Some(CORE_CLI),
        "profiler" => Some(PROFILER_CLI),
        _ => None,
    };
    if let Some(pure) = p.pure {
        entries.extend(pure_files(pure, &p.dist, ctx, cli));
    }
    entries.push(ZipEntry::bytes(format!("{}/__init__.py", p.platform_dir), ""));
    if let (Some(json), Some(t)) = (&p.devel_links, &p.target) {
        entries.push(ZipEntry::bytes(format!("{}/.devel_links/{t}.json", p.platform_dir), json.clone()));
    }
    let mut rpaths = BTreeMap::new();
    for (rel, placed) in &p.layout.files {
        let member = format!("{}/{rel}", p.platform_dir);
        let source = match (&placed.payload, &placed.rpath) {
            (Payload::Copy(src), Some(r)) => {
                rpaths.insert(member.clone(), r.clone());
                EntrySource::Splice(edited.get(src, r).cloned().expect("every RPATH job was edited"))
            }
            (Payload::Copy(src), None) => EntrySource::Path(src.clone()),
            (Payload::Launcher(text), _) => EntrySource::Bytes(launcher.expect("launchers were compiled").image(text)?),
        };
        entries.push(ZipEntry { name: member, source, executable: placed.executable, stored: false });
    }
    let core_scripts: Vec<&str> = super::roles::CORE_SCRIPTS.iter().map(|s| s.0).collect();
    let profiler_scripts: Vec<&str> = super::roles::PROFILER_SCRIPTS.iter().map(|s| s.0).collect();
    let scripts = match p.kind {
        "core" => Some(("rocm_sdk_core", core_scripts.as_slice())),
        "profiler" => Some(("rocm_profiler", profiler_scripts.as_slice())),
        _ => None,
    };
    let mut e = finish(ctx, &ctx.staging, p.kind, &p.dist, &summary(p), &p.requires, entries, scripts)?;
    e.package_dir = Some(p.platform_dir.clone());
    e.target = p.target.clone();
    e.aliases = p.layout.aliases.clone();
    e.launchers = p.layout.launchers.clone();
    e.rpaths = rpaths;
    Ok(e)
}

pub fn write_all(opts: &Options, mut plan: Plan) -> Result<PackageReport, PackageError> {
    let epoch = crate::wheel::archive::source_date_epoch()?.unwrap_or(0).max(0);
    let dist = opts.dest_dir.join("dist");
    std::fs::create_dir_all(&dist).map_err(io(&dist))?;
    let scratch = tempfile::Builder::new()
        .prefix(".quarry-rocm-package-")
        .tempdir_in(&opts.dest_dir)
        .map_err(io(&opts.dest_dir))?;
    let staging = scratch.path().join("dist");
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let ctx = Ctx {
        version: &plan.version,
        plat: platform_tag(),
        time: crate::wheel::archive::zip_time(epoch),
        staging: staging.clone(),
        info_text: plan.info.render(),
    };

    // Every ELF file edited at once.
    let mut jobs: Vec<(PathBuf, String)> = Vec::new();
    for p in &plan.runtime {
        for placed in p.layout.files.values() {
            if let (Payload::Copy(src), Some(r)) = (&placed.payload, &placed.rpath) {
                jobs.push((src.clone(), r.clone()));
            }
        }
    }
    for d in &plan.devel {
        jobs.extend(d.normalize.iter().cloned());
    }
    let edited = edits::edit_all(jobs, scratch.path(), &opts.cache)?;

    // Launchers: one compiled program; each launcher is its image with the link text.
    let needs_launcher = plan.runtime.iter().any(|p| !p.layout.launchers.is_empty());
    let program = if needs_launcher { Some(launcher::Launcher::compile(scratch.path())?) } else { None };

    let mut packages = Vec::new();
    let mut dropped = Vec::new();
    for p in &plan.runtime {
        packages.push(runtime_wheel(&ctx, p, &edited, program.as_ref())?);
        for d in &p.layout.dropped {
            dropped.push(DroppedEntry { package: p.dist.clone(), path: d.path.clone(), reason: d.reason.clone() });
        }
    }
    for d in plan.devel.iter_mut() {
        let map: HashMap<PathBuf, Arc<Splice>> =
            d.normalize.iter().filter_map(|(src, r)| edited.get(src, r).map(|c| (src.clone(), c.clone()))).collect();
        devel::use_edited(&mut d.tree, &map)?;
        let tar = devel::tar(&d.tree, &map, epoch as u64)?;
        let mut entries = pure_files("rocm_sdk_devel", DEVEL_DIST, &ctx, Some(DEVEL_CLI));
        entries.push(ZipEntry::splice("rocm_sdk_devel/_devel.tar", Arc::new(tar), false));
        let dir = match &d.subdir {
            Some(s) => staging.join(s),
            None => staging.clone(),
        };
        let summary = "ROCm SDK development files (headers, CMake configs, tools), expanded on first use";
        let mut e = finish(&ctx, &dir, "devel", DEVEL_DIST, summary, &[], entries, None)?;
        e.package_dir = Some(plan.info.packages["devel"].clone());
        e.target = d.subdir.clone();
        e.links = d
            .tree
            .iter()
            .filter_map(|(p, n)| match &n.kind {
                Kind::Symlink(t) => {
                    Some((String::from_utf8_lossy(p).into_owned(), String::from_utf8_lossy(t).into_owned()))
                }
                _ => None,
            })
            .collect();
        packages.push(e);
    }
    for (subdir, info) in &plan.sdists {
        let dir = match subdir {
            Some(s) => staging.join(s),
            None => staging.clone(),
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let (path, files) = sdist::write(&dir, info, epoch as u64)?;
        let sha256 = crate::oci::digest::sha256_file(&path).map_err(io(&path))?;
        let size = std::fs::metadata(&path).map_err(io(&path))?.len();
        packages.insert(
            0,
            PackageEntry {
                name: "rocm".into(),
                kind: "selector".into(),
                package_dir: Some("rocm_sdk".into()),
                target: subdir.clone(),
                file: path,
                sha256,
                size,
                requires: vec![format!("{}=={}", super::CORE_DIST, plan.version)],
                files,
                aliases: BTreeMap::new(),
                launchers: BTreeMap::new(),
                rpaths: BTreeMap::new(),
                links: BTreeMap::new(),
            },
        );
    }
    for p in &mut packages {
        let rel = p.file.strip_prefix(&staging).expect("written under staging").to_path_buf();
        let to = dist.join(&rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::rename(&p.file, &to).map_err(io(&to))?;
        p.file = to;
    }
    scratch.close().map_err(io(&opts.dest_dir))?;
    Ok(PackageReport {
        version: plan.version.clone(),
        version_from: String::new(),
        split: plan.split,
        targets: plan.targets.clone(),
        dist_dir: dist,
        patchelf: edited.patchelf.clone(),
        elf_editor: edited.editor.to_string(),
        native_edits: edited.native,
        patchelf_fallbacks: edited.fallbacks.clone(),
        packages,
        dropped,
        notes: plan.notes.clone(),
    })
}
