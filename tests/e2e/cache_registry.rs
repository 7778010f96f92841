//! End-to-end: the cache's registry tier. Debian's `docker-registry` on a
//! free 127.0.0.1 port stands for the registry many CI runners and GPU
//! nodes share; two cache directories stand for two machines. What one
//! machine built, the other takes from the registry, verified, and builds
//! nothing: layers, kernel outputs, wheels and compiler objects. A
//! read-only machine writes nothing; a corrupted blob is refused and
//! rebuilt; a killed push leaves no entry; a wrong login or an unreachable
//! registry says so.

use crate::common;

use common::registry::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tags of every repository of the registry, read from its storage (what
/// its catalog and tag lists serve), and its blobs: the whole of what it holds.
fn holdings(reg: &Registry) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in walkdir::WalkDir::new(reg.storage()).into_iter().filter_map(|e| e.ok()) {
        let p = e.path().strip_prefix(reg.storage()).unwrap().to_string_lossy().into_owned();
        if p.contains("/_manifests/tags/") && p.ends_with("/current/link")
            || p.starts_with("blobs/") && p.ends_with("/data")
        {
            out.insert(p);
        }
    }
    out
}

/// The entry tags of `repo` (`layer-<key>`...).
fn tags(reg: &Registry, repo: &str) -> Vec<String> {
    let dir = reg.storage().join("repositories").join(repo).join("_manifests/tags");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// `quarry build --json` of `def` with the cache `cache` and the registry tier `registry` (`--cache-registry ...`).
fn build(def: &Path, out: &Path, cache: &Path, registry: &[&str], code: i32) -> (Value, String) {
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(def)
            .arg("-o")
            .arg(out)
            .arg("--json")
            .arg("--cache-dir")
            .arg(cache)
            .args(registry)
            .env("DOCKER_CONFIG", out.with_extension("no-docker-config")),
        code,
    );
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let v = if code == 0 { stdout_json(&o) } else { Value::Null };
    (v, stderr)
}

/// A scratch image of two files layers: a fixed one and one of `content`.
fn small_image(dir: &Path, content: &str) -> PathBuf {
    write(&dir.join("fixed.txt"), "the same on every machine\n");
    write(&dir.join("varying.txt"), content);
    let def = dir.join("image.toml");
    write(
        &def,
        "name = \"shared\"\nbase = \"scratch\"\n\
         [[layer]]\nname = \"fixed\"\n[[layer.source]]\nfile = \"fixed.txt\"\ndest = \"/fixed.txt\"\n\
         [[layer]]\nname = \"varying\"\n[[layer.source]]\nfile = \"varying.txt\"\ndest = \"/varying.txt\"\n",
    );
    def
}

fn layers(v: &Value) -> Vec<(String, bool, Value)> {
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_string(), l["cached"].as_bool().unwrap(), l["tier"].clone()))
        .collect()
}

