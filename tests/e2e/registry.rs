//! End-to-end: `quarry push` and `registry` bases against Debian's
//! `docker-registry` (distribution 2.8) started on a free 127.0.0.1 port by
//! each test, and killed when the test ends, even on failure.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::registry::*;

/// A layer cache shared by the tests' builds (stable keys: later runs reuse it).
fn shared_cache() -> PathBuf {
    repo().join("target/registry-test-cache")
}

struct Built {
    dir: PathBuf,
    manifest_digest: String,
    layer_digests: Vec<String>,
    diff_ids: Vec<String>,
}

fn build(def: &Path, out: &Path, cache: &Path, extra: &[&str]) -> Built {
    let o = run_expect(
        quarry().arg("build").arg(def).arg("-o").arg(out).arg("--json").arg("--cache-dir").arg(cache).args(extra),
        0,
    );
    let v = stdout_json(&o);
    let layers = v["layers"].as_array().unwrap();
    Built {
        dir: out.to_path_buf(),
        manifest_digest: v["manifest_digest"].as_str().unwrap().to_string(),
        layer_digests: layers.iter().map(|l| l["digest"].as_str().unwrap().to_string()).collect(),
        diff_ids: layers.iter().map(|l| l["diff_id"].as_str().unwrap().to_string()).collect(),
    }
}

/// A small image: a scratch base and one layer of `content`.
fn small_image(work: &Path, name: &str, content: &str) -> Built {
    write(&work.join(name).join("data.txt"), content);
    write(
        &work.join(name).join("image.toml"),
        &format!(
            "name = \"{name}\"\nbase = \"scratch\"\n[config]\nenv = {{ FROM_BASE = \"{name}\" }}\n[[layer]]\nname = \"data\"\n[[layer.source]]\nfile = \"data.txt\"\ndest = \"/data/{name}.txt\"\n"
        ),
    );
    build(&work.join(name).join("image.toml"), &work.join("out").join(name), &shared_cache(), &[])
}

fn push(dir: &Path, reference: &str, cache: &Path, extra: &[&str]) -> Value {
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(dir)
            .arg(reference)
            .arg("--plain-http")
            .arg("--json")
            .arg("--cache-dir")
            .arg(cache)
            .args(extra),
        0,
    );
    stdout_json(&o)
}

fn skopeo_inspect(reference: &str) -> Value {
    let o = run_expect(
        Command::new("skopeo").args(["inspect", "--tls-verify=false"]).arg(format!("docker://{reference}")),
        0,
    );
    stdout_json(&o)
}

