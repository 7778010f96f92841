//! ROCm artifacts -> pip-installable packages (`quarry rocm package`):
//! the `rocm` selector sdist, `rocm-sdk-core`, `rocm-sdk-libraries` (or one
//! `rocm-sdk-libraries-<family>` per family in legacy mode), one
//! `rocm-sdk-device-<gfx>` per target in split mode, and `rocm-sdk-devel`.
//!
//! One concern per module: `roles` (which artifact goes where), `collect`
//! (overlaying artifacts), `runtime` (SONAME-only libraries, aliases,
//! launchers, dropped links), `launcher` (the native launcher), `rpath`
//! (patchelf + verification), `devel` (the devel tar), `wheel_zip` (the
//! parallel deterministic wheel writer), `sdist` (the selector sdist).
//! This file wires them together.

pub mod collect;
pub mod devel;
pub mod launcher;
pub mod roles;
pub mod rpath;
pub mod runtime;
pub mod sdist;
pub mod wheel_zip;

use crate::elf::patchelf::{Patchelf, PatchelfError};
use crate::elf::ElfError;
use crate::rocm::artifacts::{self, Artifact, ArtifactError, Artifacts};
use crate::rocm::python::DistInfo;
use collect::Staged;
use devel::InRuntime;
use rayon::prelude::*;
use rpath::LibDir;
use runtime::{Payload, RuntimeLayout};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use wheel_zip::{Member, Source};

/// The wheel tag of every runtime package: no manylinux tag, no repair.
pub const WHEEL_TAG: &str = "py3-none-linux_x86_64";
pub const CORE_PACKAGE: &str = "_rocm_sdk_core";
pub const LIBRARIES_PACKAGE: &str = "_rocm_sdk_libraries";
pub const DEVEL_PACKAGE: &str = "_rocm_sdk_devel";
pub const CORE_DIST: &str = "rocm-sdk-core";
pub const LIBRARIES_DIST: &str = "rocm-sdk-libraries";
pub const DEVICE_DIST: &str = "rocm-sdk-device";
pub const DEVEL_DIST: &str = "rocm-sdk-devel";
/// Core's own library directories besides `lib`, searched when present.
const CORE_EXTRA_LIB_DIRS: [&str; 2] = ["lib/llvm/lib", "lib/rocm_sysdeps/lib"];
/// Core directories the libraries packages search besides core's `lib`.
const LIBRARIES_CORE_LIB_DIRS: [&str; 2] = ["lib/rocm_sysdeps/lib", "lib/host-math/lib"];

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error(transparent)]
    Artifacts(#[from] ArtifactError),
    #[error("`{path}`: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{0}`: the path is not UTF-8; wheels need UTF-8 names (rename it in the artifact)")]
    NonUtf8Path(PathBuf),
    #[error("`{0}` is not a regular file, directory or symlink; artifacts hold only those")]
    SpecialFile(PathBuf),
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error(transparent)]
    Patchelf(#[from] PatchelfError),
    #[error("`{member}` (from `{src}`): {why}")]
    Patch { member: String, src: PathBuf, why: String },
    #[error("`{file}`: after patching, the RPATH is {found}, not DT_RPATH `{expected}`")]
    RpathNotSet { file: PathBuf, expected: String, found: String },
    #[error("cannot build the native launcher with `{cc}`: {why}")]
    Compiler { cc: String, why: String },
    #[error("launcher target `{0}` is too long or holds a NUL byte")]
    LauncherTarget(String),
    #[error("writing wheel `{wheel}`: {why}")]
    WheelWrite { wheel: PathBuf, why: String },
    #[error("the devel tree: {0}")]
    DevelTree(String),
    #[error("no version: `{0}` has no `version`; pass --version (for example --version 7.10.0.dev0)")]
    NoVersion(String),
    #[error("version `{version}` ({origin}) is not a normalized PEP 440 version like 7.10.0, 7.10.0rc1, 7.10.0a20260101 or 7.10.0.dev0")]
    BadVersion { version: String, origin: String },
    #[error("legacy mode (KPACK_SPLIT_ARTIFACTS false or --split off) needs per-family artifacts (`blas_lib_gfx94X-dcgpu`), and `{0}` has none; use --split on or add them")]
    NoFamilies(String),
    #[error("`{device}` would overwrite `{path}` of {libraries}: device packages may only add files to the libraries package's directory")]
    DeviceOverlap { device: String, libraries: String, path: String },
    #[error(transparent)]
    Wheel(#[from] crate::wheel::WheelError),
}

/// `--split auto|on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitMode {
    /// `flags.KPACK_SPLIT_ARTIFACTS` of therock_manifest.json (default true).
    #[default]
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub artifact_dir: PathBuf,
    /// Packages go to `<dest_dir>/dist/`.
    pub dest_dir: PathBuf,
    /// Default: `version` (or `rocm_version`) of therock_manifest.json.
    pub version: Option<String>,
    pub split: SplitMode,
}

