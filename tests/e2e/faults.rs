//! Bad input and faults, end to end (the `quarry` binary on real files):
//! each case here once slipped through as corrupt data passed on or
//! invalid output written, and must now be a clear error that loses nothing.
use crate::common;

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

/// An image with one layer of `n` KiB of data, built into `out` through `cache`.
fn data_image(dir: &Path, name: &str, cache: &Path, out: &Path) -> serde_json::Value {
    let mut data = Vec::new();
    for i in 0..64 * 1024u32 {
        data.extend_from_slice(&i.wrapping_mul(2654435761).to_le_bytes());
    }
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/blob.bin"), &data).unwrap();
    let def = dir.join(format!("{name}.toml"));
    write(
        &def,
        &format!("name = \"{name}\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n[[layer]]\nname = \"data\"\n[[layer.source]]\ndir = \"data\"\ndest = \"/data\"\n"),
    );
    stdout_json(&run_expect(
        quarry().arg("build").arg(&def).arg("-o").arg(out).arg("--cache-dir").arg(cache).arg("--json"),
        0,
    ))
}

/// Flip one byte in the middle of a file, in place (its inode stays: a
/// layout's blob is a hard link of the cache's, so both are damaged).
fn flip_a_byte(path: &Path) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mid = f.metadata().unwrap().len() / 2;
    let mut b = [0u8];
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.write_all(&[b[0] ^ 0x40]).unwrap();
}

/// A corrupt blob was copied into outputs, `plan` said up to date, `export`
/// wrote a corrupt archive and exited 0, and only `load` failed, with the
/// engine's "unexpected EOF". Now every reader of the cache or a layout
/// checks the blob where it uses it: named with its digest, exit 1, nothing
/// corrupt written; and the next build repairs the cache.
#[test]
fn a_corrupt_blob_is_named_and_never_passed_on() {
    let d = tempfile::tempdir().unwrap();
    let (cache, out) = (d.path().join("cache"), d.path().join("out"));
    let built = data_image(d.path(), "damaged", &cache, &out);
    let layer = built["layers"][0]["digest"].as_str().unwrap().to_string();
    let blob = out.join("blobs/sha256").join(layer.trim_start_matches("sha256:"));
    flip_a_byte(&blob);

    for format in ["oci-archive", "docker-archive"] {
        let file = d.path().join(format!("{format}.tar"));
        let o = run_expect(quarry().args(["export"]).arg(&out).args(["--format", format, "-o"]).arg(&file), 1);
        let e = stderr(&o);
        assert!(e.contains(&layer) && e.contains("damaged"), "{format}: {e}");
        assert!(!file.exists(), "{format}: no archive written");
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".quarry-export"))
            .collect();
        assert!(left.is_empty(), "{format}: no temporary file left");
    }
    if have_docker() {
        let tag = format!("{}:t", unique("damaged"));
        let o = run_expect(quarry().args(["load", "--tag", &tag]).arg(&out).arg("--cache-dir").arg(&cache), 1);
        assert!(stderr(&o).contains(&layer), "{}", stderr(&o));
        let there = Command::new("docker").args(["image", "inspect", &tag]).output().unwrap();
        assert!(!there.status.success(), "nothing was loaded as {tag}");
        let o = run_expect(
            quarry().args(["run", "--gpu", "none"]).arg(&out).arg("--cache-dir").arg(&cache).args(["--", "/x"]),
            1,
        );
        assert!(stderr(&o).contains(&layer), "{}", stderr(&o));
        assert_eq!(leaked_quarry_containers(), Vec::<String>::new());
    }
    if common::registry::have_registry() {
        let reg = common::registry::Registry::start("");
        let o = run_expect(
            quarry()
                .arg("push")
                .arg(&out)
                .arg(format!("{}/faults/damaged:v1", reg.addr()))
                .arg("--plain-http")
                .arg("--cache-dir")
                .arg(&cache),
            1,
        );
        assert!(stderr(&o).contains(&layer), "{}", stderr(&o));
        let tags = Command::new("skopeo")
            .args(["list-tags", "--tls-verify=false"])
            .arg(format!("docker://{}/faults/damaged", reg.addr()))
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&tags.stdout).contains("v1"), "no image was pushed");
    }

    // The cache shared the damage (one inode): `plan` no longer says the
    // layer is there, and the next build makes it again, the same bytes.
    let def = d.path().join("damaged.toml");
    let p = stdout_json(&run_expect(
        quarry().arg("plan").arg(&def).arg("--cache-dir").arg(&cache).arg("-o").arg(&out).arg("--json"),
        0,
    ));
    assert_eq!(p["layers"][0]["cached"], false, "{p}");
    let again = stdout_json(&run_expect(
        quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--cache-dir").arg(&cache).arg("--json"),
        0,
    ));
    assert_eq!(again["manifest_digest"], built["manifest_digest"]);
    assert_eq!(again["layers"][0]["cached"], false, "rebuilt: {again}");
    let third = stdout_json(&run_expect(
        quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--cache-dir").arg(&cache).arg("--json"),
        0,
    ));
    assert_eq!(third["layers"][0]["cached"], true, "the cache is whole again");
    run_expect(
        quarry().args(["export"]).arg(&out).args(["--format", "oci-archive", "-o"]).arg(d.path().join("ok.tar")),
        0,
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.path().join("ok.tar")).unwrap().permissions().mode() & 0o777;
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
        .unwrap();
    assert_eq!(mode, 0o666 & !umask, "an archive gets the user's file mode, not a temporary file's 0600: {mode:o}");
}

