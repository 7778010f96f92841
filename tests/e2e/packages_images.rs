//! The shipped distro images: `no_rocm_image_debian12` is locked, built
//! from the Debian archive this machine's apt uses, loaded into the engine
//! and run; rebuilt from the lock it gives the same digest, also with no
//! way to reach any mirror, with the security pocket's fixes in it.
//! `no_rocm_image_ubuntu24_04` plans from its lock and stays the twin of the
//! Debian image (tests/e2e/shipped_images.rs builds and runs both families).
use crate::common;

use common::provenance::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// .debs and indexes shared by every run (content-addressed, verified on use).
fn cache_dir() -> PathBuf {
    packages_cache()
}

fn build(img: &Path, out: &Path, extra: &[&str], offline: bool) -> serde_json::Value {
    let mut c = quarry();
    c.arg("build")
        .arg(img)
        .arg("--cache-dir")
        .arg(cache_dir())
        .arg("-o")
        .arg(out)
        .arg("--no-cache")
        .arg("--json")
        .args(extra);
    if offline {
        offline_env(&mut c);
    }
    stdout_json(&run_expect(&mut c, 0))
}

/// No route to any mirror: every proxy variable points at a closed port
/// (the discard port on loopback). The mirror stays the one the image
/// names in its apt sources (a different mirror is a different image).
fn offline_env(c: &mut Command) {
    for v in ["http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        c.env(v, "http://127.0.0.1:9");
    }
    c.env_remove("no_proxy").env_remove("NO_PROXY");
}

struct RemoveImage(String);
impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

#[test]
fn debian12_image_builds_locked_reproducibly_offline_and_runs() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("no_rocm_image_debian12.toml");
    std::fs::copy(repo().join("images/no_rocm_image_debian12.toml"), &img).unwrap();
    run_expect(quarry().arg("lock").arg(&img).arg("--cache-dir").arg(cache_dir()), 0);
    let lock = std::fs::read_to_string(img.with_extension("lock")).unwrap();
    assert!(lock.contains("name = \"python3-venv\"") && lock.contains("name = \"sudo\""), "{lock}");

    let a = build(&img, &work.path().join("a"), &["--sbom"], false);
    // The second build lays the tree out on disk, not in memory: directories
    // list their entries in another order (as on another machine), and the
    // image must not change. And it needs no container engine.
    let b = {
        let mut c = quarry();
        c.arg("build").arg(&img).arg("--cache-dir").arg(cache_dir()).arg("-o").arg(work.path().join("b"));
        c.args(["--no-cache", "--json", "--sbom"]).env("QUARRY_SANDBOX_BACKING", "disk");
        c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
        stdout_json(&run_expect(&mut c, 0))
    };
    assert_eq!(a["manifest_digest"], b["manifest_digest"], "two builds from the lock differ");
    check_sbom(&work.path().join("a"), &a, &work.path().join("b"), &b, &lock);
    // The provenance: the same bytes from both builds, a valid SLSA v1
    // statement by the in-toto models, every pinned .deb in it by sha256.
    let (pa, pb) = (provenance_of(&work.path().join("a"), &a), provenance_of(&work.path().join("b"), &b));
    assert!(pa == pb, "two builds gave different provenance");
    let counted = check_with_in_toto_models(&pa, work.path());
    assert_eq!(counted["subjects"], 1, "{counted}");
    assert_lists_every_locked_deb(&pa, &lock);

    // Offline: first show that nothing can be fetched in this environment...
    let mut probe = quarry();
    probe.arg("lock").arg(&img).arg("--cache-dir").arg(work.path().join("empty-cache"));
    offline_env(&mut probe);
    let e = run_expect(&mut probe, 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains("InRelease"), "{e:?}");
    // ...then that the locked build still succeeds from the warm cache, unchanged.
    let c = build(&img, &work.path().join("c"), &[], true);
    assert_eq!(a["manifest_digest"], c["manifest_digest"], "the offline build differs");

    let tag = format!("{}:latest", unique("no-rocm-debian12"));
    let _guard = RemoveImage(tag.clone());
    let archive = work.path().join("image.tar");
    run_expect(
        quarry()
            .arg("export")
            .arg(work.path().join("a"))
            .args(["--format", "docker-archive", "--tag", &tag, "-o"])
            .arg(&archive),
        0,
    );
    run_expect(Command::new("docker").arg("load").arg("-i").arg(&archive), 0);
    let run = |script: &str| -> String {
        let o =
            run_expect(Command::new("docker").args(["run", "--rm", "--network", "none", &tag, "sh", "-ec", script]), 0);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let pip = run("python3 -m venv /tmp/v && /tmp/v/bin/pip --version");
    assert!(pip.starts_with("pip ") && pip.contains("/tmp/v/"), "{pip}");
    let dpkg = run("dpkg -l");
    for p in [
        "python3",
        "python3-venv",
        "python3-pip",
        "python3-setuptools",
        "python3-wheel",
        "git",
        "git-lfs",
        "curl",
        "wget",
        "psmisc",
        "jq",
        "zip",
        "unzip",
        "cmake",
        "ninja-build",
        "clang",
        "lld",
        "valgrind",
        "libgfortran5",
        "sudo",
        "dpkg",
        "apt",
    ] {
        // Multi-Arch: same packages are listed as NAME:ARCH.
        let listed = |l: &str| l.split_whitespace().nth(1).is_some_and(|n| n == p || n.split(':').next() == Some(p));
        assert!(dpkg.lines().any(|l| l.starts_with("ii  ") && listed(l)), "`dpkg -l` lacks {p}:\n{dpkg}");
    }
    let id = run("id tester; whoami; pwd");
    assert!(id.contains("(video)") && id.contains("(render)") && id.contains("\ntester\n/home/tester"), "{id}");
    assert_eq!(run("sudo -n true && sudo -n id -u"), "0\n");
    // The loader cache and the tools that maintainer scripts would have set up.
    let tools = run("ldconfig -p | head -1; command -v awk; command -v which; git --version; clang --version | head -1; dpkg --audit; sudo -n apt-get check -q");
    assert!(
        tools.contains("libs found in cache") && tools.contains("/usr/bin/awk") && tools.contains("git version"),
        "{tools}"
    );
    probe_debian(&run, true);
    check_security_pocket(&lock, &tag);
}