fn blobs_in(cache: &Path) -> Vec<String> {
    match std::fs::read_dir(cache.join("blobs/sha256")) {
        Ok(d) => d.map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect(),
        Err(_) => vec![],
    }
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn push_then_build_on_it_by_digest() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let rootfs = debian_rootfs("");
    write(&w.join("a/motd"), "pushed by quarry\n");
    write(
        &w.join("a/image.toml"),
        &format!(
            "name = \"a\"\nbase = {{ rootfs = \"{}\" }}\n[config]\nenv = {{ QUARRY_BASE = \"a\" }}\ncmd = [\"/bin/sh\"]\n[[layer]]\nname = \"motd\"\n[[layer.source]]\nfile = \"motd\"\ndest = \"/etc/motd\"\n",
            rootfs.display()
        ),
    );
    let a = build(&w.join("a/image.toml"), &w.join("out/a"), &shared_cache(), &[]);
    let push_cache = w.join("push-cache");
    let reference = format!("{}/quarry-test/a:v1", reg.addr());

    // First push: every blob is sent: the layers and the config, and the
    // provenance artifact's two (its statement and the empty config).
    let p1 = push(&a.dir, &reference, &push_cache, &[]);
    assert_eq!(p1["digest"], a.manifest_digest.as_str());
    assert_eq!(p1["ref"], format!("{reference}@{}", a.manifest_digest).as_str());
    assert_eq!(p1["blobs_pushed"], a.layer_digests.len() as u64 + 3, "{p1}");
    assert_eq!(p1["blobs_skipped"], 0);

    // An independent reader sees the image.
    let s = skopeo_inspect(&reference);
    assert_eq!(s["Digest"], a.manifest_digest.as_str());
    let skopeo_layers: Vec<String> =
        s["Layers"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
    assert_eq!(skopeo_layers, a.layer_digests);
    assert!(s["Env"].as_array().unwrap().iter().any(|e| e == "QUARRY_BASE=a"), "{s}");

    // Second push: nothing is uploaded (the registry's own log agrees).
    let uploads_before = reg.upload_requests();
    assert!(uploads_before > 0, "the registry log shows no uploads:\n{}", reg.log());
    let p2 = push(&a.dir, &reference, &push_cache, &[]);
    assert_eq!(p2["blobs_pushed"], 0, "{p2}");
    assert_eq!(p2["blobs_skipped"], a.layer_digests.len() as u64 + 3);
    assert_eq!(reg.upload_requests(), uploads_before, "a second push started uploads:\n{}", reg.log());

    // An image on the pushed one, pulled by digest into an empty cache.
    write(&w.join("b/extra.txt"), "on top\n");
    write(
        &w.join("b/image.toml"),
        &format!(
            "name = \"b\"\nbase = {{ registry = \"{}/quarry-test/a@{}\" }}\n[[layer]]\nname = \"extra\"\n[[layer.source]]\nfile = \"extra.txt\"\ndest = \"/extra.txt\"\n",
            reg.addr(),
            a.manifest_digest
        ),
    );
    let pull_cache = w.join("pull-cache");
    let b = build(&w.join("b/image.toml"), &w.join("out/b"), &pull_cache, &[]);
    assert_eq!(b.layer_digests.len(), a.layer_digests.len() + 1);
    assert_eq!(&b.layer_digests[..a.layer_digests.len()], &a.layer_digests[..], "base layers changed");
    assert_eq!(&b.diff_ids[..a.diff_ids.len()], &a.diff_ids[..]);
    for d in &a.layer_digests {
        assert!(blobs_in(&pull_cache).contains(&d.trim_start_matches("sha256:").to_string()));
    }
    // The config is inherited: skopeo reads B's layout with A's env and cmd.
    let sb = stdout_json(&run_expect(
        Command::new("skopeo").arg("inspect").arg(format!("oci:{}:latest", w.join("out/b").display())),
        0,
    ));
    assert!(sb["Env"].as_array().unwrap().iter().any(|e| e == "QUARRY_BASE=a"), "{sb}");

    // Pushing B to another repository mounts A's layers instead of sending them.
    let pb = push(&b.dir, &format!("{}/quarry-test/b:v1", reg.addr()), &pull_cache, &[]);
    assert_eq!(pb["blobs_mounted"], a.layer_digests.len() as u64, "{pb}");
    assert_eq!(pb["blobs_pushed"], 4, "the new layer, the config, the provenance statement and its empty config: {pb}");
    assert_eq!(skopeo_inspect(&format!("{}/quarry-test/b:v1", reg.addr()))["Digest"], b.manifest_digest.as_str());

    // A base pulled once by digest rebuilds without the registry.
    drop(reg);
    let b2 = build(&w.join("b/image.toml"), &w.join("out/b2"), &pull_cache, &[]);
    assert_eq!(b2.manifest_digest, b.manifest_digest);
}

#[test]
fn killed_push_completes_when_run_again() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let big = random_200m();
    write(
        &w.join("big/image.toml"),
        &format!(
            "name = \"big\"\nbase = \"scratch\"\n[[layer]]\nname = \"random\"\n[[layer.source]]\nfile = \"{}\"\ndest = \"/random.bin\"\n",
            big.display()
        ),
    );
    let img = build(&w.join("big/image.toml"), &w.join("out/big"), &shared_cache(), &["--compression", "none"]);
    let reference = format!("{}/quarry-test/big:v1", reg.addr());
    let cache = w.join("cache");

    let mut child = quarry()
        .arg("push")
        .arg(&img.dir)
        .arg(&reference)
        .args(["--plain-http", "--json", "--chunk-size", "16", "--cache-dir"])
        .arg(&cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill it once the registry holds part of the big blob.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if largest_upload(&reg) >= 40 << 20 {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            panic!("the push ended ({st}) before it could be killed mid-way:\n{err}");
        }
        assert!(Instant::now() < deadline, "the upload did not start within 120 s:\n{}", reg.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let partial = largest_upload(&reg);
    assert!(partial < 200 << 20, "the blob was complete before the kill ({partial} bytes)");

    // Run again: it completes, and the registry serves the whole image.
    let p = push(&img.dir, &reference, &cache, &["--chunk-size", "16"]);
    assert_eq!(p["digest"], img.manifest_digest.as_str());
    assert!(p["blobs_pushed"].as_u64().unwrap() >= 1, "{p}");
    let s = skopeo_inspect(&reference);
    assert_eq!(s["Digest"], img.manifest_digest.as_str());
    // Every byte made it: pulling it as a base verifies the 200 MB blob.
    write(
        &w.join("on/image.toml"),
        &format!("name = \"on\"\nbase = {{ registry = \"{}/quarry-test/big@{}\" }}\n", reg.addr(), img.manifest_digest),
    );
    let on = build(&w.join("on/image.toml"), &w.join("out/on"), &w.join("pull-cache"), &[]);
    assert_eq!(on.layer_digests, img.layer_digests);
}

#[test]
fn refusing_registry_is_a_clear_error() {
    if !have_registry() {
        return;
    }
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let img = small_image(w, "refused", "refused\n");
    let empty_docker_config = w.join("docker-empty");
    std::fs::create_dir_all(&empty_docker_config).unwrap();

    // Nothing listening.
    let port = free_port();
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(&img.dir)
            .arg(format!("127.0.0.1:{port}/quarry-test/x:v1"))
            .args(["--plain-http", "--cache-dir"])
            .arg(w.join("cache"))
            .env("QUARRY_REGISTRY_ATTEMPTS", "2"),
        1,
    );
    let e = stderr(&o);
    assert!(e.contains(&format!("127.0.0.1:{port}")) && e.contains("cannot connect"), "{e}");

    // htpasswd auth: refused without credentials, accepted with the docker config's.
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    std::fs::write(w.join("htpasswd"), format!("quarry:{hash}\n")).unwrap();
    let reg =
        Registry::start(&format!("  htpasswd:\n    realm: quarry-test\n    path: {}\n", w.join("htpasswd").display()));
    let reference = format!("{}/quarry-test/auth:v1", reg.addr());
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(&img.dir)
            .arg(&reference)
            .args(["--plain-http", "--cache-dir"])
            .arg(w.join("cache"))
            .env("DOCKER_CONFIG", &empty_docker_config),
        1,
    );
    let e = stderr(&o);
    assert!(e.contains("authentication") && e.contains("docker login"), "{e}");
    assert!(!e.contains("panicked"), "{e}");

    let wrong = w.join("docker-wrong");
    write(
        &wrong.join("config.json"),
        &format!(r#"{{"auths":{{"http://{}":{{"auth":"cXVhcnJ5Ondyb25n"}}}}}}"#, reg.addr()), // quarry:wrong
    );
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(&img.dir)
            .arg(&reference)
            .args(["--plain-http", "--cache-dir"])
            .arg(w.join("cache"))
            .env("DOCKER_CONFIG", &wrong),
        1,
    );
    assert!(stderr(&o).contains("authentication"), "{}", stderr(&o));

    let good = w.join("docker-good");
    write(
        &good.join("config.json"),
        &format!(r#"{{"auths":{{"{}":{{"auth":"cXVhcnJ5OnMzY3JldA=="}}}}}}"#, reg.addr()), // quarry:s3cret
    );
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(&img.dir)
            .arg(&reference)
            .args(["--plain-http", "--json", "--cache-dir"])
            .arg(w.join("cache"))
            .env("DOCKER_CONFIG", &good),
        0,
    );
    assert_eq!(stdout_json(&o)["digest"], img.manifest_digest.as_str());

    // A base on that registry: refused without credentials, pulled with them.
    write(
        &w.join("on/image.toml"),
        &format!(
            "name = \"on\"\nbase = {{ registry = \"{}/quarry-test/auth@{}\" }}\n",
            reg.addr(),
            img.manifest_digest
        ),
    );
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(w.join("on/image.toml"))
            .arg("-o")
            .arg(w.join("out/on"))
            .arg("--cache-dir")
            .arg(w.join("pull-cache"))
            .env("DOCKER_CONFIG", &empty_docker_config),
        1,
    );
    let e = stderr(&o);
    assert!(e.contains("on/image.toml") && e.contains("authentication"), "{e}");
    assert!(!w.join("out/on").exists());
    run_expect(
        quarry()
            .arg("build")
            .arg(w.join("on/image.toml"))
            .arg("-o")
            .arg(w.join("out/on"))
            .arg("--cache-dir")
            .arg(w.join("pull-cache"))
            .env("DOCKER_CONFIG", &good),
        0,
    );
}

