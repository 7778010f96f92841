//! `[base.packages]` against a small archive made here: a few .deb files,
//! a Packages index, a Release file clearsigned with a key made for the
//! test, all served over HTTP on 127.0.0.1. Hermetic and fast: it checks the
//! lock, the dpkg database and every refusal (bad signature, missing
//! package, unsatisfiable chain, tampered cache, pin no longer served), and
//! a release with its security pocket (`pockets_*`).
use crate::common;

use common::deb_archive::{self, sha256, Archive, Pkg};
use common::*;
use std::path::{Path, PathBuf};

/// The archive: `app` -> `mid` -> `libx (>= 1)`; `top` -> `old` -> `libx (<< 1)`
/// (unsatisfiable: the index has libx 1.2 only); `base-tool` is Essential.
fn archive() -> Option<Archive> {
    let pkg = |name, version, extra, files| Pkg { name, version, extra, members: &[], files };
    deb_archive::archive(&[
        pkg(
            "app",
            "1.0",
            "Depends: mid\n",
            &[("./bin/app", b"#!/bin/sh\necho app\n", 0o755), ("./etc/app.conf", b"x=1\n", 0o644)],
        ),
        pkg("mid", "2.0", "Depends: libx (>= 1) | libother\n", &[("./usr/share/mid/README", b"mid\n", 0o644)]),
        pkg("libx", "1.2", "", &[("./usr/lib/libx.txt", b"libx\n", 0o644)]),
        pkg("old", "1", "Depends: libx (<< 1)\n", &[("./usr/share/old", b"old\n", 0o644)]),
        pkg("top", "1", "Depends: old\n", &[("./usr/share/top", b"top\n", 0o644)]),
        pkg("base-tool", "3", "Essential: yes\n", &[("./sbin/base-tool", b"tool\n", 0o755)]),
    ])
}

impl Archive {
    /// An image definition in its own directory (the lock goes beside it).
    fn image(&self, name: &str, include: &[&str], keyring: &Path) -> PathBuf {
        let dir = self.root.path().join(name);
        let file = dir.join("image.toml");
        let include: Vec<String> = include.iter().map(|i| format!("\"{i}\"")).collect();
        write(
            &file,
            &format!(
                "name = \"{name}\"\n[base.packages]\nsuite = \"test\"\nmirror = \"{}\"\nkeyring = \"{}\"\ninclude = [{}]\n[config]\nplatform = \"linux/amd64\"\n",
                self.url,
                keyring.display(),
                include.join(", ")
            ),
        );
        file
    }

    fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    fn www(&self) -> PathBuf {
        self.root.path().join("www")
    }
}

fn lock(img: &Path, cache: &Path, code: i32) -> std::process::Output {
    run_expect(
        quarry()
            .arg("lock")
            .arg(img)
            .arg("--cache-dir")
            .arg(cache)
            .env("no_proxy", "127.0.0.1")
            .env("NO_PROXY", "127.0.0.1"),
        code,
    )
}

