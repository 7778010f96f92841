use super::build_provenance as provenance;
use crate::cli::image_arg;
use crate::engine::compiler_cache::Mode as CompilerCacheMode;
use crate::engine::gpu::GpuMode;
use crate::progress::Progress;
use crate::wheel::build::{build, parse_axis, prepare, BuildRequest, RocmRequest};
use crate::wheel::rocm_init::VersionPolicy;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A project directory or an sdist
    source: PathBuf,
    /// An OCI layout directory, an image definition (.toml, built and loaded first) or an engine image
    #[arg(long)]
    image: String,
    /// Directory for the wheels
    #[arg(long, short)]
    output: PathBuf,
    /// Pythons to build for: `auto` (every one in the image) or tags like `cp311,cp312`
    #[arg(long, default_value = "auto")]
    python: String,
    /// A build axis KEY=V1,V2: one build per value, KEY set in the environment (repeatable)
    #[arg(long = "axis", value_name = "KEY=V1,V2")]
    axes: Vec<String>,
    /// A PEP 440 local version template filled from the axes, e.g. `rocm{ROCM_VERSION}torch{TORCH_VERSION}`
    #[arg(long = "local-version", value_name = "TEMPLATE")]
    local_version: Option<String>,
    /// With --repair: never bundle libraries matching this glob (`libamdhip64.so*`)
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Repair the wheels, bundling the libraries the image provides (quarry's
    /// own patchelf is copied into the image; QUARRY_PATCHELF names another,
    /// run on this machine)
    #[arg(long)]
    repair: bool,
    /// Split each wheel (after --repair) into a host wheel and one device wheel
    /// per GPU target, as `quarry wheel split` does
    #[arg(long)]
    split: bool,
    /// This build is one shard of a build sharded by GPU target: link its
    /// binaries as split builds are, for `quarry wheel merge`
    #[arg(long, conflicts_with = "split")]
    shard: bool,
    /// Install each wheel in a fresh virtualenv in a fresh container and run this command there
    #[arg(long, value_name = "CMD")]
    test: Option<String>,
    /// The image --test runs in: a clean runtime image (layout, definition or
    /// engine image), so a passing test shows the wheel needs nothing the
    /// build image has [default: the build image]
    #[arg(long = "test-image", value_name = "IMAGE")]
    test_image: Option<String>,
    /// A requirement installed beside each wheel for --test (repeatable), resolved
    /// and pinned in the lock with the wheel's own requirements
    #[arg(long = "test-requires", value_name = "REQ")]
    test_requires: Vec<String>,
    /// A wheelhouse for build requirements (searched with the index when
    /// quarry resolves them) and for --test's dependencies
    #[arg(long = "find-links", value_name = "DIR")]
    find_links: Option<PathBuf>,
    /// Build with the image's own packages (`pip wheel --no-build-isolation`)
    /// instead of an isolated environment of the project's build requirements
    #[arg(long = "no-build-isolation")]
    no_build_isolation: bool,
    /// Let the build container reach the network (off by default)
    #[arg(long)]
    network: bool,
    /// The lock of build requirements to use and update [default: OUTPUT/quarry-wheel.lock]
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// GPUs: `auto` passes AMD GPUs when /dev/kfd exists; the target list comes from
    /// PYTORCH_ROCM_ARCH / GPU_ARCHS, else the detected GPUs, else the default list
    #[arg(long, value_parser = crate::cli::values::gpu_mode(), default_value = "auto")]
    gpu: GpuMode,
    /// Compile through ccache (CMake's compiler launchers, hipcc's
    /// HIP_CLANG_LAUNCHER), its directory kept in the cache per image,
    /// targets and project: `auto` when the image has ccache
    #[arg(long, value_parser = crate::cli::values::compiler_cache(), value_name = "MODE", default_value = "auto")]
    compiler_cache: CompilerCacheMode,
    /// Build even when the cache has the result (the compiler cache starts empty too); the cache is still written
    #[arg(long)]
    no_cache: bool,
    /// Build against ROCm's Python packages in DIR (`quarry rocm package`'s
    /// output, or the reference's) instead of a system ROCm: installed offline
    /// into the build environment, pinned in each wheel (`rocm[libraries]==V`)
    /// and loaded by a `_rocm_init.py` before the package's native code
    #[arg(long = "rocm-packages", value_name = "DIR")]
    rocm_packages: Option<PathBuf>,
    /// With --rocm-packages: the extras of `rocm` the build environment gets
    #[arg(long = "rocm-extras", value_name = "EXTRA,...", default_value = "libraries,devel", value_delimiter = ',')]
    rocm_extras: Vec<String>,
    /// With --rocm-packages: libraries `_rocm_init.py` preloads by short name (`amdhip64,hipblas`) [default: every ROCm library the wheel's binaries need]
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    preload: Vec<String>,
    /// With --rocm-packages: `exact` pins `rocm[libraries]==V`; `minor` pins
    /// `==MAJOR.MINOR.*` (a dev or pre-release version stays exact)
    #[arg(long = "rocm-version-policy", value_enum, value_name = "POLICY", default_value_t = VersionPolicy::Exact)]
    rocm_version_policy: VersionPolicy,
    /// With --rocm-packages: a ROCm version other than the pin is an import
    /// error (`fail_on_version_mismatch`), not a warning
    #[arg(long = "rocm-fail-on-version-mismatch")]
    rocm_fail_on_version_mismatch: bool,
    #[command(flatten)]
    def: crate::cli::DefinitionArgs,
    #[command(flatten)]
    sign: crate::cli::sign_args::SignArgs,
    /// Print a JSON list of the wheels on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::super::set_output_mode(a.json, false);
    if a.test.is_none() && (a.test_image.is_some() || !a.test_requires.is_empty()) {
        anyhow::bail!("--test-image and --test-requires apply to --test CMD; give the test command too");
    }
    if a.rocm_packages.is_none() && (!a.preload.is_empty() || a.rocm_fail_on_version_mismatch) {
        anyhow::bail!(
            "--preload and --rocm-fail-on-version-mismatch apply to --rocm-packages DIR; give the ROCm packages too"
        )
    }
    // A key that cannot be opened (a wrong password) fails before anything is built.
    let sign_key = a.sign.load()?;
    let cache = a.def.cache.open()?;
    let request = BuildRequest {
        pythons: match a.python.as_str() {
            "auto" => None,
            list => Some(list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()),
        },
        axes: a.axes.iter().map(String::as_str).map(parse_axis).collect::<Result<Vec<_>, _>>()?,
        local_version: a.local_version,
        repair: a.repair,
        split: a.split,
        shard: a.shard,
        exclude: a.exclude,
        test: a.test,
        test_requires: a.test_requires,
        find_links: a.find_links,
        gpu: a.gpu,
        isolation: !a.no_build_isolation,
        network: a.network,
        lock: a.lock,
        compiler_cache: a.compiler_cache,
        no_cache: a.no_cache,
        rocm: a.rocm_packages.map(|dir| RocmRequest {
            dir,
            extras: a.rocm_extras,
            preload: a.preload,
            policy: a.rocm_version_policy,
            fail_on_mismatch: a.rocm_fail_on_version_mismatch,
        }),
        ..BuildRequest::new(a.source.clone(), a.output, cache.clone())
    };
    let source = a.source;
    let failed = |e: crate::wheel::build::WheelBuildError| {
        anyhow::Error::new(e).context(format!("wheel build of `{}`", source.display()))
    };
    // Checked before any image is built: a bad input costs nothing.
    let prepared = prepare(request).map_err(failed)?;
    // Layouts are loaded into the engine only when a build or a test runs.
    let progress = Progress::new(a.json, true);
    let image = image_arg::build_image(&a.image, &a.def.sets, &cache, progress)?;
    let test_image = match &a.test_image {
        Some(t) => Some(image_arg::build_image(t, &a.def.sets, &cache, progress)?),
        None => None,
    };
    let opts = prepared.with_image(image, test_image);
    let mut built = build(&opts).map_err(failed)?;
    let image_name = crate::provenance::image_argument(&a.image);
    let written = provenance::write(&opts, &image_name, &built, sign_key.as_ref())?;
    // One statement per wheel, in `products` order: each wheel, then its device wheels.
    let mut written = written.into_iter();
    for b in &mut built {
        b.provenance = written.next().map(|w| w.provenance);
        written.by_ref().take(b.device_wheels.len()).for_each(drop);
    }
    // Notes go through the diagnostics sink: shown to a person, not in --json.
    for b in built.iter().filter(|b| b.pure) {
        log::info!(
            "note: {} is a pure (none-any) wheel: nothing was compiled, so there was nothing to repair",
            b.wheel.display()
        );
    }
    for b in &built {
        if let Some(req) = &b.rocm_requirement {
            let name = b.wheel.file_name().unwrap_or_default().to_string_lossy();
            log::info!("{name}: requires {req}; _rocm_init.py in {}", b.rocm_init.join(", "));
        }
        if let Some(libs) = &b.rocm_excluded {
            log::info!(
                "repair left out {} libraries the ROCm packages provide (rocm_sdk loads them){}{}",
                libs.len(),
                if libs.is_empty() { "" } else { ": " },
                libs.join(", ")
            );
        }
    }
    if a.json {
        super::super::print_json(&built)?;
        return Ok(0);
    }
    let rows: Vec<[String; 4]> = built
        .iter()
        .map(|b| {
            [
                b.wheel.file_name().unwrap_or_default().to_string_lossy().into_owned(),
                b.tag.clone(),
                format!("{:.1} KiB", b.size as f64 / 1024.0),
                format!("{:.1} s", b.seconds),
            ]
        })
        .collect();
    let header = ["wheel", "tag", "size", "time"].map(String::from);
    let rows: Vec<[String; 4]> = rows
        .into_iter()
        .zip(&built)
        .map(|(mut r, b)| {
            if b.cached {
                r[3] = if b.tier == Some(crate::cache::Tier::Remote) { "registry".into() } else { "cached".into() };
            }
            r
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        outln!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
    }
    Ok(0)
}
