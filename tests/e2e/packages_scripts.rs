//! Maintainer scripts and triggers run in quarry's sandbox: packages from an
//! archive made here (with preinst, postinst, conffiles and a file trigger)
//! over a real Debian 12 essential base. What the scripts do lands in the
//! layers; a trigger one layer declares fires when a later layer installs
//! into its directory; a failing script is named with its output and
//! nothing is cached; as an unprivileged user (subordinate ids) the image
//! is the same bytes as root's; where user namespaces are refused, the
//! error says so and what to do.
use crate::common;

use common::deb_archive::{self, Archive, Pkg};
use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const GOOD_PREINST: &str = "#!/bin/sh\nset -e\nmkdir -p /var/lib/good\n\
    echo \"$1 $DPKG_MAINTSCRIPT_PACKAGE $(sed -n 's/^Package: //p' /var/lib/dpkg/tmp.ci/control)\" > /var/lib/good/preinst\n";
/// The alternatives priority in a variable, as clang's postinst has it.
const GOOD_POSTINST: &str = "#!/bin/sh\nset -e\ncase \"$1\" in\n\
    configure) prio=50; update-alternatives --quiet --install /usr/bin/good good /usr/lib/good/good-real $prio\n\
      echo configure > /var/lib/good/postinst ;;\n\
    triggered) echo \"$2\" > /var/lib/good/triggered ;;\nesac\n";

fn test_archive() -> Option<Archive> {
    deb_archive::archive(&[
        Pkg {
            name: "good",
            version: "1.0",
            extra: "",
            members: &[
                ("preinst", GOOD_PREINST),
                ("postinst", GOOD_POSTINST),
                ("conffiles", "/etc/good.conf\n"),
                ("triggers", "interest /usr/share/good/plugins\n"),
            ],
            files: &[
                ("./usr/lib/good/good-real", b"#!/bin/sh\necho good\n", 0o755),
                ("./etc/good.conf", b"x\n", 0o644),
            ],
        },
        Pkg {
            name: "plugin",
            version: "1.0",
            extra: "Depends: good\n",
            members: &[],
            files: &[("./usr/share/good/plugins/p1", b"p1\n", 0o644)],
        },
        Pkg {
            name: "bad",
            version: "1.0",
            extra: "",
            members: &[("postinst", "#!/bin/sh\necho \"boom from bad's postinst\" >&2\nexit 3\n")],
            files: &[("./usr/share/doc/bad/README", b"bad\n", 0o644)],
        },
        Pkg {
            name: "badpre",
            version: "1.0",
            extra: "",
            members: &[("preinst", "#!/bin/sh\necho 'no room for badpre' >&2\nexit 4\n")],
            files: &[("./usr/share/doc/badpre/README", b"badpre\n", 0o644)],
        },
    ])
}

/// An image: Debian 12's essential packages, then one packages layer per
/// `layers` entry from the test archive (`keyring` signs it).
fn image(dir: &Path, a: &Archive, keyring: &Path, layers: &[&[&str]]) -> PathBuf {
    let names: Vec<String> = (0..layers.len()).map(|i| format!("\"l{i}\"")).collect();
    let img = dir.join("image.toml");
    write(
        &img,
        &format!(
            "name = \"scripts\"\nlayers = [{}]\n[base.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\n\
             keyring = \"/usr/share/keyrings/debian-archive-keyring.gpg\"\nvariant = \"essential\"\n\
             [config]\ncmd = [\"/bin/sh\"]\n",
            names.join(", ")
        ),
    );
    for (i, include) in layers.iter().enumerate() {
        let list: Vec<String> = include.iter().map(|p| format!("\"{p}\"")).collect();
        write(
            &dir.join(format!("layers/l{i}.toml")),
            &format!(
                "name = \"l{i}\"\n[[source]]\n[source.packages]\nsuite = \"test\"\nmirror = \"{}\"\nkeyring = \"{}\"\ninclude = [{}]\n",
                a.url,
                keyring.display(),
                list.join(", ")
            ),
        );
    }
    img
}

/// `quarry SUBCOMMAND --cache-dir CACHE` reaching the test archive directly.
fn quarry_for(sub: &str, cache: &Path) -> Command {
    let mut c = quarry();
    c.arg(sub).arg("--cache-dir").arg(cache).env("no_proxy", "127.0.0.1").env("NO_PROXY", "127.0.0.1");
    c
}

