//! Bad input and faults, end to end (the `quarry` binary on real files):
//! each case here once slipped through as corrupt data passed on or
//! invalid output written, and must now be a clear error that loses nothing.
mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A one-file image in its own directory: `extra` goes after `name`, and
/// `mode` is written into the file source as given (TOML).
fn image(dir: &Path, name: &str, mode: &str) -> PathBuf {
    write(&dir.join("motd.txt"), "hello\n");
    let def = dir.join("image.toml");
    write(
        &def,
        &format!(
            "name = \"{name}\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n[[layer]]\nname = \"motd\"\n[[layer.source]]\nfile = \"motd.txt\"\ndest = \"/etc/motd\"\nmode = {mode}\n"
        ),
    );
    def
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `mode = 644` is a TOML integer: read as decimal it gave the file
/// `--w----r-T` and the build succeeded. It is refused, naming the field.
#[test]
fn an_integer_mode_is_refused_not_read_as_decimal() {
    let d = tempfile::tempdir().unwrap();
    let def = image(d.path(), "modes", "644");
    let out = d.path().join("out");
    let e = stderr(&run_expect(
        quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--cache-dir").arg(d.path().join("c")),
        1,
    ));
    assert!(e.contains("layer[0].source[0].mode") && e.contains("\"0644\"") && e.contains("decimal"), "{e}");
    assert!(!out.exists(), "nothing written");
    // The string form builds, with the mode it says.
    let def = image(d.path(), "modes", "\"0644\"");
    run_expect(quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--cache-dir").arg(d.path().join("c")), 0);
}

/// `name = "../../escape"` wrote the layout outside `out/` under an
/// invalid tag; an image name is now an OCI repository name.
#[test]
fn an_image_name_that_is_not_a_repository_name_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let work = d.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    for bad in ["../../escape", "/abs", "Upper", "a..b", "trailing-", "x/../y"] {
        let def = image(&d.path().join("defs"), bad, "\"0644\"");
        let o = run_expect(
            quarry().current_dir(&work).arg("build").arg(&def).arg("--cache-dir").arg(d.path().join("c")),
            1,
        );
        let e = stderr(&o);
        assert!(e.contains("field `name`") && e.contains("not an image name"), "{bad}: {e}");
    }
    let written: Vec<_> = walkdir::WalkDir::new(d.path())
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() == "index.json")
        .map(|e| e.path().to_path_buf())
        .collect();
    assert!(written.is_empty(), "no layout written anywhere: {written:?}");
    let def = image(&d.path().join("defs"), "org/tools_v2.1-rc", "\"0644\"");
    run_expect(quarry().current_dir(&work).arg("build").arg(&def).arg("--cache-dir").arg(d.path().join("c")), 0);
    assert!(work.join("out/org/tools_v2.1-rc/index.json").is_file());
}

/// `inspect ... | head` and `wheel check ... | head` panicked on the
/// closed pipe (exit 101): a reader that stops early ends the output quietly.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let d = tempfile::tempdir().unwrap();
    let def = image(d.path(), "pipes", "\"0644\"");
    let out = d.path().join("out");
    run_expect(quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--cache-dir").arg(d.path().join("c")), 0);
    let wheel = d.path().join("demo-1.0-py3-none-any.whl");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
        let o = zip::write::SimpleFileOptions::default();
        for i in 0..2000 {
            z.start_file(format!("demo/m{i}.py"), o).unwrap();
            std::io::Write::write_all(&mut z, b"x = 1\n").unwrap();
        }
        z.start_file("demo-1.0.dist-info/WHEEL", o).unwrap();
        std::io::Write::write_all(&mut z, b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n").unwrap();
        z.start_file("demo-1.0.dist-info/METADATA", o).unwrap();
        std::io::Write::write_all(&mut z, b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n").unwrap();
        z.finish().unwrap();
    }
    for args in [
        vec!["inspect".to_string(), out.display().to_string()],
        vec!["wheel".into(), "check".into(), wheel.display().to_string()],
    ] {
        // The reader closes its end before quarry writes: every write fails.
        let mut child = quarry().args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let e = stderr(&o);
        assert!(!e.contains("panicked") && o.status.code() != Some(101), "{args:?}: {e}");
    }
    // And as a shell pipeline does it.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "set -o pipefail 2>/dev/null; {} inspect {} | head -c 1 >/dev/null",
            env!("CARGO_BIN_EXE_quarry"),
            out.display()
        ))
        .output()
        .unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}
