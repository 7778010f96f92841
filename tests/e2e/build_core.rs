//! End-to-end tests of `quarry build`, `inspect` and `export`:
//! reproducibility, round trips through GNU tar and umoci, independent
//! readers (skopeo, docker load/run), the cache, and bad input.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const LONG_DIR: &str = "a-directory-name-that-is-long-enough-to-need-pax-headers-0123456789-abcdefghijklmnopqrstuvwxyz";

/// The input tree every test builds: modes, links, empty dirs, long paths.
/// `variant` changes mtimes, owners and creation order, never content.
fn make_tree(root: &Path, variant: u32) {
    let mut files: Vec<(String, &str, u32)> = vec![
        ("bin/tool".into(), "#!/bin/sh\necho tool\n", 0o755),
        ("bin/suid-tool".into(), "setuid\n", 0o4755),
        ("etc/config".into(), "key = value\n", 0o644),
        ("etc/secret".into(), "hidden\n", 0o600),
        (format!("{LONG_DIR}/short"), "over 100 bytes\n", 0o644),
        (format!("{LONG_DIR}/{LONG_DIR}/{LONG_DIR}/deep-file"), "over 255 bytes\n", 0o644),
        ("data/original".into(), "linked content\n", 0o644),
    ];
    if variant % 2 == 1 {
        files.reverse();
    }
    for (rel, content, mode) in &files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    std::fs::hard_link(root.join("data/original"), root.join("data/hardlink")).unwrap();
    std::os::unix::fs::symlink("../etc/config", root.join("bin/config-link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/absolute", root.join("bin/abs-link")).unwrap();
    std::fs::create_dir_all(root.join("empty/dir")).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Other mtimes and owners in other variants.
    let t = filetime::FileTime::from_unix_time(1_000_000_000 + variant as i64 * 12345, 0);
    for e in walkdir::WalkDir::new(root).contents_first(true) {
        let e = e.unwrap();
        let _ = filetime::set_symlink_file_times(e.path(), t, t);
        let _ = std::os::unix::fs::lchown(e.path(), Some(1000 + variant), Some(2000 + variant));
    }
    // chown clears setuid: set the modes again, then the times again.
    for (rel, _, mode) in &files {
        std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(std::fs::metadata(root.join("bin/suid-tool")).unwrap().mode() & 0o7777, 0o4755);
}

/// A small rootfs tarball with files for the whiteout test.
fn make_base_tar(path: &Path) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, data) in [("usr/share/doc/pkg/README", "doc"), ("usr/share/keep", "keep"), ("etc/hostname", "base")] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_bytes()).unwrap();
    }
    b.finish().unwrap();
}

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    /// images/img.toml with a rootfs base, the tree as a `dir` layer, a
    /// `file` layer and a removal.
    fn new(variant: u32) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        make_tree(&root.join("input"), variant);
        make_base_tar(&root.join("base.tar"));
        write(&root.join("motd.txt"), "hello\n");
        write(
            &root.join("images/img.toml"),
            r#"
name = "core-test"
base = { rootfs = "../base.tar" }
layers = ["tree"]
[params]
INPUT = "../input"
[config]
env = { PATH = "/bin:/usr/bin" }
cmd = ["/bin/sh"]
workdir = "/work"
labels = { "org.opencontainers.image.title" = "core-test" }
exposed_ports = ["8080"]
[[layer]]
name = "motd"
[[layer.source]]
file = "../motd.txt"
dest = "/etc/motd"
mode = "0640"
[[layer]]
name = "cleanup"
remove = ["/usr/share/doc"]
"#,
        );
        write(
            &root.join("layers/tree.toml"),
            "name = \"tree\"\n[[source]]\ndir = \"${INPUT}\"\ndest = \"/srv/tree\"\n",
        );
        Project { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn image(&self) -> PathBuf {
        self.path().join("images/img.toml")
    }

    fn build(&self, cache: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
        let mut c = quarry();
        c.args(["build", "--json", "--cache-dir"]).arg(cache).arg("-o").arg(out).arg(self.image()).args(extra);
        stdout_json(&run_expect(&mut c, 0))
    }
}