#[test]
fn a_second_machine_builds_nothing_the_first_built_and_read_only_writes_nothing() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let def = small_image(&w.join("src"), "one\n");
    let tier = format!("{}/quarry-cache", reg.addr());
    let rw = ["--cache-registry", tier.as_str()];

    // Machine A builds and pushes both layers.
    let (a, _) = build(&def, &w.join("out-a"), &w.join("cache-a"), &rw, 0);
    assert!(layers(&a).iter().all(|(_, cached, _)| !cached), "{a:#}");
    assert_eq!(a["cache_registry"]["pushed"], 2, "{a:#}");
    let entries = tags(&reg, "quarry-cache");
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|t| t.starts_with("layer-") && t.len() == 6 + 64), "{entries:?}");

    // Machine B: an empty cache, the same registry. Its plan says where each layer is...
    let plan = stdout_json(&run_expect(
        quarry().arg("plan").arg(&def).arg("--json").arg("--cache-dir").arg(w.join("cache-b")).args(rw),
        0,
    ));
    let tiers: Vec<&Value> = plan["layers"].as_array().unwrap().iter().map(|l| &l["tier"]).collect();
    assert_eq!(tiers, [&Value::from("remote"), &Value::from("remote")], "{plan:#}");
    // ...and its build packs nothing and writes the same image.
    let (b, _) = build(&def, &w.join("out-b"), &w.join("cache-b"), &rw, 0);
    assert_eq!(b["manifest_digest"], a["manifest_digest"]);
    for (name, cached, tier) in layers(&b) {
        assert!(cached && tier == "remote", "{name}: {b:#}");
    }
    assert_eq!((b["cache_registry"]["hits"].as_u64(), b["cache_registry"]["pushed"].as_u64()), (Some(2), Some(0)));
    // Pulled and verified into B's own cache: a third build needs no registry.
    let (again, _) = build(&def, &w.join("out-b2"), &w.join("cache-b"), &[], 0);
    assert!(layers(&again).iter().all(|(_, cached, tier)| *cached && tier == "local"), "{again:#}");

    // A read-only machine builds what changed but writes nothing.
    let before = holdings(&reg);
    let writes =
        |log: &str| log.matches("http.request.method=PUT").count() + log.matches("http.request.method=POST").count();
    let writes_before = writes(&reg.log());
    assert!(writes_before > 0, "the registry logs its requests:\n{}", reg.log());
    let def2 = small_image(&w.join("src2"), "two\n");
    let ro = ["--cache-registry", tier.as_str(), "--cache-registry-mode", "ro"];
    let (c, _) = build(&def2, &w.join("out-c"), &w.join("cache-c"), &ro, 0);
    let l = layers(&c);
    assert!(l[0].1 && l[0].2 == "remote", "the fixed layer comes from the registry: {c:#}");
    assert!(!l[1].1, "the changed layer is built: {c:#}");
    assert_eq!(holdings(&reg), before, "ro wrote to the registry");
    assert_eq!(writes(&reg.log()), writes_before, "ro sent a PUT or POST:\n{}", reg.log());
    // The same through the environment.
    let (_, _) = build(&def2, &w.join("out-d"), &w.join("cache-d"), &[], 0);
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(&def2)
            .args(["-o"])
            .arg(w.join("out-e"))
            .arg("--json")
            .arg("--cache-dir")
            .arg(w.join("cache-e"))
            .env("QUARRY_CACHE_REGISTRY", &tier)
            .env("QUARRY_CACHE_REGISTRY_MODE", "ro"),
        0,
    );
    assert_eq!(stdout_json(&o)["cache_registry"]["mode"], "ro");
    assert_eq!(holdings(&reg), before, "ro (from the environment) wrote to the registry");
}

