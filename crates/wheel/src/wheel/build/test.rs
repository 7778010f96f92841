//! `quarry wheel build --test`: each wheel installed in a fresh virtualenv
//! in a fresh container, and a command run against it, with the network off.
//!
//! The container is of the build image, or of `--test-image` (a clean
//! runtime image, so a passing test proves the wheel does not need the
//! build image's -dev libraries). What the test installs is resolved like
//! the build requirements: the wheel's own runtime requirements
//! (`Requires-Dist`) and `--test-requires` are resolved on this machine with
//! the user's pip for the test image's Python and platform, pinned in the
//! lock (`[[test]]` tables), kept in the cache by sha256 and copied in, so
//! the install needs no network. A wheel that fails its test is moved out
//! of the output directory into `failed-tests/` beside the good ones.
//! A wheel built on ROCm's packages (`--rocm-packages`) gets them from that
//! directory, copied in: its `rocm[libraries]==V` is installed from there.

use super::lock::{BuildLock, LockTest, LockedWheel, Role};
use super::pythons::{parse_pythons, Python, FIND_PYTHONS};
use super::{BuildOptions, Built, WheelBuildError, FIND_LINKS_DIR};
use crate::cache::Cache;
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::run::{Network, Output, RunOptions};
use crate::engine::Engine;
use crate::pypi::resolve::{fetch_pinned, resolve, Pin};
use std::path::{Path, PathBuf};

const TEST_WHEELS_DIR: &str = "/quarry/wheels";
const TEST_REQ_DIR: &str = "/quarry/test-req";
/// Where a wheel that failed its test goes, inside the output directory.
pub const FAILED_DIR: &str = "failed-tests";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WheelBuildError + '_ {
    move |err| WheelBuildError::Io { path: path.to_path_buf(), err }
}

/// What the tests use from the build.
pub(super) struct TestContext<'a> {
    pub cache: &'a Cache,
    pub lock: &'a mut BuildLock,
    pub lock_path: &'a Path,
}

/// The Pythons of the image the tests run in (found in a container of it).
fn test_pythons(engine: &Engine, image: &str) -> Result<Vec<Python>, WheelBuildError> {
    let opts = RunOptions { image: image.to_string(), network: Network::None, ..Default::default() };
    let out = engine
        .guarded(async |s| {
            s.require_image(image).await?;
            let id = s.start_idle(&opts, Vec::new()).await?;
            let sh = vec!["sh".to_string(), "-c".to_string(), FIND_PYTHONS.to_string()];
            let (_, out) = s.exec(&id, sh, vec![], None, ExecOutput::Capture).await?;
            s.remove_container(&id).await;
            Ok(out)
        })
        .map_err(WheelBuildError::Engine)?;
    Ok(parse_pythons(&String::from_utf8_lossy(&out)))
}

/// The wheel's `Requires-Dist` lines (markers kept: pip evaluates them).
fn runtime_requirements(wheel: &Path) -> Result<Vec<String>, WheelBuildError> {
    let mut zip = crate::wheel::archive::WheelZip::open(wheel)?;
    let meta = format!("{}/METADATA", zip.dist_info_dir()?);
    let text = String::from_utf8_lossy(&zip.read_file(&meta)?).into_owned();
    Ok(crate::wheel::metadata::header_values(&text, "Requires-Dist").into_iter().map(str::to_string).collect())
}

/// A requirement on the `rocm` package itself (`rocm[libraries]==5.7.dev0`).
fn is_rocm_requirement(r: &str) -> bool {
    let name: String = r.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect();
    name.eq_ignore_ascii_case("rocm")
}

/// The wheels to install beside `wheel` for its test in `python`'s image:
/// from the lock when it pins the same requirements, else resolved and pinned.
fn test_requirements(
    cx: &mut TestContext,
    o: &BuildOptions,
    image: &str,
    python: &Python,
    wheel: &Path,
) -> Result<Vec<crate::pypi::Fetched>, WheelBuildError> {
    let mut requires = runtime_requirements(wheel)?;
    // The ROCm packages come from --rocm-packages, copied in beside the wheel.
    if o.rocm.is_some() {
        requires.retain(|r| !is_rocm_requirement(r));
    }
    requires.extend(o.test_requires.iter().cloned());
    if requires.is_empty() {
        return Ok(Vec::new());
    }
    let (target, platform) = super::isolation::target_of(python, image)?;
    let label = format!("the test requirements for {} ({platform})", python.tag);
    let find_links: Vec<PathBuf> =
        o.find_links.iter().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())).collect();
    let own = crate::wheel::name::WheelName::parse(&wheel.file_name().unwrap_or_default().to_string_lossy())
        .map(|n| crate::wheel::name::normalize_name(&n.name))
        .unwrap_or_default();
    let locked = cx.lock.test(&python.tag, &platform).filter(|t| t.requires == requires).cloned();
    let wheels: Vec<LockedWheel> = match locked {
        Some(t) => t.wheels,
        None => {
            log::info!("resolving {label}: {}", requires.join(", "));
            let r = resolve(cx.cache, &target, &requires, &find_links, &label)
                .map_err(|e| super::isolation::resolve_error(e, &python.tag, &platform))?;
            let wheels: Vec<LockedWheel> = r
                .into_iter()
                .filter(|w| crate::wheel::name::normalize_name(&w.name) != own)
                .map(|w| LockedWheel {
                    name: w.name,
                    version: w.version,
                    file: w.fetched.file,
                    sha256: w.fetched.sha256,
                    role: Role::TestRequires,
                })
                .collect();
            cx.lock.set_test(LockTest {
                python: python.tag.clone(),
                platform: platform.clone(),
                requires,
                wheels: wheels.clone(),
            });
            cx.lock.write(cx.lock_path).map_err(WheelBuildError::Lock)?;
            wheels
        }
    };
    let pins: Vec<Pin> = wheels.iter().map(LockedWheel::pin).collect();
    fetch_pinned(cx.cache, &target, &pins, &find_links, &label)
        .map_err(|e| super::isolation::resolve_error(e, &python.tag, &platform))
}

