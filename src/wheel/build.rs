//! `quarry wheel build`: build wheels in a container for every Python of an
//! image and every combination of build axes, then give them a local
//! version label, repair them (with the libraries of the image they were
//! built in), and test each in a fresh container.
//!
//! The project is copied in through the engine's archive API, never
//! bind-mounted, so remote engines work. One idle container per image runs
//! every build with `exec`; it is removed however the build ends.

use super::image::RepairImage;
use super::local_version::add_local_version;
use super::name::WheelName;
use super::repair::{repair, RepairIn, RepairOptions};
use super::version::{expand_template, normalize_local_label};
use super::WheelError;
use crate::elf::patchelf::Patchelf;
use crate::engine::copy::CopyIn;
use crate::engine::exec::ExecOutput;
use crate::engine::gpu::{GpuPlan, TargetList};
use crate::engine::run::{Network, Output, RunOptions};
use crate::engine::{Engine, EngineError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the project, the find-links wheelhouse and the results live in
/// the build container.
const SRC_DIR: &str = "/quarry/src";
const SDIST_DIR: &str = "/quarry/sdist";
const FIND_LINKS_DIR: &str = "/quarry/find-links";
const WORK_DIR: &str = "/quarry/work";
const OUT_DIR: &str = "/quarry/out";
const TEST_WHEELS_DIR: &str = "/quarry/wheels";

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Wheel(#[from] WheelError),
    #[error("{0}")]
    Input(String),
    #[error("image `{image}` has no Python: looked for /opt/python/cp3*/bin/python and python3 on PATH; use an image with Python, pip, setuptools and wheel")]
    NoPython { image: String },
    #[error("the build for {python}{} failed (pip wheel exited with {code}); its output is above", axes_suffix(axes))]
    Failed { python: String, axes: BTreeMap<String, String>, code: i64 },
    #[error("the build for {python}{} left {count} wheels in its output instead of one: {names}", axes_suffix(axes))]
    WheelCount { python: String, axes: BTreeMap<String, String>, count: usize, names: String },
    #[error("testing `{wheel}` failed (exit code {code}); its output is above")]
    TestFailed { wheel: String, code: i32 },
    #[error("`{path}`: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

fn axes_suffix(axes: &BTreeMap<String, String>) -> String {
    if axes.is_empty() {
        return String::new();
    }
    let v: Vec<String> = axes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(" with {}", v.join(" "))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |err| BuildError::Io { path: path.to_path_buf(), err }
}

/// What to build and how.
pub struct BuildOptions {
    /// A project directory or an sdist.
    pub source: PathBuf,
    /// An engine image reference (already loaded).
    pub image: String,
    pub output: PathBuf,
    /// Python tags (`cp311`) to build for; None builds for every one found.
    pub pythons: Option<Vec<String>>,
    /// `KEY=V1,V2` axes, in the order given.
    pub axes: Vec<(String, Vec<String>)>,
    /// A local version template (`rocm{ROCM_VERSION}torch{TORCH_VERSION}`).
    pub local_version: Option<String>,
    /// Repair each wheel with the libraries of the image.
    pub repair: bool,
    /// The patchelf to repair with; None: the image's.
    pub patchelf: Option<Patchelf>,
    pub exclude: Vec<String>,
    /// A command to run against each installed wheel.
    pub test: Option<String>,
    pub find_links: Option<PathBuf>,
    pub gpu: GpuPlan,
    pub targets: TargetList,
}

/// One built wheel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Built {
    /// The wheel's path in the output directory.
    pub wheel: PathBuf,
    /// The Python tag it was built with (`cp311`).
    pub python: String,
    pub axes: BTreeMap<String, String>,
    /// `python-abi-platform`, e.g. `cp311-cp311-manylinux_2_17_x86_64`.
    pub tag: String,
    pub size: u64,
    /// Seconds the container build took.
    pub seconds: f64,
    pub repaired: bool,
    pub tested: bool,
    /// A `none-any` wheel: nothing to repair, but worth a note.
    pub pure: bool,
}

/// Parse `KEY=V1,V2`.
pub fn parse_axis(s: &str) -> Result<(String, Vec<String>), BuildError> {
    let bad =
        |why: &str| BuildError::Input(format!("--axis `{s}`: {why}; expected KEY=V1,V2 (e.g. TORCH_VERSION=2.5,2.6)"));
    let (k, v) = s.split_once('=').ok_or_else(|| bad("no `=`"))?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("the key must be a variable name (letters, digits, `_`)"));
    }
    let values: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(bad("a value is empty"));
    }
    Ok((k.to_string(), values))
}

