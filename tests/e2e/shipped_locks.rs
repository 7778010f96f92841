//! Every shipped Debian image that installs packages ships its
//! `IMAGE.lock`, and the lock matches the definition:
//! `quarry plan` of each, with the Debian mirror pointed at a host that does
//! not exist and an empty cache, must find every package set pinned (no
//! resolving, so no network) and know every layer's key. A missing lock
//! leaves a layer without a key (or makes the plan resolve, and fail); a
//! lock made for another package list is refused. The Ubuntu images too,
//! with their mirrors pointed at hosts that do not exist.

use crate::common;

use common::*;

/// The definition, or a layer file it names, installs Debian/Ubuntu packages.
fn installs_packages(def: &std::path::Path) -> bool {
    let text = std::fs::read_to_string(def).unwrap();
    let mut texts = vec![text.clone()];
    let doc: toml::Table = text.parse().unwrap();
    for name in doc.get("layers").and_then(|l| l.as_array()).into_iter().flatten() {
        let f = repo().join("layers").join(format!("{}.toml", name.as_str().unwrap()));
        texts.push(std::fs::read_to_string(f).unwrap());
    }
    texts.iter().any(|t| t.contains("base.packages]") || t.contains("source.packages]"))
}

#[test]
fn every_shipped_debian_image_with_packages_is_locked_and_current() {
    let cache = tempfile::tempdir().unwrap();
    let mut checked = Vec::new();
    let mut defs: Vec<_> = std::fs::read_dir(repo().join("images"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    defs.sort();
    for def in defs.into_iter().filter(|d| installs_packages(d)) {
        let name = def.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&def).unwrap();
        let mut sets = vec!["--set".to_string(), "DEBIAN_MIRROR=http://mirror.invalid/debian".to_string()];
        if text.contains("UBUNTU_MIRROR") {
            sets.extend(["--set".to_string(), "UBUNTU_MIRROR=http://mirror.invalid/ubuntu".to_string()]);
        }
        let lock = def.with_extension("lock");
        assert!(
            lock.is_file(),
            "images/{name}.toml installs packages but ships no lock: run `quarry lock images/{name}.toml`"
        );
        let out = quarry()
            .arg("plan")
            .arg(&def)
            .arg("--json")
            .args(&sets)
            .arg("--cache-dir")
            .arg(cache.path())
            .env("http_proxy", "http://127.0.0.1:9")
            .env("https_proxy", "http://127.0.0.1:9")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "images/{name}.lock does not match the definition (run `quarry lock images/{name}.toml`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plan = stdout_json(&out);
        for layer in plan["layers"].as_array().unwrap() {
            assert!(
                layer["key"].is_string(),
                "images/{name}: layer `{}` is not pinned by the lock ({}); run `quarry lock images/{name}.toml`",
                layer["name"],
                layer["note"]
            );
        }
        checked.push(name);
    }
    assert_eq!(
        checked,
        [
            "hip-builder-debian13",
            "no_rocm_image_debian12",
            "no_rocm_image_debian12_media",
            "no_rocm_image_debian12_ocl_rt",
            "no_rocm_image_debian12_openmpi",
            "no_rocm_image_debian12_rocgdb",
            "no_rocm_image_ubuntu24_04",
            "no_rocm_image_ubuntu24_04_media",
            "no_rocm_image_ubuntu24_04_ocl_rt",
            "no_rocm_image_ubuntu24_04_openmpi",
            "no_rocm_image_ubuntu24_04_rocgdb",
            "rocm-runtime-debian13",
        ]
    );
}

/// The host names of the mirrors and indexes this machine's own
/// configuration gives quarry (so the test names none itself): the
/// Debian and Ubuntu archives the shipped images resolve to with `mirror =
/// "host"`, and pip's index with its file host.
fn mirror_hosts() -> Vec<String> {
    let host_of = |url: &str| url.split("://").nth(1).and_then(|r| r.split('/').next()).map(String::from);
    let mut hosts = Vec::new();
    for image in ["no_rocm_image_debian12.toml", "no_rocm_image_ubuntu24_04.toml"] {
        let out =
            quarry().args(["lock", "--dry-run", "--json"]).arg(repo().join("images").join(image)).output().unwrap();
        assert!(
            out.status.success() || !in_ci(),
            "{image}: no mirror for `host` here ({}); .ci/run installs debootstrap",
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            let v = stdout_json(&out);
            hosts.extend(v["releases"].as_array().unwrap().iter().filter_map(|r| host_of(r.as_str().unwrap())));
        }
    }
    let pip = std::process::Command::new("python3")
        .args(["-c", "from pip._internal.models.index import PyPI; print(PyPI.url); print('https://' + PyPI.file_storage_domain)"])
        .output()
        .unwrap();
    assert!(pip.status.success(), "python3 -m pip is needed");
    hosts.extend(String::from_utf8_lossy(&pip.stdout).lines().filter_map(host_of));
    hosts.sort();
    hosts.dedup();
    hosts
}

#[test]
fn no_tracked_file_names_a_mirror_host() {
    let hosts = mirror_hosts();
    assert!(hosts.len() >= 3 || !in_ci(), "{hosts:?}");
    let files = std::process::Command::new("git").arg("-C").arg(repo()).args(["ls-files", "-z"]).output().unwrap();
    assert!(files.status.success(), "git ls-files");
    let mut named = Vec::new();
    for f in files.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let path = repo().join(String::from_utf8_lossy(f).as_ref());
        let Ok(text) = std::fs::read(&path) else { continue };
        let text = String::from_utf8_lossy(&text);
        for h in hosts.iter().filter(|h| text.contains(h.as_str())) {
            named.push(format!("{}: {h}", path.display()));
        }
    }
    assert!(
        named.is_empty(),
        "tracked files name a mirror's host (use `host`, a parameter or the user's config):\n{}",
        named.join("\n")
    );
}