fn build(img: &Path, cache: &Path, out: &Path, code: i32) -> std::process::Output {
    run_expect(
        quarry()
            .arg("build")
            .arg(img)
            .arg("--cache-dir")
            .arg(cache)
            .arg("-o")
            .arg(out)
            .arg("--no-cache")
            .arg("--json")
            .env("no_proxy", "127.0.0.1")
            .env("NO_PROXY", "127.0.0.1"),
        code,
    )
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// path -> (type, content) of the single layer of a built image.
fn layer_entries(
    out: &Path,
    built: &serde_json::Value,
) -> std::collections::BTreeMap<String, (tar::EntryType, Vec<u8>)> {
    deb_archive::layer_entries(out, built, 0)
}

#[test]
fn lock_build_and_dpkg_database() {
    let Some(a) = archive() else { return };
    let img = a.image("ok", &["app"], &a.keyring);
    let o = lock(&img, &a.cache(), 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("4 packages pinned"), "{o:?}");
    let lock_text = std::fs::read_to_string(img.with_extension("lock")).unwrap();
    let lock: toml::Value = toml::from_str(&lock_text).unwrap();
    let lock = &lock["base"];
    let names: Vec<&str> = lock["package"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    // The Essential package comes along; `top`/`old` do not.
    assert_eq!(names, ["app", "base-tool", "libx", "mid"]);
    let inrelease = std::fs::read(a.www().join("dists/test/InRelease")).unwrap();
    assert_eq!(lock["release"]["test"].as_str().unwrap(), format!("sha256:{}", sha256(&inrelease)));
    assert!(!lock_text.contains("127.0.0.1"), "the lock records no mirror");

    let out = a.root.path().join("out-ok");
    let built = stdout_json(&build(&img, &a.cache(), &out, 0));
    let files = layer_entries(&out, &built);
    let status = String::from_utf8_lossy(&files["var/lib/dpkg/status"].1).into_owned();
    let paragraphs: Vec<&str> = status.split("\n\n").filter(|p| !p.trim().is_empty()).collect();
    assert_eq!(paragraphs.len(), 4, "{status}");
    for (p, n) in paragraphs.iter().zip(["app", "base-tool", "libx", "mid"]) {
        assert!(
            p.starts_with(&format!("Package: {n}\n")) && p.contains("\nStatus: install ok installed\n"),
            "{status}"
        );
    }
    assert!(paragraphs[1].contains("\nEssential: yes\n"), "{status}");
    // Merged /usr: the package's /bin/app lands in /usr/bin, /bin is a link.
    assert_eq!(files["bin"].0, tar::EntryType::Symlink);
    assert_eq!(files["bin"].1, b"usr/bin");
    assert_eq!(files["usr/bin/app"].1, b"#!/bin/sh\necho app\n");
    assert!(files.contains_key("usr/sbin/base-tool"));
    // dpkg's file lists keep the paths as the package ships them.
    let list = String::from_utf8_lossy(&files["var/lib/dpkg/info/app.list"].1).into_owned();
    assert!(list.lines().any(|l| l == "/bin/app"), "{list}");
    assert_eq!(String::from_utf8_lossy(&files["var/lib/dpkg/arch"].1), "amd64\n");

    // The lock is used as it is: resolving again would find no difference,
    // so prove it by serving a changed index; the build does not read it.
    std::fs::write(a.www().join("dists/test/InRelease"), b"garbage").unwrap();
    let again = stdout_json(&build(&img, &a.cache(), &a.root.path().join("out-ok2"), 0));
    assert_eq!(again["manifest_digest"], built["manifest_digest"], "same lock, same image");
}

#[test]
fn pinned_file_no_longer_served_and_tampered_cache() {
    let Some(a) = archive() else { return };
    let img = a.image("pins", &["app"], &a.keyring);
    lock(&img, &a.cache(), 0);
    let out = a.root.path().join("out");
    build(&img, &a.cache(), &out, 0);

    // A tampered .deb in the cache is caught by its sha256 (and removed).
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    let app = lock["base"]["package"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("app")).unwrap();
    let cached = a.cache().join("debs").join(app["sha256"].as_str().unwrap());
    let mut bytes = std::fs::read(&cached).unwrap();
    bytes.push(0);
    std::fs::write(&cached, &bytes).unwrap();
    let e = stderr(&build(&img, &a.cache(), &out, 1));
    assert!(
        e.contains("sha256 mismatch")
            && e.contains(&cached.display().to_string())
            && e.contains(app["sha256"].as_str().unwrap()),
        "{e}"
    );
    assert!(!cached.exists(), "the bad entry is removed");
    // The next build downloads it again.
    build(&img, &a.cache(), &out, 0);

    // A pinned file the mirror no longer serves: a clear error, not a re-resolve.
    std::fs::remove_file(a.www().join("pool/main/app_1.0_amd64.deb")).unwrap();
    std::fs::remove_file(&cached).unwrap();
    let e = stderr(&build(&img, &a.cache(), &out, 1));
    assert!(
        e.contains("pool/main/app_1.0_amd64.deb")
            && e.contains("app 1.0 from suite `test`")
            && e.contains("no longer serves")
            && e.contains("quarry lock"),
        "{e}"
    );
}

#[test]
fn refusals_name_what_is_wrong() {
    let Some(a) = archive() else { return };
    // A package missing from the index.
    let e = stderr(&lock(&a.image("missing", &["nope"], &a.keyring), &a.cache(), 1));
    assert!(e.contains("`nope` is not in the index"), "{e}");
    // An unsatisfiable dependency names the chain.
    let e = stderr(&lock(&a.image("chain", &["top"], &a.keyring), &a.cache(), 1));
    assert!(e.contains("top -> old") && e.contains("libx (<< 1)") && e.contains("1.2"), "{e}");
    // Signed by a key that is not in the keyring.
    let e = stderr(&lock(&a.image("otherkey", &["app"], &a.other_keyring), &a.cache(), 1));
    assert!(e.contains("bad signature") && e.contains("InRelease"), "{e}");
    // A build without a lock resolves, so it refuses the same way.
    let e = stderr(&build(&a.image("otherkey2", &["app"], &a.other_keyring), &a.cache(), &a.root.path().join("o"), 1));
    assert!(e.contains("bad signature"), "{e}");
    // The configure step runs in a container: this synthetic archive has no
    // shell or dpkg, so the step fails clearly, naming it (when an engine runs).
    if have_docker() {
        let img = a.image("configure", &["app"], &a.keyring);
        let def = std::fs::read_to_string(&img).unwrap().replace("include =", "configure = true\ninclude =");
        std::fs::write(&img, def).unwrap();
        let e = stderr(&build(&img, &a.cache(), &a.root.path().join("o3"), 1));
        assert!(e.contains("layer `configure`"), "{e}");
    }
    // Signed text changed after signing.
    let inrelease = a.www().join("dists/test/InRelease");
    let text = std::fs::read_to_string(&inrelease).unwrap();
    std::fs::write(&inrelease, text.replace("Origin: quarry-test", "Origin: quarry-tesT")).unwrap();
    let e = stderr(&lock(&a.image("tampered", &["app"], &a.keyring), &a.cache(), 1));
    assert!(e.contains("bad signature"), "{e}");
    // A lock that does not answer the definition any more.
    std::fs::write(&inrelease, text).unwrap();
    let img = a.image("stale", &["app"], &a.keyring);
    lock(&img, &a.cache(), 0);
    let def = std::fs::read_to_string(&img).unwrap().replace("[\"app\"]", "[\"app\", \"top\"]");
    std::fs::write(&img, def).unwrap();
    let e = stderr(&build(&img, &a.cache(), &a.root.path().join("o2"), 1));
    assert!(e.contains("image.lock") && e.contains("`include`") && e.contains("quarry lock"), "{e}");
}

#[test]
fn proxy_from_the_environment_is_used() {
    let Some(a) = archive() else { return };
    let img = a.image("proxy", &["app"], &a.keyring);
    let mut c = quarry();
    c.arg("lock").arg(&img).arg("--cache-dir").arg(a.cache());
    for v in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
        c.env(v, "http://127.0.0.1:9");
    }
    c.env_remove("no_proxy").env_remove("NO_PROXY");
    // The mirror is reachable, the proxy (a closed port) is not: going
    // through the proxy must fail...
    let e = stderr(&run_expect(&mut c, 1));
    assert!(e.contains(&a.url) && e.contains("proxy"), "{e}");
    // ...and `no_proxy` exempts the mirror.
    run_expect(c.env("no_proxy", "127.0.0.1"), 0);
}

impl Archive {
    /// An image with a packages base including `base` and a packages layer
    /// `tools` (in `layers/tools.toml`) including `layer`.
    fn layered(&self, name: &str, base: &[&str], layer: &[&str], layer_extra: &str) -> PathBuf {
        let img = self.image(name, base, &self.keyring);
        let def = std::fs::read_to_string(&img).unwrap().replacen('\n', "\nlayers = [\"tools\"]\n", 1);
        std::fs::write(&img, def).unwrap();
        let list: Vec<String> = layer.iter().map(|i| format!("\"{i}\"")).collect();
        write(
            &img.parent().unwrap().join("layers/tools.toml"),
            &format!(
                "name = \"tools\"\n[[source]]\n[source.packages]\nsuite = \"test\"\nmirror = \"{}\"\nkeyring = \"{}\"\ninclude = [{}]\n{layer_extra}",
                self.url,
                self.keyring.display(),
                list.join(", ")
            ),
        );
        img
    }

    fn take_requests(&self) -> Vec<String> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }
}