/// Every file's bytes under `dir`, leaving out the bookkeeping `cache du`
/// does not report (leases, the prune lock).
fn bytes_under(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter(|e| !e.path().starts_with(dir.join("leases")) && e.file_name() != "prune.lock")
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Each killed build left ~300 MB in the cache's `tmp/` that `cache du`
/// did not count and `cache prune` did not remove (swept after a day).
/// Twenty builds killed at points spread over their run, then one build:
/// the clean build's digest, `tmp/` empty after it, `cache du` exact.
#[test]
fn builds_killed_at_random_points_leave_nothing_behind() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    // 12 MB in 48 files: packing takes long enough to be killed in the middle.
    for i in 0..48u32 {
        let mut data = Vec::with_capacity(256 * 1024);
        let mut x = i.wrapping_mul(2654435761) | 1;
        while data.len() < 256 * 1024 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            data.extend_from_slice(&x.to_le_bytes());
        }
        write(&src.join(format!("f{i:02}.bin")), "");
        std::fs::write(src.join(format!("f{i:02}.bin")), &data).unwrap();
    }
    let def = d.path().join("killed.toml");
    write(
        &def,
        "name = \"killed\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n[[layer]]\nname = \"data\"\n[[layer.source]]\ndir = \"src\"\ndest = \"/data\"\n",
    );
    let clean = {
        let c = d.path().join("clean-cache");
        let b = run_expect(
            quarry()
                .arg("build")
                .arg(&def)
                .arg("-o")
                .arg(d.path().join("clean"))
                .arg("--cache-dir")
                .arg(&c)
                .arg("--json"),
            0,
        );
        stdout_json(&b)["manifest_digest"].as_str().unwrap().to_string()
    };
    let cache = d.path().join("cache");
    // How long a whole build takes here, to spread the kills over it.
    let t = std::time::Instant::now();
    run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .arg("-o")
            .arg(d.path().join("probe"))
            .arg("--cache-dir")
            .arg(d.path().join("probe-cache"))
            .arg("--quiet"),
        0,
    );
    let whole = t.elapsed().as_millis().max(50) as u64;
    let mut seed = 0x9e3779b97f4a7c15u64;
    for i in 0..20 {
        seed ^= seed << 7;
        seed ^= seed >> 9;
        let at = seed % (whole + whole / 4);
        let mut c = quarry();
        c.arg("build").arg(&def).arg("-o").arg(d.path().join(format!("out-{i}"))).arg("--cache-dir").arg(&cache);
        // --no-cache: every run packs again, none ends early on a hit.
        let mut child = c.arg("--no-cache").arg("--quiet").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(at));
        let _ = child.kill();
        let _ = child.wait();
    }
    let out = run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .arg("-o")
            .arg(d.path().join("final"))
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--json"),
        0,
    );
    assert_eq!(stdout_json(&out)["manifest_digest"].as_str().unwrap(), clean, "the killed builds changed the image");
    let left: Vec<_> = std::fs::read_dir(cache.join("tmp")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "tmp/ after the build: {left:?}");
    let du = stdout_json(&run_expect(quarry().args(["cache", "du", "--json", "--cache-dir"]).arg(&cache), 0));
    assert_eq!(du["scratch_bytes"], 0, "{du}");
    assert_eq!(du["total_bytes"].as_u64().unwrap(), bytes_under(&cache), "cache du counts every byte: {du}");
}

