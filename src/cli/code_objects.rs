//! `quarry code-objects FILE... [--json]`: the AMD GPU targets files have
//! code for. Exit 1 when a file cannot be read or a report has problems.

use crate::code_objects::{inspect_path, FileReport};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// ELF files, code objects (.co, .hsaco), offload bundles, .kpack archives, wheels or directories
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print a JSON array: per file `file`, `targets`, `code_objects` [{target, features, size, container, ...}], `problems`
    #[arg(long)]
    json: bool,
}

fn human_size(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn print_human(out: &mut impl Write, r: &FileReport) -> std::io::Result<()> {
    let targets = match (r.targets.is_empty(), &r.kpack_ref) {
        (true, Some(_)) => "code in .kpack archives".to_string(),
        (true, None) => "no AMD GPU code".to_string(),
        (false, _) => r.targets.join(" "),
    };
    writeln!(out, "{}: {targets}", r.file)?;
    for c in &r.code_objects {
        let id = std::iter::once(c.target.as_str()).chain(c.features.iter().map(String::as_str)).collect::<Vec<_>>();
        let mut via = c.container.clone();
        if let Some(m) = &c.compression {
            via.push_str(&format!(" ({m})"));
        }
        if let Some(b) = &c.binary {
            via.push_str(&format!(" for {b}"));
        }
        if c.format != "elf" {
            via.push_str(&format!(", {}", c.format));
        }
        writeln!(out, "  {:<26} {:>10}  {via}", id.join(":"), human_size(c.size))?;
    }
    if let Some(m) = &r.kpack_ref {
        let plural = if m.wrappers == 1 { "" } else { "s" };
        writeln!(
            out,
            "  device-split: kernels `{}` ({} wrapper{plural}) in {}",
            m.kernel_name,
            m.wrappers,
            m.kpack_search_paths.join(", ")
        )?;
        for a in &m.archives {
            let kernels: Vec<String> = a
                .kernels
                .iter()
                .enumerate()
                .map(|(i, k)| match k {
                    Some(n) => format!("#{i} {}", human_size(*n)),
                    None => format!("#{i} MISSING"),
                })
                .collect();
            let what = a.problem.clone().unwrap_or_else(|| kernels.join(", "));
            writeln!(out, "    {:<24} {}: {what}", a.arch, a.archive)?;
        }
    }
    for p in &r.problems {
        writeln!(out, "  problem: {p}")?;
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let mut reports = Vec::new();
    let mut unread = crate::cli::exit::Failures::default();
    for f in &a.files {
        match inspect_path(f) {
            Ok(r) => reports.extend(r),
            Err(e) => unread.0.push(e.to_string()),
        }
    }
    let problems = reports.iter().any(|r| !r.problems.is_empty());
    if a.json {
        super::print_json(&reports)?;
    } else {
        let mut out = std::io::stdout().lock();
        for r in &reports {
            match print_human(&mut out, r) {
                // A closed pipe (`| head`) is the reader's choice.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
                other => other?,
            }
        }
    }
    // Problems found are the answer (exit 1); an unreadable file is a failure.
    unread.or_status(if problems { 1 } else { 0 })
}
