use crate::code_objects::target_list::TargetList;
use crate::wheel::analyze::Options;
use crate::wheel::check::check;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Wheel files; with --index, requirements instead (`torch[device-gfx942]`)
    #[arg(required = true, value_name = "WHEEL|REQUIREMENT")]
    wheels: Vec<PathBuf>,
    /// Resolve the requirements given as pip would (extras and dependencies,
    /// wheels only) from a wheelhouse directory (offline) or a PEP 503 index
    /// URL, then check the set they give (needs --targets)
    #[arg(long, value_name = "URL|DIR", requires = "targets")]
    index: Option<String>,
    /// Never count libraries matching this glob as external (matched against
    /// versioned sonames and resolved paths: use `libamdhip64.so*`)
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Never count libraries ROCm's Python packages in DIR provide as
    /// external (a wheel built with `wheel build --rocm-packages`: rocm_sdk loads them)
    #[arg(long = "rocm-packages", value_name = "DIR")]
    rocm_packages: Option<PathBuf>,
    /// Also check the wheels as one install set (host, device, family and
    /// rocm-sdk-device wheels, or fat wheels): every GPU binary has code the
    /// HIP runtime would load on each target, and each host's device-<target>
    /// extra pulls the wheels it is in (gfx942,gfx90a:xnack+)
    #[arg(long, value_name = "LIST", value_parser = TargetList::parse_option)]
    targets: Option<TargetList>,
    /// The kpack loader to check for: `rocm-10` (a candidate archive that
    /// lacks a kernel falls through to a less specific one; the newest),
    /// `rocm-7` (the first matching archive decides), or a ROCm version.
    /// `ROCM_KPACK_DISABLE`, `ROCM_KPACK_PATH` and `ROCM_KPACK_PATH_PREFIX` in the
    /// environment are honoured as the runtime does
    #[arg(long, value_name = "LOADER", default_value = "rocm-10", value_parser = parse_loader)]
    loader: crate::wheel::coverage::loader::Loader,
    /// Print a JSON array, one object per wheel, on stdout (with --targets:
    /// an object {"wheels": [...], "coverage": {...}})
    #[arg(long)]
    json: bool,
}