/// `quarry run` tagged a layout by its directory (`out:latest`): two
/// images written to two `out/` directories collided in one engine, and the
/// lab's `--print-docker` line named another tag than the exported archive.
/// A layout now names its image (`NAME:TAG` of the definition).
#[test]
fn a_layout_is_named_by_its_image_not_its_directory() {
    let d = tempfile::tempdir().unwrap();
    let mut tags = Vec::new();
    for name in ["first", "second"] {
        let dir = d.path().join(name);
        let out = dir.join("out");
        run_expect(
            quarry()
                .arg("build")
                .arg(image(&dir, name, "\"0644\""))
                .arg("-o")
                .arg(&out)
                .arg("--cache-dir")
                .arg(d.path().join("c")),
            0,
        );
        let archive = dir.join("lab.tar");
        run_expect(quarry().arg("export").arg(&out).args(["--format", "docker-archive", "-o"]).arg(&archive), 0);
        let mut a = tar::Archive::new(std::fs::File::open(&archive).unwrap());
        let manifest: serde_json::Value = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap())
            .find(|e| e.path().unwrap().to_string_lossy() == "manifest.json")
            .map(|e| serde_json::from_reader(e).unwrap())
            .unwrap();
        let repo_tag = manifest[0]["RepoTags"][0].as_str().unwrap().to_string();
        assert_eq!(repo_tag, format!("{name}:latest"));
        let line =
            run_expect(quarry().args(["run", "--gpu", "none", "--print-docker"]).arg(&out).args(["--", "true"]), 0);
        let line = String::from_utf8_lossy(&line.stdout).into_owned();
        assert!(line.split_whitespace().any(|w| w == repo_tag), "the lab's line runs the archive's image: {line}");
        tags.push(repo_tag);
    }
    assert_ne!(tags[0], tags[1]);
}

/// The smaller cases: a broken `index.json` said only "i/o error"; a
/// command missing in the container exited 1, not 127 as a shell (and
/// `docker run`) does; a failed `wheel repair` left an empty output folder.
#[test]
fn a_broken_index_a_missing_command_and_a_failed_repair_say_so() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let def = image(d.path(), "small", "\"0644\"");
    run_expect(quarry().arg("build").arg(&def).arg("-o").arg(&out).arg("--cache-dir").arg(d.path().join("c")), 0);

    let copy = d.path().join("broken");
    run_expect(Command::new("cp").arg("-a").arg(&out).arg(&copy), 0);
    std::fs::write(copy.join("index.json"), b"{\"schemaVersion\": 2, \"manifests\": [").unwrap();
    let e = stderr(&run_expect(quarry().arg("inspect").arg(&copy), 1));
    assert!(e.contains("index.json") && e.contains("not an OCI image index") && !e.contains("i/o error"), "{e}");

    if have_docker() {
        let o = run_expect(
            quarry()
                .args(["run", "--gpu", "none"])
                .arg(&out)
                .arg("--cache-dir")
                .arg(d.path().join("c"))
                .args(["--", "/no/such/command"]),
            127,
        );
        assert!(stderr(&o).contains("/no/such/command"), "{}", stderr(&o));
        assert_eq!(leaked_quarry_containers(), Vec::<String>::new());
    }

    let wheel = d.path().join("pure-1.0-py3-none-any.whl");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
        let o = zip::write::SimpleFileOptions::default();
        let files: [(&str, &[u8]); 3] = [
            ("pure/__init__.py", b"x = 1\n"),
            ("pure-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
            ("pure-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: pure\nVersion: 1.0\n"),
        ];
        let mut record = String::new();
        for (name, data) in files {
            z.start_file(name, o).unwrap();
            std::io::Write::write_all(&mut z, data).unwrap();
            use base64::Engine as _;
            let h =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(quarry::oci::Digest::of_bytes(data).as_bytes());
            record.push_str(&format!("{name},sha256={h},{}\n", data.len()));
        }
        record.push_str("pure-1.0.dist-info/RECORD,,\n");
        z.start_file("pure-1.0.dist-info/RECORD", o).unwrap();
        std::io::Write::write_all(&mut z, record.as_bytes()).unwrap();
        z.finish().unwrap();
    }
    let dest = d.path().join("repaired");
    let e = stderr(&run_expect(quarry().args(["wheel", "repair"]).arg(&wheel).arg("-o").arg(&dest), 1));
    assert!(e.contains("no ELF file"), "{e}");
    assert!(!dest.exists(), "a failed repair leaves no folder");
}