/// A token service for the bearer flow: answers every request with a token
/// and records the request lines.
fn token_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    // Every request is answered here: nothing goes upstream.
    intercepting_proxy(0, |_, _| {
        let body = r#"{"token":"quarry-test-token"}"#;
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
}

#[test]
fn bearer_token_flow() {
    if !have_registry() {
        return;
    }
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let img = small_image(w, "bearer", "bearer\n");
    let (tport, seen) = token_server();
    // distribution's `silly` auth challenges every request without an
    // Authorization header with `Bearer realm=...,service=...,scope=...`.
    let reg = Registry::start(&format!(
        "  silly:\n    realm: http://127.0.0.1:{tport}/token\n    service: quarry-test-service\n"
    ));
    let reference = format!("{}/quarry-test/tok:v1", reg.addr());
    let empty = w.join("docker-empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(&img.dir)
            .arg(&reference)
            .args(["--plain-http", "--json", "--cache-dir"])
            .arg(w.join("cache"))
            .env("DOCKER_CONFIG", &empty),
        0,
    );
    assert_eq!(stdout_json(&o)["digest"], img.manifest_digest.as_str());
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "the token service was never asked");
    assert!(seen.iter().all(|l| l.starts_with("GET /token?")), "{seen:?}");
    assert!(seen.iter().any(|l| l.contains("service=quarry-test-service")), "{seen:?}");
    assert!(seen.iter().any(|l| l.contains("scope=repository%3Aquarry-test%2Ftok%3Apull%2Cpush")), "{seen:?}");
    // One token serves the whole push.
    assert_eq!(seen.len(), 1, "{seen:?}");
}

