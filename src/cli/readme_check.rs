//! The README's and docs' examples against the real command line (a test
//! only): in README.md and every docs/*.md, every `sh` block says how it is
//! tested (`<!-- readme-test: run -->`, run by tests/e2e/readme.rs, or
//! `<!-- readme-test: covered by tests/NAME.rs ... -->`, a test that
//! exists), and every `quarry` command in every block parses with quarry's
//! own argument parser, so a renamed or removed flag cannot stay in the
//! documentation. `DOCS` must list every file of docs/ (checked against the
//! directory), so a new page cannot escape the check; every relative link
//! must lead to a file that exists and, with a `#fragment`, to a heading in it.

use clap::Parser;
use std::path::Path;

/// Every checked file, by its path from the repository's root.
const DOCS: &[(&str, &str)] = &[
    ("README.md", include_str!("../../README.md")),
    ("docs/cache-and-matrices.md", include_str!("../../docs/cache-and-matrices.md")),
    ("docs/commands.md", include_str!("../../docs/commands.md")),
    ("docs/development.md", include_str!("../../docs/development.md")),
    ("docs/engines.md", include_str!("../../docs/engines.md")),
    ("docs/images-and-locks.md", include_str!("../../docs/images-and-locks.md")),
    ("docs/kernels.md", include_str!("../../docs/kernels.md")),
    ("docs/performance.md", include_str!("../../docs/performance.md")),
    ("docs/reliability.md", include_str!("../../docs/reliability.md")),
    ("docs/rocm-packaging.md", include_str!("../../docs/rocm-packaging.md")),
    ("docs/test-images.md", include_str!("../../docs/test-images.md")),
    ("docs/wheels.md", include_str!("../../docs/wheels.md")),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One fenced block: its language, the annotation line above it, its text.
struct Block {
    line: usize,
    lang: String,
    note: String,
    text: String,
}

fn blocks(doc: &str) -> Vec<Block> {
    let lines: Vec<&str> = doc.lines().collect();
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
fn every_doc_is_checked() {
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|name| name.ends_with(".md"))
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = DOCS.iter().map(|(name, _)| *name).filter(|name| name.starts_with("docs/")).collect();
    for name in &on_disk {
        assert!(listed.contains(&name.as_str()), "{name}: not in src/cli/readme_check.rs's DOCS: add it there");
    }
    for name in &listed {
        assert!(on_disk.iter().any(|n| n == name), "{name}: listed in src/cli/readme_check.rs's DOCS but not in docs/");
    }
}

#[test]
fn every_shell_example_is_tested_and_every_quarry_command_parses() {
    let mut commands = 0;
    for (file, doc) in DOCS {
        for b in blocks(doc).into_iter().filter(|b| b.lang == "sh") {
            let note = b.note.trim();
            let how =
                note.strip_prefix("<!-- readme-test: ").and_then(|n| n.strip_suffix(" -->")).unwrap_or_else(|| {
                    panic!("{file}:{}: the block has no `<!-- readme-test: ... -->` line above it", b.line)
                });
            if let Some(covered) = how.strip_prefix("covered by ") {
                let test = covered.split_whitespace().next().unwrap_or_default();
                assert!(root().join(test).is_file(), "{file}:{}: `{test}` does not exist", b.line);
            } else {
                assert!(how.starts_with("run"), "{file}:{}: `{how}`: expected `run` or `covered by FILE`", b.line);
            }
            for cmd in quarry_commands(&b.text) {
                commands += 1;
                if let Err(e) = crate::cli::Cli::try_parse_from(&cmd) {
                    // `--help`-style exits are not errors of the example.
                    assert!(
                        matches!(
                            e.kind(),
                            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                        ),
                        "{file}:{}: `{}` does not parse:\n{e}",
                        b.line,
                        cmd.join(" ")
                    );
                }
            }
        }
    }
    assert!(commands >= 25, "only {commands} quarry commands found in README.md and docs/");
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a document's headings (outside fenced blocks).
fn anchors(doc: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// `(line, target)` of each `[text](target)` link outside fenced blocks.
fn links(doc: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut checked = 0;
    for (file, doc) in DOCS {
        let dir = root().join(file).parent().unwrap().to_path_buf();
        for (line, target) in links(doc) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let to = if path.is_empty() { root().join(file) } else { dir.join(path) };
            let shown = to.strip_prefix(root()).unwrap_or(&to).display().to_string();
            assert!(to.exists(), "{file}:{line}: `{target}`: {shown} does not exist");
            if !fragment.is_empty() {
                let text = std::fs::read_to_string(&to).unwrap_or_default();
                assert!(
                    anchors(&text).iter().any(|a| a == fragment),
                    "{file}:{line}: `{target}`: no heading in {shown} has the anchor `{fragment}`"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} relative links found in README.md and docs/");
}

#[test]
fn anchors_are_github_s() {
    assert_eq!(anchor(" Engines: Docker, Podman, remote"), "engines-docker-podman-remote");
    assert_eq!(anchor("Framework wheels on ROCm's packages"), "framework-wheels-on-rocms-packages");
    assert_eq!(anchor("`rocm_sdk`: the reference's API"), "rocm_sdk-the-references-api");
    assert_eq!(links("see [a](b.md#c) and [d](#e)\n```\n[x](y)\n```\n"), [(1, "b.md#c".into()), (1, "#e".into())]);
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
