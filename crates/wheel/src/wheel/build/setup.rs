//! The one place a wheel build is set up: every caller (the CLI's `wheel
//! build`, a matrix cell) states what it wants as a [`BuildRequest`] and
//! [`prepare`] checks it once, before any image is loaded or container
//! started: the project and the find-links directory, the patchelf a
//! repair will use (a too-old `QUARRY_PATCHELF` is refused here, and
//! quarry's own is fetched now rather than after the builds), the GPU plan
//! and target list, ROCm's packages, and `SOURCE_DATE_EPOCH`. What it
//! gives back, a [`Prepared`] build, becomes [`BuildOptions`] once the
//! caller has its image; [`BuildOptions`] cannot be made any other way, so
//! a matrix cell builds exactly what the CLI would for the same request.

use super::{is_sdist, BuildOptions, RocmBuild, WheelBuildError};
use crate::cache::Cache;
use crate::code_objects::target_list::TargetList;
use crate::engine::build_image::BuildImage;
use crate::engine::compiler_cache;
use crate::engine::gpu::{self, GpuMode};
use crate::tools::patchelf::{pinned, ContainerPatchelf};
use crate::wheel::rocm_init::{RocmPin, VersionPolicy};
use crate::wheel::rocm_packages::RocmPackages;
use std::path::PathBuf;

/// What a caller wants built; see the fields of [`BuildOptions`] for those
/// passed through unchanged.
pub struct BuildRequest {
    pub source: PathBuf,
    pub output: PathBuf,
    pub pythons: Option<Vec<String>>,
    pub axes: Vec<(String, Vec<String>)>,
    pub local_version: Option<String>,
    pub repair: bool,
    /// Split each wheel into a host wheel and one device wheel per GPU target.
    pub split: bool,
    /// The build is one shard of a build sharded by GPU target, its wheels
    /// merged later (`wheel merge`): linked as split builds are.
    pub shard: bool,
    pub exclude: Vec<String>,
    pub test: Option<String>,
    pub test_requires: Vec<String>,
    pub find_links: Option<PathBuf>,
    /// Whether to pass AMD GPUs to the build and test containers.
    pub gpu: GpuMode,
    /// The GPUs a scheduler gave (device names); empty: every one.
    pub gpu_devices: Vec<String>,
    /// The target list, when the caller fixes it. None: PYTORCH_ROCM_ARCH /
    /// GPU_ARCHS, else (GPUs passed) the detected GPUs, else the default list.
    pub targets: Option<TargetList>,
    pub isolation: bool,
    pub network: bool,
    pub lock: Option<PathBuf>,
    pub cache: Cache,
    pub compiler_cache: compiler_cache::Mode,
    pub no_cache: bool,
    pub rocm: Option<RocmRequest>,
}

/// A build on ROCm's Python packages (`--rocm-packages DIR`), as asked.
pub struct RocmRequest {
    pub dir: PathBuf,
    pub extras: Vec<String>,
    pub preload: Vec<String>,
    pub policy: VersionPolicy,
    pub fail_on_mismatch: bool,
}

impl BuildRequest {
    /// A request with the CLI's defaults for everything but what is named.
    pub fn new(source: PathBuf, output: PathBuf, cache: Cache) -> BuildRequest {
        BuildRequest {
            source,
            output,
            pythons: None,
            axes: Vec::new(),
            local_version: None,
            repair: false,
            split: false,
            shard: false,
            exclude: Vec::new(),
            test: None,
            test_requires: Vec::new(),
            find_links: None,
            gpu: GpuMode::Auto,
            gpu_devices: Vec::new(),
            targets: None,
            isolation: true,
            network: false,
            lock: None,
            cache,
            compiler_cache: compiler_cache::Mode::Auto,
            no_cache: false,
            rocm: None,
        }
    }
}

/// A checked request, waiting for its image.
pub struct Prepared {
    options: BuildOptions,
}