#[test]
fn digest_mismatch_leaves_nothing_in_the_cache() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let img = small_image(w, "corrupt", &"some bytes to corrupt\n".repeat(1000));
    push(&img.dir, &format!("{}/quarry-test/corrupt:v1", reg.addr()), &w.join("push-cache"), &[]);

    // Serve wrong bytes for the layer: same size, one byte changed.
    let layer = &img.layer_digests[0];
    let data = reg.blob_data(layer);
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();

    write(
        &w.join("on/image.toml"),
        &format!(
            "name = \"on\"\nbase = {{ registry = \"{}/quarry-test/corrupt@{}\" }}\n",
            reg.addr(),
            img.manifest_digest
        ),
    );
    let cache = w.join("pull-cache");
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(w.join("on/image.toml"))
            .arg("-o")
            .arg(w.join("out/on"))
            .arg("--cache-dir")
            .arg(&cache),
        1,
    );
    let e = stderr(&o);
    assert!(e.contains("digest") && e.contains(layer.as_str()) && e.contains("nothing was stored"), "{e}");
    let hex = layer.trim_start_matches("sha256:").to_string();
    assert!(!blobs_in(&cache).contains(&hex), "the bad blob is in the cache");
    assert_eq!(std::fs::read_dir(cache.join("tmp")).unwrap().count(), 0, "temporary files left in the cache");
    assert!(!w.join("out/on").exists());

    // Served short: a size error, nothing stored either.
    std::fs::write(&data, &bytes[..mid]).unwrap();
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(w.join("on/image.toml"))
            .arg("-o")
            .arg(w.join("out/on"))
            .arg("--cache-dir")
            .arg(&cache),
        1,
    );
    assert!(stderr(&o).contains("bytes"), "{}", stderr(&o));
    assert!(!blobs_in(&cache).contains(&hex));
    assert_eq!(std::fs::read_dir(cache.join("tmp")).unwrap().count(), 0);
}

