//! Every shipped Debian and Ubuntu image against what Debian's own tools
//! make from the same packages, pockets and mirrors: mmdebstrap (scripts
//! and triggers run, as Debian's installer does) for the base, and `apt-get
//! install` in a chroot of it for each layer (tests/fixtures/debian-reference.sh,
//! apt held to the images' locks). Every file, symlink, directory, mode and
//! owner must be equal (the dpkg status byte for byte; `apt-mark showauto`
//! named when it differs), except the entries of `ALLOWED`, each with its reason. The
//! differences the maintainer scripts used to leave (no CA store, no
//! git-lfs filter, no `cc`, no `.pyc`, no triggers or debconf database...)
//! are also checked by name, so that a reference that lost them too could
//! not hide them.
use crate::common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One entry of a tree: kind and content (or target), mode, owner.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: char,
    /// sha256 of a file's bytes (a `.pyc`'s without its 16-byte header),
    /// a symlink's target, a device's numbers.
    what: String,
    mode: u32,
    uid: u64,
    gid: u64,
}

type Tree = BTreeMap<String, Entry>;

fn hash_file(path: &str, bytes: &[u8]) -> String {
    // The header of a .pyc names its source's time (see `pyc-timestamps`
    // in crates/inputs/src/distro/normalize.rs); the code after it must be equal.
    let body = if path.ends_with(".pyc") && bytes.len() >= 16 { &bytes[16..] } else { bytes };
    quarry::oci::digest::sha256_hex(body)
}

/// A directory tree (the reference).
fn dir_tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    for e in walkdir::WalkDir::new(root).min_depth(1) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let ft = m.file_type();
        let (kind, what) = if ft.is_symlink() {
            ('l', std::fs::read_link(e.path()).unwrap().to_string_lossy().into_owned())
        } else if ft.is_dir() {
            ('d', String::new())
        } else if ft.is_file() {
            ('f', hash_file(&rel, &std::fs::read(e.path()).unwrap()))
        } else {
            ('o', m.rdev().to_string())
        };
        out.insert(rel, Entry { kind, what, mode: m.mode() & 0o7777, uid: m.uid() as u64, gid: m.gid() as u64 });
    }
    out
}

/// An image's merged filesystem, read from its layer blobs (whiteouts and
/// opaque directories applied, as a runtime would), without extracting.
fn image_tree(layout: &Path) -> Tree {
    let json = |p: &Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let blob = |d: &str| layout.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
    let index = json(&layout.join("index.json"));
    let manifest = json(&blob(index["manifests"][0]["digest"].as_str().unwrap()));
    let mut out = Tree::new();
    for l in manifest["layers"].as_array().unwrap() {
        let f = std::fs::File::open(blob(l["digest"].as_str().unwrap())).unwrap();
        let mut a = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
        let mut links = Vec::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().trim_start_matches("./").trim_end_matches('/').to_string();
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if name == ".wh..wh..opq" {
                let prefix = format!("{dir}/");
                out.retain(|k, _| !k.starts_with(&prefix));
                continue;
            }
            if let Some(gone) = name.strip_prefix(".wh.") {
                let gone = if dir.is_empty() { gone.to_string() } else { format!("{dir}/{gone}") };
                let prefix = format!("{gone}/");
                out.retain(|k, _| *k != gone && !k.starts_with(&prefix));
                continue;
            }
            let h = e.header().clone();
            let (mode, uid, gid) = (h.mode().unwrap() & 0o7777, h.uid().unwrap(), h.gid().unwrap());
            let (kind, what) = match h.entry_type() {
                tar::EntryType::Directory => ('d', String::new()),
                tar::EntryType::Symlink => ('l', e.link_name().unwrap().unwrap().to_string_lossy().into_owned()),
                tar::EntryType::Link => {
                    links.push((path.clone(), e.link_name().unwrap().unwrap().to_string_lossy().into_owned()));
                    continue;
                }
                tar::EntryType::Regular => {
                    let mut b = Vec::new();
                    e.read_to_end(&mut b).unwrap();
                    ('f', hash_file(&path, &b))
                }
                other => ('o', format!("{other:?}")),
            };
            if kind != 'd' {
                let prefix = format!("{path}/");
                out.retain(|k, _| !k.starts_with(&prefix));
            }
            out.insert(path, Entry { kind, what, mode, uid, gid });
        }
        for (path, target) in links {
            let t = out.get(target.trim_start_matches("./")).cloned().expect("a link's target is in its layer");
            out.insert(path, t);
        }
    }
    out
}