fn layer_names_cached(j: &serde_json::Value) -> BTreeMap<String, bool> {
    j["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_string(), l["cached"].as_bool().unwrap()))
        .collect()
}

#[test]
fn same_inputs_same_digests_whatever_mtimes_owners_order_threads() {
    let a = Project::new(0);
    let b = Project::new(1);
    let ja = a.build(&a.path().join("cache"), &a.path().join("out"), &["--threads", "1"]);
    let jb = b.build(&b.path().join("cache"), &b.path().join("out"), &["--threads", "2"]);
    assert_eq!(ja["manifest_digest"], jb["manifest_digest"], "\n{ja:#}\n{jb:#}");
    assert_eq!(ja["config_digest"], jb["config_digest"]);
    for field in ["name", "manifest_digest", "config_digest", "output", "layers"] {
        assert!(!ja[field].is_null(), "missing `{field}` in {ja:#}");
    }
    for l in ja["layers"].as_array().unwrap() {
        for field in ["name", "digest", "diff_id", "size", "media_type", "cached"] {
            assert!(!l[field].is_null(), "layer misses `{field}`: {l}");
        }
    }
    // zstd and none are reproducible too, and differ from gzip.
    let z1 = a.build(&a.path().join("cache"), &a.path().join("outz"), &["--compression", "zstd", "--threads", "1"]);
    let z2 = b.build(&b.path().join("cache"), &b.path().join("outz"), &["--compression", "zstd", "--threads", "2"]);
    assert_eq!(z1["manifest_digest"], z2["manifest_digest"]);
    assert_ne!(z1["manifest_digest"], ja["manifest_digest"]);
    let n = a.build(&a.path().join("cache"), &a.path().join("outn"), &["--compression", "none"]);
    let l = &n["layers"][1];
    assert_eq!(l["digest"], l["diff_id"], "an uncompressed layer's digest is its diff_id");
    assert_eq!(l["diff_id"], ja["layers"][1]["diff_id"], "same tar whatever the compression");
}

/// Compare an extracted tree with the input: contents, modes, link targets,
/// hardlinks sharing an inode, empty directories.
fn assert_same_tree(input: &Path, extracted: &Path) {
    let list = |root: &Path| -> BTreeMap<PathBuf, std::fs::Metadata> {
        walkdir::WalkDir::new(root)
            .min_depth(1)
            .into_iter()
            .map(|e| {
                let e = e.unwrap();
                (e.path().strip_prefix(root).unwrap().to_path_buf(), std::fs::symlink_metadata(e.path()).unwrap())
            })
            .collect()
    };
    let a = list(input);
    let b = list(extracted);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "same paths");
    for (rel, ma) in &a {
        let mb = &b[rel];
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?} type");
        if !ma.file_type().is_symlink() {
            assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "{rel:?} mode");
        }
        if ma.is_file() {
            assert_eq!(
                std::fs::read(input.join(rel)).unwrap(),
                std::fs::read(extracted.join(rel)).unwrap(),
                "{rel:?} content"
            );
        }
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(input.join(rel)).unwrap(), std::fs::read_link(extracted.join(rel)).unwrap());
        }
    }
    let o = std::fs::metadata(extracted.join("data/original")).unwrap();
    let h = std::fs::metadata(extracted.join("data/hardlink")).unwrap();
    assert_eq!(o.ino(), h.ino(), "hardlinks share an inode");
}