#[test]
fn missing_tag_and_tag_only_bases_are_clear_errors() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let img = small_image(w, "tags", "tags\n");
    push(&img.dir, &format!("{}/quarry-test/tags:v1", reg.addr()), &w.join("cache"), &[]);

    let base_build = |base: &str| {
        write(&w.join("on/image.toml"), &format!("name = \"on\"\nbase = {{ registry = \"{base}\" }}\n"));
        let o = run_expect(
            quarry()
                .arg("build")
                .arg(w.join("on/image.toml"))
                .arg("-o")
                .arg(w.join("out/on"))
                .arg("--cache-dir")
                .arg(w.join("cache")),
            1,
        );
        stderr(&o)
    };
    // A tag that does not exist.
    let e = base_build(&format!("{}/quarry-test/tags:nope", reg.addr()));
    assert!(e.contains("tag `nope`") && e.contains("not found"), "{e}");
    // A tag that exists: refused, naming the digest to pin.
    let e = base_build(&format!("{}/quarry-test/tags:v1", reg.addr()));
    assert!(e.contains("pinned by digest") && e.contains(&img.manifest_digest), "{e}");
    // A digest the repository does not have.
    let missing = format!("sha256:{}", "0".repeat(64));
    let e = base_build(&format!("{}/quarry-test/tags@{missing}", reg.addr()));
    assert!(e.contains(&missing) && e.contains("not found"), "{e}");
    // A repository that does not exist.
    let e = base_build(&format!("{}/quarry-test/nothing@{}", reg.addr(), img.manifest_digest));
    assert!(e.contains("not found"), "{e}");
    assert!(!w.join("out/on").exists());
}

/// An image index with an amd64 and an arm64 image, put under a tag.
#[test]
fn index_is_resolved_to_the_image_platform() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let cache = w.join("cache");
    let amd = small_image(w, "amd", "amd64\n");
    write(&w.join("arm/data.txt"), "arm64\n");
    write(
        &w.join("arm/image.toml"),
        "name = \"arm\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/arm64\"\n[[layer]]\nname = \"data\"\n[[layer.source]]\nfile = \"data.txt\"\ndest = \"/data.txt\"\n",
    );
    let arm = build(&w.join("arm/image.toml"), &w.join("out/arm"), &shared_cache(), &[]);
    push(&amd.dir, &format!("{}/quarry-test/multi:amd", reg.addr()), &cache, &[]);
    push(&arm.dir, &format!("{}/quarry-test/multi:arm", reg.addr()), &cache, &[]);
    let entry = |b: &Built, arch: &str| {
        let size = std::fs::metadata(b.dir.join("blobs/sha256").join(b.manifest_digest.trim_start_matches("sha256:")))
            .unwrap()
            .len();
        serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": b.manifest_digest,
            "size": size,
            "platform": { "os": "linux", "architecture": arch },
        })
    };
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [entry(&arm, "arm64"), entry(&amd, "amd64")],
    }))
    .unwrap();
    let index_digest = format!("sha256:{}", quarry::oci::digest::sha256_hex(&index));
    ureq::put(format!("http://{}/v2/quarry-test/multi/manifests/multi", reg.addr()))
        .header("content-type", "application/vnd.oci.image.index.v1+json")
        .send(&index[..])
        .expect("put the index");

    let on = |platform: &str, out: &str| {
        write(
            &w.join(out).join("image.toml"),
            &format!(
                "name = \"{out}\"\nbase = {{ registry = \"{}/quarry-test/multi@{index_digest}\" }}\n[config]\nplatform = \"{platform}\"\n",
                reg.addr()
            ),
        );
        w.join(out).join("image.toml")
    };
    let b = build(&on("linux/amd64", "on-amd"), &w.join("out/on-amd"), &w.join("pull-cache"), &[]);
    assert_eq!(b.layer_digests, amd.layer_digests);
    let b = build(&on("linux/arm64", "on-arm"), &w.join("out/on-arm"), &w.join("pull-cache"), &[]);
    assert_eq!(b.layer_digests, arm.layer_digests);
    let o = run_expect(
        quarry()
            .arg("build")
            .arg(on("linux/s390x", "on-s390x"))
            .arg("-o")
            .arg(w.join("out/on-s390x"))
            .arg("--cache-dir")
            .arg(w.join("pull-cache")),
        1,
    );
    let e = stderr(&o);
    assert!(e.contains("linux/s390x") && e.contains("linux/amd64") && e.contains("linux/arm64"), "{e}");

    // `quarry pull` writes the registry's own bytes: the layout has its digest.
    let o = run_expect(
        quarry()
            .arg("pull")
            .arg(format!("{}/quarry-test/multi:multi", reg.addr()))
            .args(["--plain-http", "--json", "--platform", "linux/arm64", "-o"])
            .arg(w.join("out/pulled"))
            .arg("--cache-dir")
            .arg(&cache),
        0,
    );
    let pulled = stdout_json(&o);
    assert_eq!(pulled["digest"], arm.manifest_digest.as_str());
    // The image's provenance comes along (the layout then holds two
    // manifests: skopeo is given the tag).
    assert_eq!(pulled["attached"], serde_json::json!(["application/vnd.in-toto+json"]), "{pulled}");
    let s = stdout_json(&run_expect(
        Command::new("skopeo").arg("inspect").arg(format!("oci:{}:multi", w.join("out/pulled").display())),
        0,
    ));
    assert_eq!(s["Digest"], arm.manifest_digest.as_str());
    assert_eq!(s["Architecture"], "arm64");
}

