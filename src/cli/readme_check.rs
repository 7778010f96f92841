//! The README's examples against the real command line (a test only): every
//! `sh` block says how it is tested (`<!-- readme-test: run -->`, run by
//! tests/readme.rs, or `<!-- readme-test: covered by tests/NAME.rs ... -->`,
//! a test that exists), and every `quarry` command in every block parses
//! with quarry's own argument parser, so a renamed or removed flag cannot
//! stay in the README.

use clap::Parser;

const README: &str = include_str!("../../README.md");

/// One fenced block: its language, the annotation line above it, its text.
struct Block {
    line: usize,
    lang: String,
    note: String,
    text: String,
}

fn blocks() -> Vec<Block> {
    let lines: Vec<&str> = README.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(lang) = lines[i].strip_prefix("```").filter(|l| !l.is_empty()) {
            let note = if i > 0 { lines[i - 1].to_string() } else { String::new() };
            let start = i;
            let mut text = String::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                text.push_str(lines[i]);
                text.push('\n');
                i += 1;
            }
            out.push(Block { line: start + 1, lang: lang.to_string(), note, text });
        }
        i += 1;
    }
    out
}

/// The `quarry` commands of a shell block, as argument lists: continuation
/// lines joined, `$ ` prompts and comments dropped, a pipeline cut at `|`,
/// `cargo run --release --` read as `quarry`.
fn quarry_commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let line = line.trim().trim_start_matches("$ ");
        let Some(words) = shlex::split(line) else { continue };
        let mut words: Vec<String> = words.into_iter().take_while(|w| w != "|" && w != "&&").collect();
        if words.starts_with(&["cargo".into(), "run".into(), "--release".into(), "--".into()]) {
            words.splice(0..4, ["quarry".to_string()]);
        }
        if words.first().map(String::as_str) == Some("quarry") {
            out.push(words);
        }
    }
    out
}

#[test]
fn every_shell_example_is_tested_and_every_quarry_command_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut commands = 0;
    for b in blocks().into_iter().filter(|b| b.lang == "sh") {
        let note = b.note.trim();
        let how = note.strip_prefix("<!-- readme-test: ").and_then(|n| n.strip_suffix(" -->")).unwrap_or_else(|| {
            panic!("README.md:{}: the block has no `<!-- readme-test: ... -->` line above it", b.line)
        });
        if let Some(covered) = how.strip_prefix("covered by ") {
            let file = covered.split_whitespace().next().unwrap_or_default();
            assert!(root.join(file).is_file(), "README.md:{}: `{file}` does not exist", b.line);
        } else {
            assert!(how.starts_with("run"), "README.md:{}: `{how}`: expected `run` or `covered by FILE`", b.line);
        }
        for cmd in quarry_commands(&b.text) {
            commands += 1;
            if let Err(e) = crate::cli::Cli::try_parse_from(&cmd) {
                // `--help`-style exits are not errors of the example.
                assert!(
                    matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion),
                    "README.md:{}: `{}` does not parse:\n{e}",
                    b.line,
                    cmd.join(" ")
                );
            }
        }
    }
    assert!(commands >= 25, "only {commands} quarry commands found in the README");
}

#[test]
fn commands_are_read_as_a_shell_would() {
    let c = quarry_commands(
        "$ quarry plan x.toml --json | jq .up_to_date\nquarry wheel build a \\\n    --test \"python -c 'import a'\"  # note\n\
         cargo run --release -- build y.toml\npip install z\n",
    );
    assert_eq!(c[0], ["quarry", "plan", "x.toml", "--json"]);
    assert_eq!(c[1], ["quarry", "wheel", "build", "a", "--test", "python -c 'import a'"]);
    assert_eq!(c[2], ["quarry", "build", "y.toml"]);
    assert_eq!(c.len(), 3);
}