/// Why an entry may differ from Debian's: each reason is a fact about the
/// reference or about a rule quarry states in its code.
const ALLOWED: &[(&str, &str)] = &[
    ("dev/", "mmdebstrap makes device nodes and links in /dev; an image gets /dev from its runtime"),
    ("etc/hostname", "mmdebstrap copies the host's (debootstrap compatibility; its manual says so)"),
    ("etc/resolv.conf", "mmdebstrap copies the host's"),
    ("etc/fstab", "mmdebstrap writes an empty one (debootstrap compatibility)"),
    ("etc/apt/sources.list.d/", "named differently; `apt sources` below checks both name the same archive"),
    ("var/cache/apt/archives/lock", "left by apt, which the reference ran"),
    ("var/lib/apt/lists/lock", "left by apt, which the reference ran"),
    ("var/cache/apt/archives/partial", "apt makes it _apt's, mode 0700, when it runs (the reference ran it)"),
    ("var/lib/apt/lists/partial", "apt makes it _apt's, mode 0700, when it runs"),
    ("var/lib/dpkg/status-old", "dpkg's backup of its previous status: the reference wrote the same database in more runs"),
    ("var/lib/dpkg/diversions-old", "dpkg-divert's backup of the previous state, likewise"),
    ("var/cache/debconf/config.dat-old", "debconf's backup of its previous state, likewise"),
    ("var/cache/debconf/templates.dat-old", "debconf's backup of its previous state, likewise"),
    ("var/cache/debconf/passwords.dat-old", "debconf's backup of its previous state, likewise"),
    ("var/cache/fontconfig/", "fc-cache drops the caches of font directories newer than SOURCE_DATE_EPOCH (the reference's); quarry's tree has its times clamped, so its caches are valid and kept"),
    ("var/log/fontconfig.log", "fc-cache's log names the caches it dropped (see var/cache/fontconfig)"),
    ("var/cache/debconf/tmp.ci", "left by dpkg-preconfigure, the debconf hook apt runs before it installs (quarry's packages are not installed through apt)"),
];

/// Files equal once their lines (or paragraphs) are put in one order.
const SAME_SET: &[(&str, &str)] = &[
    ("etc/shells", "update-shells appends in the order it sees shells; the reference ran it once per apt batch"),
    ("var/lib/dpkg/triggers/File", "dpkg writes file-trigger interests in unpack order; apt's order is not quarry's"),
    ("var/lib/apt/extended_states", "apt writes its marks in its cache's order"),
    ("etc/gitconfig", "`git lfs install` writes its keys in Go map order, different at every run (quarry orders them by rule `git-lfs-config`)"),
];

/// The definition's own accounts (users, groups), which no package makes.
const OURS: &[&str] = &["tester"];

fn allowed(path: &str) -> Option<&'static str> {
    ALLOWED
        .iter()
        .find(|(p, _)| path == p.trim_end_matches('/') || (p.ends_with('/') && path.starts_with(p)))
        .map(|(_, r)| *r)
}

fn read(root: &Path, p: &str) -> String {
    std::fs::read_to_string(root.join(p)).unwrap_or_default()
}