/// One package written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PackageEntry {
    /// The distribution name (`rocm-sdk-core`).
    pub name: String,
    /// selector, core, libraries, device, devel.
    pub kind: String,
    /// The import package directory its files go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub file: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub requires: Vec<String>,
    /// Members of the wheel or sdist, in archive order.
    pub files: Vec<String>,
    /// Other names of shared libraries (not copied) -> the SONAME file.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub aliases: BTreeMap<String, String>,
    /// Launcher -> its relative target.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub launchers: BTreeMap<String, String>,
    /// Paths of ELF files given an RPATH -> that RPATH.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rpaths: BTreeMap<String, String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DroppedEntry {
    pub package: String,
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PackageReport {
    pub version: String,
    pub split: bool,
    pub targets: Vec<String>,
    pub dist_dir: PathBuf,
    pub patchelf: String,
    pub packages: Vec<PackageEntry>,
    /// Symlinks left out (dangling, or to directories in runtime packages).
    pub dropped: Vec<DroppedEntry>,
}

/// What one runtime package is made of.
struct RuntimeSpec {
    kind: &'static str,
    dist: String,
    package: String,
    target: Option<String>,
    requires: Vec<String>,
    /// Write `<package>/__init__.py` (device packages add to another's directory).
    init: bool,
    search: Vec<LibDir>,
}

struct Ctx {
    version: String,
    dist: PathBuf,
    scratch: PathBuf,
    time: zip::DateTime,
    patchelf: Patchelf,
    /// SOURCE_DATE_EPOCH (0 when unset): tar times are clamped to it.
    epoch: u64,
    launcher: OnceLock<Result<launcher::Launcher, String>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackageError + '_ {
    move |source| PackageError::Io { path: path.to_path_buf(), source }
}

/// A normalized PEP 440 version, as wheel file names need it.
fn valid_version(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit())
        && !v.ends_with(['.', '+'])
        && v.chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, '.' | '+' | '!'))
        && !v.contains("..")
}

fn resolve_version(explicit: Option<&str>, arts: &Artifacts) -> Result<String, PackageError> {
    let manifest = arts.root.join(artifacts::THEROCK_MANIFEST);
    let (v, origin) = match explicit {
        Some(v) => (v.to_string(), "--version".to_string()),
        None => {
            let v = ["version", "rocm_version"]
                .iter()
                .find_map(|k| arts.therock.get(k).and_then(|v| v.as_str()))
                .ok_or_else(|| PackageError::NoVersion(manifest.display().to_string()))?;
            (v.to_string(), format!("from {}", manifest.display()))
        }
    };
    if !valid_version(&v) {
        return Err(PackageError::BadVersion { version: v, origin });
    }
    Ok(v)
}

fn wheel_file(dist: &str, version: &str) -> String {
    format!("{}-{version}-{WHEEL_TAG}.whl", crate::wheel::name::normalize_name(dist))
}