fn paragraphs(status: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(status).split("\n\n").filter(|p| !p.trim().is_empty()).map(|p| format!("{p}\n")).collect()
}

#[test]
fn packages_layer_adds_only_what_the_layers_below_lack() {
    let Some(a) = archive() else { return };
    let img = a.layered("layered", &["libx"], &["app"], "");
    let o = lock(&img, &a.cache(), 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("layer tools: 2"), "{o:?}");
    let pins: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    let names = |v: &toml::Value| -> Vec<String> {
        v["package"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(&pins["base"]), ["base-tool", "libx"]);
    // libx is installed below: the layer pins only what is missing.
    assert_eq!(names(&pins["layer"]["tools"]), ["app", "mid"]);
    assert!(pins["layer"]["tools"]["below"].as_str().unwrap().starts_with("sha256:"), "{pins}");
    assert!(pins["layer"]["tools"].get("variant").is_none());

    // The locked build reads no index and downloads only the layer's packages.
    a.take_requests();
    let out = a.root.path().join("out-layered");
    let built = stdout_json(&build(&img, &a.cache(), &out, 0));
    let mut asked = a.take_requests();
    asked.sort();
    assert_eq!(asked, ["pool/main/app_1.0_amd64.deb", "pool/main/mid_2.0_amd64.deb"]);
    let layer_names: Vec<&str> =
        built["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(layer_names, ["base", "tools"]);

    let base = deb_archive::layer_entries(&out, &built, 0);
    let files = deb_archive::layer_entries(&out, &built, 1);
    for p in [
        "usr/bin/app",
        "etc/app.conf",
        "usr/share/mid/README",
        "var/lib/dpkg/info/app.list",
        "var/lib/dpkg/info/mid.list",
    ] {
        assert!(files.contains_key(p), "the layer lacks {p}: {:?}", files.keys());
    }
    // Nothing of the base again, and never a directory over its /bin link.
    for p in ["usr/lib/libx.txt", "var/lib/dpkg/info/libx.list", "usr/sbin/base-tool", "bin", "var/lib/dpkg/arch"] {
        assert!(!files.contains_key(p), "the layer holds {p}");
    }
    assert_eq!(base["bin"].0, tar::EntryType::Symlink);
    // The merged database: the base's entries as they were plus the new ones, sorted.
    let below = paragraphs(&base["var/lib/dpkg/status"].1);
    let merged = paragraphs(&files["var/lib/dpkg/status"].1);
    let first_lines: Vec<&str> = merged.iter().map(|p| p.lines().next().unwrap()).collect();
    assert_eq!(first_lines, ["Package: app", "Package: base-tool", "Package: libx", "Package: mid"]);
    assert_eq!([merged[1].clone(), merged[2].clone()], [below[0].clone(), below[1].clone()]);
    assert!(merged[0].contains("\nStatus: install ok installed\n"), "{}", merged[0]);
    let list = String::from_utf8_lossy(&files["var/lib/dpkg/info/app.list"].1).into_owned();
    assert!(list.lines().any(|l| l == "/bin/app"), "{list}");

    // Same inputs, same layer and image.
    let again = stdout_json(&build(&img, &a.cache(), &a.root.path().join("out-layered2"), 0));
    assert_eq!(again["layers"][1]["digest"], built["layers"][1]["digest"]);
    assert_eq!(again["manifest_digest"], built["manifest_digest"]);

    // A lock made over other packages below is refused, not trusted.
    let text = std::fs::read_to_string(img.with_extension("lock")).unwrap();
    let below_digest = pins["layer"]["tools"]["below"].as_str().unwrap();
    std::fs::write(img.with_extension("lock"), text.replace(below_digest, &format!("sha256:{}", "0".repeat(64))))
        .unwrap();
    let e = stderr(&build(&img, &a.cache(), &a.root.path().join("out-layered3"), 1));
    assert!(e.contains("layer `tools`") && e.contains("dpkg status changed") && e.contains("quarry lock"), "{e}");
}

#[test]
fn packages_layer_refusals_name_the_chain() {
    let Some(a) = archive() else { return };
    // top -> old needs libx (<< 1); the base has libx 1.2, which a layer does not replace.
    let img = a.layered("unsat", &["libx"], &["top"], "");
    let e = stderr(&lock(&img, &a.cache(), 1));
    assert!(
        e.contains("layer `tools`")
            && e.contains("top -> old")
            && e.contains("`libx` 1.2 is installed in the layers below"),
        "{e}"
    );
    // A build without a lock resolves the same way.
    let e = stderr(&build(&img, &a.cache(), &a.root.path().join("o"), 1));
    assert!(e.contains("top -> old"), "{e}");
    let e = stderr(&lock(&a.layered("other-version", &["libx"], &["libx=0.9"], ""), &a.cache(), 1));
    assert!(e.contains("`libx` 1.2 is installed in the layers below"), "{e}");
    let e = stderr(&lock(&a.layered("missing", &["libx"], &["nope"], ""), &a.cache(), 1));
    assert!(e.contains("`nope` is not in the index"), "{e}");
    // `configure = true` runs dpkg in a container after the layer: this
    // archive has no dpkg, so the step fails, naming it.
    if have_docker() {
        let img = a.layered("configure", &["libx"], &["app"], "configure = true\n");
        let e = stderr(&build(&img, &a.cache(), &a.root.path().join("o2"), 1));
        assert!(e.contains("layer `tools-configure`"), "{e}");
    }
}

#[test]
fn plan_and_lock_over_a_layer_not_built_yet() {
    let Some(a) = archive() else { return };
    let img = a.layered("planned", &["libx"], &["app"], "");
    let cache = a.root.path().join("plan-cache");
    let plan = |code| {
        let mut c = quarry();
        c.arg("plan").arg(&img).arg("--cache-dir").arg(&cache).arg("-o").arg(a.root.path().join("plan-out"));
        c.arg("--json").env("no_proxy", "127.0.0.1").env("NO_PROXY", "127.0.0.1");
        stdout_json(&run_expect(&mut c, code))
    };
    // No lock, nothing built: the base is resolved now (its key needs the
    // pins); the layer over it cannot be, and the plan says so.
    let p = plan(0);
    let layers = p["layers"].as_array().unwrap();
    assert_eq!(layers[0]["name"], "base");
    assert!(layers[0]["key"].is_string() && layers[0]["cached"] == false, "{p}");
    assert!(layers[0]["inputs"].as_array().unwrap().iter().any(|i| i["kind"] == "deb"), "{p}");
    assert!(layers[1]["key"].is_null() && layers[1]["cached"] == false, "{p}");
    assert!(layers[1]["note"].as_str().unwrap().contains("once they are built"), "{p}");
    assert!(!cache.join("layers").read_dir().unwrap().any(|_| true), "planning built nothing");

    let lock_json = || {
        let mut c = quarry();
        c.arg("lock").arg(&img).arg("--cache-dir").arg(&cache).arg("--json");
        stdout_json(&run_expect(c.env("no_proxy", "127.0.0.1").env("NO_PROXY", "127.0.0.1"), 0))
    };
    // `quarry lock` builds the base to resolve the layer over it, and says so.
    let locked = lock_json();
    assert_eq!(locked["built_to_resolve"]["tools"], serde_json::json!(["base"]), "{locked}");
    assert_eq!(locked["layers"]["tools"], 2);

    // With the lock every key is known; the base is in the cache now.
    let p = plan(0);
    let layers = p["layers"].as_array().unwrap();
    assert!(layers[1]["key"].is_string(), "{p}");
    assert_eq!((layers[0]["cached"].as_bool(), layers[1]["cached"].as_bool()), (Some(true), Some(false)));
    let debs: Vec<&str> =
        layers[1]["inputs"].as_array().unwrap().iter().map(|i| i["reference"].as_str().unwrap()).collect();
    assert_eq!(debs, ["app=1.0 (amd64)", "mid=2.0 (amd64)"]);
    // Locking again builds nothing new.
    assert_eq!(lock_json()["built_to_resolve"], serde_json::json!({}));
}

fn pkg<'a>(name: &'a str, version: &'a str, extra: &'a str, files: &'a [deb_archive::Entry<'a>]) -> Pkg<'a> {
    Pkg { name, version, extra, members: &[], files }
}