/// An account file without the definition's users, and without the groups
/// made only for them (a supplementary group Debian does not have).
fn without_ours(text: &str, theirs: &str) -> String {
    let names: BTreeSet<&str> = theirs.lines().filter_map(|l| l.split(':').next()).collect();
    text.lines()
        .filter(|l| !OURS.iter().any(|u| l.split(':').next() == Some(u)))
        .filter(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let members: Vec<&str> =
                f.last().map(|m| m.split(',').filter(|m| !m.is_empty()).collect()).unwrap_or_default();
            names.contains(f[0]) || members.is_empty() || !members.iter().all(|m| OURS.contains(m))
        })
        .map(|l| {
            let mut f: Vec<String> = l.split(':').map(String::from).collect();
            if let Some(members) = f.last_mut() {
                *members = members.split(',').filter(|m| !OURS.contains(m)).collect::<Vec<_>>().join(",");
            }
            f.join(":")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn sorted_units(text: &str, paragraphs: bool) -> Vec<String> {
    let mut v: Vec<String> = if paragraphs {
        text.split("\n\n").map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
    } else {
        text.lines().map(String::from).collect()
    };
    v.sort();
    v
}

/// Every difference not explained, one line each.
fn compare(ours: &Tree, ours_root: &Path, theirs: &Tree, theirs_root: &Path, own_files: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    let ours_only = |p: &str| {
        OURS.iter().any(|u| {
            p == format!("home/{u}") || p.starts_with(&format!("home/{u}/")) || p == format!("etc/sudoers.d/{u}")
        }) || own_files.contains(&p)
    };
    let paths: BTreeSet<&String> = ours.keys().chain(theirs.keys()).collect();
    for p in paths {
        let (a, b) = (ours.get(p), theirs.get(p));
        if a == b || allowed(p).is_some() {
            continue;
        }
        match (a, b) {
            (Some(_), None) if ours_only(p) => continue,
            (Some(a), Some(b)) if a.kind == b.kind && (a.mode, a.uid, a.gid) == (b.mode, b.uid, b.gid) => {
                if SAME_SET.iter().any(|(f, _)| f == p) {
                    let para = p.ends_with("extended_states");
                    if sorted_units(&read(ours_root, p), para) == sorted_units(&read(theirs_root, p), para) {
                        continue;
                    }
                }
                let accounts = ["passwd", "group", "shadow", "gshadow", "subuid", "subgid"];
                let file = p.strip_prefix("etc/").unwrap_or("").trim_end_matches('-');
                if accounts.contains(&file) {
                    let theirs = read(theirs_root, p);
                    if without_ours(&read(ours_root, p), &theirs) == without_ours(&theirs, &theirs) {
                        continue;
                    }
                }
            }
            _ => {}
        }
        bad.push(format!("{p}: quarry {a:?}, Debian {b:?}"));
    }
    bad
}

/// The differences the packages' scripts make, named (see the module doc).
fn named_checks(root: &Path, tree: &Tree, reference: &Tree, reference_root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let mut want = |ok: bool, what: &str| {
        if !ok {
            bad.push(format!("missing: {what}"));
        }
    };
    let count = |t: &Tree, prefix: &str| t.keys().filter(|k| k.starts_with(prefix)).count();
    want(
        tree.get("etc/ssl/certs/ca-certificates.crt").is_some_and(|e| e.kind == 'f'),
        "the CA bundle (update-ca-certificates)",
    );
    want(
        count(tree, "etc/ssl/certs/") == count(reference, "etc/ssl/certs/") && count(tree, "etc/ssl/certs/") > 100,
        "every hashed CA link",
    );
    let pycs = |t: &Tree| t.keys().filter(|k| k.ends_with(".pyc")).count();
    want(pycs(tree) == pycs(reference) && pycs(tree) > 0, "the system Python's .pyc files (py3compile)");
    for f in ["File", "Unincorp"] {
        want(tree.contains_key(&format!("var/lib/dpkg/triggers/{f}")), "dpkg's triggers database");
    }
    want(tree.contains_key("var/cache/debconf/config.dat"), "the debconf database");
    want(tree.get("var/lib/apt/extended_states").is_some(), "apt's automatic marks");
    want(tree.keys().any(|k| k.starts_with("etc/apt/sources.list.d/")), "apt sources");
    if tree.contains_key("usr/bin/git-lfs") {
        want(read(root, "etc/gitconfig").contains("[filter \"lfs\"]"), "git-lfs's filter in /etc/gitconfig");
    }
    if tree.contains_key("usr/bin/clang-14") {
        for cc in ["cc", "c++", "c89", "c99"] {
            want(tree.get(&format!("usr/bin/{cc}")).is_some_and(|e| e.kind == 'l'), "the cc/c++/c89/c99 alternatives");
        }
    }
    if tree.contains_key("usr/bin/python3") {
        want(tree.contains_key("etc/python3/debian_config"), "/etc/python3/debian_config");
        want(
            tree.keys().any(|k| k.starts_with("usr/local/lib/python3") && k.ends_with("dist-packages")),
            "/usr/local/lib/python3.X/dist-packages",
        );
    }
    if tree.contains_key("etc/sudoers") {
        want(tree["etc/sudoers"].mode == 0o440, "/etc/sudoers mode 0440");
    }
    // Debian 12's dash diverts /bin/sh; Debian 13's ships it.
    if read(reference_root, "var/lib/dpkg/diversions").contains("/bin/sh") {
        want(read(root, "var/lib/dpkg/diversions").contains("/bin/sh"), "dash's diversion of /bin/sh");
    }
    want(tree.contains_key("etc/inputrc"), "/etc/inputrc");
    bad
}

/// What `apt-mark showauto` lists: the packages `extended_states` marks
/// `Auto-Installed: 1`.
fn showauto(root: &Path) -> BTreeSet<String> {
    read(root, "var/lib/apt/extended_states")
        .split("\n\n")
        .filter(|p| p.lines().any(|l| l.trim() == "Auto-Installed: 1"))
        .filter_map(|p| p.lines().find_map(|l| l.strip_prefix("Package: ")).map(|n| n.trim().to_string()))
        .collect()
}

/// The apt sources of both name the same archive (mirror, suite).
fn same_archive(ours: &Path, theirs: &Path) -> bool {
    let fields = |root: &Path| -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for e in std::fs::read_dir(root.join("etc/apt/sources.list.d")).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            for l in text.lines() {
                // Options (`[signed-by=...]`) say how, not which archive.
                let l = match (l.find('['), l.find(']')) {
                    (Some(a), Some(b)) if a < b => format!("{}{}", &l[..a], &l[b + 1..]),
                    _ => l.to_string(),
                };
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.first() == Some(&"deb") && w.len() > 2 {
                    out.insert((w[1].trim_end_matches('/').to_string(), w[2].to_string()));
                }
            }
            for p in text.split("\n\n") {
                let get = |k: &str| p.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("").trim().to_string();
                let (u, s) = (get("URIs:"), get("Suites:"));
                for s in s.split_whitespace().filter(|_| !u.is_empty()) {
                    out.insert((u.trim_end_matches('/').to_string(), s.to_string()));
                }
            }
        }
        out
    };
    let (a, b) = (fields(ours), fields(theirs));
    !a.is_empty() && a == b
}