fn build(img: &Path, cache: &Path, out: &Path, extra: &[&str], code: i32) -> std::process::Output {
    let mut c = quarry();
    c.arg("build").arg(img).arg("-o").arg(out).args(["--json", "--no-cache"]).args(extra);
    c.arg("--cache-dir").arg(cache).env("no_proxy", "127.0.0.1").env("NO_PROXY", "127.0.0.1");
    run_expect(&mut c, code)
}

fn text(m: &BTreeMap<String, (tar::EntryType, Vec<u8>)>, p: &str) -> String {
    String::from_utf8_lossy(&m.get(p).unwrap_or_else(|| panic!("no {p} in {:?}", m.keys().collect::<Vec<_>>())).1)
        .into_owned()
}

fn digest(built: &serde_json::Value) -> String {
    built["manifest_digest"].as_str().unwrap().to_string()
}

#[test]
fn scripts_and_a_trigger_run_across_layers() {
    let Some(a) = test_archive() else { return };
    let work = tempfile::tempdir().unwrap();
    let img = image(work.path(), &a, &a.keyring, &[&["good"], &["plugin"]]);
    run_expect(quarry_for("lock", &packages_cache()).arg(&img), 0);
    let out = work.path().join("out");
    let built = stdout_json(&build(&img, &packages_cache(), &out, &[], 0));

    let one = deb_archive::layer_entries(&out, &built, 1);
    // The preinst ran as dpkg runs it: `install`, its package named, its
    // control archive in tmp.ci/.
    assert_eq!(text(&one, "var/lib/good/preinst"), "install good good\n");
    assert_eq!(text(&one, "var/lib/good/postinst"), "configure\n");
    // update-alternatives with its priority in a variable.
    assert_eq!(text(&one, "usr/bin/good"), "/etc/alternatives/good");
    assert_eq!(text(&one, "etc/alternatives/good"), "/usr/lib/good/good-real");
    // The conffile installed by dpkg, its md5 recorded.
    assert_eq!(text(&one, "etc/good.conf"), "x\n");
    assert!(!one.contains_key("etc/good.conf.dpkg-new"));
    let status = text(&one, "var/lib/dpkg/status");
    let good = status.split("\n\n").find(|p| p.starts_with("Package: good\n")).unwrap();
    assert!(
        good.contains("Status: install ok installed")
            && good.contains("/etc/good.conf 401b30e3b8b5d629635a5c613cdb7919"),
        "{good}"
    );
    assert!(text(&one, "var/lib/dpkg/triggers/File").contains("/usr/share/good/plugins good\n"));
    assert!(
        !one.keys().any(|k| k.contains(".quarry-ci") || k.contains("policy-rc.d") || k.contains("tmp.ci")),
        "no scaffolding left"
    );

    // A file of the next layer activates the trigger good declared below.
    let two = deb_archive::layer_entries(&out, &built, 2);
    assert_eq!(text(&two, "var/lib/good/triggered"), "/usr/share/good/plugins\n");
    assert!(!two.contains_key("var/lib/good/postinst"), "good is not configured again");
    let status = text(&two, "var/lib/dpkg/status");
    assert!(status.split("\n\n").all(|p| p.is_empty() || p.contains("Status: install ok installed")), "{status}");

    // Laid out on disk instead of in memory (directories list their
    // entries in another order): the same image.
    let again = stdout_json(&build(&img, &packages_cache(), &work.path().join("again"), &[], 0));
    let mut c = quarry();
    c.arg("build").arg(&img).arg("-o").arg(work.path().join("disk")).args(["--json", "--no-cache"]);
    c.arg("--cache-dir").arg(packages_cache()).env("no_proxy", "127.0.0.1").env("QUARRY_SANDBOX_BACKING", "disk");
    let disk = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(digest(&built), digest(&again));
    assert_eq!(digest(&built), digest(&disk));
}