/// The release `test` and its pocket `test-security`, which fixes `libx`.
fn pocket_archive() -> Option<Archive> {
    let release = [
        pkg("app", "1.0", "Depends: mid\n", &[("./bin/app", b"app\n", 0o755)]),
        pkg("mid", "2.0", "Depends: libx (>= 1)\n", &[("./usr/share/mid", b"mid\n", 0o644)]),
        pkg("libx", "1.2", "", &[("./usr/lib/libx.txt", b"libx 1.2\n", 0o644)]),
        pkg("base-tool", "3", "Essential: yes\n", &[("./sbin/base-tool", b"tool\n", 0o755)]),
    ];
    let security = [pkg("libx", "1.3", "", &[("./usr/lib/libx.txt", b"libx 1.3\n", 0o644)])];
    deb_archive::archive_suites(&[("test", &release), ("test-security", &security)])
}

impl Archive {
    fn with_suites(&self, name: &str, suites: &[&str], keyring: &str) -> PathBuf {
        let img = self.image(name, &["app"], &self.keyring);
        let list: Vec<String> = suites.iter().map(|s| format!("\"{s}\"")).collect();
        let def = std::fs::read_to_string(&img)
            .unwrap()
            .replace("suite = \"test\"", &format!("suites = [{}]", list.join(", ")))
            .replace(&format!("keyring = \"{}\"", self.keyring.display()), &format!("keyring = {keyring}"));
        std::fs::write(&img, def).unwrap();
        img
    }
}

