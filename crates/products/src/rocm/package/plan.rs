//! Every package's layout, decided before anything is written: which
//! artifacts feed it, its runtime layout or devel tree, its requirements and
//! its `_dist_info.py` data.

use super::collect::{self, backtrack};
use super::devel::{self, Normalize};
use super::runtime::{self, RuntimeLayout};
use super::{roles, Options, PackageError, SplitMode};
use super::{CORE_DIST, DEVEL_DIST, DEVICE_DIST, LIBRARIES_DIST, PROFILER_DIST};
use crate::layer::Tree;
use crate::rocm::python::{script_function, DistInfo};
use crate::rocm_artifacts::{self as artifacts, Artifact, Artifacts};
use std::collections::BTreeSet;

/// A runtime wheel to write.
pub struct RuntimePkg {
    /// core, profiler, libraries, device.
    pub kind: &'static str,
    pub dist: String,
    /// The platform package directory (`_rocm_sdk_core`).
    pub platform_dir: String,
    /// The pure Python package (`rocm_sdk_core`), if any.
    pub pure: Option<&'static str>,
    pub target: Option<String>,
    pub requires: Vec<String>,
    pub layout: RuntimeLayout,
    /// Device packages: `.devel_links/<T>.json`'s text.
    pub devel_links: Option<String>,
}

/// A devel wheel to write (legacy mode with several families: one each,
/// in `dist/<family>/`).
pub struct DevelPkg {
    pub tree: Tree,
    pub normalize: Vec<Normalize>,
    pub subdir: Option<String>,
}

pub struct Plan {
    pub version: String,
    pub split: bool,
    pub targets: Vec<String>,
    pub runtime: Vec<RuntimePkg>,
    pub devel: Vec<DevelPkg>,
    /// The `rocm` sdists: (subdirectory of dist/, its dist info).
    pub sdists: Vec<(Option<String>, DistInfo)>,
    /// What every pure package's `_dist_info.py` says.
    pub info: DistInfo,
    pub notes: Vec<String>,
}

#[derive(serde::Serialize)]
struct DevelLink {
    relpath: String,
    target: String,
}

#[derive(serde::Serialize)]
struct DevelLinks {
    version: String,
    links: Vec<DevelLink>,
}

fn select<'a>(arts: &'a Artifacts, f: impl Fn(&Artifact) -> bool + 'a) -> Vec<&'a Artifact> {
    arts.artifacts.iter().filter(|a| f(a)).collect()
}