fn parse_loader(s: &str) -> Result<crate::wheel::coverage::loader::Loader, String> {
    crate::wheel::coverage::loader::Loader::parse(s)
        .ok_or_else(|| format!("`{s}`: give rocm-7, rocm-10 or a ROCm version such as 7.1"))
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    super::super::set_output_mode(a.json, false);
    // With --index the set is what pip would install for the requirements.
    let _resolved = match &a.index {
        Some(index) => {
            let dir = tempfile::Builder::new().prefix("quarry-check-").tempdir()?;
            let requirements: Vec<String> = a.wheels.iter().map(|r| r.to_string_lossy().into_owned()).collect();
            let index = crate::pypi::index::Index::parse(index);
            a.wheels = crate::pypi::index::download(&index, &requirements, dir.path())?;
            if !a.json {
                let names: Vec<String> =
                    a.wheels.iter().map(|w| w.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
                outln!("{} resolve to {}", requirements.join(" "), names.join(", "));
            }
            Some(dir)
        }
        None => None,
    };
    let mut exclude = a.exclude.clone();
    if let Some(dir) = &a.rocm_packages {
        exclude.extend(crate::wheel::rocm_packages::RocmPackages::read(dir)?.exclude_globs());
    }
    let options = Options { exclude, system_paths: None };
    let mut summaries = Vec::new();
    let mut bad_records = Vec::new();
    let mut bad_abi3 = Vec::new();
    let mut failures = crate::cli::exit::Failures::default();
    for wheel in &a.wheels {
        // One unreadable wheel does not stop the others from being checked.
        let report = match check(wheel, &options) {
            Ok(r) => r,
            Err(e) => {
                // The error names the file and its cause, once; --json gets an entry too.
                let message = e.to_string();
                summaries.push(serde_json::json!({ "wheel": wheel.display().to_string(), "error": message }));
                failures.0.push(message);
                continue;
            }
        };
        if report.abi3_ok() == Some(false) {
            let a = report.abi3.as_ref().expect("audited");
            let list: Vec<String> = a.violations.iter().map(|v| v.to_string()).collect();
            bad_abi3.push(format!(
                "wheel `{}` is tagged abi3 for Python {} and later, but uses symbols outside that Stable ABI \
                 (build it with Py_LIMITED_API set to that version, or drop the abi3 tag):\n  {}",
                wheel.display(),
                a.minimum,
                list.join("\n  ")
            ));
        }
        if !report.record_ok() {
            bad_records.push(format!(
                "wheel `{}`: RECORD is wrong:\n  {}",
                wheel.display(),
                report.record_problems.join("\n  ")
            ));
        }
        let mut s = report.summary();
        // The code-object inspector reads the wheel's members for AMD GPU code.
        match crate::code_objects::inspect_wheel(wheel) {
            Ok(reports) => s.gpu_targets = crate::code_objects::all_targets(&reports),
            Err(e) => log::warn!("`{}`: GPU code objects not read: {e}", wheel.display()),
        }
        if !a.json {
            print_human(&s);
        }
        summaries.push(serde_json::to_value(&s)?);
    }
    let coverage = match &a.targets {
        Some(targets) => {
            let paths = |var: &str| {
                std::env::var_os(var)
                    .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
                    .unwrap_or_default()
            };
            let runtime = crate::wheel::coverage::Runtime {
                loader: a.loader,
                kpack_disabled: crate::wheel::coverage::loader::disabled(
                    std::env::var("ROCM_KPACK_DISABLE").ok().as_deref(),
                ),
                kpack_path: paths("ROCM_KPACK_PATH"),
                kpack_path_prefix: paths("ROCM_KPACK_PATH_PREFIX"),
            };
            Some(crate::wheel::coverage::check_targets(&a.wheels, &targets.targets, runtime)?)
        }
        None => None,
    };
    if a.json {
        match &coverage {
            Some(c) => super::super::print_json(&serde_json::json!({ "wheels": summaries, "coverage": c }))?,
            None => super::super::print_json(&summaries)?,
        }
    }
    // What the check found wrong is reported as the command's failure.
    failures.0.extend(bad_records.into_iter().chain(bad_abi3));
    if let Some(c) = &coverage {
        if !a.json {
            outln!("targets {} (loader {}): {} GPU binaries checked", c.targets.join(" "), c.loader, c.binaries.len());
        }
        for p in &c.notes {
            log::info!("note: {} on {}: {}", p.binary, p.target, p.why);
        }
        failures.0.extend(c.problems.iter().map(|p| format!("{} on {}: {}", p.binary, p.target, p.why)));
    }
    failures.or_status(0)
}

fn print_human(s: &crate::wheel::check::CheckSummary) {
    outln!("{}", s.wheel);
    outln!("  policy      {}", s.policy.as_deref().unwrap_or("(pure: no ELF files)"));
    if let Some(r) = &s.repairable_policy {
        if Some(r) != s.policy.as_ref() {
            outln!("  repairable  {r} (after `quarry wheel repair`)");
        }
    }
    outln!("  RECORD      {}", if s.record_ok { "ok" } else { "WRONG" });
    if !s.gpu_targets.is_empty() {
        outln!("  gpu targets {}", s.gpu_targets.join(" "));
    }
    if let Some(a) = &s.abi3 {
        match a.violations.len() {
            0 => outln!("  abi3        ok (Stable ABI of Python {})", a.minimum),
            n => outln!("  abi3        {n} symbol(s) outside the Stable ABI of Python {}", a.minimum),
        }
    }
    for (lib, versions) in &s.symbol_versions {
        outln!("  symbols     {lib}: {}", versions.iter().cloned().collect::<Vec<_>>().join(" "));
    }
    for (lib, path) in &s.external_libs {
        outln!("  external    {lib} => {}", path.as_deref().unwrap_or("(not found)"));
        // What bundling it brings in: why the repairable policy is what it is.
        for (from, versions) in s.external_symbol_versions.get(lib).into_iter().flatten() {
            outln!("    needs     {from}: {}", versions.iter().cloned().collect::<Vec<_>>().join(" "));
        }
    }
    for lib in &s.excluded_libs {
        outln!("  excluded    {lib}");
    }
}