/// The image has the security pocket's versions of what that pocket
/// updates (the lock says which), and apt, given the network and the
/// image's own sources, finds nothing newer in any pocket.
fn check_security_pocket(lock: &str, tag: &str) {
    let pins: toml::Value = toml::from_str(lock).unwrap();
    let from_security: Vec<(String, String)> = pins["base"]["package"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["suite"].as_str() == Some("bookworm-security"))
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["version"].as_str().unwrap().to_string()))
        .collect();
    let names: Vec<&str> = from_security.iter().map(|(n, _)| n.as_str()).collect();
    // bookworm-security has carried OpenSSL fixes since bookworm's point
    // releases; the image's TLS stack comes from it.
    assert!(names.contains(&"libssl3"), "libssl3 from bookworm-security: {names:?}");
    let installed = {
        let o =
            run_expect(Command::new("docker").args(["run", "--rm", "--network", "none", tag, "dpkg-query", "-W"]), 0);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (name, version) in &from_security {
        let listed = installed.lines().any(|l| {
            let mut w = l.split('\t');
            w.next().is_some_and(|n| n == name || n.split(':').next() == Some(name)) && w.next() == Some(version)
        });
        assert!(listed, "the image lacks {name} {version} from bookworm-security:\n{installed}");
    }
    let o = run_expect(
        Command::new("docker").args(["run", "--rm", "--user", "root", tag, "sh", "-ec"]).arg(
            "apt-get update -qq >/dev/null; grep -h '^Suites' /etc/apt/sources.list.d/*.sources; apt-get -s upgrade | grep '^Inst' || true",
        ),
        0,
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["Suites: bookworm bookworm-updates", "Suites: bookworm-security"],
        "apt sources name every pocket and nothing is left to upgrade:\n{text}"
    );
}