/// Check `r` and settle every choice that does not need the image.
pub fn prepare(r: BuildRequest) -> Result<Prepared, WheelBuildError> {
    check_source(&r)?;
    if r.split && r.test.is_some() {
        // The test would install the host wheel and no device code.
        return Err(WheelBuildError::Input(
            "--split and --test together: a test would install the host wheel without its device wheels; \
             build with --test first, or check the split wheels with `quarry wheel check --targets`"
                .into(),
        ));
    }
    check_shard_axes(&r)?;
    let epoch = crate::epoch::from_env_or_zero()?;
    let patchelf = patchelf_for(&r)?;
    let gpu = gpu::plan(r.gpu, &r.gpu_devices)?;
    let targets = r.targets.unwrap_or_else(|| match r.gpu {
        GpuMode::None => gpu::build_targets(&[]),
        _ => gpu::targets_for_builds(),
    });
    let rocm = r.rocm.map(rocm_build).transpose()?;
    let options = BuildOptions {
        source: r.source,
        // Replaced by `with_image`: a request has no image yet.
        image: BuildImage::Reference(String::new()),
        output: r.output,
        pythons: r.pythons,
        axes: r.axes,
        local_version: r.local_version,
        repair: r.repair,
        split: r.split,
        split_link: r.split || r.shard,
        patchelf,
        exclude: r.exclude,
        test: r.test,
        test_image: None,
        test_requires: r.test_requires,
        find_links: r.find_links,
        gpu,
        targets,
        isolation: r.isolation,
        network: r.network,
        lock: r.lock,
        cache: r.cache,
        compiler_cache: r.compiler_cache,
        no_cache: r.no_cache,
        rocm,
        epoch,
        _checked: (),
    };
    Ok(Prepared { options })
}

impl Prepared {
    /// The build's options, building in `image` and testing in `test_image`
    /// (None: the build image).
    pub fn with_image(self, image: BuildImage, test_image: Option<BuildImage>) -> BuildOptions {
        BuildOptions { image, test_image, ..self.options }
    }
}

/// Shards of one build share one file name (`wheel merge` needs that): an
/// axis of several values would make several shards of that name in one
/// output directory, each overwriting the last. Refused before anything
/// is built, unless the local version tells the cells apart.
fn check_shard_axes(r: &BuildRequest) -> Result<(), WheelBuildError> {
    if !r.shard {
        return Ok(());
    }
    let template = r.local_version.as_deref().unwrap_or("");
    let Some((key, values)) = r.axes.iter().find(|(k, v)| v.len() > 1 && !template.contains(&format!("{{{k}}}")))
    else {
        return Ok(());
    };
    let out = r.output.display();
    Err(WheelBuildError::Input(format!(
        "--shard with --axis {key}={}: each shard has the wheel's one file name, so {} shards in `{out}` would overwrite each other; \
         build each value into its own output (`--axis {key}={} --shard -o {out}/{}`), then `quarry wheel merge {out}/*/*.whl -o DIR`, \
         or run them as a matrix with `merge = true`",
        values.join(","),
        values.len(),
        values[0],
        values[0],
    )))
}

/// The project must be a directory or an sdist; the rest of the inputs must agree.
fn check_source(r: &BuildRequest) -> Result<(), WheelBuildError> {
    let meta = std::fs::metadata(&r.source).map_err(|e| {
        WheelBuildError::Input(format!(
            "source `{}` cannot be read ({e}); give a project directory or an sdist",
            r.source.display()
        ))
    })?;
    if !meta.is_dir() && !is_sdist(&r.source) {
        return Err(WheelBuildError::Input(format!(
            "source `{}` is neither a directory nor an sdist (.tar.gz, .zip); give a project directory or an sdist",
            r.source.display()
        )));
    }
    if r.rocm.is_some() && !r.isolation {
        return Err(WheelBuildError::Input(
            "--rocm-packages installs ROCm's packages into the isolated build environment; drop --no-build-isolation"
                .into(),
        ));
    }
    if let Some(f) = &r.find_links {
        if !f.is_dir() {
            return Err(WheelBuildError::Input(format!("--find-links `{}` is not a directory of wheels", f.display())));
        }
    }
    Ok(())
}

/// The patchelf a repair runs: the user's (QUARRY_PATCHELF, checked now:
/// one older than 0.19 is an error before anything is built) or quarry's
/// own, fetched now for this machine's architecture (the images' usual one).
fn patchelf_for(r: &BuildRequest) -> Result<ContainerPatchelf, WheelBuildError> {
    if !r.repair {
        return Ok(ContainerPatchelf::Pinned { cache: r.cache.clone() });
    }
    let chosen = ContainerPatchelf::choose(&r.cache, None)?;
    if let (ContainerPatchelf::Pinned { cache }, Some(arch)) = (&chosen, pinned::host_arch()) {
        pinned::fetch(cache, arch)?;
    }
    Ok(chosen)
}

fn rocm_build(r: RocmRequest) -> Result<RocmBuild, WheelBuildError> {
    let packages = RocmPackages::read(&r.dir)?;
    let trimmed = |v: Vec<String>| v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    let pin = RocmPin {
        version: packages.version.clone(),
        policy: r.policy,
        preload: trimmed(r.preload),
        fail_on_mismatch: r.fail_on_mismatch,
    };
    Ok(RocmBuild { packages, extras: trimmed(r.extras), pin })
}