#[test]
fn the_debian12_test_image_comes_whole_from_the_registry() {
    if !have_registry() || !have_tool("gpgv") {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let def = repo().join("images/no_rocm_image_debian12.toml");
    let tier = format!("{}/quarry-cache", reg.addr());
    let rw = ["--cache-registry", tier.as_str()];
    // Machine A: the tests' warm package cache (it built this image
    // before, or builds it now); what the registry lacks, it pushes.
    let (a, _) = build(&def, &w.join("out-a"), &packages_cache(), &rw, 0);
    assert!(a["cache_registry"]["pushed"].as_u64().unwrap() >= 1, "{a:#}");
    // Machine B: nothing local. Every layer from the registry, the same image.
    let (b, _) = build(&def, &w.join("out-b"), &w.join("cache-b"), &rw, 0);
    assert_eq!(b["manifest_digest"], a["manifest_digest"], "{b:#}");
    let l = layers(&b);
    assert!(!l.is_empty() && l.iter().all(|(_, cached, tier)| *cached && tier == "remote"), "0 layers packed: {b:#}");
    // The layout is whole: an independent reader agrees.
    let inspected =
        Command::new("skopeo").arg("inspect").arg(format!("oci:{}:latest", w.join("out-b").display())).output();
    let inspected = inspected.expect("run skopeo");
    assert!(inspected.status.success(), "{}", String::from_utf8_lossy(&inspected.stderr));
}

#[test]
fn a_corrupted_blob_is_refused_and_rebuilt_and_bad_registries_say_so() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let def = small_image(&w.join("src"), "content\n");
    let tier = format!("{}/quarry-cache", reg.addr());
    let rw = ["--cache-registry", tier.as_str()];
    let (a, _) = build(&def, &w.join("out-a"), &w.join("cache-a"), &rw, 0);

    // Flip a byte of one layer blob in the registry's storage.
    let victim = a["layers"][1]["digest"].as_str().unwrap().to_string();
    let data = reg.blob_data(&victim);
    let mut bytes = std::fs::read(&data).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    let (b, stderr) = build(&def, &w.join("out-b"), &w.join("cache-b"), &rw, 0);
    assert_eq!(b["manifest_digest"], a["manifest_digest"], "rebuilt, the same image");
    let l = layers(&b);
    assert!(l[0].1 && l[0].2 == "remote", "{b:#}");
    assert!(!l[1].1, "the refused layer is rebuilt: {b:#}");
    let refused = b["cache_registry"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{b:#}");
    let warned = b["warnings"].as_array().unwrap().iter().any(|m| m.as_str().unwrap().contains("refused"));
    assert!(warned, "the refusal is reported: {b:#}\n{stderr}");
    assert!(!w.join("cache-b").join("blobs/sha256").join(bytes_digest(&bytes)).exists(), "nothing corrupt was kept");

    // Unreachable: a warning, once, and a local build; required: an error naming it.
    let closed = format!("127.0.0.1:{}/quarry-cache", free_port());
    let (c, _) = build(&def, &w.join("out-c"), &w.join("cache-c"), &["--cache-registry", &closed], 0);
    let warnings: Vec<&str> = c["warnings"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(warnings.iter().filter(|m| m.contains("cannot be reached")).count(), 1, "{warnings:?}");
    assert_eq!(c["manifest_digest"], a["manifest_digest"]);
    let (_, err) = build(
        &def,
        &w.join("out-d"),
        &w.join("cache-d"),
        &["--cache-registry", &closed, "--cache-registry-required"],
        1,
    );
    assert!(err.contains(&closed) && err.contains("--cache-registry-required"), "{err}");

    // A registry that wants a login: wrong credentials are an error naming
    // the registry and where quarry read them.
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    std::fs::write(w.join("htpasswd"), format!("quarry:{hash}\n")).unwrap();
    let locked =
        Registry::start(&format!("  htpasswd:\n    realm: quarry-test\n    path: {}\n", w.join("htpasswd").display()));
    let wrong = w.join("docker-wrong");
    let auth = base64_basic("quarry:not-the-password");
    write(&wrong.join("config.json"), &format!("{{\"auths\":{{\"{}\":{{\"auth\":\"{auth}\"}}}}}}", locked.addr()));
    let locked_tier = format!("{}/quarry-cache", locked.addr());
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .arg("-o")
            .arg(w.join("out-e"))
            .arg("--cache-dir")
            .arg(w.join("cache-e"))
            .args(["--cache-registry", &locked_tier])
            .env("DOCKER_CONFIG", &wrong),
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&locked.addr()) && err.contains(&wrong.join("config.json").display().to_string()), "{err}");
    // The right ones work.
    let good = w.join("docker-good");
    let auth = base64_basic("quarry:s3cret");
    write(&good.join("config.json"), &format!("{{\"auths\":{{\"{}\":{{\"auth\":\"{auth}\"}}}}}}", locked.addr()));
    run_expect(
        quarry()
            .arg("build")
            .arg(&def)
            .arg("-o")
            .arg(w.join("out-f"))
            .arg("--cache-dir")
            .arg(w.join("cache-f"))
            .args(["--cache-registry", &locked_tier])
            .env("DOCKER_CONFIG", &good),
        0,
    );
    assert_eq!(tags(&locked, "quarry-cache").len(), 2);
}

fn bytes_digest(b: &[u8]) -> String {
    quarry::oci::digest::sha256_hex(b)
}

fn base64_basic(user_pass: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(user_pass)
}

#[test]
fn a_killed_push_leaves_no_entry_and_the_next_run_completes_it() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // A 200 MB layer of random bytes, stored uncompressed: its upload takes
    // long enough to be killed in the middle.
    let big = random_200m();
    write(
        &w.join("big/image.toml"),
        &format!(
            "name = \"big\"\nbase = \"scratch\"\n[[layer]]\nname = \"random\"\n[[layer.source]]\nfile = \"{}\"\ndest = \"/random.bin\"\n",
            big.display()
        ),
    );
    let def = w.join("big/image.toml");
    let tier = format!("{}/quarry-cache", reg.addr());
    let cache = w.join("cache");
    let mut child = quarry()
        .arg("build")
        .arg(&def)
        .arg("-o")
        .arg(w.join("out"))
        .args(["--compression", "none", "--json", "--cache-registry", &tier, "--cache-dir"])
        .arg(&cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if largest_upload(&reg) >= 40 << 20 {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            panic!("the build ended ({st}) before its push could be killed:\n{err}");
        }
        assert!(Instant::now() < deadline, "the upload did not start within 300 s:\n{}", reg.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    // SIGKILL: nothing of quarry's runs after this.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(tags(&reg, "quarry-cache").is_empty(), "a killed push left a tag: {:?}", tags(&reg, "quarry-cache"));

    // The next run finds the layer in its own cache and completes the push.
    let (v, _) = build(&def, &w.join("out2"), &cache, &["--cache-registry", &tier, "--compression", "none"], 0);
    assert_eq!(v["layers"][0]["tier"], "local", "{v:#}");
    assert_eq!(v["cache_registry"]["pushed"], 1, "{v:#}");
    assert_eq!(tags(&reg, "quarry-cache").len(), 1);
    // Another machine takes it from there, whole.
    let (b, _) =
        build(&def, &w.join("out3"), &w.join("cache-b"), &["--cache-registry", &tier, "--compression", "none"], 0);
    assert_eq!(b["layers"][0]["tier"], "remote", "{b:#}");
    assert_eq!(b["manifest_digest"], v["manifest_digest"]);
}

#[test]
fn two_machines_pushing_one_key_at_once_both_succeed() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let def = small_image(&w.join("src"), "raced\n");
    let tier = format!("{}/quarry-cache", reg.addr());
    let spawn = |m: &str| {
        quarry()
            .arg("build")
            .arg(&def)
            .arg("-o")
            .arg(w.join(format!("out-{m}")))
            .args(["--json", "--cache-registry", &tier, "--cache-dir"])
            .arg(w.join(format!("cache-{m}")))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for o in [&a, &b] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(stdout_json(&a)["manifest_digest"], stdout_json(&b)["manifest_digest"]);
    assert_eq!(tags(&reg, "quarry-cache").len(), 2, "one entry per key");
    // The entries are whole: a third machine takes both, verified.
    let (c, _) = build(&def, &w.join("out-c"), &w.join("cache-c"), &["--cache-registry", &tier], 0);
    assert!(layers(&c).iter().all(|(_, cached, tier)| *cached && tier == "remote"), "{c:#}");
}

/// `quarry kernel build --json` of the four-kernel project in `src`.
fn kernel_build(builder: &Path, src: &Path, out: &Path, cache: &Path, tier: &str) -> Value {
    stdout_json(&run_expect(
        quarry()
            .args(["kernel", "build"])
            .arg(src)
            .arg("--image")
            .arg(builder)
            .arg("-o")
            .arg(out)
            .arg("--cache-dir")
            .arg(cache)
            .args(["--cache-registry", tier, "--targets", "gfx90a,gfx942", "--gpu", "none", "--json", "--", "make"]),
        0,
    ))
}

/// The sdists of tests/fixtures/wheel-corpus.sh (shared with tests/e2e/wheel_corpus.rs).
fn corpus_sdist(prefix: &str) -> PathBuf {
    std::fs::read_dir(common::wheel_corpus().join("sdists"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no sdist {prefix}*"))
}

#[test]
fn kernel_and_wheel_builds_are_shared_and_one_edited_kernel_is_all_that_compiles() {
    if !have_registry() || !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let tier = format!("{}/quarry-cache", reg.addr());
    let src = w.join("src");
    for f in ["k1.hip", "k2.hip", "k3.hip", "k4.hip", "Makefile"] {
        write(&src.join(f), &std::fs::read_to_string(repo().join("tests/fixtures/hip-multi").join(f)).unwrap());
    }

    // Machine A compiles the four kernels (ccache: four misses) and shares them.
    let a = kernel_build(&builder, &src, &w.join("out-a"), &w.join("cache-a"), &tier);
    assert_eq!(a["cached"], false, "{a:#}");
    assert_eq!(
        (a["compiler_cache"]["misses"].as_u64(), a["compiler_cache"]["hits"].as_u64()),
        (Some(4), Some(0)),
        "{a:#}"
    );
    // Machine B: nothing compiled, the same bytes.
    let b = kernel_build(&builder, &src, &w.join("out-b"), &w.join("cache-b"), &tier);
    assert_eq!((b["cached"].as_bool(), b["tier"].as_str()), (Some(true), Some("remote")), "{b:#}");
    assert!(b.get("compiler_cache").is_none(), "nothing ran: {b:#}");
    let lib = |o: &str| std::fs::read(w.join(o).join("libkernels.so")).unwrap();
    assert_eq!(lib("out-a"), lib("out-b"));

    // One kernel of four edited: that one is compiled, the other three come from ccache.
    let k3 = std::fs::read_to_string(src.join("k3.hip")).unwrap().replace("* 3.0f", "* 3.5f");
    write(&src.join("k3.hip"), &k3);
    let edited = kernel_build(&builder, &src, &w.join("out-a2"), &w.join("cache-a"), &tier);
    let cc = &edited["compiler_cache"];
    assert_eq!((cc["misses"].as_u64(), cc["hits"].as_u64()), (Some(1), Some(3)), "{edited:#}");
    assert_eq!(cc["restored_from"], "local");
    // The engine's CPU count of the build container is the compile work:
    // one file of four (plus three cache hits and the link) is well under
    // the cold build's, however busy the machine (CPU time, not wall).
    let cpu =
        |v: &Value| v["container_cpu_seconds"].as_f64().unwrap_or_else(|| panic!("no container_cpu_seconds: {v:#}"));
    assert!(cpu(&a) > 0.0 && cpu(&edited) < 0.6 * cpu(&a), "cold {} s, edited {} s", cpu(&a), cpu(&edited));
    // Machine C, cold, edits another kernel: the outputs are new, the
    // compiler cache comes from the registry (A pushed it), one compile.
    let k4 = std::fs::read_to_string(src.join("k4.hip")).unwrap().replace("* 4.0f", "* 4.5f");
    write(&src.join("k4.hip"), &k4);
    let c = kernel_build(&builder, &src, &w.join("out-c"), &w.join("cache-c"), &tier);
    let cc = &c["compiler_cache"];
    assert_eq!((cc["misses"].as_u64(), cc["hits"].as_u64()), (Some(1), Some(3)), "{c:#}");
    assert_eq!(cc["restored_from"], "remote", "{c:#}");

    // A wheel from a real sdist: built on A, taken whole by B (the lock is the project's).
    let sdist = corpus_sdist("crcmod-");
    let lock = w.join("crcmod.lock");
    let wheel_build = |out: &str, cache: &str| {
        stdout_json(&run_expect(
            quarry()
                .args(["wheel", "build"])
                .arg(&sdist)
                .arg("--image")
                .arg(&builder)
                .arg("-o")
                .arg(w.join(out))
                .arg("--lock")
                .arg(&lock)
                .arg("--cache-dir")
                .arg(w.join(cache))
                .args(["--cache-registry", &tier, "--gpu", "none", "--json"]),
            0,
        ))
    };
    let wa = wheel_build("wheels-a", "cache-a");
    assert_eq!(wa[0]["cached"], false, "{wa:#}");
    let wb = wheel_build("wheels-b", "cache-b");
    assert_eq!((wb[0]["cached"].as_bool(), wb[0]["tier"].as_str()), (Some(true), Some("remote")), "{wb:#}");
    assert_eq!(wb[0]["sha256"], wa[0]["sha256"]);
    let file = |v: &Value| std::fs::read(v[0]["wheel"].as_str().unwrap()).unwrap();
    assert_eq!(file(&wa), file(&wb), "the same bytes");
    assert!(tags(&reg, "quarry-cache").iter().any(|t| t.starts_with("wheel-")));
    assert!(tags(&reg, "quarry-cache").iter().any(|t| t.starts_with("ccache-")));
    assert_eq!(common::leaked_quarry_containers(), Vec::<String>::new());
}
