//! A rendered Dockerfile builds with Docker 20.10's classic builder
//! (DOCKER_BUILDKIT=0: no `COPY --chmod`) and gives the tree quarry's own
//! build gives: a quarry-built Debian base is loaded into the engine, a
//! definition with files, modes, a directory, a step run as another user
//! and files after it is rendered, `docker build` runs, and the two images'
//! filesystems (read back through `docker export`) are compared entry by
//! entry: path, type, mode, owner, contents, link target.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

struct Cleanup {
    images: Vec<String>,
    containers: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = Command::new("docker").args(["rm", "-f", c]).output();
        }
        for i in &self.images {
            let _ = Command::new("docker").args(["rmi", "-f", i]).output();
        }
    }
}

/// Every entry of an image's filesystem: path -> (type, mode, uid:gid, contents digest or link).
fn tree_of(image: &str, cleanup: &mut Cleanup) -> BTreeMap<String, String> {
    let out = run_expect(
        Command::new("docker").args(["create", "--label", "io.quarry.test=dockerfile", image, "/bin/true"]),
        0,
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    cleanup.containers.push(id.clone());
    let mut child = Command::new("docker").args(["export", &id]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut archive = tar::Archive::new(child.stdout.take().unwrap());
    let mut tree = BTreeMap::new();
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let h = e.header().clone();
        let path = e.path().unwrap().to_string_lossy().trim_end_matches('/').to_string();
        // Written by the engine into every container.
        if [".dockerenv", "etc/hostname", "etc/hosts", "etc/resolv.conf", "dev", "proc", "sys"]
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")))
        {
            continue;
        }
        let what = match h.entry_type() {
            tar::EntryType::Regular => {
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                format!("file {}", quarry::oci::digest::sha256_hex(&data))
            }
            tar::EntryType::Symlink => format!("link {}", h.link_name().unwrap().unwrap().display()),
            tar::EntryType::Link => format!("hardlink {}", h.link_name().unwrap().unwrap().display()),
            other => format!("{other:?}"),
        };
        let mode = h.mode().unwrap() & 0o7777;
        tree.insert(path, format!("{what} {mode:04o} {}:{}", h.uid().unwrap(), h.gid().unwrap()));
    }
    assert!(child.wait().unwrap().success(), "docker export {image} failed");
    tree
}

#[test]
fn rendered_dockerfile_builds_with_the_classic_builder_and_matches_quarrys_image() {
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let ctx = &work.path().join("context");
    let outside = work.path().join("layouts");
    let cache = fixtures_dir().join("engine-cache");
    let mut cleanup = Cleanup { images: Vec::new(), containers: Vec::new() };

    // The base: a Debian rootfs built by quarry and loaded under the name
    // the rendered `FROM` of an `oci` base uses (the layout's directory name).
    let base_name = unique("dfbase");
    write(
        &outside.join("base.toml"),
        &format!("name = \"dfbase\"\nbase = {{ rootfs = \"{}\" }}\n", debian_rootfs("").display()),
    );
    let base_layout = outside.join(&base_name);
    run_expect(
        quarry()
            .env("QUARRY_CACHE", &cache)
            .arg("build")
            .arg(outside.join("base.toml"))
            .arg("-o")
            .arg(&base_layout)
            .arg("--quiet"),
        0,
    );
    let base_tag = format!("{base_name}:latest");
    cleanup.images.push(base_tag.clone());
    run_expect(quarry().env("QUARRY_CACHE", &cache).arg("load").arg(&base_layout).args(["--tag", &base_tag]), 0);

    // Inputs: files whose context modes differ from the wanted ones.
    write(&ctx.join("files/tool.sh"), "#!/bin/sh\necho tool\n");
    write(&ctx.join("files/secret.txt"), "secret\n");
    write(&ctx.join("files/motd.txt"), "hello\n");
    write(&ctx.join("tree/bin/run"), "#!/bin/sh\nexit 0\n");
    write(&ctx.join("tree/share/doc.txt"), "doc\n");
    for (f, m) in [
        ("files/tool.sh", 0o644),
        ("files/secret.txt", 0o644),
        ("files/motd.txt", 0o664),
        ("tree/bin/run", 0o755),
        ("tree/share/doc.txt", 0o644),
    ] {
        std::fs::set_permissions(ctx.join(f), std::fs::Permissions::from_mode(m)).unwrap();
    }
    for d in ["tree", "tree/bin", "tree/share"] {
        std::fs::set_permissions(ctx.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let def = ctx.join("img.toml");
    write(
        &def,
        &format!(
            r#"name = "dfimg"
base = {{ oci = "{}" }}
[config]
user = "nobody"
workdir = "/tmp"
[[layer]]
name = "files"
[[layer.source]]
file = "files/tool.sh"
dest = "/usr/local/bin/tool"
mode = "0755"
[[layer.source]]
file = "files/secret.txt"
dest = "/etc/quarry/"
mode = "0600"
[[layer.source]]
dir = "tree"
dest = "/opt/tree"
[[layer]]
name = "as-nobody"
[layer.run]
user = "nobody"
script = "mkdir -p /tmp/by-nobody && echo made > /tmp/by-nobody/note && chmod 0750 /tmp/by-nobody"
[[layer]]
name = "after-the-step"
[[layer.source]]
file = "files/motd.txt"
dest = "/etc/motd"
mode = "0644"
"#,
            base_layout.display()
        ),
    );

    let out = run_expect(quarry().arg("dockerfile").arg(&def).arg("--context").arg(ctx), 0);
    let dockerfile = String::from_utf8(out.stdout).unwrap();
    assert!(!dockerfile.contains("--chmod"), "{dockerfile}");
    assert!(dockerfile.contains(r#"RUN ["chmod", "0755", "/usr/local/bin/tool"]"#), "{dockerfile}");
    assert!(dockerfile.contains(r#"RUN ["chmod", "0600", "/etc/quarry/secret.txt"]"#), "{dockerfile}");
    std::fs::write(ctx.join("Dockerfile"), &dockerfile).unwrap();

    let docker_tag = format!("{}:latest", unique("dfdocker"));
    cleanup.images.push(docker_tag.clone());
    let built = Command::new("docker")
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "-q", "-t", &docker_tag, "-f"])
        .arg(ctx.join("Dockerfile"))
        .arg(ctx)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "classic `docker build` failed:\n{}\n--- Dockerfile:\n{dockerfile}",
        String::from_utf8_lossy(&built.stderr)
    );

    let quarry_tag = format!("{}:latest", unique("dfquarry"));
    cleanup.images.push(quarry_tag.clone());
    let layout = outside.join("quarry-out");
    run_expect(quarry().env("QUARRY_CACHE", &cache).arg("build").arg(&def).arg("-o").arg(&layout).arg("--quiet"), 0);
    run_expect(quarry().env("QUARRY_CACHE", &cache).arg("load").arg(&layout).args(["--tag", &quarry_tag]), 0);

    let theirs = tree_of(&docker_tag, &mut cleanup);
    let ours = tree_of(&quarry_tag, &mut cleanup);
    for (path, want) in [
        ("usr/local/bin/tool", "0755 0:0"),
        ("etc/quarry/secret.txt", "0600 0:0"),
        ("etc/motd", "0644 0:0"),
        ("opt/tree/bin/run", "0755 0:0"),
        ("tmp/by-nobody", "0750 65534:65534"),
    ] {
        let got = ours.get(path).unwrap_or_else(|| panic!("{path} missing from quarry's image"));
        assert!(got.ends_with(want), "{path}: {got}, want {want}");
    }
    let differ: Vec<String> = theirs
        .keys()
        .chain(ours.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|p| theirs.get(*p) != ours.get(*p))
        .map(|p| format!("{p}: docker {:?} / quarry {:?}", theirs.get(p), ours.get(p)))
        .collect();
    assert!(differ.is_empty(), "the two images differ:\n{}", differ.join("\n"));
    let config = run_expect(
        Command::new("docker").args(["inspect", "-f", "{{.Config.User}} {{.Config.WorkingDir}}", &docker_tag]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&config.stdout).trim(), "nobody /tmp");
    assert!(Path::new(&layout).join("index.json").exists());
}
