//! Every shipped Debian image that installs packages ships its
//! `IMAGE.lock`, and the lock matches the definition (issue 26 item 10):
//! `quarry plan` of each, with the Debian mirror pointed at a host that does
//! not exist and an empty cache, must find every package set pinned (no
//! resolving, so no network) and know every layer's key. A missing lock
//! leaves a layer without a key (or makes the plan resolve, and fail); a
//! lock made for another package list is refused. The Ubuntu definitions
//! cannot be locked where no Ubuntu archive is reachable (docs/images-and-locks.md
//! says how a user locks them); they are listed, not checked.

mod common;

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
    let mut ubuntu = Vec::new();
    let mut defs: Vec<_> = std::fs::read_dir(repo().join("images"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    defs.sort();
    for def in defs.into_iter().filter(|d| installs_packages(d)) {
        let name = def.file_stem().unwrap().to_string_lossy().into_owned();
        if std::fs::read_to_string(&def).unwrap().contains("UBUNTU_MIRROR") {
            ubuntu.push(name);
            continue;
        }
        let lock = def.with_extension("lock");
        assert!(
            lock.is_file(),
            "images/{name}.toml installs packages but ships no lock: run `quarry lock images/{name}.toml`"
        );
        let out = quarry()
            .arg("plan")
            .arg(&def)
            .args(["--json", "--set", "DEBIAN_MIRROR=http://mirror.invalid/debian", "--cache-dir"])
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
            "rocm-runtime-debian13",
        ]
    );
    assert_eq!(ubuntu.len(), 5, "{ubuntu:?}");
}
