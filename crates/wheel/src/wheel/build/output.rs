//! After the builds: each wheel the container left is rewritten
//! deterministically, labelled with its local version, pinned to ROCm's
//! packages with `_rocm_init.py` (`--rocm-packages`), repaired, and moved
//! into the output directory.

use super::{BuildOptions, Built, Job, WheelBuildError};
use crate::engine::Engine;
use crate::wheel::image::RepairImage;
use crate::wheel::local_version::add_local_version;
use crate::wheel::name::WheelName;
use crate::wheel::normalize::normalize;
use crate::wheel::repair::{repair, RepairIn, RepairOptions};
use std::path::{Path, PathBuf};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WheelBuildError + '_ {
    move |err| WheelBuildError::Io { path: path.to_path_buf(), err }
}

/// Claim `wheel`'s file name in `output` for job `n`, unless an earlier
/// job of this build put another wheel of that name there (the same bytes,
/// as a pure wheel built for two Pythons, are one product).
fn place(
    placed: &mut std::collections::BTreeMap<std::ffi::OsString, usize>,
    jobs: &[Job],
    n: usize,
    wheel: &Path,
    output: &Path,
) -> Result<(), WheelBuildError> {
    let name = wheel.file_name().unwrap_or_default().to_os_string();
    if let Some(&first) = placed.get(&name) {
        let there = output.join(&name);
        let same = |p: &Path| crate::oci::digest::sha256_file(p).map_err(io(p));
        if same(&there)? == same(wheel)? {
            return Ok(());
        }
        return Err(WheelBuildError::SameName {
            name: name.to_string_lossy().into_owned(),
            python: jobs[n].python.tag.clone(),
            first: jobs[first].axes.clone(),
            second: jobs[n].axes.clone(),
        });
    }
    placed.insert(name, n);
    Ok(())
}

pub(super) fn parse_name(wheel: &Path) -> Result<WheelName, WheelBuildError> {
    Ok(WheelName::parse(&wheel.file_name().unwrap_or_default().to_string_lossy())?)
}

/// The wheels of `jobs` (job `n`'s in `raw/n`), finished into `o.output`;
/// `labels` per axes combination; scratch space in `staging`.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    engine: &Engine,
    image: &str,
    o: &BuildOptions,
    jobs: &[Job],
    labels: &[Option<String>],
    raw: &Path,
    staging: &Path,
    epoch: u64,
) -> Result<Vec<Built>, WheelBuildError> {
    let mut built = Vec::new();
    // Each product's file name, by the job that made it: a second job
    // making the same name is refused before it overwrites the first's.
    let mut placed: std::collections::BTreeMap<std::ffi::OsString, usize> = Default::default();
    for (n, job) in jobs.iter().enumerate() {
        let dir = raw.join(n.to_string());
        let wheels: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io(&dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "whl"))
            .collect();
        if wheels.len() != 1 {
            return Err(WheelBuildError::WheelCount {
                python: job.python.tag.clone(),
                axes: job.axes.clone(),
                count: wheels.len(),
                names: wheels
                    .iter()
                    .map(|w| w.file_name().unwrap().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        // Byte for byte the same for the same inputs, before anything else touches it.
        let mut wheel = normalize(&wheels[0], &staging.join(format!("normalized-{n}")), epoch)?;
        if let Some(label) = labels[job.combo].as_deref() {
            wheel = add_local_version(&wheel, label, &staging.join(format!("label-{n}")))?;
        }
        let pure = parse_name(&wheel)?.is_pure();
        let (mut rocm_requirement, mut rocm_init, mut rocm_excluded) = (None, Vec::new(), None);
        let mut repaired = false;
        if o.repair && !pure {
            let mut exclude = o.exclude.clone();
            exclude.extend(o.rocm.iter().flat_map(|r| r.packages.exclude_globs()));
            let within = RepairIn::Image {
                image: RepairImage { engine, image: image.to_string() },
                patchelf: o.patchelf.clone(),
            };
            let report = repair(
                &wheel,
                &staging.join(format!("repair-{n}")),
                &RepairOptions { exclude, ..RepairOptions::new(within) },
            )?;
            if let Some(r) = &o.rocm {
                let covered = report.excluded_libs.iter().filter(|l| r.packages.libraries.contains(*l));
                rocm_excluded = Some(covered.cloned().collect());
            }
            wheel = report.output;
            repaired = true;
        }
        // After repair: what it left to ROCm's packages is what they must load first.
        if let Some(r) = &o.rocm {
            let provided = &r.packages.libraries;
            let done = crate::wheel::rocm_init::inject(&wheel, &r.pin, provided, &staging.join(format!("rocm-{n}")))?;
            (wheel, rocm_requirement, rocm_init) = (done.wheel, Some(done.requirement), done.packages);
        }
        let mut device_wheels = Vec::new();
        if o.split && !pure {
            let options = crate::wheel::split::SplitOptions {
                device_prefix: None,
                targets: None,
                families: crate::wheel::split::Families::Auto,
                scheme: crate::code_objects::kpack_writer::Scheme::ZstdPerKernel,
                device_requires: Vec::new(),
                variants: None,
            };
            let report = crate::wheel::split::split(&wheel, &staging.join(format!("split-{n}")), &options)?;
            for d in report.device {
                place(&mut placed, jobs, n, &d.wheel, &o.output)?;
                let dest = o.output.join(d.wheel.file_name().unwrap());
                std::fs::rename(&d.wheel, &dest).map_err(io(&dest))?;
                device_wheels.push(dest);
            }
            wheel = report.host;
        }
        place(&mut placed, jobs, n, &wheel, &o.output)?;
        let dest = o.output.join(wheel.file_name().unwrap());
        std::fs::rename(&wheel, &dest).map_err(io(&dest))?;
        let name = parse_name(&dest)?;
        built.push(Built {
            tag: format!("{}-{}-{}", name.python_tags.join("."), name.abi_tags.join("."), name.platform_tags.join(".")),
            size: std::fs::metadata(&dest).map_err(io(&dest))?.len(),
            sha256: crate::oci::digest::sha256_file(&dest).map_err(io(&dest))?,
            wheel: dest,
            python: job.python.tag.clone(),
            axes: job.axes.clone(),
            seconds: job.seconds,
            session_seconds: 0.0,
            isolated: o.isolation,
            repaired,
            tested: false,
            pure,
            python_path: job.python.path.clone(),
            cached: false,
            tier: None,
            rocm_requirement,
            rocm_init,
            rocm_excluded,
            device_wheels,
            provenance: None,
        });
    }
    Ok(built)
}