struct Image<'a> {
    /// images/NAME.toml
    name: &'a str,
    /// The reference tree it is compared with.
    reference: &'static str,
    /// What the definition adds besides packages (a files layer), only in quarry's.
    own_files: &'static [&'static str],
}

fn includes(def: &Path, base: bool) -> Vec<String> {
    let v: toml::Value = toml::from_str(&std::fs::read_to_string(def).unwrap()).unwrap();
    let list = if base {
        v["base"]["packages"]["include"].clone()
    } else {
        v["layer"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|l| l["source"][0].get("packages").map(|p| p["include"].clone()))
            .unwrap()
    };
    list.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

fn layer_file_includes(file: &str) -> Vec<String> {
    let v: toml::Value = toml::from_str(&std::fs::read_to_string(repo().join("layers").join(file)).unwrap()).unwrap();
    v["source"][0]["packages"]["include"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// Every pinned package of the locks, `name version` per line.
fn pins(locks: &[&str]) -> String {
    let mut out = String::new();
    for l in locks {
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(repo().join("images").join(l)).unwrap()).unwrap();
        let mut pk: Vec<toml::Value> =
            v.get("base").and_then(|b| b.get("package")).and_then(|p| p.as_array()).cloned().unwrap_or_default();
        for layer in v.get("layer").and_then(|l| l.as_table()).into_iter().flat_map(|t| t.values()) {
            pk.extend(layer["package"].as_array().cloned().unwrap_or_default());
        }
        for p in pk {
            out.push_str(&format!("{} {}\n", p["name"].as_str().unwrap(), p["version"].as_str().unwrap()));
        }
    }
    out
}

/// The image's apt sources as one-line `deb` entries, each suite with the
/// mirror quarry takes for it (`mirror = "host"`, or the user's `--set`):
/// what the reference is made from.
fn sources(image: &str) -> String {
    let def = repo().join("images").join(image);
    let plan = run_expect(quarry().args(["lock", "--dry-run", "--json"]).arg(&def).args(mirror_sets(&def)), 0);
    let v = stdout_json(&plan);
    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(&def).unwrap()).unwrap();
    let components: Vec<&str> = doc["base"]["packages"]["components"]
        .as_array()
        .map(|c| c.iter().map(|x| x.as_str().unwrap()).collect())
        .unwrap_or_else(|| vec!["main"]);
    let mut out = String::new();
    for r in v["releases"].as_array().unwrap() {
        let r = r.as_str().unwrap();
        let (mirror, rest) = r.split_once("/dists/").expect("a Release URL");
        let suite = rest.trim_end_matches("/InRelease");
        out.push_str(&format!("deb {mirror} {suite} {}\n", components.join(" ")));
    }
    out
}

/// The keyring file of a definition whose `keyring` is a pinned package:
/// the package fetched from the Debian mirror with curl and checked here
/// against the definition's sha256, independently of quarry.
fn keyring_of(image: &str) -> Option<PathBuf> {
    let doc: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("images").join(image)).unwrap()).unwrap();
    let k = doc["base"]["packages"]["keyring"].as_table()?;
    let (deb, sha, path) = (k["deb"].as_str()?, k["sha256"].as_str()?, k["path"].as_str()?);
    let dir = fixtures_dir().join(format!("keyring-{}", &sha[..12]));
    let file = dir.join(path.trim_start_matches('/'));
    with_lock("keyring", || {
        if file.exists() {
            return;
        }
        let debian = sources("no_rocm_image_debian12.toml");
        let mirror = debian.split_whitespace().nth(1).unwrap().to_string();
        let tmp = fixtures_dir().join("keyring.deb");
        run_expect(Command::new("curl").args(["-fsSL", "-o"]).arg(&tmp).arg(format!("{mirror}/{deb}")), 0);
        assert_eq!(quarry::oci::digest::sha256_file(&tmp).unwrap(), sha, "{deb} is not the pinned package");
        run_expect(Command::new("dpkg-deb").arg("-x").arg(&tmp).arg(&dir), 0);
    });
    Some(file)
}