#[test]
fn a_failing_script_is_named_and_nothing_is_cached() {
    let Some(a) = test_archive() else { return };
    let work = tempfile::tempdir().unwrap();
    for (include, script, said) in [
        (&["bad"][..], "post-installation", "boom from bad's postinst"),
        (&["badpre"][..], "preinst", "no room for badpre"),
    ] {
        let dir = work.path().join(include[0]);
        let img = image(&dir, &a, &a.keyring, &[include]);
        run_expect(quarry_for("lock", &packages_cache()).arg(&img), 0);
        let e = String::from_utf8_lossy(&build(&img, &packages_cache(), &dir.join("out"), &[], 1).stderr).into_owned();
        assert!(
            e.contains(&format!("package `{}`", include[0]))
                && e.contains(script)
                && e.contains(said)
                && e.contains("nothing was cached"),
            "{e}"
        );
        // The base is cached; the failed layer is not.
        let plan = stdout_json(&run_expect(quarry_for("plan", &packages_cache()).arg(&img).arg("--json"), 0));
        let layers = plan["layers"].as_array().unwrap();
        assert_eq!(layers[0]["cached"], true, "{plan:#}");
        assert_eq!(layers[1]["cached"], false, "{plan:#}");
    }
}

/// The rootless user of the Podman tests (scripts/setup gives it a
/// subordinate id range).
const ROOTLESS: &str = "quarry-rootless";

#[test]
fn unprivileged_build_is_the_same_image() {
    // SAFETY: plain system call.
    if unsafe { libc::geteuid() } != 0
        || Command::new("id").arg(ROOTLESS).output().map(|o| !o.status.success()).unwrap_or(true)
    {
        assert!(
            !in_ci(),
            "CI is set but the user `{ROOTLESS}` (scripts/setup) is missing or the tests do not run as root"
        );
        return;
    }
    let Some(a) = test_archive() else { return };
    // A directory the user can read and write, with the archive's keyring in it.
    let work = tempfile::Builder::new().prefix("rootless-").tempdir_in("/tmp").unwrap();
    let keyring = work.path().join("test.gpg");
    std::fs::copy(&a.keyring, &keyring).unwrap();
    let img = image(work.path(), &a, &keyring, &[&["good"], &["plugin"]]);
    run_expect(quarry_for("lock", &packages_cache()).arg(&img), 0);
    let root = stdout_json(&build(&img, &packages_cache(), &work.path().join("root-out"), &[], 0));
    // The user's own cache, holding the base's .debs (no download).
    let cache = work.path().join("cache");
    std::fs::create_dir_all(cache.join("debs")).unwrap();
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(img.with_extension("lock")).unwrap()).unwrap();
    for p in lock["base"]["package"].as_array().unwrap() {
        let sha = p["sha256"].as_str().unwrap();
        std::fs::copy(packages_cache().join("debs").join(sha), cache.join("debs").join(sha)).unwrap();
    }
    run_expect(Command::new("chown").args(["-R", ROOTLESS]).arg(work.path()), 0);
    let mut c = Command::new("runuser");
    c.args(["-u", ROOTLESS, "--"]).arg(env!("CARGO_BIN_EXE_quarry")).arg("build").arg(&img);
    c.arg("--cache-dir").arg(&cache).arg("-o").arg(work.path().join("user-out")).arg("--json");
    c.env("no_proxy", "127.0.0.1").env("HOME", work.path());
    let user = stdout_json(&run_expect(&mut c, 0));
    assert_eq!(digest(&root), digest(&user), "the sandbox maps the user's subordinate ids back to the image's");
}

#[test]
fn without_user_namespaces_the_error_says_what_to_do() {
    if !have_tool("unshare") {
        return;
    }
    let Some(a) = test_archive() else { return };
    let work = tempfile::tempdir().unwrap();
    let img = image(work.path(), &a, &a.keyring, &[&["good"]]);
    run_expect(quarry_for("lock", &packages_cache()).arg(&img), 0);
    // Root of a user namespace that may make no more of them: the kernel
    // refuses quarry's sandbox, as a container's seccomp profile would.
    let script = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"";
    let mut c = Command::new("unshare");
    c.args(["--user", "--map-root-user", "sh", "-c", script, "sh"]).arg(env!("CARGO_BIN_EXE_quarry"));
    c.arg("build")
        .arg(&img)
        .arg("--cache-dir")
        .arg(packages_cache())
        .arg("-o")
        .arg(work.path().join("out"))
        .arg("--no-cache");
    c.env("no_proxy", "127.0.0.1").env_remove("SOURCE_DATE_EPOCH");
    let e = String::from_utf8_lossy(&run_expect(&mut c, 1).stderr).into_owned();
    assert!(
        e.contains("cannot make the sandbox") && e.contains("user namespace") && e.contains("configure = \"engine\""),
        "{e}"
    );
}
