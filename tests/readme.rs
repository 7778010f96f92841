//! The README's examples, run as a newcomer would run them (issue 26 item
//! 14): every `sh` block marked `<!-- readme-test: run -->` runs, in README
//! order, with `bash -euo pipefail` in a fresh directory holding the
//! repository's `images/` and `layers/`, with `quarry` on PATH (a block's
//! `cargo run --release --` is that same binary), and must succeed; a
//! `toml` block marked `<!-- readme-test: write FILE -->` is written there
//! first. The other blocks name the test that covers them (checked, with
//! every `quarry` command of the README parsing, by src/cli/readme_check.rs).
//! The layer cache is the tests' shared one, so the Debian 12 image the
//! examples build is built once for the whole suite.

mod common;

use common::*;
use std::process::Command;

/// (annotation, language, text) of each fenced block after an annotation.
fn annotated_blocks(readme: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = readme.lines().collect();
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

#[test]
fn readme_examples_run() {
    if !have_docker() || !have_tool("gpgv") || !have_tool("jq") {
        return;
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
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
    let mut outputs = String::new();
    for (note, lang, text) in annotated_blocks(&readme) {
        if let Some(file) = note.strip_prefix("write ") {
            assert_eq!(lang, "toml", "{note}");
            std::fs::write(dir.join(file), &text).unwrap();
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
            "README example failed ({:?}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push_str(&stdout);
        ran += 1;
    }
    let _ = Command::new("docker").args(["rmi", "-f", "hello:1"]).output();
    assert!(ran >= 5, "only {ran} README blocks ran");
    // What the examples say they print.
    assert!(outputs.contains("Python 3.11"), "{outputs}");
    assert!(outputs.contains("Debian GNU/Linux 12"), "{outputs}");
    assert!(outputs.contains("\"manifest_digest\""), "{outputs}");
    assert!(outputs.contains("docker run --rm"), "{outputs}");
    assert!(dir.join("dist").read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("manylinux")));
}