/// The reference trees for one suite, made once (cached by what makes them).
fn reference(
    suite: &str,
    sources: &str,
    keyring: Option<&Path>,
    base_include: &[String],
    layers: &[(String, Vec<String>)],
    pins: &str,
) -> PathBuf {
    let mm = Command::new("mmdebstrap").arg("--version").output().unwrap();
    let mut what = String::from_utf8_lossy(&mm.stdout).into_owned();
    // How the trees are kept (see `keep_small`).
    what.push_str("kept small, v1 ");
    what.push_str(&format!("{suite} {sources} {keyring:?} {base_include:?} {layers:?} {pins}"));
    let tag =
        format!("{}-{}", script_tag("debian-reference.sh"), &quarry::oci::digest::sha256_hex(what.as_bytes())[..12]);
    let out = fixtures_dir().join("debian-reference").join(format!("{suite}-{tag}"));
    with_lock(&format!("debian-reference-{suite}"), || {
        if out.exists() {
            return;
        }
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let pins_file = out.with_extension("pins");
        std::fs::write(&pins_file, pins).unwrap();
        let sources_file = out.with_extension("sources");
        std::fs::write(&sources_file, sources).unwrap();
        let mut c = Command::new("sh");
        c.arg(repo().join("tests/fixtures/debian-reference.sh"))
            .arg(&out)
            .arg(suite)
            .arg(&sources_file)
            .arg(&pins_file)
            .arg(base_include.join(","));
        if let Some(k) = keyring {
            c.env("KEYRING", k);
        }
        for (name, inc) in layers {
            c.arg(format!("{name}={}", inc.join(",")));
        }
        let st = c.status().unwrap();
        assert!(st.success(), "making the reference for {suite} failed");
        // Each tree made from the one before it is complete now: keep them small.
        let names = std::iter::once("base".to_string())
            .chain(layers.iter().map(|(n, _)| n.split('@').next().unwrap().to_string()));
        for name in names {
            keep_small(&out.join(name));
        }
    });
    out
}