fn dist_info_dir(dist: &str, version: &str) -> String {
    format!("{}-{version}.dist-info", crate::wheel::name::normalize_name(dist))
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

fn wheel_metadata() -> String {
    format!(
        "Wheel-Version: 1.0\nGenerator: quarry {}\nRoot-Is-Purelib: false\nTag: {WHEEL_TAG}\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn sha256_file(path: &Path) -> Result<(String, u64), PackageError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).map_err(io(path))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((hex::encode(h.finalize()), n))
}

fn has_dir(layout: &RuntimeLayout, dir: &str) -> bool {
    let prefix = format!("{dir}/");
    layout.files.keys().any(|p| p.starts_with(&prefix))
}

fn select<'a>(arts: &'a Artifacts, f: impl Fn(&Artifact) -> bool + 'a) -> Vec<&'a Artifact> {
    arts.artifacts.iter().filter(|a| f(a)).collect()
}

/// Package the artifacts under `opts.artifact_dir` into `<dest_dir>/dist/`.
pub fn package(opts: &Options) -> Result<PackageReport, PackageError> {
    let arts = artifacts::read(&opts.artifact_dir)?;
    let version = resolve_version(opts.version.as_deref(), &arts)?;
    let split = match opts.split {
        SplitMode::Auto => arts.split_flag(),
        SplitMode::On => true,
        SplitMode::Off => false,
    };
    let targets = arts.targets();
    if !split && targets.is_empty() {
        return Err(PackageError::NoFamilies(arts.root.display().to_string()));
    }
    let epoch = crate::wheel::archive::source_date_epoch()?.unwrap_or(0).max(0);
    let dist = opts.dest_dir.join("dist");
    std::fs::create_dir_all(&dist).map_err(io(&dist))?;
    let scratch = tempfile::Builder::new()
        .prefix(".quarry-rocm-package-")
        .tempdir_in(&opts.dest_dir)
        .map_err(io(&opts.dest_dir))?;
    // Everything is written under the scratch directory first and moved
    // into dist/ only once every package is done: a failure leaves no
    // partial set of packages behind.
    let staging = scratch.path().join("dist");
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let ctx = Ctx {
        version: version.clone(),
        dist: staging.clone(),
        scratch: scratch.path().to_path_buf(),
        time: crate::wheel::archive::zip_time(epoch),
        patchelf: Patchelf::find(None)?,
        epoch: epoch as u64,
        launcher: OnceLock::new(),
    };
    let pin = |d: &str| format!("{d}=={version}");
    let mut packages = Vec::new();
    let mut dropped = Vec::new();
    let mut info = DistInfo { version: version.clone(), split, targets: targets.clone(), ..Default::default() };

    // Core.
    let core_staged = collect::collect(select(&arts, |a| roles::is_core(&a.name)), &roles::core_excludes)?;
    let core = runtime::layout(&core_staged)?;
    let mut core_search = vec![LibDir::new(CORE_PACKAGE, "lib")];
    for d in CORE_EXTRA_LIB_DIRS {
        if has_dir(&core, d) {
            core_search.push(LibDir::new(CORE_PACKAGE, d));
        }
    }
    let core_spec = RuntimeSpec {
        kind: "core",
        dist: CORE_DIST.into(),
        package: CORE_PACKAGE.into(),
        target: None,
        requires: vec![],
        init: true,
        search: core_search,
    };
    packages.push(build_runtime(&ctx, &core_spec, &core, &mut dropped)?);
    for (path, p) in &core.files {
        if let Some(short) = p.soname.as_deref().and_then(runtime::short_name) {
            info.libraries.entry(short.to_string()).or_insert_with(|| ("core".to_string(), path.clone()));
        }
    }
    for (path, target) in &core.launchers {
        if let Some(name) = path.strip_prefix("bin/").filter(|n| !n.contains('/')) {
            info.launchers.insert(name.to_string(), target.clone());
        }
    }

    // Libraries, and device packages overlaid into the libraries directory.
    let libraries_search = |package: &str| {
        let mut v = vec![LibDir::new(package, "lib"), LibDir::new(CORE_PACKAGE, "lib")];
        for d in LIBRARIES_CORE_LIB_DIRS {
            if has_dir(&core, d) {
                v.push(LibDir::new(CORE_PACKAGE, d));
            }
        }
        v
    };
    let mut devel_runtime: BTreeMap<String, InRuntime> = core
        .placed
        .iter()
        .map(|(from, to)| (from.clone(), InRuntime { package: CORE_PACKAGE.into(), path: to.clone() }))
        .collect();
    let mut library_layouts: Vec<(String, RuntimeLayout)> = Vec::new();
    if split {
        let staged = collect::collect(select(&arts, |a| roles::is_libraries(&a.name)), &|_| false)?;
        let layout = runtime::layout(&staged)?;
        let spec = RuntimeSpec {
            kind: "libraries",
            dist: LIBRARIES_DIST.into(),
            package: LIBRARIES_PACKAGE.into(),
            target: None,
            requires: vec![pin(CORE_DIST)],
            init: true,
            search: libraries_search(LIBRARIES_PACKAGE),
        };
        packages.push(build_runtime(&ctx, &spec, &layout, &mut dropped)?);
        for (from, to) in &layout.placed {
            devel_runtime
                .entry(from.clone())
                .or_insert(InRuntime { package: LIBRARIES_PACKAGE.into(), path: to.clone() });
        }
        for t in &targets {
            let staged = collect::collect(select(&arts, |a| roles::is_target_code(&a.name, t)), &|_| false)?;
            let dev = runtime::layout(&staged)?;
            let dist_name = format!("{DEVICE_DIST}-{t}");
            if let Some(p) = dev.files.keys().find(|p| layout.files.contains_key(*p)) {
                return Err(PackageError::DeviceOverlap {
                    device: dist_name,
                    libraries: LIBRARIES_DIST.into(),
                    path: format!("{LIBRARIES_PACKAGE}/{p}"),
                });
            }
            let spec = RuntimeSpec {
                kind: "device",
                dist: dist_name,
                package: LIBRARIES_PACKAGE.into(),
                target: Some(t.clone()),
                requires: vec![pin(LIBRARIES_DIST)],
                init: false,
                search: libraries_search(LIBRARIES_PACKAGE),
            };
            packages.push(build_runtime(&ctx, &spec, &dev, &mut dropped)?);
        }
        library_layouts.push((LIBRARIES_PACKAGE.into(), layout));
        info.device_targets = targets.clone();
        info.default_family = String::new();
    } else {
        for fam in &targets {
            let staged = collect::collect(
                select(&arts, |a| roles::is_libraries(&a.name) || roles::is_target_code(&a.name, fam)),
                &|_| false,
            )?;
            let layout = runtime::layout(&staged)?;
            let package = format!("{LIBRARIES_PACKAGE}_{}", fam.replace('-', "_"));
            let spec = RuntimeSpec {
                kind: "libraries",
                dist: format!("{LIBRARIES_DIST}-{fam}"),
                package: package.clone(),
                target: Some(fam.clone()),
                requires: vec![pin(CORE_DIST)],
                init: true,
                search: libraries_search(&package),
            };
            packages.push(build_runtime(&ctx, &spec, &layout, &mut dropped)?);
            library_layouts.push((package, layout));
        }
        info.families = targets.clone();
        info.default_family = targets[0].clone();
    }
    if let Some((_, layout)) = library_layouts.first() {
        for (path, p) in &layout.files {
            if let Some(short) = p.soname.as_deref().and_then(runtime::short_name) {
                info.libraries.entry(short.to_string()).or_insert_with(|| ("libraries".to_string(), path.clone()));
            }
        }
    }

    // Devel.
    let devel_staged = collect::collect(select(&arts, |a| roles::is_devel(&a.name)), &|_| false)?;
    let mut devel_requires = vec![pin(CORE_DIST)];
    if split {
        devel_requires.push(pin(LIBRARIES_DIST));
    }
    packages.push(build_devel(&ctx, &devel_staged, &devel_runtime, devel_requires, &mut dropped)?);

    // The selector sdist.
    for (k, p) in [("core", CORE_PACKAGE), ("libraries", LIBRARIES_PACKAGE), ("devel", DEVEL_PACKAGE)] {
        info.packages.insert(k.into(), p.into());
    }
    for (k, d) in [("core", CORE_DIST), ("libraries", LIBRARIES_DIST), ("devel", DEVEL_DIST)] {
        info.dists.insert(k.into(), d.into());
    }
    if split {
        info.dists.insert("device".into(), DEVICE_DIST.into());
    }
    let (sdist_path, sdist_files) = sdist::write(&staging, &info, epoch as u64)?;
    let (sha256, size) = sha256_file(&sdist_path)?;
    let mut requires = vec![pin(CORE_DIST)];
    requires.push(if split {
        format!("{} ; extra == \"libraries\"", pin(LIBRARIES_DIST))
    } else {
        format!("{LIBRARIES_DIST}-<family>=={version} ; extra == \"libraries\" (family chosen at install time)")
    });
    requires.push(format!("{} ; extra == \"devel\"", pin(DEVEL_DIST)));
    packages.insert(
        0,
        PackageEntry {
            name: "rocm".into(),
            kind: "selector".into(),
            package_dir: Some("rocm_sdk".into()),
            target: None,
            file: sdist_path,
            sha256,
            size,
            requires,
            files: sdist_files,
            aliases: BTreeMap::new(),
            launchers: BTreeMap::new(),
            rpaths: BTreeMap::new(),
        },
    );
    let patchelf = format!("{} ({})", ctx.patchelf.path().display(), ctx.patchelf.version());
    drop(ctx);
    for p in &mut packages {
        let name = p.file.file_name().expect("packages have file names");
        let to = dist.join(name);
        std::fs::rename(&p.file, &to).map_err(io(&to))?;
        p.file = to;
    }
    scratch.close().map_err(io(&opts.dest_dir))?;
    Ok(PackageReport { version, split, targets, dist_dir: dist, patchelf, packages, dropped })
}

impl Ctx {
    fn launcher(&self) -> Result<&launcher::Launcher, PackageError> {
        self.launcher
            .get_or_init(|| launcher::Launcher::compile(&self.scratch).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|why| PackageError::Compiler { cc: "cc".into(), why: why.clone() })
    }
}

/// Lay out, patch and write one runtime wheel.
fn build_runtime(
    ctx: &Ctx,
    spec: &RuntimeSpec,
    layout: &RuntimeLayout,
    dropped: &mut Vec<DroppedEntry>,
) -> Result<PackageEntry, PackageError> {
    let work = ctx.scratch.join(&spec.dist);
    let mut members = Vec::with_capacity(layout.files.len() + 3);
    // (member, source, copy) of every ELF file to patch.
    let mut jobs: Vec<(String, PathBuf, PathBuf, String)> = Vec::new();
    for (path, placed) in &layout.files {
        let member = format!("{}/{path}", spec.package);
        let source = match &placed.payload {
            Payload::Launcher(target) => {
                let out = work.join(path);
                ctx.launcher()?.write(target, &out)?;
                out
            }
            Payload::Copy(src) => src.clone(),
        };
        if placed.host_elf {
            let rpath = rpath::rpath_for(&spec.package, path, &spec.search, placed.rpath.as_deref());
            let copy = work.join(path);
            jobs.push((member.clone(), source, copy.clone(), rpath));
            members.push(Member { name: member, source: Source::Path(copy), executable: placed.executable });
        } else {
            members.push(Member { name: member, source: Source::Path(source), executable: placed.executable });
        }
    }
    jobs.par_iter().try_for_each(|(member, src, copy, rpath)| {
        let fail = |why: String| PackageError::Patch { member: member.clone(), src: src.clone(), why };
        if src != copy {
            if let Some(d) = copy.parent() {
                std::fs::create_dir_all(d).map_err(io(d))?;
            }
            std::fs::copy(src, copy).map_err(|e| fail(format!("copying for patching: {e}")))?;
            let mode = if std::fs::metadata(src)
                .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
                .unwrap_or(false)
            {
                0o755
            } else {
                0o644
            };
            std::fs::set_permissions(copy, std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(io(copy))?;
        }
        rpath::patch_and_verify(&ctx.patchelf, copy, rpath).map_err(|e| {
            fail(format!(
                "{e}; patchelf {} wrote a file the loader may reject, so nothing was packaged \
                 (try another patchelf release and report the input file)",
                ctx.patchelf.version()
            ))
        })
    })?;
    if spec.init {
        members.push(Member::bytes(
            format!("{}/__init__.py", spec.package),
            format!(
                "\"\"\"{} {}: installed by the rocm packages; use `import rocm_sdk`.\"\"\"\n",
                spec.dist, ctx.version
            ),
        ));
    }
    let summary = match spec.kind {
        "core" => "ROCm SDK core: runtime, HIP, compiler and tools".to_string(),
        "libraries" => "ROCm SDK math and ML libraries (host code)".to_string(),
        _ => format!("ROCm SDK device code for {}", spec.target.as_deref().unwrap_or("")),
    };
    let rpaths = jobs.iter().map(|(m, _, _, r)| (m.clone(), r.clone())).collect();
    for d in &layout.dropped {
        dropped.push(DroppedEntry { package: spec.dist.clone(), path: d.path.clone(), reason: d.reason.clone() });
    }
    finish_wheel(
        ctx,
        spec.kind,
        &spec.dist,
        Some(&spec.package),
        spec.target.clone(),
        &summary,
        &spec.requires,
        members,
    )
    .map(|mut e| {
        e.aliases = layout.aliases.clone();
        e.launchers = layout.launchers.clone();
        e.rpaths = rpaths;
        e
    })
}

fn build_devel(
    ctx: &Ctx,
    staged: &Staged,
    runtime: &BTreeMap<String, InRuntime>,
    requires: Vec<String>,
    dropped: &mut Vec<DroppedEntry>,
) -> Result<PackageEntry, PackageError> {
    let (tree, gone) = devel::tree(staged, DEVEL_PACKAGE, runtime)?;
    for d in gone {
        dropped.push(DroppedEntry { package: DEVEL_DIST.into(), path: d.path, reason: d.reason });
    }
    let work = ctx.scratch.join(DEVEL_DIST);
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let tar = work.join("_devel.tar");
    devel::write(&tree, &tar, ctx.epoch)?;
    let members = vec![
        Member::bytes(
            format!("{DEVEL_PACKAGE}/__init__.py"),
            format!("\"\"\"{DEVEL_DIST} {}: expanded on first use by `rocm-sdk init`.\"\"\"\n", ctx.version),
        ),
        Member { name: format!("{DEVEL_PACKAGE}/_devel.tar"), source: Source::Path(tar), executable: false },
    ];
    finish_wheel(
        ctx,
        "devel",
        DEVEL_DIST,
        Some(DEVEL_PACKAGE),
        None,
        "ROCm SDK development files (headers, CMake configs, tools), expanded on first use",
        &requires,
        members,
    )
}

#[allow(clippy::too_many_arguments)]
fn finish_wheel(
    ctx: &Ctx,
    kind: &str,
    dist: &str,
    package: Option<&str>,
    target: Option<String>,
    summary: &str,
    requires: &[String],
    mut members: Vec<Member>,
) -> Result<PackageEntry, PackageError> {
    let di = dist_info_dir(dist, &ctx.version);
    members.push(Member::bytes(format!("{di}/METADATA"), metadata(dist, &ctx.version, summary, requires)));
    members.push(Member::bytes(format!("{di}/WHEEL"), wheel_metadata()));
    let out = ctx.dist.join(wheel_file(dist, &ctx.version));
    let files = wheel_zip::write_wheel(&out, &di, members, ctx.time, &ctx.scratch)?;
    let (sha256, size) = sha256_file(&out)?;
    Ok(PackageEntry {
        name: dist.to_string(),
        kind: kind.to_string(),
        package_dir: package.map(str::to_string),
        target,
        file: out,
        sha256,
        size,
        requires: requires.to_vec(),
        files,
        aliases: BTreeMap::new(),
        launchers: BTreeMap::new(),
        rpaths: BTreeMap::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for v in ["7.10.0", "7.10.0.dev0", "7.10.0a20260101", "7.10.0rc1", "7.10.0+local.1"] {
            assert!(valid_version(v), "{v}");
        }
        for v in ["", "v7", "7.10-0", "7..1", "7.10.", "7 1", "7.10.0RC1"] {
            assert!(!valid_version(v), "{v}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            wheel_file("rocm-sdk-libraries-gfx94X-dcgpu", "7.10.0"),
            "rocm_sdk_libraries_gfx94x_dcgpu-7.10.0-py3-none-linux_x86_64.whl"
        );
        assert_eq!(dist_info_dir("rocm-sdk-devel", "7.10.0"), "rocm_sdk_devel-7.10.0.dist-info");
    }
}