/// Test every built wheel; a failing one is moved to `failed-tests/` and
/// the first failure is returned once all have run.
/// `image` (an engine reference) is the test image, else the build image.
pub(super) fn test_all(
    engine: &Engine,
    o: &BuildOptions,
    image: &str,
    cmd: &str,
    built: &mut [Built],
    cx: &mut TestContext,
) -> Result<(), WheelBuildError> {
    let pythons = test_pythons(engine, image)?;
    let mut failed = Vec::new();
    for b in built.iter_mut() {
        let python = pythons.iter().find(|p| p.tag == b.python).ok_or_else(|| {
            WheelBuildError::Input(format!(
                "--test-image `{image}` has no {} to test {} with (it has: {})",
                b.python,
                b.wheel.display(),
                pythons.iter().map(|p| p.tag.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        let extra = test_requirements(cx, o, image, python, &b.wheel)?;
        match test_wheel(engine, image, o, &b.wheel, python, &extra, cmd)? {
            0 => b.tested = true,
            code => {
                let dir = o.output.join(FAILED_DIR);
                std::fs::create_dir_all(&dir).map_err(io(&dir))?;
                let to = dir.join(b.wheel.file_name().unwrap_or_default());
                std::fs::rename(&b.wheel, &to).map_err(io(&b.wheel))?;
                failed.push(WheelBuildError::TestFailed { wheel: to.display().to_string(), code });
            }
        }
    }
    match failed.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Install `wheel` into a fresh virtualenv in a fresh container (network
/// off, from the output directory, the resolved test requirements and
/// `--find-links`) and run `cmd` from a temporary directory, so the source
/// tree cannot be imported by mistake. Returns the command's exit code.
fn test_wheel(
    engine: &Engine,
    image: &str,
    o: &BuildOptions,
    wheel: &Path,
    python: &Python,
    extra: &[crate::pypi::Fetched],
    cmd: &str,
) -> Result<i32, WheelBuildError> {
    let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let mut copy_in = Vec::new();
    for e in std::fs::read_dir(&o.output).map_err(io(&o.output))? {
        let p = e.map_err(io(&o.output))?.path();
        if p.is_file() && p.extension().is_some_and(|x| x == "whl") {
            copy_in.push(CopyIn {
                dest: format!("{TEST_WHEELS_DIR}/{}", p.file_name().unwrap().to_string_lossy()),
                host: p,
            });
        }
    }
    let mut links = format!("--find-links {TEST_WHEELS_DIR}");
    if !extra.is_empty() {
        // Copied in through the archive API (the directory is made then: the
        // image's user, often not root, need not be able to create it).
        links.push_str(&format!(" --find-links {TEST_REQ_DIR}"));
        copy_in
            .extend(extra.iter().map(|f| CopyIn { host: f.path.clone(), dest: format!("{TEST_REQ_DIR}/{}", f.file) }));
    }
    if let Some(r) = &o.rocm {
        copy_in.push(CopyIn { host: r.packages.dir.clone(), dest: super::rocm::ROCM_PACKAGES_DIR.into() });
        links.push_str(&format!(" --find-links {}", super::rocm::ROCM_PACKAGES_DIR));
    }
    if let Some(f) = &o.find_links {
        copy_in.push(CopyIn { host: f.clone(), dest: FIND_LINKS_DIR.into() });
        links.push_str(&format!(" --find-links {FIND_LINKS_DIR}"));
    }
    let also: String = o.test_requires.iter().map(|r| format!(" {}", crate::engine::run::shell_quote(r))).collect();
    let script = format!(
        "set -e\n\"$QUARRY_PYTHON\" -m venv /tmp/quarry-venv\n\
         /tmp/quarry-venv/bin/python -m pip install --disable-pip-version-check -q --no-index {links} {TEST_WHEELS_DIR}/{file}{also}\n\
         cd \"$(mktemp -d)\"\nexport PATH=/tmp/quarry-venv/bin:$PATH VIRTUAL_ENV=/tmp/quarry-venv\n\
         exec sh -c \"$QUARRY_TEST\"\n"
    );
    let opts = RunOptions {
        image: image.to_string(),
        cmd: vec!["sh".into(), "-c".into(), script],
        env: vec![format!("QUARRY_PYTHON={}", python.path), format!("QUARRY_TEST={cmd}")],
        network: Network::None,
        gpu: o.gpu.clone(),
        ..Default::default()
    };
    log::info!("testing {file} in `{}`: {cmd}", opts.image);
    engine
        .guarded(async |s| {
            s.require_image(&opts.image).await?;
            let (id, code) = s
                .launch(
                    &|m| opts.body(m),
                    crate::engine::run::Memlock::Unset,
                    &copy_in,
                    Default::default(),
                    Output::Stderr,
                )
                .await?;
            s.remove_container(&id).await;
            Ok(code)
        })
        .map_err(WheelBuildError::Engine)
}
