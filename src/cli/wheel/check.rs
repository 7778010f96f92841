use crate::wheel::analyze::Options;
use crate::wheel::check::check;
use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Wheel files
    #[arg(required = true)]
    wheels: Vec<PathBuf>,
    /// Never count libraries matching this glob as external (matched against
    /// versioned sonames and resolved paths: use `libamdhip64.so*`)
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Print a JSON array, one object per wheel, on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let options = Options { exclude: a.exclude.clone(), system_paths: None };
    let mut summaries = Vec::new();
    let mut bad_records = Vec::new();
    let mut failures = 0;
    for wheel in &a.wheels {
        // One unreadable wheel does not stop the others from being checked.
        let report = match check(wheel, &options).with_context(|| format!("checking `{}`", wheel.display())) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("quarry: error: {e:#}");
                failures += 1;
                continue;
            }
        };
        if !report.record_ok() {
            bad_records.push(format!(
                "wheel `{}`: RECORD is wrong:\n  {}",
                wheel.display(),
                report.record_problems.join("\n  ")
            ));
        }
        let s = report.summary();
        if !a.json {
            print_human(&s);
        }
        summaries.push(s);
    }
    if a.json {
        super::super::print_json(&summaries)?;
    }
    for b in &bad_records {
        eprintln!("quarry: error: {b}");
    }
    Ok(if bad_records.is_empty() && failures == 0 { 0 } else { 1 })
}

fn print_human(s: &crate::wheel::check::CheckSummary) {
    println!("{}", s.wheel);
    println!("  policy      {}", s.policy.as_deref().unwrap_or("(pure: no ELF files)"));
    if let Some(r) = &s.repairable_policy {
        if Some(r) != s.policy.as_ref() {
            println!("  repairable  {r} (after `quarry wheel repair`)");
        }
    }
    println!("  RECORD      {}", if s.record_ok { "ok" } else { "WRONG" });
    for (lib, versions) in &s.symbol_versions {
        println!("  symbols     {lib}: {}", versions.iter().cloned().collect::<Vec<_>>().join(" "));
    }
    for (lib, path) in &s.external_libs {
        println!("  external    {lib} => {}", path.as_deref().unwrap_or("(not found)"));
    }
    for lib in &s.excluded_libs {
        println!("  excluded    {lib}");
    }
}