/// Every combination of the axes' values (one empty map without axes).
pub fn combinations(axes: &[(String, Vec<String>)]) -> Vec<BTreeMap<String, String>> {
    let mut out = vec![BTreeMap::new()];
    for (k, values) in axes {
        out = out
            .into_iter()
            .flat_map(|m| {
                values.iter().map(move |v| {
                    let mut m = m.clone();
                    m.insert(k.clone(), v.clone());
                    m
                })
            })
            .collect();
    }
    out
}

/// A Python found in the image.
#[derive(Debug, Clone, PartialEq)]
struct Python {
    tag: String,
    path: String,
}

/// Lists `TAG PATH` for each Python: the manylinux layout, else python3.
const FIND_PYTHONS: &str = r#"tag='import sys; print("cp%d%d%s" % (sys.version_info[0], sys.version_info[1], getattr(sys, "abiflags", "")))'
found=0
for p in /opt/python/cp3*/bin/python; do
  if [ -x "$p" ]; then found=1; echo "$("$p" -c "$tag") $p"; fi
done
if [ $found = 0 ] && p=$(command -v python3); then echo "$("$p" -c "$tag") $p"; fi"#;

fn parse_pythons(out: &str) -> Vec<Python> {
    out.lines()
        .filter_map(|l| {
            let (tag, path) = l.trim().split_once(' ')?;
            Some(Python { tag: tag.to_string(), path: path.to_string() })
        })
        .collect()
}

fn is_sdist(p: &Path) -> bool {
    let n = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    [".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz", ".tar"].iter().any(|s| n.ends_with(s))
}

/// One job: a Python and a combination of axes.
struct Job {
    python: Python,
    axes: BTreeMap<String, String>,
    seconds: f64,
}