/// What a GPU lab does first with a Debian image, working as Debian's own
/// install would: `run` runs a script as the image's user.
fn probe_debian(run: &dyn Fn(&str) -> String, full: bool) {
    // The system CA store: Python's default context loads the bundle.
    let certs = run("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt; \
                     python3 -c 'import ssl; print(ssl.create_default_context().cert_store_stats()[\"x509_ca\"])'");
    let counts: Vec<u32> = certs.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert!(counts[0] > 100 && counts[0] == counts[1], "the CA bundle and Python's store: {certs}");
    // venv (ensurepip) works; pip gets as far as TLS to an https index: no bundle error.
    let pip = run("python3 -m venv /tmp/v && /tmp/v/bin/python -c 'print(1)'; \
                   /tmp/v/bin/pip download --no-deps --retries 0 --timeout 2 -d /tmp/d \
                     --index-url https://127.0.0.1:9/simple probe 2>&1 || true");
    assert!(pip.starts_with("1\n"), "{pip}");
    assert!(!pip.contains("TLS CA certificate bundle") && pip.contains("127.0.0.1"), "{pip}");
    if full {
        // pip's modules come from their .pyc files, valid for the image's
        // times: fast for the user, who cannot write new ones. CPU time, not
        // wall time (this machine is shared), against the same import with
        // the .pyc files out of sight (-X pycache_prefix: compiled anew).
        let imp = run("cpu() { python3 \"$@\" -c 'import pip._internal.cli.main, os; t = os.times(); print(t.user + t.system)'; }; \
                       cpu; cpu -X pycache_prefix=/tmp/nopyc; \
                       python3 -v -c 'import pip._internal.cli.main' 2>&1 | grep -c 'bytecode is stale' || true; \
                       python3 -v -c 'import pip._internal.cli.main' 2>&1 | grep -c \"code object from '.*__pycache__\"");
        let mut l = imp.lines();
        let mut num = || -> f64 { l.next().unwrap().trim().parse().unwrap() };
        let (cpu, compiling, stale, cached) = (num(), num(), num(), num());
        assert!(stale == 0.0 && cached > 100.0, "stale {stale}, from .pyc {cached}: {imp}");
        assert!(
            cpu < 1.0 && cpu * 2.0 < compiling,
            "importing pip took {cpu} s of CPU ({compiling} s compiling): {imp}"
        );
    }
    // dpkg's triggers database: installing a package leaves nothing half done.
    let dpkg = run("set -e; d=$(mktemp -d); mkdir -p $d/DEBIAN $d/usr/lib/quarry-probe; \
                    printf 'Package: quarry-probe\\nVersion: 1\\nArchitecture: all\\nMaintainer: q <q@example.org>\\nDescription: probe\\n' > $d/DEBIAN/control; \
                    printf 'activate-noawait ldconfig\\n' > $d/DEBIAN/triggers; echo x > $d/usr/lib/quarry-probe/x; \
                    dpkg-deb -b $d /tmp/probe.deb >/dev/null; sudo -n dpkg -i /tmp/probe.deb >/dev/null; \
                    sudo -n dpkg --audit; echo audit-clean; sudo -n apt-get check -q >/dev/null && echo apt-clean; \
                    apt-mark showauto | wc -l");
    let mut l = dpkg.lines();
    assert_eq!((l.next(), l.next()), (Some("audit-clean"), Some("apt-clean")), "{dpkg}");
    assert!(l.next().unwrap().trim().parse::<u32>().unwrap() > 0, "apt knows automatic packages: {dpkg}");
    if full {
        let cc = run("cc --version | head -1; c++ --version | head -1; git config --system --get filter.lfs.process");
        assert!(cc.contains("clang version") && cc.contains("git-lfs filter-process"), "{cc}");
    }
}