#[test]
fn layers_round_trip_through_gnu_tar_and_umoci() {
    let p = Project::new(0);
    let out = p.path().join("out");
    let j = p.build(&p.path().join("cache"), &out, &[]);

    // GNU tar: the `tree` layer alone gives back the input under srv/tree.
    let tree_layer = j["layers"].as_array().unwrap().iter().find(|l| l["name"] == "tree").unwrap();
    let blob = out.join("blobs/sha256").join(tree_layer["digest"].as_str().unwrap().trim_start_matches("sha256:"));
    let x = p.path().join("gnutar");
    std::fs::create_dir_all(&x).unwrap();
    let st = Command::new("tar").arg("-xzf").arg(&blob).arg("-C").arg(&x).arg("--same-permissions").status().unwrap();
    assert!(st.success());
    assert_same_tree(&p.path().join("input"), &x.join("srv/tree"));
    let listing = Command::new("tar").arg("-tvzf").arg(&blob).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.lines().all(|l| l.contains(" 0/0 ")), "owners are 0:0 with empty names:\n{listing}");
    assert!(listing.lines().all(|l| l.contains("1970-01-01")), "mtimes clamped to 0:\n{listing}");

    // umoci applies every layer, whiteouts included.
    if !have_tool("umoci") {
        return;
    }
    let bundle = p.path().join("bundle");
    let o = Command::new("umoci")
        .arg("unpack")
        .arg("--image")
        .arg(format!("{}:latest", out.display()))
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(o.status.success(), "umoci unpack: {}", String::from_utf8_lossy(&o.stderr));
    let rootfs = bundle.join("rootfs");
    assert_same_tree(&p.path().join("input"), &rootfs.join("srv/tree"));
    assert!(!rootfs.join("usr/share/doc").exists(), "the whiteout removed the base's directory");
    assert_eq!(std::fs::read_to_string(rootfs.join("usr/share/keep")).unwrap(), "keep");
    assert_eq!(std::fs::read_to_string(rootfs.join("etc/motd")).unwrap(), "hello\n");
    assert_eq!(std::fs::metadata(rootfs.join("etc/motd")).unwrap().mode() & 0o7777, 0o640);
}

