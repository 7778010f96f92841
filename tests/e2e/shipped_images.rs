//! The ten shipped test images (Debian 12 and Ubuntu 24.04: each base and
//! its `_media`, `_ocl_rt`, `_openmpi`, `_rocgdb` variants) as a GPU lab
//! uses them: built from their locks through the shared package cache,
//! loaded into the engine and run. The tester user has its tools (venv and
//! pip, cc, git lfs, sudo) and a home with the mode login.defs gives; dpkg
//! and apt find the database clean; fontconfig's caches are valid; and with
//! the network, `apt-get install hello` works (the image's apt sources,
//! pockets and keyring). And `no_rocm_image_ubuntu24_04`, the image the
//! project is named after: locked afresh, then built cold in two caches with
//! no engine reachable, one digest.
use crate::common;

use common::provenance::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const VARIANTS: [&str; 5] = ["", "_media", "_ocl_rt", "_openmpi", "_rocgdb"];

fn build(def: &Path, cache: &Path, out: &Path) -> serde_json::Value {
    let mut c = quarry();
    c.arg("build").arg(def).arg("--cache-dir").arg(cache).arg("-o").arg(out).arg("--json").args(mirror_sets(def));
    stdout_json(&run_expect(&mut c, 0))
}

struct RemoveImage(String);
impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn docker_run(args: &[&str], script: &str) -> String {
    let o = run_expect(Command::new("docker").args(["run", "--rm"]).args(args).args(["sh", "-ec", script]), 0);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What the tester user checks first, one answer per line.
const PROBE: &str = r#"
sudo -n true && echo sudo-ok
python3 -m venv /tmp/v && /tmp/v/bin/pip --version | cut -d' ' -f1
printf 'int main(void) { return 0; }\n' > /tmp/t.c && cc -o /tmp/t /tmp/t.c && /tmp/t && echo cc-ok
git lfs version | cut -d/ -f1
stat -c %a "$HOME"
sed -n 's/^HOME_MODE[[:space:]]*//p' /etc/login.defs | grep . || echo none
sudo -n dpkg --audit && echo audit-clean
sudo -n apt-get check -q >/dev/null && echo apt-clean
if command -v fc-cache >/dev/null; then fc-cache -v 2>/dev/null | grep -c ': caching,' || true; else echo 0; fi
"#;

/// Build, load and probe one distribution's five images; `home` is the
/// mode its login.defs gives homes (`HOME_MODE`, or what `UMASK` leaves).
fn probe_family(distro: &str, home: &str, home_mode_line: &str) {
    let work = tempfile::Builder::new().prefix("shipped-").tempdir_in(test_cache()).unwrap();
    let mut report = Vec::new();
    for v in VARIANTS {
        let name = format!("no_rocm_image_{distro}{v}");
        let def = repo().join("images").join(format!("{name}.toml"));
        let out = work.path().join(&name);
        build(&def, &packages_cache(), &out);
        let tag = format!("{}:t", unique(&name.replace('_', "-")));
        let _cleanup = RemoveImage(tag.clone());
        run_expect(quarry().args(["load", "--tag", &tag]).arg(&out), 0);
        let got = docker_run(&["--network", "none", &tag], PROBE);
        let want = ["sudo-ok", "pip", "cc-ok", "git-lfs", home, home_mode_line, "audit-clean", "apt-clean", "0"];
        if got.lines().collect::<Vec<_>>() != want {
            report.push(format!("{name}: the tester's probe gave\n{got}\nwanted\n{}", want.join("\n")));
        }
        // As root, with the network: the image's own apt sources and keyring.
        let hello = docker_run(
            &["--user", "root", &tag],
            "apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hello >/dev/null && hello",
        );
        if hello != "Hello, world!\n" {
            report.push(format!("{name}: apt-get install hello gave {hello:?}"));
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(report.is_empty(), "{}", report.join("\n\n"));
    assert_eq!(leaked_quarry_containers(), Vec::<String>::new(), "no quarry container is left");
}

#[test]
fn debian12_images_work_as_a_lab_uses_them() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    // Debian 12's login.defs sets UMASK 022 and no HOME_MODE: 0755.
    probe_family("debian12", "755", "none");
}

#[test]
fn ubuntu24_04_images_work_as_a_lab_uses_them() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    probe_family("ubuntu24_04", "750", "0750");
}

#[test]
fn ubuntu24_04_locks_and_builds_cold_twice_the_same_without_an_engine() {
    if !have_tool("gpgv") {
        return;
    }
    let work = tempfile::Builder::new().prefix("ubuntu-cold-").tempdir_in(test_cache()).unwrap();
    let def = work.path().join("no_rocm_image_ubuntu24_04.toml");
    std::fs::copy(repo().join("images/no_rocm_image_ubuntu24_04.toml"), &def).unwrap();
    let caches: Vec<PathBuf> = ["a", "b"].iter().map(|c| work.path().join(format!("cache-{c}"))).collect();
    // Locked afresh: the keyring package is fetched and checked by quarry,
    // every pocket's InRelease verified with it.
    let mut lock = quarry();
    lock.arg("lock").arg(&def).arg("--cache-dir").arg(&caches[0]).arg("--json").args(mirror_sets(&def));
    let locked = stdout_json(&run_expect(&mut lock, 0));
    let releases = locked["releases"].as_object().unwrap();
    assert_eq!(releases.keys().collect::<Vec<_>>(), ["noble", "noble-security", "noble-updates"], "{locked}");
    let text = std::fs::read_to_string(def.with_extension("lock")).unwrap();
    let pins: toml::Value = toml::from_str(&text).unwrap();
    let packages = pins["base"]["package"].as_array().unwrap();
    let from = |s: &str| packages.iter().filter(|p| p["suite"].as_str() == Some(s)).count();
    assert!(from("noble-security") > 0 && from("noble") > 0, "the pockets give packages: {text}");
    assert!(packages.iter().any(|p| p["name"].as_str() == Some("apt")), "apt is in the image");

    let digests: Vec<(String, Vec<u8>)> = caches
        .iter()
        .enumerate()
        .map(|(i, cache)| {
            let mut c = quarry();
            c.arg("build").arg(&def).arg("--cache-dir").arg(cache).arg("-o").arg(work.path().join(format!("out-{i}")));
            c.args(["--json"]).args(mirror_sets(&def)).env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
            let built = stdout_json(&run_expect(&mut c, 0));
            assert_eq!(built["layers"][0]["cached"], false, "a cold build: {built}");
            let statement = provenance_of(&work.path().join(format!("out-{i}")), &built);
            (built["manifest_digest"].as_str().unwrap().to_string(), statement)
        })
        .collect();
    assert_eq!(digests[0].0, digests[1].0, "two cold builds of one lock in two caches differ");
    assert!(digests[0].1 == digests[1].1, "two cold builds of one lock in two caches gave different provenance");
    check_with_in_toto_models(&digests[0].1, work.path());
    assert_lists_every_locked_deb(&digests[0].1, &text);
}