#[test]
fn ubuntu24_04_image_parses_plans_and_twins_debian() {
    let img = repo().join("images/no_rocm_image_ubuntu24_04.toml");
    let o = run_expect(
        quarry().arg("lock").arg(&img).args([
            "--dry-run",
            "--json",
            "--set",
            "UBUNTU_MIRROR=http://mirror.invalid/ubuntu",
        ]),
        0,
    );
    let plan = stdout_json(&o);
    assert_eq!(plan["release"], "http://mirror.invalid/ubuntu/dists/noble/InRelease");
    let arch = quarry::definition::Platform::host().arch.debian();
    let mut indexes = Vec::new();
    for suite in ["noble", "noble-updates", "noble-security"] {
        for c in ["main", "universe"] {
            indexes.push(format!("http://mirror.invalid/ubuntu/dists/{suite}/{c}/binary-{arch}/Packages.xz"));
        }
    }
    assert_eq!(plan["indexes"], serde_json::json!(indexes));
    // Debian's ubuntu-keyring package, pinned by its sha256.
    let keyring = plan["keyring"].as_str().unwrap();
    assert!(
        keyring.starts_with("/usr/share/keyrings/ubuntu-archive-keyring.gpg in pool/main/u/ubuntu-keyring/"),
        "{keyring}"
    );
    assert_eq!(plan["locked"], true);

    // The same recipe as the Debian twin.
    let no_sets = Default::default();
    let ubuntu = quarry::definition::load_image(&img, &no_sets).unwrap();
    let debian = quarry::definition::load_image(&repo().join("images/no_rocm_image_debian12.toml"), &no_sets).unwrap();
    let (quarry::definition::Base::Packages(u), quarry::definition::Base::Packages(d)) = (&ubuntu.base, &debian.base)
    else {
        panic!("both images have a packages base")
    };
    assert_eq!(u.include, d.include);
    assert_eq!(u.users, d.users);
    assert_eq!((u.suite(), d.suite()), ("noble", "bookworm"));
    assert_eq!(u.suites.len(), d.suites.len(), "both take their pockets");
    assert_eq!(ubuntu.config.user, debian.config.user);
    assert_eq!(ubuntu.config.workdir.as_deref(), Some("/home/tester"));
    assert_eq!(ubuntu.config.user.as_deref(), Some("tester"));

    // Every variant exists for both, with the same packages over its test image.
    for v in ["media", "ocl_rt", "openmpi", "rocgdb"] {
        let load = |d: &str| {
            let f = repo().join(format!("images/no_rocm_image_{d}_{v}.toml"));
            let img = quarry::definition::load_image(&f, &no_sets).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let quarry::definition::Base::Image(base) = &img.base else { panic!("{v}: an `image` base") };
            assert_eq!(base.name, format!("no_rocm_image_{d}"));
            let Some(p) = img.layers[0].packages() else { panic!("{v}: a packages layer") };
            (p.include.clone(), p.suite().to_string())
        };
        let (u, d) = (load("ubuntu24_04"), load("debian12"));
        assert_eq!(u.0, d.0, "{v}");
        assert_eq!((u.1.as_str(), d.1.as_str()), ("noble", "bookworm"));
    }

    // Where no apt source and no debootstrap script names noble's archive,
    // `host` says so and what to do.
    let empty = tempfile::tempdir().unwrap();
    let e = run_expect(
        quarry()
            .arg("lock")
            .arg(&img)
            .arg("--dry-run")
            .env("QUARRY_APT_ETC", empty.path())
            .env("QUARRY_DEBOOTSTRAP_SCRIPTS", empty.path()),
        1,
    );
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("suite `noble`") && e.contains("debootstrap") && e.contains("--set"), "{e}");
}

/// `configure = true`: packages are left "unpacked" and `dpkg --configure -a`
/// runs as a step layer, so every maintainer script has run in the image.
#[test]
fn configure_step_runs_maintainer_scripts() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("configured.toml");
    write(
        &img,
        "name = \"configured\"\n[base.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\n\
         keyring = \"/usr/share/keyrings/debian-archive-keyring.gpg\"\ninclude = [\"hello\"]\nconfigure = true\n\
         [config]\ncmd = [\"/bin/sh\"]\n",
    );
    let out = work.path().join("out");
    let j = build(&img, &out, &[], false);
    let names: Vec<&str> = j["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["base", "configure"], "{j:#}");
    let tag = format!("{}:t", unique("configured"));
    let _cleanup = RemoveImage(tag.clone());
    run_expect(quarry().args(["load", "--tag", &tag]).arg(&out), 0);
    let o = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &tag, "sh", "-c"])
        .arg("dpkg --audit && dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' | grep -v '^ii ' ; hello")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout.trim(), "Hello, world!", "every package configured (ii), hello runs: {stdout}");
    assert_eq!(leaked_quarry_containers(), Vec::<String>::new(), "no quarry container is left");
}

