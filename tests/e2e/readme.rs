//! The README's and docs' examples, run as a newcomer would run them:
//! every `sh` block marked
//! `<!-- readme-test: run -->` runs, README.md's first, then those of each
//! docs/*.md in file name order, each file's in its order, with
//! `bash -euo pipefail` in one fresh directory holding the repository's
//! `images/` and `layers/` (so a block may use what an earlier one made: the
//! docs' blocks run the image the README's Quick start built), with `quarry`
//! on PATH (a block's `cargo run --release --` is that same binary), and must
//! succeed; a `toml` block marked `<!-- readme-test: write FILE -->` is
//! written there first. The other blocks name the test that covers them
//! (checked, with every `quarry` command of the README and the docs parsing,
//! by src/cli/readme_check.rs). The layer cache is the tests' shared one, so
//! the Debian 12 image the examples build is built once for the whole suite.

use crate::common;

use common::*;
use std::process::Command;

/// (annotation, language, text) of each fenced block after an annotation.
fn annotated_blocks(doc: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let note = lines[i].trim().strip_prefix("<!-- readme-test: ").and_then(|n| n.strip_suffix(" -->"));
        if let (Some(note), Some(lang)) = (note, lines.get(i + 1).and_then(|l| l.strip_prefix("```"))) {
            let mut text = String::new();
            i += 2;
            while i < lines.len() && !lines[i].starts_with("```") {
                text.push_str(lines[i]);
                text.push('\n');
                i += 1;
            }
            out.push((note.to_string(), lang.to_string(), text));
        }
        i += 1;
    }
    out
}

/// README.md, then every docs/*.md in file name order: (path from the
/// repository's root, text).
fn documents() -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|name| name.ends_with(".md"))
        .collect();
    names.sort();
    std::iter::once("README.md".to_string())
        .chain(names)
        .map(|name| {
            let text = std::fs::read_to_string(repo().join(&name)).unwrap();
            (name, text)
        })
        .collect()
}

#[test]
fn readme_examples_run() {
    if !have_docker() || !have_tool("gpgv") || !have_tool("jq") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("quarry");
    std::fs::create_dir_all(&dir).unwrap();
    for sub in ["images", "layers"] {
        run_expect(Command::new("cp").arg("-a").arg(repo().join(sub)).arg(&dir), 0);
    }
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_quarry"), bin.join("quarry")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = 0;
    // What each file's blocks printed.
    let mut outputs: std::collections::BTreeMap<String, String> = Default::default();
    for (file, doc) in documents() {
        for (note, lang, text) in annotated_blocks(&doc) {
            if let Some(name) = note.strip_prefix("write ") {
                assert_eq!(lang, "toml", "{file}: {note}");
                std::fs::write(dir.join(name), &text).unwrap();
                continue;
            }
            if lang != "sh" || !note.starts_with("run") {
                continue;
            }
            let script = text.replace("cargo run --release -- ", "quarry ");
            let out = Command::new("bash")
                .args(["-euo", "pipefail", "-c", &script])
                .current_dir(&dir)
                .env("PATH", &path)
                .env("QUARRY_CACHE", packages_cache())
                .env_remove("SOURCE_DATE_EPOCH")
                .env_remove("QUARRY_PATCHELF")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{file}: example failed ({:?}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            );
            outputs.entry(file.clone()).or_default().push_str(&stdout);
            ran += 1;
        }
    }
    let _ = Command::new("docker").args(["rmi", "-f", "hello:1"]).output();
    assert!(ran >= 5, "only {ran} blocks of README.md and docs/*.md ran");
    // What the examples say they print, by the file that says it.
    for (file, printed) in [
        ("README.md", "Python 3.11"),
        ("docs/commands.md", "\"manifest_digest\""),
        ("docs/engines.md", "Debian GNU/Linux 12"),
        ("docs/engines.md", "docker run --rm"),
    ] {
        let got = outputs.get(file).map(String::as_str).unwrap_or_default();
        assert!(got.contains(printed), "{file}: its examples did not print `{printed}`:\n{got}");
    }
    assert!(
        std::fs::read_dir(dir.join("dist"))
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().contains("manylinux")))
            .unwrap_or(false),
        "docs/wheels.md: its wheel build left no manylinux wheel in dist/"
    );
}