/// Build, label, repair and test; returns the wheels in the output directory.
pub fn build(engine: &Engine, o: &BuildOptions) -> Result<Vec<Built>, BuildError> {
    let meta = std::fs::metadata(&o.source).map_err(|e| {
        BuildError::Input(format!(
            "source `{}` cannot be read ({e}); give a project directory or an sdist",
            o.source.display()
        ))
    })?;
    if !meta.is_dir() && !is_sdist(&o.source) {
        return Err(BuildError::Input(format!(
            "source `{}` is neither a directory nor an sdist (.tar.gz, .zip); give a project directory or an sdist",
            o.source.display()
        )));
    }
    if let Some(f) = &o.find_links {
        if !f.is_dir() {
            return Err(BuildError::Input(format!("--find-links `{}` is not a directory of wheels", f.display())));
        }
    }
    let combos = combinations(&o.axes);
    // Check the template against every combination before building anything.
    let labels: Vec<Option<String>> = combos
        .iter()
        .map(|c| o.local_version.as_deref().map(|t| normalize_local_label(&expand_template(t, c)?)).transpose())
        .collect::<Result<_, WheelError>>()?;
    std::fs::create_dir_all(&o.output).map_err(io(&o.output))?;
    let staging =
        tempfile::Builder::new().prefix(".quarry-wheel-build-").tempdir_in(&o.output).map_err(io(&o.output))?;
    let raw = staging.path().join("raw");

    let run_opts =
        RunOptions { image: o.image.clone(), network: Network::None, gpu: o.gpu.clone(), ..Default::default() };
    let (src_arg, mut copy_in) = if meta.is_dir() {
        (None, vec![CopyIn { host: o.source.clone(), dest: SRC_DIR.into() }])
    } else {
        let name = o.source.file_name().unwrap().to_string_lossy().into_owned();
        (
            Some(format!("{SDIST_DIR}/{name}")),
            vec![CopyIn { host: o.source.clone(), dest: format!("{SDIST_DIR}/{name}") }],
        )
    };
    if let Some(f) = &o.find_links {
        copy_in.push(CopyIn { host: f.clone(), dest: FIND_LINKS_DIR.into() });
    }

    let mut jobs: Vec<Job> = Vec::new();
    engine.guarded(async |s| {
        let id = s.start_idle(&run_opts, copy_in.clone()).await?;
        let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        let (_, out) = s
            .exec(&id, sh(FIND_PYTHONS), vec![], None, ExecOutput::Capture)
            .await?;
        let mut pythons = parse_pythons(&String::from_utf8_lossy(&out));
        if pythons.is_empty() {
            return Err(BuildError::NoPython {
                image: o.image.clone(),
            }
            .into_engine());
        }
        if let Some(want) = &o.pythons {
            for w in want {
                if !pythons.iter().any(|p| &p.tag == w) {
                    return Err(BuildError::Input(format!(
                        "--python {w}: image `{}` has no such Python (found: {})",
                        o.image,
                        pythons.iter().map(|p| p.tag.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                    .into_engine());
                }
            }
            pythons.retain(|p| want.contains(&p.tag));
        }
        // Repairing with the image's patchelf: refuse a missing or old one now, not after the builds.
        if o.repair && o.patchelf.is_none() {
            let (_, out) = s.exec(&id, sh(super::image::FIND_PATCHELF), vec![], None, ExecOutput::Capture).await?;
            super::image::patchelf_in_image(&o.image, &String::from_utf8_lossy(&out), true)
                .map_err(|e| BuildError::Wheel(e.into()).into_engine())?;
        }
        for python in &pythons {
            for axes in &combos {
                let n = jobs.len();
                let target = match &src_arg {
                    Some(sdist) => sdist.clone(),
                    None => format!("{WORK_DIR}/{n}"),
                };
                // A fresh copy of the project per build, so one build's
                // `build/` directory never leaks into the next.
                let mut script = format!("set -e\nmkdir -p {OUT_DIR}/{n}\n");
                if src_arg.is_none() {
                    script.push_str(&format!("mkdir -p {WORK_DIR}\ncp -a {SRC_DIR} {target}\n"));
                }
                script.push_str(&format!(
                    "exec \"$QUARRY_PYTHON\" -m pip wheel --no-deps --no-build-isolation --no-index {}-w {OUT_DIR}/{n} {target}\n",
                    if o.find_links.is_some() {
                        format!("--find-links {FIND_LINKS_DIR} ")
                    } else {
                        String::new()
                    }
                ));
                let bin = Path::new(&python.path)
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let mut env: Vec<String> = axes.iter().map(|(k, v)| format!("{k}={v}")).collect();
                env.push(format!("QUARRY_PYTHON={}", python.path));
                env.push(format!(
                    "PATH={bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                ));
                env.push(format!("PYTORCH_ROCM_ARCH={}", o.targets.joined()));
                env.push(format!("GPU_ARCHS={}", o.targets.joined()));
                env.push("PIP_DISABLE_PIP_VERSION_CHECK=1".into());
                env.push("PIP_NO_INPUT=1".into());
                eprintln!(
                    "quarry: building for {}{} in `{}`",
                    python.tag,
                    axes_suffix(axes),
                    o.image
                );
                let t = Instant::now();
                let (code, _) = s
                    .exec(&id, sh(&script), env, None, ExecOutput::Stderr)
                    .await?;
                if code != 0 {
                    return Err(BuildError::Failed {
                        python: python.tag.clone(),
                        axes: axes.clone(),
                        code,
                    }
                    .into_engine());
                }
                jobs.push(Job {
                    python: python.clone(),
                    axes: axes.clone(),
                    seconds: t.elapsed().as_secs_f64(),
                });
            }
        }
        s.copy_out(&id, OUT_DIR, &raw).await?;
        s.remove_container(&id).await;
        Ok(())
    })
    .map_err(BuildError::from_engine)?;

    let mut built = Vec::new();
    for (n, job) in jobs.iter().enumerate() {
        let dir = raw.join(n.to_string());
        let wheels: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io(&dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "whl"))
            .collect();
        if wheels.len() != 1 {
            return Err(BuildError::WheelCount {
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
        let mut wheel = wheels[0].clone();
        let label = labels[n % combos.len()].as_deref();
        if let Some(label) = label {
            wheel = add_local_version(&wheel, label, &staging.path().join(format!("label-{n}")))?;
        }
        let pure = parse_name(&wheel)?.is_pure();
        let mut repaired = false;
        if o.repair && !pure {
            let within = RepairIn::Image {
                image: RepairImage { engine, image: o.image.clone() },
                patchelf: o.patchelf.clone(),
                host_has_none: o.patchelf.is_none(),
            };
            let report = repair(
                &wheel,
                &staging.path().join(format!("repair-{n}")),
                &RepairOptions { exclude: o.exclude.clone(), plat: None, within },
            )?;
            wheel = report.output;
            repaired = true;
        }
        let dest = o.output.join(wheel.file_name().unwrap());
        std::fs::rename(&wheel, &dest).map_err(io(&dest))?;
        let name = parse_name(&dest)?;
        built.push(Built {
            tag: format!("{}-{}-{}", name.python_tags.join("."), name.abi_tags.join("."), name.platform_tags.join(".")),
            size: std::fs::metadata(&dest).map_err(io(&dest))?.len(),
            wheel: dest,
            python: job.python.tag.clone(),
            axes: job.axes.clone(),
            seconds: job.seconds,
            repaired,
            tested: false,
            pure,
        });
    }
    drop(staging);

    if let Some(cmd) = &o.test {
        for (b, job) in built.iter_mut().zip(&jobs) {
            test_wheel(engine, o, &b.wheel, &job.python.path, cmd)?;
            b.tested = true;
        }
    }
    Ok(built)
}

fn parse_name(wheel: &Path) -> Result<WheelName, BuildError> {
    Ok(WheelName::parse(&wheel.file_name().unwrap_or_default().to_string_lossy())?)
}

/// Install `wheel` into a fresh virtualenv in a fresh container (network
/// off, from the output directory plus `--find-links`) and run `cmd` from a
/// temporary directory, so the source tree cannot be imported by mistake.
fn test_wheel(engine: &Engine, o: &BuildOptions, wheel: &Path, python: &str, cmd: &str) -> Result<(), BuildError> {
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
    if let Some(f) = &o.find_links {
        copy_in.push(CopyIn { host: f.clone(), dest: FIND_LINKS_DIR.into() });
        links.push_str(&format!(" --find-links {FIND_LINKS_DIR}"));
    }
    let script = format!(
        "set -e\n\"$QUARRY_PYTHON\" -m venv /tmp/quarry-venv\n\
         /tmp/quarry-venv/bin/python -m pip install --disable-pip-version-check -q --no-index {links} {TEST_WHEELS_DIR}/{file}\n\
         cd \"$(mktemp -d)\"\nexport PATH=/tmp/quarry-venv/bin:$PATH VIRTUAL_ENV=/tmp/quarry-venv\n\
         exec sh -c \"$QUARRY_TEST\"\n"
    );
    let opts = RunOptions {
        image: o.image.clone(),
        cmd: vec!["sh".into(), "-c".into(), script],
        env: vec![format!("QUARRY_PYTHON={python}"), format!("QUARRY_TEST={cmd}")],
        network: Network::None,
        gpu: o.gpu.clone(),
        ..Default::default()
    };
    eprintln!("quarry: testing {file}: {cmd}");
    let code = engine
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
        .map_err(BuildError::from_engine)?;
    if code != 0 {
        return Err(BuildError::TestFailed { wheel: file, code });
    }
    Ok(())
}

/// The guarded engine session returns [`EngineError`]; build errors raised
/// inside it travel as `Invalid` carrying the message and come back out
/// unchanged in meaning.
impl BuildError {
    fn into_engine(self) -> EngineError {
        match self {
            BuildError::Engine(e) => e,
            other => EngineError::Invalid(other.to_string()),
        }
    }

    fn from_engine(e: EngineError) -> BuildError {
        BuildError::Engine(e)
    }

    /// The exit status for the CLI (130/143 after a signal, else 1).
    pub fn exit_code(&self) -> i32 {
        match self {
            BuildError::Engine(e) => e.exit_code(),
            BuildError::Wheel(e) => e.exit_code(),
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_combinations() {
        let a = parse_axis("TORCH_VERSION=2.5,2.6").unwrap();
        assert_eq!(a.1, vec!["2.5", "2.6"]);
        assert!(parse_axis("nokey").is_err());
        assert!(parse_axis("A=1,,2").is_err());
        assert!(parse_axis("A B=1").is_err());
        let c = combinations(&[a, parse_axis("ROCM_VERSION=6.2").unwrap()]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1]["TORCH_VERSION"], "2.6");
        assert_eq!(c[1]["ROCM_VERSION"], "6.2");
        assert_eq!(combinations(&[]).len(), 1);
    }

    #[test]
    fn python_listing() {
        let p = parse_pythons("cp311 /opt/python/cp311-cp311/bin/python\ncp312 /usr/bin/python3\n");
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].path, "/usr/bin/python3");
        assert!(is_sdist(Path::new("x/msgpack-1.1.0.tar.gz")));
        assert!(!is_sdist(Path::new("x/setup.py")));
    }
}
