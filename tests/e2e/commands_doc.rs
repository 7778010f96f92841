//! docs/commands.md against the command line itself: every command the
//! built binary's `--help` lists (subcommands of subcommands too) has a row
//! in the table, and every long flag its `--help` shows is named in that
//! row. The options every command takes (`--engine`) must be named
//! somewhere on the page. Read from the binary, not from the source, so
//! what is checked is what a user sees.

use crate::common;

use common::{quarry, repo};
use std::collections::BTreeSet;

/// `--help` of `path` (`["wheel", "split"]`): its subcommands and its long
/// flags, each with its short form after a space when it has one (`--output -o`).
fn help(path: &[String]) -> (Vec<String>, BTreeSet<String>) {
    let out = quarry().args(path).arg("--help").output().unwrap();
    assert!(out.status.success(), "quarry {} --help failed", path.join(" "));
    let text = String::from_utf8(out.stdout).unwrap();
    let (mut commands, mut flags) = (Vec::new(), BTreeSet::new());
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line;
            continue;
        }
        let word = line.trim_start();
        match section {
            "Commands:" if line.starts_with("  ") && !line.starts_with("   ") => {
                let name = word.split_whitespace().next().unwrap_or_default();
                if name != "help" {
                    commands.push(name.to_string());
                }
            }
            "Options:" => {
                // `  -o, --output <DIR>  ...` or `      --json  ...`
                let long = word.split_once("--").filter(|(short, _)| short.is_empty() || short.ends_with(", "));
                if let Some((short, rest)) = long {
                    let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                    let short = short.trim_end_matches(", ");
                    flags.insert(if short.is_empty() { format!("--{name}") } else { format!("--{name} {short}") });
                }
            }
            _ => {}
        }
    }
    (commands, flags)
}

/// Every leaf command path with its flags.
fn leaves(path: Vec<String>, out: &mut Vec<(Vec<String>, BTreeSet<String>)>) {
    let (commands, flags) = help(&path);
    if commands.is_empty() {
        out.push((path, flags));
        return;
    }
    for c in commands {
        let mut p = path.clone();
        p.push(c);
        leaves(p, out);
    }
}

/// The rows of the commands table: (the command paths the first cell
/// names, the whole row). `quarry matrix plan|run FILE` names
/// `matrix plan` and `matrix run`.
fn rows(doc: &str) -> Vec<(Vec<Vec<String>>, String)> {
    let mut out = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with("| `quarry ")) {
        let cell = line.trim_start_matches("| `quarry ").split('`').next().unwrap();
        let mut paths: Vec<Vec<String>> = vec![Vec::new()];
        for word in cell.split_whitespace() {
            let names: Vec<&str> = word.split("\\|").flat_map(|w| w.split('|')).collect();
            let is_name = |n: &&str| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '-');
            if names.iter().all(is_name) && !word.starts_with('-') {
                paths = paths
                    .iter()
                    .flat_map(|p| names.iter().map(move |n| p.iter().cloned().chain([n.to_string()]).collect()))
                    .collect();
            } else {
                break;
            }
        }
        out.push((paths, line.to_string()));
    }
    out
}

#[test]
fn every_command_and_flag_is_in_the_commands_page() {
    let doc = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let (_, global) = help(&[]);
    let mut commands = Vec::new();
    leaves(Vec::new(), &mut commands);
    assert!(commands.len() > 20, "the help lists {} commands", commands.len());
    let rows = rows(&doc);
    let mut missing = Vec::new();
    for (path, flags) in &commands {
        // The row naming the command itself; else the longest that names a
        // prefix of it (`quarry cdi ...` for `cdi generate`).
        let row = (0..=path.len())
            .rev()
            .find_map(|n| rows.iter().find(|(paths, _)| paths.iter().any(|p| p[..] == path[..n])))
            .filter(|(paths, _)| paths.iter().any(|p| !p.is_empty()));
        let Some((_, row)) = row else {
            missing.push(format!("quarry {}: no row", path.join(" ")));
            continue;
        };
        let words: BTreeSet<&str> = row.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).collect();
        // A flag is named by its long or its short form.
        let undocumented: Vec<&String> = flags
            .iter()
            .filter(|f| !global.contains(*f) && !f.starts_with("--help") && !f.starts_with("--version"))
            .filter(|f| !f.split(' ').any(|form| words.contains(form)))
            .collect();
        if !undocumented.is_empty() {
            missing.push(format!(
                "quarry {}: {}",
                path.join(" "),
                undocumented.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(" ")
            ));
        }
    }
    for g in global.iter().filter(|g| !g.starts_with("--help") && !g.starts_with("--version")) {
        if !g.split(' ').any(|form| doc.contains(form)) {
            missing.push(format!("the option every command takes, {g}"));
        }
    }
    assert!(missing.is_empty(), "docs/commands.md does not name:\n{}", missing.join("\n"));
}