/// Which of a tree's files `compare`, `named_checks`, `showauto` and
/// `same_archive` read whole: the small text files of /etc and of apt's and
/// dpkg's state (what `extract` takes of quarry's image too).
fn read_whole(p: &str) -> bool {
    p.starts_with("etc/") || p.starts_with("var/lib/apt/") || p.starts_with("var/lib/dpkg/") && !p.contains("/info/")
}

/// A reference tree kept as what the checks need: every entry (kind,
/// content digest, mode, owner) in `ROOT.tree.jsonl`, and only the files
/// the checks read whole; the rest removed. The full trees took 14 GB of
/// the test cache (Debian 13's ROCm layers alone 9 GB), more than a CI
/// machine's free disk could spare beside the other tests.
fn keep_small(root: &Path) {
    let mut lines = String::new();
    for (path, e) in dir_tree(root) {
        let line = serde_json::json!([path, e.kind.to_string(), e.what, e.mode, e.uid, e.gid]);
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    std::fs::write(tree_file(root), lines).unwrap();
    let walk = walkdir::WalkDir::new(root).min_depth(1).contents_first(true);
    for e in walk.into_iter().map(|e| e.unwrap()) {
        let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if e.file_type().is_dir() {
            // Emptied directories go; those holding kept files stay.
            let _ = std::fs::remove_dir(e.path());
        } else if !(e.file_type().is_file() && read_whole(&rel)) {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
}

fn tree_file(root: &Path) -> PathBuf {
    root.with_extension("tree.jsonl")
}

/// A reference tree as [`keep_small`] stored it.
fn reference_tree(root: &Path) -> Tree {
    let text = std::fs::read_to_string(tree_file(root)).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let n = |i: usize| v[i].as_u64().unwrap();
            let kind = v[1].as_str().unwrap().chars().next().unwrap();
            let e = Entry { kind, what: v[2].as_str().unwrap().to_string(), mode: n(3) as u32, uid: n(4), gid: n(5) };
            (v[0].as_str().unwrap().to_string(), e)
        })
        .collect()
}

fn build(image: &str) -> PathBuf {
    let out = tempfile::Builder::new().prefix("fidelity-").tempdir_in(test_cache()).unwrap().keep();
    run_expect(
        quarry()
            .arg("build")
            .arg(repo().join("images").join(image))
            .arg("--cache-dir")
            .arg(packages_cache())
            .arg("-o")
            .arg(&out)
            .arg("--quiet")
            .args(mirror_sets(&repo().join("images").join(image))),
        0,
    );
    out
}

/// The image's tree extracted to a directory (for reading whole files).
fn extract(layout: &Path) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("fidelity-root-").tempdir_in(test_cache()).unwrap();
    let json = |p: &Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let blob = |dg: &str| layout.join("blobs/sha256").join(dg.trim_start_matches("sha256:"));
    let index = json(&layout.join("index.json"));
    let manifest = json(&blob(index["manifests"][0]["digest"].as_str().unwrap()));
    // Only the small text files compare() and named_checks() read.
    for l in manifest["layers"].as_array().unwrap() {
        let f = std::fs::File::open(blob(l["digest"].as_str().unwrap())).unwrap();
        let mut a = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let p = e.path().unwrap().to_string_lossy().trim_start_matches("./").to_string();
            if e.header().entry_type() == tar::EntryType::Regular && read_whole(&p) {
                let to = d.path().join(&p);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                let mut b = Vec::new();
                e.read_to_end(&mut b).unwrap();
                std::fs::write(to, b).unwrap();
            }
        }
    }
    d
}