#[test]
fn skopeo_reads_layout_and_inspect_agrees() {
    let p = Project::new(0);
    let out = p.path().join("out");
    let j = p.build(&p.path().join("cache"), &out, &[]);
    let mut c = quarry();
    c.args(["inspect", "--json"]).arg(&out);
    let ins = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(ins["manifest_digest"], j["manifest_digest"]);
    assert_eq!(ins["layers"].as_array().unwrap().len(), 4);
    assert_eq!(ins["config"]["WorkingDir"], "/work");
    // An OCI archive inspects the same.
    let archive = p.path().join("img.oci.tar");
    run_expect(quarry().args(["export", "--format", "oci-archive", "-o"]).arg(&archive).arg(&out), 0);
    let ins2 = stdout_json(&run_expect(quarry().args(["inspect", "--json"]).arg(&archive), 0));
    assert_eq!(ins2["manifest_digest"], j["manifest_digest"]);
    if !have_tool("skopeo") {
        return;
    }
    let o = Command::new("skopeo").arg("inspect").arg(format!("oci:{}:latest", out.display())).output().unwrap();
    assert!(o.status.success(), "skopeo: {}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["Digest"], j["manifest_digest"]);
    assert_eq!(s["Layers"].as_array().unwrap().len(), 4);
    let o = Command::new("skopeo")
        .arg("inspect")
        .arg(format!("oci-archive:{}:latest", archive.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "skopeo oci-archive: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn docker_loads_the_docker_archive_and_runs_it() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let rootfs = debian_rootfs("");
    let p = Project::new(0);
    // Swap the tiny base for a real Debian rootfs so there is a shell.
    let img = std::fs::read_to_string(p.image()).unwrap().replace("../base.tar", &rootfs.display().to_string());
    std::fs::write(p.image(), img).unwrap();
    let out = p.path().join("out");
    p.build(&fixtures_dir().join("cache-core"), &out, &[]);
    let tag = format!("{}:t", unique("load"));
    let archive = p.path().join("docker.tar");
    run_expect(quarry().args(["export", "--format", "docker-archive", "--tag", &tag, "-o"]).arg(&archive).arg(&out), 0);
    let o = Command::new("docker").arg("load").arg("-i").arg(&archive).output().unwrap();
    assert!(o.status.success(), "docker load: {}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            &tag,
            "sh",
            "-c",
            "cat /etc/motd; stat -c %a /srv/tree/bin/suid-tool; ls /usr/share",
        ])
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "docker run: {}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.starts_with("hello\n4755\n"), "{stdout}");
    assert!(!stdout.lines().any(|l| l == "doc"), "usr/share/doc was removed by a whiteout: {stdout}");
    assert!(stdout.lines().any(|l| l == "keep") || stdout.lines().any(|l| l == "perl5"), "{stdout}");
}

#[test]
fn unchanged_rebuild_is_cached_and_a_change_rebuilds_from_that_layer() {
    let p = Project::new(0);
    let cache = p.path().join("cache");
    let first = p.build(&cache, &p.path().join("out"), &[]);
    assert!(layer_names_cached(&first).values().all(|c| !c), "{first:#}");
    let again = p.build(&cache, &p.path().join("out"), &[]);
    assert!(layer_names_cached(&again).values().all(|c| *c), "{again:#}");
    assert_eq!(first["manifest_digest"], again["manifest_digest"]);

    std::fs::write(p.path().join("input/etc/config"), "key = other\n").unwrap();
    let changed = p.build(&cache, &p.path().join("out"), &[]);
    let c = layer_names_cached(&changed);
    assert!(c["base"]);
    assert!(!c["tree"], "the changed layer is rebuilt");
    assert!(!c["motd"], "later layers are rebuilt");
    assert!(!c["cleanup"]);
    assert_ne!(changed["manifest_digest"], first["manifest_digest"]);
    // The motd layer's bytes do not depend on its parent: same digest again.
    let motd = |j: &serde_json::Value| {
        j["layers"].as_array().unwrap().iter().find(|l| l["name"] == "motd").unwrap()["digest"].clone()
    };
    assert_eq!(motd(&changed), motd(&first));
}

/// Run a failing build; return stderr. Checks the exit code and that the
/// cache holds no record, blob or temporary file.
fn failing_build(p: &Path, image: &Path) -> String {
    let cache = p.join("cache-bad");
    let out = p.join("out-bad");
    let o = run_expect(quarry().args(["build", "--cache-dir"]).arg(&cache).arg("-o").arg(&out).arg(image), 1);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out.exists(), "no output after a failed build");
    for sub in ["layers", "tmp"] {
        let d = cache.join(sub);
        if d.exists() {
            let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert!(left.is_empty(), "cache `{sub}` holds {left:?} after a failed build");
        }
    }
    stderr
}

fn malicious_tar(path: &Path, entries: &[(&str, tar::EntryType, &str)]) {
    // Raw header names: the tar crate's own setters refuse these paths.
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, kind, target) in entries {
        let mut h = tar::Header::new_ustar();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        let data: &[u8] = if *kind == tar::EntryType::Regular { b"payload" } else { b"" };
        h.set_size(data.len() as u64);
        if !target.is_empty() {
            h.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
        }
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.finish().unwrap();
}

#[test]
fn bad_input_is_refused_clearly_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let image = |name: &str, body: &str| -> PathBuf {
        let p = d.join("images").join(format!("{name}.toml"));
        write(&p, body);
        p
    };
    let archive_image = |name: &str, archive: &str, extra: &str| {
        image(name, &format!("name = \"{name}\"\nbase = \"scratch\"\n[[layer]]\nname = \"x\"\n[[layer.source]]\narchive = \"{archive}\"\ndest = \"/opt/x\"\n{extra}"))
    };

    let e = failing_build(
        d,
        &image(
            "missing",
            "name = \"m\"\nbase = \"scratch\"\n[[layer]]\nname = \"x\"\n[[layer.source]]\ndir = \"nope\"\n",
        ),
    );
    assert!(e.contains("missing.toml") && e.contains("layer[0].source[0].dir") && e.contains("nope"), "{e}");

    let e = failing_build(d, &image("malformed", "name = \"m\"\nbase = [\n"));
    assert!(e.contains("malformed.toml") && e.contains("line"), "{e}");

    let e = failing_build(d, &image("unknown-field", "name = \"m\"\nbase = \"scratch\"\ncolour = \"red\"\n"));
    assert!(e.contains("unknown-field.toml") && e.contains("colour"), "{e}");

    let e = failing_build(d, &image("unknown-layer", "name = \"m\"\nbase = \"scratch\"\nlayers = [\"nowhere\"]\n"));
    assert!(e.contains("unknown-layer.toml") && e.contains("layers[0]") && e.contains("nowhere"), "{e}");

    let e = failing_build(d, &image("unset", "name = \"m\"\nbase = { rootfs = \"${ROOTFS}\" }\n"));
    assert!(e.contains("base.rootfs") && e.contains("--set ROOTFS="), "{e}");

    // A default directory that does not exist: the error names the parameter to set.
    let e = failing_build(
        d,
        &image(
            "default-dir",
            "name = \"m\"\nbase = \"scratch\"\n[params]\nTREE = \"/nonexistent/tree\"\n[[layer]]\nname = \"t\"\n[[layer.source]]\ndir = \"${TREE}\"\ndest = \"/t\"\n",
        ),
    );
    assert!(e.contains("layer[0].source[0].dir") && e.contains("--set TREE=PATH"), "{e}");

    // A misspelt --set is an error with a suggestion, not silently ignored.
    let hello = repo().join("images/hello.toml");
    let o =
        run_expect(quarry().args(["build", "--json", "--set", "GREETNG=hi", "-o"]).arg(d.join("o-set")).arg(&hello), 1);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--set GREETNG") && e.contains("did you mean `GREETING`?"), "{e}");
    assert!(!d.join("o-set").exists());

    write(&d.join("images/ok.tar.payload"), "x");
    malicious_tar(&d.join("images/good.tar"), &[("f", tar::EntryType::Regular, "")]);
    let e = failing_build(d, &archive_image("pinned", "good.tar", &format!("sha256 = \"{}\"\n", "0".repeat(64))));
    assert!(e.contains("sha256 mismatch") && e.contains("good.tar") && e.contains(&"0".repeat(64)), "{e}");

    type Entries = Vec<(&'static str, tar::EntryType, &'static str)>;
    let cases: [(&str, Entries, &str); 4] = [
        ("dotdot", vec![("../../escape", tar::EntryType::Regular, "")], ".."),
        ("absolute", vec![("/etc/escape", tar::EntryType::Regular, "")], "absolute"),
        (
            "through-symlink",
            vec![("link", tar::EntryType::Symlink, "/tmp"), ("link/escape", tar::EntryType::Regular, "")],
            "symlink",
        ),
        ("hardlink-out", vec![("h", tar::EntryType::Link, "../../etc/passwd")], ".."),
    ];
    for (name, entries, needle) in cases {
        malicious_tar(&d.join(format!("images/{name}.tar")), &entries);
        let e = failing_build(d, &archive_image(name, &format!("{name}.tar"), ""));
        assert!(e.contains(&format!("{name}.tar")) && e.contains(needle), "{name}: {e}");
    }
    // A hardlink to a path that is not in the archive.
    malicious_tar(&d.join("images/hardlink-missing.tar"), &[("h", tar::EntryType::Link, "etc/passwd")]);
    let e = failing_build(d, &archive_image("hardlink-missing", "hardlink-missing.tar", ""));
    assert!(e.contains("hardlink") && e.contains("etc/passwd"), "{e}");
    assert!(!Path::new("/tmp/escape").exists() && !Path::new("/etc/escape").exists());
}
