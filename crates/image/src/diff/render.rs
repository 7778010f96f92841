//! A report as text for a terminal, or as markdown for a PR comment.

use super::packages::PackageChange;
use super::Report;
use std::fmt::Write;

fn package_line(p: &PackageChange) -> String {
    match (p.from.as_deref(), p.to.as_deref()) {
        (Some(f), Some(t)) => format!("{} {}: {f} -> {t}", p.change, p.name),
        (None, Some(t)) => format!("added {} {t}", p.name),
        (Some(f), None) => format!("removed {} {f}", p.name),
        _ => p.name.clone(),
    }
}

fn size(n: u64) -> String {
    match n {
        n if n < 1 << 10 => format!("{n} B"),
        n if n < 1 << 20 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
    }
}

/// Lines for people; `bullet` starts each item (`` or `- `).
fn lines(r: &Report, bullet: &str, code: bool) -> Vec<String> {
    let q = |s: &str| if code { format!("`{s}`") } else { s.to_string() };
    let mut out = Vec::new();
    if r.is_empty() {
        out.push("no differences".to_string());
        return out;
    }
    match r {
        Report::Locks(d) => {
            for s in &d.sets {
                out.push(format!("{}:", s.set));
                for p in &s.packages {
                    out.push(format!("{bullet}{}", package_line(p)));
                }
                if !s.releases_changed.is_empty() {
                    out.push(format!("{bullet}archive moved: {}", s.releases_changed.join(", ")));
                }
            }
            if !d.pypi.is_empty() {
                out.push("pypi:".into());
                for p in &d.pypi {
                    out.push(format!(
                        "{bullet}{}: {} -> {}",
                        p.requirement,
                        p.from.as_deref().unwrap_or("(none)"),
                        p.to.as_deref().unwrap_or("(none)")
                    ));
                }
            }
        }
        Report::Wheels(d) => wheel_lines(d, bullet, &q, &mut out),
        Report::Images(d) => {
            let shared = d.layers.iter().filter(|l| l.state == "shared").count();
            out.push(format!("layers: {shared} shared, {} differ", d.layers.len() - shared));
            for c in &d.config {
                out.push(format!("{bullet}config {}: {} -> {}", c.field, c.from, c.to));
            }
            if !d.packages.is_empty() {
                out.push("packages:".into());
                for p in &d.packages {
                    out.push(format!("{bullet}{}", package_line(p)));
                }
            }
            for l in d.layers.iter().filter(|l| l.state != "shared") {
                out.push(format!(
                    "layer {} {} ({} -> {}): {} file(s)",
                    l.index,
                    l.state,
                    size(l.size_from),
                    size(l.size_to),
                    l.files.len()
                ));
                for f in &l.files {
                    let what = if f.what.is_empty() { String::new() } else { format!(" ({})", f.what.join(", ")) };
                    out.push(format!(
                        "{bullet}{} {}{what} {} -> {}",
                        f.change,
                        q(&f.path),
                        size(f.size_from),
                        size(f.size_to)
                    ));
                }
            }
        }
    }
    out
}

pub fn text(r: &Report) -> String {
    let mut s = String::new();
    for l in lines(r, "  ", false) {
        let _ = writeln!(s, "{l}");
    }
    s
}

pub fn markdown(r: &Report) -> String {
    let mut s = String::from("### quarry diff\n\n");
    for l in lines(r, "- ", true) {
        if l.starts_with("- ") {
            let _ = writeln!(s, "{l}");
        } else {
            let _ = writeln!(s, "\n**{l}**\n");
        }
    }
    s
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

fn wheel_lines(d: &super::wheel::WheelDiff, bullet: &str, q: &dyn Fn(&str) -> String, out: &mut Vec<String>) {
    for f in &d.fields {
        out.push(format!("{}: {} -> {}", f.field, f.from, f.to));
    }
    if !d.requirements.is_empty() {
        out.push("metadata:".into());
        for r in &d.requirements {
            out.push(format!("{bullet}{} {}: {}", r.change, r.field, q(&r.value)));
        }
    }
    if !d.members.is_empty() {
        out.push(format!("members: {} differ", d.members.len()));
        for m in &d.members {
            let what = if m.what.is_empty() { String::new() } else { format!(" ({})", m.what.join(", ")) };
            let detail = m.detail.as_deref().map(|x| format!("; {x}")).unwrap_or_default();
            out.push(format!(
                "{bullet}{} {}{what} {} -> {}{detail}",
                m.change,
                q(&m.path),
                size(m.size_from),
                size(m.size_to)
            ));
        }
    }
    if !d.elf.is_empty() {
        out.push("ELF dynamic entries:".into());
        for e in &d.elf {
            out.push(format!("{bullet}{} {}: {} -> {}", q(&e.member), e.field, list(&e.from), list(&e.to)));
        }
    }
    if !d.gpu_targets.is_empty() {
        out.push("GPU targets:".into());
        for t in &d.gpu_targets {
            out.push(format!("{bullet}{}: {} -> {}", q(&t.member), list(&t.from), list(&t.to)));
        }
    }
}