fn check(images: &[Image], refs: &Path) {
    let mut report = Vec::new();
    for img in images {
        let layout = build(&format!("{}.toml", img.name));
        let ours = image_tree(&layout);
        let root = extract(&layout);
        let theirs_root = refs.join(img.reference);
        let theirs = reference_tree(&theirs_root);
        for line in compare(&ours, root.path(), &theirs, &theirs_root, img.own_files) {
            report.push(format!("{}: {line}", img.name));
        }
        for line in named_checks(root.path(), &ours, &theirs, &theirs_root) {
            report.push(format!("{}: {line}", img.name));
        }
        let (auto_ours, auto_theirs) = (showauto(root.path()), showauto(&theirs_root));
        if auto_ours != auto_theirs {
            report.push(format!(
                "{}: `apt-mark showauto` differs: automatic only in quarry's {:?}, only in the reference's {:?}",
                img.name,
                auto_ours.difference(&auto_theirs).collect::<Vec<_>>(),
                auto_theirs.difference(&auto_ours).collect::<Vec<_>>()
            ));
        }
        if !same_archive(root.path(), &theirs_root) {
            report.push(format!("{}: apt sources name another archive than the reference's", img.name));
        }
        let _ = std::fs::remove_dir_all(&layout);
    }
    assert!(report.is_empty(), "differences from Debian's own install:\n{}", report.join("\n"));
}

fn can_run() -> bool {
    // SAFETY: plain system call.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(
            !in_ci(),
            "CI is set but the tests do not run as root: the Debian reference needs mmdebstrap --mode=root"
        );
        eprintln!("skipping: the Debian reference needs root");
    }
    root && have_tool("mmdebstrap") && have_tool("gpgv")
}

/// A test image and its four variants against the reference: mmdebstrap
/// of the base, `apt-get install` of each variant's packages over it.
fn family(distro: &str, suite: &str) {
    let base_name = format!("no_rocm_image_{distro}");
    let base = repo().join(format!("images/{base_name}.toml"));
    let layered = ["media", "ocl_rt", "openmpi", "rocgdb"];
    let layers: Vec<(String, Vec<String>)> = layered
        .iter()
        .map(|l| (l.to_string(), includes(&repo().join(format!("images/{base_name}_{l}.toml")), false)))
        .collect();
    let locks: Vec<String> = std::iter::once(format!("{base_name}.lock"))
        .chain(layered.iter().map(|l| format!("{base_name}_{l}.lock")))
        .collect();
    let pins = pins(&locks.iter().map(String::as_str).collect::<Vec<_>>());
    let keyring = keyring_of(&format!("{base_name}.toml"));
    let sources = sources(&format!("{base_name}.toml"));
    let refs = reference(suite, &sources, keyring.as_deref(), &includes(&base, true), &layers, &pins);
    let names: Vec<String> =
        std::iter::once(base_name.clone()).chain(layered.iter().map(|l| format!("{base_name}_{l}"))).collect();
    let mut images = vec![Image { name: &names[0], reference: "base", own_files: &[] }];
    for (l, name) in layered.iter().zip(&names[1..]) {
        images.push(Image { name, reference: l, own_files: &[] });
    }
    check(&images, &refs);
}

#[test]
fn debian12_images_are_what_debian_installs() {
    if !can_run() {
        return;
    }
    family("debian12", "bookworm");
}

#[test]
fn ubuntu24_04_images_are_what_ubuntu_installs() {
    if !can_run() {
        return;
    }
    family("ubuntu24_04", "noble");
}

#[test]
fn debian13_rocm_images_are_what_debian_installs() {
    if !can_run() {
        return;
    }
    let runtime = repo().join("images/rocm-runtime-debian13.toml");
    let layers = vec![
        ("rocm".to_string(), layer_file_includes("rocm-debian.toml")),
        ("hip@rocm".to_string(), includes(&repo().join("images/hip-builder-debian13.toml"), false)),
    ];
    let pins = pins(&["rocm-runtime-debian13.lock", "hip-builder-debian13.lock"]);
    let refs =
        reference("trixie", &sources("rocm-runtime-debian13.toml"), None, &includes(&runtime, true), &layers, &pins);
    check(
        &[
            Image { name: "rocm-runtime-debian13", reference: "rocm", own_files: &[] },
            // The hip-clang files layer: clang++ on PATH for CMake's HIP language.
            Image { name: "hip-builder-debian13", reference: "hip", own_files: &["usr/local/bin/clang++"] },
        ],
        &refs,
    );
}