/// (name, version, suite) of every package a lock pins for its base.
fn pinned(img: &Path) -> Vec<(String, String, String)> {
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    let s = |p: &toml::Value, k: &str| p[k].as_str().unwrap().to_string();
    lock["base"]["package"].as_array().unwrap().iter().map(|p| (s(p, "name"), s(p, "version"), s(p, "suite"))).collect()
}

#[test]
fn pockets_resolve_as_apt_and_a_relock_moves_only_the_fixed_packages() {
    let Some(a) = pocket_archive() else { return };
    let keyring = format!("\"{}\"", a.keyring.display());
    let img = a.with_suites("pockets", &["test", "test-security"], &keyring);
    lock(&img, &a.cache(), 0);
    let t = |n: &str, v: &str, s: &str| (n.to_string(), v.to_string(), s.to_string());
    // The highest version wins, and the lock says which pocket it came from.
    assert_eq!(
        pinned(&img),
        [
            t("app", "1.0", "test"),
            t("base-tool", "3", "test"),
            t("libx", "1.3", "test-security"),
            t("mid", "2.0", "test")
        ]
    );
    let text = std::fs::read_to_string(img.with_extension("lock")).unwrap();
    let lock_v: toml::Value = toml::from_str(&text).unwrap();
    for suite in ["test", "test-security"] {
        let inrelease = std::fs::read(a.www().join(format!("dists/{suite}/InRelease"))).unwrap();
        assert_eq!(lock_v["base"]["release"][suite].as_str().unwrap(), format!("sha256:{}", sha256(&inrelease)));
    }
    let out = a.root.path().join("out-pockets");
    let built = stdout_json(&build(&img, &a.cache(), &out, 0));
    let files = layer_entries(&out, &built);
    assert_eq!(files["usr/lib/libx.txt"].1, b"libx 1.3\n");
    let sources = String::from_utf8_lossy(&files["etc/apt/sources.list.d/quarry.sources"].1).into_owned();
    assert_eq!(sources, format!("Types: deb\nURIs: {}\nSuites: test test-security\nComponents: main\n", a.url));

    // A security release fixes libx again and mid: locking again moves
    // exactly those two, and every other line of the lock stays.
    a.publish(
        "test-security",
        &[
            pkg("libx", "1.4", "", &[("./usr/lib/libx.txt", b"libx 1.4\n", 0o644)]),
            pkg("mid", "2.0.1", "Depends: libx (>= 1)\n", &[("./usr/share/mid", b"mid 2.0.1\n", 0o644)]),
        ],
    );
    lock(&img, &a.cache(), 0);
    assert_eq!(
        pinned(&img),
        [
            t("app", "1.0", "test"),
            t("base-tool", "3", "test"),
            t("libx", "1.4", "test-security"),
            t("mid", "2.0.1", "test-security")
        ]
    );
    let after: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    let by_name = |v: &toml::Value| -> std::collections::BTreeMap<String, toml::Value> {
        let list = v["base"]["package"].as_array().unwrap();
        list.iter().map(|p| (p["name"].as_str().unwrap().to_string(), p.clone())).collect()
    };
    let (old_pins, new_pins) = (by_name(&lock_v), by_name(&after));
    let moved: Vec<&String> = new_pins.keys().filter(|n| old_pins.get(*n) != new_pins.get(*n)).collect();
    assert_eq!(moved, ["libx", "mid"]);
    assert_eq!(after["base"]["release"]["test"], lock_v["base"]["release"]["test"], "the release did not move");
    assert_ne!(after["base"]["release"]["test-security"], lock_v["base"]["release"]["test-security"]);

    // The old lock pins libx 1.3, which the pocket no longer serves: a
    // clear error naming the suite and the file, and nothing is built.
    std::fs::write(img.with_extension("lock"), &text).unwrap();
    std::fs::remove_file(a.www().join("pool/main/libx_1.3_amd64.deb")).unwrap();
    let fresh = a.root.path().join("fresh-cache");
    let gone = a.root.path().join("out-gone");
    let e = stderr(&build(&img, &fresh, &gone, 1));
    assert!(
        e.contains("libx 1.3 from suite `test-security`")
            && e.contains("pool/main/libx_1.3_amd64.deb")
            && e.contains("quarry lock"),
        "{e}"
    );
    assert!(!gone.exists(), "nothing written");
}