/// A proxy to `upstream` that answers its first `fail` connections with a
/// 503 and then forwards every connection byte for byte.
fn flaky_proxy(upstream: u16, fail: usize) -> (u16, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let failed = Arc::new(Mutex::new(0usize));
    let failed2 = failed.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { continue };
            let mut n = failed2.lock().unwrap();
            if *n < fail {
                *n += 1;
                let _ = client
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = client.shutdown(std::net::Shutdown::Both);
                continue;
            }
            drop(n);
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut c1, mut s1) = (client, server);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c1, &mut s1);
                let _ = s1.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, failed)
}

#[test]
fn transient_failures_are_retried() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let img = small_image(w, "flaky", "flaky\n");
    let (port, failed) = flaky_proxy(reg.port, 3);
    let p = push(&img.dir, &format!("127.0.0.1:{port}/quarry-test/flaky:v1"), &w.join("cache"), &[]);
    assert_eq!(p["digest"], img.manifest_digest.as_str());
    assert_eq!(*failed.lock().unwrap(), 3, "the proxy did not fail requests");
    assert_eq!(skopeo_inspect(&format!("{}/quarry-test/flaky:v1", reg.addr()))["Digest"], img.manifest_digest.as_str());

    // Pulling through a proxy that fails again.
    let (port, failed) = flaky_proxy(reg.port, 3);
    write(
        &w.join("on/image.toml"),
        &format!(
            "name = \"on\"\nbase = {{ registry = \"127.0.0.1:{port}/quarry-test/flaky@{}\" }}\n",
            img.manifest_digest
        ),
    );
    let on = build(&w.join("on/image.toml"), &w.join("out/on"), &w.join("pull-cache"), &[]);
    assert_eq!(on.layer_digests, img.layer_digests);
    assert_eq!(*failed.lock().unwrap(), 3);

    // More failures than attempts: a clear error naming the status.
    let (port, _) = flaky_proxy(reg.port, 100);
    let o = run_expect(
        quarry()
            .arg("push")
            .arg(&img.dir)
            .arg(format!("127.0.0.1:{port}/quarry-test/flaky:v2"))
            .args(["--plain-http", "--cache-dir"])
            .arg(w.join("cache"))
            .env("QUARRY_REGISTRY_ATTEMPTS", "2"),
        1,
    );
    assert!(stderr(&o).contains("503"), "{}", stderr(&o));
}