/// Every path of a layer blob (gzip tar), with its type.
fn layer_paths(out: &Path, digest: &str) -> Vec<(String, tar::EntryType)> {
    let f = std::fs::File::open(out.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))).unwrap();
    let mut a = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
    a.entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.path().unwrap().display().to_string().trim_end_matches('/').to_string(), e.header().entry_type())
        })
        .collect()
}

/// One file of a layer blob.
fn layer_file(out: &Path, digest: &str, path: &str) -> Vec<u8> {
    let f = std::fs::File::open(out.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))).unwrap();
    let mut a = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some(path) {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut v).unwrap();
            return v;
        }
    }
    panic!("no {path} in layer {digest}")
}

/// The jq layer holds jq and the libraries the layers below lack, and
/// nothing else but the dpkg database and the loader cache; dpkg in the
/// image sees the packages of every layer as installed.
fn check_jq_layer(out: &Path, built: &serde_json::Value, below_has: &str, dpkg_listed: &[&str]) {
    let layers = built["layers"].as_array().unwrap();
    let jq = layers.iter().find(|l| l["name"] == "jq").expect("a jq layer");
    let paths = layer_paths(out, jq["digest"].as_str().unwrap());
    let new = ["jq", "libjq1:amd64", "libonig5:amd64"];
    let mut listed = std::collections::BTreeSet::new();
    for (p, _) in &paths {
        if let Some(pkg) = p.strip_prefix("var/lib/dpkg/info/").and_then(|f| f.rsplit_once('.')).map(|(k, _)| k) {
            assert!(new.contains(&pkg), "the layer has dpkg files of `{pkg}`: {p}");
        }
    }
    for (p, t) in &paths {
        if *t != tar::EntryType::Directory && !p.starts_with("var/lib/dpkg/") && p != "etc/ld.so.cache" {
            listed.insert(p.clone());
        }
    }
    assert!(listed.contains("usr/bin/jq") && listed.iter().any(|p| p.contains("libonig.so.5")), "{listed:?}");
    assert!(!listed.iter().any(|p| p.contains(below_has)), "the layer repeats `{below_has}` from below: {listed:?}");
    assert!(!paths.iter().any(|(p, _)| matches!(p.as_str(), "bin" | "lib" | "sbin")), "never over the /usr links");

    let tag = format!("{}:t", unique(&format!("jq-layer-{}", built["name"].as_str().unwrap())));
    let _cleanup = RemoveImage(tag.clone());
    run_expect(quarry().args(["load", "--tag", &tag]).arg(out), 0);
    let o = run_expect(
        Command::new("docker").args(["run", "--rm", "--network", "none", &tag, "sh", "-ec"]).arg(
            "echo '{\"a\":[1,2]}' | jq -c .a; dpkg -s jq | sed -n 2p; dpkg --audit; \
             dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'",
        ),
        0,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("[1,2]"), "{out}");
    assert_eq!(lines.next(), Some("Status: install ok installed"), "{out}");
    let states: Vec<&str> = lines.collect();
    for p in dpkg_listed.iter().chain(["jq", "libjq1", "libonig5"].iter()) {
        assert!(states.contains(&format!("ii  {p}").as_str()), "`{p}` is not `ii`: {states:?}");
    }
    assert!(states.iter().all(|l| l.starts_with("ii ")), "{states:?}");
}

fn jq_layer(dir: &Path, configure: bool) {
    write(
        &dir.join("layers/jq.toml"),
        &format!(
            "name = \"jq\"\n[[source]]\n[source.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\n\
             keyring = \"/usr/share/keyrings/debian-archive-keyring.gpg\"\ninclude = [\"jq\"]\nconfigure = {configure}\n"
        ),
    );
}