#[test]
fn pockets_refusals_name_the_suite_and_file() {
    let Some(a) = pocket_archive() else { return };
    let keyring = |k: &Path| format!("\"{}\"", k.display());
    // A pocket the mirror does not have.
    let e = stderr(&lock(&a.with_suites("nopocket", &["test", "test-updates"], &keyring(&a.keyring)), &a.cache(), 1));
    assert!(e.contains("suite `test-updates`") && e.contains("dists/test-updates/InRelease"), "{e}");
    // A keyring that does not sign the Release.
    let e = stderr(&lock(
        &a.with_suites("otherkey", &["test", "test-security"], &keyring(&a.other_keyring)),
        &a.cache(),
        1,
    ));
    assert!(e.contains("suite `test`") && e.contains("bad signature") && e.contains("dists/test/InRelease"), "{e}");

    // The keyring as a file in a package pinned by its sha256, fetched from
    // the mirror (as Debian's ubuntu-keyring for Ubuntu's archive).
    let key = std::fs::read(&a.keyring).unwrap();
    let deb = a.www().join("pool/main/test-keyring_1_all.deb");
    deb_archive::make_deb(
        &deb,
        "Package: test-keyring\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example.invalid>\nDescription: k\n",
        &[],
        &[("./usr/share/keyrings/test.gpg", &key, 0o644)],
    );
    let sha = sha256(&std::fs::read(&deb).unwrap());
    let table = |sha: &str, path: &str| {
        format!(
            "{{ deb = \"pool/main/test-keyring_1_all.deb\", sha256 = \"{sha}\", path = \"{path}\", mirror = \"{}\" }}",
            a.url
        )
    };
    let img = a.with_suites("keydeb", &["test", "test-security"], &table(&sha, "/usr/share/keyrings/test.gpg"));
    lock(&img, &a.cache(), 0);
    assert_eq!(pinned(&img).len(), 4);
    let e = stderr(&lock(
        &a.with_suites("keydeb-sha", &["test"], &table(&"0".repeat(64), "/usr/share/keyrings/test.gpg")),
        &a.cache(),
        1,
    ));
    assert!(e.contains("sha256 mismatch") && e.contains("test-keyring_1_all.deb"), "{e}");
    let e = stderr(&lock(
        &a.with_suites("keydeb-path", &["test"], &table(&sha, "/usr/share/keyrings/nope.gpg")),
        &a.cache(),
        1,
    ));
    assert!(e.contains("/usr/share/keyrings/nope.gpg") && e.contains("keyring.path"), "{e}");
}