/// A proxy that sends each request on its own upstream connection, records
/// request lines, and answers the `fail_at`-th PATCH with a 503 without
/// passing it on.
fn patch_failing_proxy(upstream: u16, fail_at: usize) -> (u16, Arc<Mutex<Vec<String>>>) {
    intercepting_proxy(upstream, move |line, seen| {
        let patches = seen.iter().filter(|l| l.starts_with("PATCH ")).count();
        (line.starts_with("PATCH ") && patches == fail_at)
            .then(|| b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec())
    })
}

#[test]
fn a_failed_chunk_is_sent_again_in_the_same_session() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    // 3.5 MiB of incompressible bytes: four 1 MiB chunks.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let bytes: Vec<u8> = (0..(7 << 19))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(w.join("chunks.bin"), &bytes).unwrap();
    write(
        &w.join("img/image.toml"),
        &format!(
            "name = \"chunks\"\nbase = \"scratch\"\n[[layer]]\nname = \"chunks\"\n[[layer.source]]\nfile = \"{}\"\ndest = \"/chunks.bin\"\n",
            w.join("chunks.bin").display()
        ),
    );
    let img = build(&w.join("img/image.toml"), &w.join("out/chunks"), &w.join("cache"), &["--compression", "none"]);
    let (port, seen) = patch_failing_proxy(reg.port, 2);
    let p =
        push(&img.dir, &format!("127.0.0.1:{port}/quarry-test/chunks:v1"), &w.join("cache"), &["--chunk-size", "1"]);
    assert_eq!(p["digest"], img.manifest_digest.as_str());
    let seen = seen.lock().unwrap().clone();
    let count = |m: &str| seen.iter().filter(|l| l.starts_with(m) && l.contains("/blobs/uploads/")).count();
    // One session for the layer, one for the config and one for each of the
    // provenance artifact's two blobs; 4 chunks + the failed one.
    assert_eq!(count("POST "), 4, "{seen:#?}");
    assert_eq!(count("PATCH "), 5, "{seen:#?}");
    assert_eq!(count("GET "), 1, "one status query: {seen:#?}");
    // The registry holds the right bytes: pull them back as a base.
    write(
        &w.join("on/image.toml"),
        &format!(
            "name = \"on\"\nbase = {{ registry = \"{}/quarry-test/chunks@{}\" }}\n",
            reg.addr(),
            img.manifest_digest
        ),
    );
    let on = build(&w.join("on/image.toml"), &w.join("out/on"), &w.join("pull-cache"), &[]);
    assert_eq!(on.layer_digests, img.layer_digests);
}

/// A Docker schema 2 manifest (written by skopeo) as a base: its layers are
/// reused with their OCI media types, so an image with no layers of its own
/// on it is byte for byte the OCI original.
#[test]
fn docker_schema2_base() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::Builder::new().prefix("quarry-test-reg-").tempdir().unwrap();
    let w = work.path();
    let img = small_image(w, "v2s2", "docker schema 2\n");
    let reference = format!("{}/quarry-test/v2s2:v1", reg.addr());
    run_expect(
        Command::new("skopeo")
            .args(["copy", "-q", "--dest-tls-verify=false", "--format", "v2s2"])
            .arg(format!("oci:{}:latest", img.dir.display()))
            .arg(format!("docker://{reference}")),
        0,
    );
    let s = skopeo_inspect(&reference);
    let digest = s["Digest"].as_str().unwrap().to_string();
    assert_ne!(digest, img.manifest_digest, "skopeo did not convert the manifest");
    write(
        &w.join("on/image.toml"),
        &format!("name = \"v2s2\"\nbase = {{ registry = \"{}/quarry-test/v2s2@{digest}\" }}\n", reg.addr()),
    );
    let on = build(&w.join("on/image.toml"), &w.join("out/on"), &w.join("pull-cache"), &[]);
    assert_eq!(on.layer_digests, img.layer_digests);
    assert_eq!(on.manifest_digest, img.manifest_digest);
}