/// A packages layer over a packages base, locked: the same digest twice.
#[test]
fn jq_layer_over_a_packages_base() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("jqbase.toml");
    write(
        &img,
        "name = \"jqbase\"\nlayers = [\"jq\"]\n[base.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\n\
         keyring = \"/usr/share/keyrings/debian-archive-keyring.gpg\"\n[config]\ncmd = [\"/bin/sh\"]\n",
    );
    jq_layer(work.path(), false);
    run_expect(quarry().arg("lock").arg(&img).arg("--cache-dir").arg(cache_dir()), 0);
    let pins: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    let names: Vec<&str> =
        pins["layer"]["jq"]["package"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["jq", "libjq1", "libonig5"], "libc6 and the rest come from the base");
    let a = build(&img, &work.path().join("a"), &[], false);
    let b = build(&img, &work.path().join("b"), &[], false);
    assert_eq!(a["layers"][1]["digest"], b["layers"][1]["digest"]);
    assert_eq!(a["manifest_digest"], b["manifest_digest"]);
    check_jq_layer(&work.path().join("a"), &a, "libc.so.6", &["bash", "dpkg", "libc6"]);
}

/// A packages layer over a rootfs made by mmdebstrap (its dpkg database
/// written by dpkg), configured in a container afterwards.
#[test]
fn jq_layer_over_a_rootfs_base_configured() {
    if !have_docker() || !have_tool("gpgv") || !have_tool("mmdebstrap") {
        return;
    }
    let rootfs = debian_rootfs("");
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("jqrootfs.toml");
    write(
        &img,
        &format!(
            "name = \"jqrootfs\"\nlayers = [\"jq\"]\nbase = {{ rootfs = \"{}\" }}\n[config]\ncmd = [\"/bin/sh\"]\n",
            rootfs.display()
        ),
    );
    jq_layer(work.path(), true);
    let a = build(&img, &work.path().join("a"), &[], false);
    let names: Vec<&str> = a["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["base", "jq", "jq-configure"]);
    // The rootfs's own dpkg status (written by dpkg) is kept byte for byte,
    // the new packages in dpkg's order among its entries, but for libc-bin:
    // libjq1's files activate its ldconfig trigger, as `dpkg --unpack` would.
    let out = work.path().join("a");
    let status = |i: usize| {
        String::from_utf8(layer_file(&out, a["layers"][i]["digest"].as_str().unwrap(), "var/lib/dpkg/status")).unwrap()
    };
    let (below, merged) = (status(0), status(1));
    let touched =
        |p: &&str| ["jq", "libjq1", "libonig5", "libc-bin"].iter().any(|n| p.starts_with(&format!("Package: {n}\n")));
    let kept: Vec<&str> = merged.split_inclusive("\n\n").filter(|p| !touched(p)).collect();
    let below_kept: Vec<&str> =
        below.split_inclusive("\n\n").filter(|p| !p.starts_with("Package: libc-bin\n")).collect();
    assert_eq!(kept.concat(), below_kept.concat());
    let libc_bin = merged.split_inclusive("\n\n").find(|p| p.starts_with("Package: libc-bin\n")).unwrap();
    assert!(
        libc_bin.contains("\nStatus: install ok triggers-pending\n")
            && libc_bin.contains("\nTriggers-Pending: ldconfig\n"),
        "{libc_bin}"
    );
    check_jq_layer(&work.path().join("a"), &a, "libc.so.6", &["apt", "bash", "dpkg", "libc6"]);
}

/// The SBOM `--sbom` attached: the same bytes from both builds, valid for
/// the SPDX project's own validator, every pinned package listed with its
/// version and sha256, and the image described by its digest.
fn check_sbom(a_dir: &Path, a: &serde_json::Value, b_dir: &Path, b: &serde_json::Value, lock: &str) {
    let sbom_of = |dir: &Path, built: &serde_json::Value| -> Vec<u8> {
        let artifact = built["sbom"].as_str().expect("--sbom reports the artifact");
        let blob = |d: &str| dir.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(blob(artifact)).unwrap()).unwrap();
        assert_eq!(manifest["artifactType"], "application/spdx+json");
        assert_eq!(manifest["subject"]["digest"], built["manifest_digest"]);
        std::fs::read(blob(manifest["layers"][0]["digest"].as_str().unwrap())).unwrap()
    };
    let (sa, sb) = (sbom_of(a_dir, a), sbom_of(b_dir, b));
    assert!(sa == sb, "two builds gave different SBOMs");
    let file = a_dir.join("../sbom.spdx.json");
    std::fs::write(&file, &sa).unwrap();
    assert!(have_tool("pyspdxtools"), "pyspdxtools (pip install spdx-tools) is needed; scripts/setup installs it");
    run_expect(Command::new("pyspdxtools").arg("-i").arg(&file), 0);
    let doc: serde_json::Value = serde_json::from_slice(&sa).unwrap();
    let packages = doc["packages"].as_array().unwrap();
    let pins: toml::Value = toml::from_str(lock).unwrap();
    let pinned = pins["base"]["package"].as_array().unwrap();
    assert!(pinned.len() > 100, "the Debian image pins its packages");
    for p in pinned {
        let (name, version, sha) =
            (p["name"].as_str().unwrap(), p["version"].as_str().unwrap(), p["sha256"].as_str().unwrap());
        let found = packages.iter().any(|q| {
            q["name"] == name
                && q["versionInfo"] == version
                && q["checksums"].as_array().is_some_and(|c| c.iter().any(|c| c["checksumValue"] == sha))
        });
        assert!(found, "the SBOM lacks {name} {version} ({sha})");
    }
    let text = String::from_utf8_lossy(&sa);
    let digest = a["manifest_digest"].as_str().unwrap();
    assert!(text.contains(digest.trim_start_matches("sha256:")), "the SBOM names the image digest");
}