/// A lock edited by hand (a pin's sha256 changed) was blamed on the mirror;
/// the error now names the lock first.
#[test]
fn an_edited_pin_names_the_lock() {
    let Some(a) = archive() else { return };
    let img = a.image("edited", &["app"], &a.keyring);
    lock(&img, &a.cache(), 0);
    let text = std::fs::read_to_string(img.with_extension("lock")).unwrap();
    let lock_v: toml::Value = toml::from_str(&text).unwrap();
    let app = lock_v["base"]["package"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("app")).unwrap();
    let sha = app["sha256"].as_str().unwrap();
    std::fs::write(img.with_extension("lock"), text.replace(sha, &"1".repeat(64))).unwrap();
    let e = stderr(&build(&img, &a.root.path().join("edited-cache"), &a.root.path().join("out-edited"), 1));
    assert!(e.contains("sha256 mismatch") && e.contains("IMAGE.lock") && e.contains("quarry lock"), "{e}");
}

/// A cold build printed nothing for most of its run, and nothing at all
/// when its output was not a terminal. Each long phase now says what it
/// does, a line each in a log (stdout piped here); `--quiet` and `--json`
/// show none.
#[test]
fn a_build_says_what_it_does_in_a_log_and_nothing_when_quiet() {
    let Some(a) = archive() else { return };
    let img = a.image("phases", &["app"], &a.keyring);
    let run = |cache: &str, extra: &[&str]| {
        let o = run_expect(
            quarry()
                .arg("build")
                .arg(&img)
                .arg("--cache-dir")
                .arg(a.root.path().join(cache))
                .arg("-o")
                .arg(a.root.path().join(format!("out-{cache}")))
                .args(extra)
                .env("no_proxy", "127.0.0.1")
                .env("NO_PROXY", "127.0.0.1"),
            0,
        );
        stderr(&o)
    };
    let log = run("log", &[]);
    for line in [
        "quarry: reading `test`",
        "quarry: downloading 4 of 4 packages",
        "quarry: unpacking 4 packages",
        "quarry: packing layer `base`",
    ] {
        assert!(log.lines().any(|l| l.starts_with(line)), "no `{line}` in:\n{log}");
    }
    assert_eq!(run("quiet", &["--quiet"]), "", "--quiet prints nothing");
    let json = run("json", &["--json"]);
    assert!(!json.contains("quarry: "), "--json keeps stderr for errors: {json}");
}