pub fn plan(opts: &Options, version: &str) -> Result<Plan, PackageError> {
    let arts = artifacts::read(&opts.artifact_dir)?;
    let split = match opts.split {
        SplitMode::Auto => arts.split_flag(),
        SplitMode::On => true,
        SplitMode::Off => false,
    };
    let sfx = &opts.version_suffix;
    let targets = arts.targets();
    if !split && targets.is_empty() {
        return Err(PackageError::NoFamilies(arts.root.display().to_string()));
    }
    let core_dir = format!("_rocm_sdk_core{sfx}");
    let libraries_dir = format!("_rocm_sdk_libraries{sfx}");
    let pin = |d: &str| format!("{d}=={version}");
    let mut notes = Vec::new();
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut runtime_pkgs: Vec<RuntimePkg> = Vec::new();

    let core_staged = collect::collect(select(&arts, |a| roles::is_core(&a.name)), &roles::core_excludes)?;
    let profiler_staged =
        collect::collect(select(&arts, |a| roles::is_profiler(&a.name)), &|r| !roles::profiler_paths(r))?;
    let mut facts = runtime::facts(&core_staged)?;
    facts.extend(runtime::facts(&profiler_staged)?);
    names.extend(core_staged.names.iter().cloned());
    let core = runtime::layout(&core_staged, &facts, &core_dir, roles::rpath_subdirs("core"))?;
    runtime_pkgs.push(RuntimePkg {
        kind: "core",
        dist: CORE_DIST.into(),
        platform_dir: core_dir.clone(),
        pure: Some("rocm_sdk_core"),
        target: None,
        requires: vec![],
        layout: core,
        devel_links: None,
    });
    let has_profiler = profiler_staged.items.values().any(|i| !matches!(i, collect::Item::Dir));
    if has_profiler {
        names.extend(profiler_staged.names.iter().cloned());
        let mut layout = runtime::layout(&profiler_staged, &facts, &core_dir, roles::rpath_subdirs("profiler"))?;
        runtime::add_unversioned_profiler_copies(&mut layout);
        runtime_pkgs.push(RuntimePkg {
            kind: "profiler",
            dist: PROFILER_DIST.into(),
            platform_dir: format!("_rocm_profiler{sfx}"),
            pure: Some("rocm_profiler"),
            target: None,
            requires: vec![],
            layout,
            devel_links: None,
        });
    } else {
        notes.push(
            "no rocprofiler-compute/-systems artifacts: rocm-profiler is not built (the reference stops with an error)"
                .into(),
        );
    }

    let families: Vec<Option<String>> = if split { vec![None] } else { targets.iter().cloned().map(Some).collect() };
    for fam in &families {
        let staged = collect::collect(select(&arts, |a| roles::is_libraries(&a.name, fam.as_deref())), &|_| false)?;
        facts.extend(runtime::facts(&staged)?);
        names.extend(staged.names.iter().cloned());
        let layout = runtime::layout(&staged, &facts, &core_dir, roles::rpath_subdirs("libraries"))?;
        let (dist, platform_dir) = match fam {
            None => (LIBRARIES_DIST.to_string(), libraries_dir.clone()),
            Some(f) => (format!("{LIBRARIES_DIST}-{f}"), format!("_rocm_sdk_libraries_{}{sfx}", f.replace('-', "_"))),
        };
        runtime_pkgs.push(RuntimePkg {
            kind: "libraries",
            dist,
            platform_dir,
            pure: Some("rocm_sdk_libraries"),
            target: fam.clone(),
            requires: vec![],
            layout,
            devel_links: None,
        });
    }
    let device_targets: Vec<String> = if split {
        let mut t: Vec<String> = targets.iter().map(|t| roles::base_target(t).to_string()).collect();
        t.sort();
        t.dedup();
        t
    } else {
        vec![]
    };
    for t in &device_targets {
        let staged = collect::collect(select(&arts, |a| roles::is_device(&a.name, t)), &|_| false)?;
        facts.extend(runtime::facts(&staged)?);
        let layout = runtime::device_layout(&staged, &facts, &core_dir, roles::rpath_subdirs("device"));
        let links = DevelLinks {
            version: version.to_string(),
            links: layout
                .files
                .keys()
                .map(|r| DevelLink { relpath: r.clone(), target: format!("{}{libraries_dir}/{r}", backtrack(r)) })
                .collect(),
        };
        runtime_pkgs.push(RuntimePkg {
            kind: "device",
            dist: format!("{DEVICE_DIST}-{t}"),
            platform_dir: libraries_dir.clone(),
            pure: None,
            target: Some(t.clone()),
            requires: vec![pin(LIBRARIES_DIST)],
            layout,
            devel_links: Some(serde_json::to_string_pretty(&links).expect("plain data serializes")),
        });
    }

    // Devel: one, or one per family in legacy mode with several families.
    let devel_dir = format!("_rocm_sdk_devel{sfx}");
    let mut devel = Vec::new();
    let per_family = !split && families.len() >= 2;
    let devel_families = families.clone();
    for fam in &devel_families {
        let staged =
            collect::collect(select(&arts, |a| roles::is_devel(&a.name, &names, split, fam.as_deref())), &|_| false)?;
        facts.extend(runtime::facts(&staged)?);
        let order = ["core", "profiler", "libraries", "device"];
        let mut runtime: Vec<(String, &RuntimeLayout)> = Vec::new();
        for kind in order {
            for p in runtime_pkgs.iter().filter(|p| p.kind == kind) {
                let other_family = kind == "libraries" && p.target.is_some() && p.target != *fam;
                if !other_family {
                    runtime.push((p.platform_dir.clone(), &p.layout));
                }
            }
        }
        let (tree, normalize) = devel::tree(&staged, &facts, &devel_dir, &runtime)?;
        devel.push(DevelPkg { tree, normalize, subdir: fam.clone().filter(|_| per_family) });
    }

    // What `_dist_info.py` says.
    let mut info = DistInfo {
        version: version.to_string(),
        suffix: sfx.clone(),
        split,
        targets: targets.clone(),
        device_targets: device_targets.clone(),
        ..Default::default()
    };
    if !split {
        info.families = targets.clone();
        info.default_family = targets[0].clone();
    }
    info.packages.insert("core".into(), core_dir.clone());
    info.packages.insert("libraries".into(), libraries_dir.clone());
    info.packages.insert("devel".into(), devel_dir.clone());
    info.dists.insert("core".into(), CORE_DIST.into());
    info.dists.insert("libraries".into(), LIBRARIES_DIST.into());
    info.dists.insert("devel".into(), DEVEL_DIST.into());
    info.dists.insert("device".into(), DEVICE_DIST.into());
    if has_profiler {
        info.packages.insert("profiler".into(), format!("_rocm_profiler{sfx}"));
        info.dists.insert("profiler".into(), PROFILER_DIST.into());
    }
    for (short, kind, prefix, dir) in roles::SHORT_NAMES {
        let pkg = runtime_pkgs.iter().find(|p| p.kind == *kind);
        let found = pkg.and_then(|p| {
            p.layout.files.keys().find(|r| {
                collect::parent(r) == *dir && {
                    let n = collect::file_name(r);
                    n == *prefix || n.starts_with(&format!("{prefix}."))
                }
            })
        });
        info.libraries.insert(short.to_string(), (kind.to_string(), found.cloned()));
    }
    if let Some(core) = runtime_pkgs.first() {
        info.launchers = core.layout.launchers.clone();
    }
    for (name, rel, expand) in roles::CORE_SCRIPTS {
        info.scripts.insert(script_function(name), (rel.to_string(), *expand));
    }
    for (name, rel) in roles::PROFILER_SCRIPTS {
        info.profiler_scripts.insert(script_function(name), rel.to_string());
    }
    let sdists = if per_family {
        targets
            .iter()
            .map(|f| {
                let mut i = info.clone();
                i.families = vec![f.clone()];
                i.default_family = f.clone();
                (Some(f.clone()), i)
            })
            .collect()
    } else {
        vec![(None, info.clone())]
    };
    Ok(Plan { version: version.to_string(), split, targets, runtime: runtime_pkgs, devel, sdists, info, notes })
}