/// A variant of the test image builds here: its packages layer over
/// no_rocm_image_debian12 (built through the cache), with its tools there.
#[test]
fn debian12_ocl_rt_variant_builds_and_has_its_tools() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let img = repo().join("images/no_rocm_image_debian12_ocl_rt.toml");
    let j = stdout_json(&run_expect(
        quarry().arg("build").arg(&img).arg("--cache-dir").arg(cache_dir()).arg("-o").arg(&out).arg("--json"),
        0,
    ));
    let names: Vec<&str> = j["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["no_rocm_image_debian12/base", "ocl-rt"], "{j:#}");
    let tag = format!("{}:latest", unique("ocl-rt"));
    let _cleanup = RemoveImage(tag.clone());
    run_expect(quarry().args(["load", "--tag", &tag]).arg(&out), 0);
    let o = run_expect(
        Command::new("docker").args([
            "run",
            "--rm",
            "--network",
            "none",
            &tag,
            "sh",
            "-ec",
            "whoami; strace -V | head -1; ls /usr/lib/x86_64-linux-gnu/libOpenCL.so.1; git lfs version; killall -V 2>&1 | head -1",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("tester\n") && text.contains("strace -- version") && text.contains("libOpenCL.so.1"),
        "{text}"
    );
    assert!(text.contains("git-lfs/"), "{text}");
}

/// The Debian 13 ROCm runtime as a GPU lab uses it: Debian 13's pip reads
/// the CA bundle when it is imported, so pip and venv work only where
/// ca-certificates' postinst ran.
#[test]
fn debian13_runtime_behaves_as_debian_installs_it() {
    if !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (runtime, _) = debian13_rocm_images();
    let tag = format!("{}:t", unique("rocm-runtime-probe"));
    let _cleanup = RemoveImage(tag.clone());
    run_expect(quarry().args(["load", "--tag", &tag]).arg(&runtime), 0);
    let run = |script: &str| -> String {
        let o =
            run_expect(Command::new("docker").args(["run", "--rm", "--network", "none", &tag, "sh", "-ec", script]), 0);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    probe_debian(&run, false);
}