/// `quarry verify` of an image built from this archive: reproduced while
/// the archive serves its pins; once a pinned .deb is gone, the error names
/// the package, its sha256 and the URI the provenance records, exit 1;
/// with the build's own cache (which holds the .deb) it is reproduced again.
#[test]
fn verify_names_a_pinned_deb_the_archive_dropped() {
    let Some(a) = archive() else { return };
    let img = a.image("verified", &["app"], &a.keyring);
    let checkout = img.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(checkout.join(".git")).unwrap();
    lock(&img, &a.cache(), 0);
    let out = a.root.path().join("verified-out");
    build(&img, &a.cache(), &out, 0);
    let verify = |cache: &Path, code: i32| {
        let mut c = quarry();
        c.arg("verify").arg(&out).arg("--json").arg("--source").arg(&checkout).arg("--cache-dir").arg(cache);
        run_expect(c.env("no_proxy", "127.0.0.1").env("NO_PROXY", "127.0.0.1"), code)
    };
    let v = stdout_json(&verify(&a.root.path().join("fresh-1"), 0));
    assert_eq!(v["reproduced"], true, "{v:#}");

    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    let app = lock["base"]["package"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("app")).unwrap();
    std::fs::remove_file(a.www().join("pool/main/app_1.0_amd64.deb")).unwrap();
    let fresh = a.root.path().join("fresh-2");
    let e = stderr(&verify(&fresh, 1));
    let uri = format!("{}/pool/main/app_1.0_amd64.deb", a.url.trim_end_matches('/'));
    assert!(
        e.contains("its input app 1.0")
            && e.contains(&format!("sha256:{}", app["sha256"].as_str().unwrap()))
            && e.contains(&format!("came from {uri}"))
            && e.contains("HTTP 404")
            && !e.contains("quarry lock"),
        "{e}"
    );
    // The cache the image was built with still holds the .deb.
    let v = stdout_json(&verify(&a.cache(), 0));
    assert_eq!(v["reproduced"], true, "{v:#}");
}
