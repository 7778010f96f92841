//! Signed images, judged by the signature checkers of the field: an image
//! pushed with `--sign-key` to Debian's `docker-registry` is accepted by
//! `cosign verify` and `cosign verify-attestation --type slsaprovenance1`
//! (cosign 2.5, Debian 13) with cosign's own key files and with an Ed25519
//! PKCS#8 key, and by skopeo with a `sigstoreSigned` policy (the policy
//! engine Podman uses, containers/image); another key and an unsigned image
//! are refused by both. Signing is deterministic: pushing again writes the
//! same signature manifests.

mod common;

use common::registry::*;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The engine's image holding cosign and skopeo, built and loaded once per
/// definition.
fn tools_image() -> String {
    let def = repo().join("tests/fixtures/sigstore-tools-debian13.toml");
    let tag = quarry::oci::digest::sha256_hex(&std::fs::read(&def).unwrap())[..12].to_string();
    let name = format!("quarry-sigstore-tools:{tag}");
    with_lock("sigstore-tools", || {
        let present = Command::new("docker").args(["image", "inspect", &name]).output().unwrap();
        if !present.status.success() {
            let out = fixtures_dir().join(format!("sigstore-tools-{tag}"));
            let mut b = quarry();
            b.arg("build").arg(&def).arg("--cache-dir").arg(packages_cache()).arg("-o").arg(&out).arg("--quiet");
            run_expect(&mut b, 0);
            run_expect(quarry().arg("load").arg(&out).arg("--tag").arg(&name), 0);
        }
    });
    name
}

/// `args` run in the tools image with `dir` at /w, on the host's network.
fn tool(image: &str, dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("docker");
    c.args(["run", "--rm", "--network", "host", "-e", "COSIGN_PASSWORD=test-password", "-w", "/w", "-v"]);
    c.arg(format!("{}:/w", dir.display())).arg(image).args(args);
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn push(layout: &Path, reference: &str, key: Option<&Path>, cache: &Path) -> Value {
    let mut c = quarry();
    c.arg("push").arg(layout).arg(reference).args(["--plain-http", "--json", "--cache-dir"]).arg(cache);
    c.env("COSIGN_PASSWORD", "test-password").env_remove("QUARRY_SIGN_KEY");
    if let Some(k) = key {
        c.arg("--sign-key").arg(k);
    }
    stdout_json(&run_expect(&mut c, 0))
}

fn small_image(work: &Path) -> (PathBuf, Value) {
    write(&work.join("img/motd.txt"), "signed by quarry\n");
    write(
        &work.join("img/image.toml"),
        "name = \"signed\"\nbase = \"scratch\"\n[[layer]]\nname = \"motd\"\n[[layer.source]]\nfile = \"motd.txt\"\ndest = \"/etc/motd\"\n",
    );
    let out = work.join("out");
    let mut c = quarry();
    c.arg("build").arg(work.join("img/image.toml")).arg("-o").arg(&out).arg("--json");
    c.arg("--cache-dir").arg(work.join("cache"));
    let built = stdout_json(&run_expect(&mut c, 0));
    (out, built)
}

#[test]
fn cosign_and_skopeo_accept_quarry_signatures_and_refuse_other_keys() {
    if !have_docker() || !have_registry() {
        return;
    }
    let image = tools_image();
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let keys = w.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    for prefix in ["cosign", "other"] {
        let o = tool(&image, &keys, &["cosign", "generate-key-pair", "--output-key-prefix", prefix]);
        assert!(o.status.success(), "cosign generate-key-pair: {}", text(&o));
    }
    let (layout, built) = small_image(w);
    let digest = built["manifest_digest"].as_str().unwrap().to_string();
    let repo_ref = format!("{}/quarry-test/signed", reg.addr());
    let pushed = push(&layout, &format!("{repo_ref}:v1"), Some(&keys.join("cosign.key")), &w.join("push-cache"));
    let kinds: Vec<&str> =
        pushed["signatures"].as_array().unwrap().iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["signature", "attestation"], "{pushed}");
    let hex = digest.trim_start_matches("sha256:");
    assert_eq!(pushed["signatures"][0]["tag"], format!("sha256-{hex}.sig"));

    // Signing is deterministic: the same key, image and repository give
    // the same signature manifests.
    let again = push(&layout, &format!("{repo_ref}:v1"), Some(&keys.join("cosign.key")), &w.join("push-cache"));
    assert_eq!(again["signatures"], pushed["signatures"], "a second push signed differently");

    let by_digest = format!("{repo_ref}@{digest}");
    let cosign = |args: &[&str], key: &str| {
        let mut a = vec!["cosign"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--key", key, "--insecure-ignore-tlog", "--allow-http-registry", &by_digest]);
        tool(&image, &keys, &a)
    };
    let v = cosign(&["verify"], "cosign.pub");
    assert!(v.status.success(), "cosign verify: {}", text(&v));
    assert!(text(&v).contains(&digest), "{}", text(&v));
    let att = cosign(&["verify-attestation", "--type", "slsaprovenance1"], "cosign.pub");
    assert!(att.status.success(), "cosign verify-attestation: {}", text(&att));
    // What cosign verified is the provenance the layout carries.
    let envelope: Value = serde_json::from_slice(att.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    use base64::Engine;
    let payload = base64::engine::general_purpose::STANDARD.decode(envelope["payload"].as_str().unwrap()).unwrap();
    assert!(payload == common::provenance::provenance_of(&layout, &built), "cosign attested another statement");
    for check in [&["verify"][..], &["verify-attestation", "--type", "slsaprovenance1"][..]] {
        let refused = cosign(check, "other.pub");
        assert!(!refused.status.success(), "cosign {check:?} accepted another key: {}", text(&refused));
    }

    // skopeo with a sigstoreSigned policy for the test repositories: the
    // signed image is taken, an unsigned one and another key are refused.
    let unsigned = format!("{}/quarry-test/unsigned", reg.addr());
    push(&layout, &format!("{unsigned}:v1"), None, &w.join("push-cache"));
    write(
        &keys.join("registries.d/local.yaml"),
        &format!("docker:\n  {}:\n    use-sigstore-attachments: true\n", reg.addr()),
    );
    for (name, key) in [("policy.json", "cosign.pub"), ("policy-other.json", "other.pub")] {
        let policy = serde_json::json!({
            "default": [{"type": "reject"}],
            "transports": {"docker": {format!("{}/quarry-test", reg.addr()): [
                {"type": "sigstoreSigned", "keyPath": format!("/w/{key}"), "signedIdentity": {"type": "matchRepository"}}
            ]}},
        });
        write(&keys.join(name), &policy.to_string());
    }
    let skopeo = |policy: &str, from: &str| {
        let src = format!("docker://{from}:v1");
        tool(
            &image,
            &keys,
            &[
                "skopeo",
                "copy",
                "--remove-signatures",
                "--policy",
                policy,
                "--registries.d",
                "/w/registries.d",
                "--src-tls-verify=false",
                &src,
                "oci:/tmp/copy:latest",
            ],
        )
    };
    let ok = skopeo("/w/policy.json", &repo_ref);
    assert!(ok.status.success(), "skopeo refused the signed image: {}", text(&ok));
    let no = skopeo("/w/policy.json", &unsigned);
    assert!(!no.status.success() && text(&no).contains("signature"), "skopeo took an unsigned image: {}", text(&no));
    let other = skopeo("/w/policy-other.json", &repo_ref);
    assert!(!other.status.success(), "skopeo took a signature of another key: {}", text(&other));
}

#[test]
fn an_ed25519_key_signs_and_bad_keys_are_clear_errors() {
    if !have_docker() || !have_registry() || !have_tool("openssl") {
        return;
    }
    let image = tools_image();
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let keys = w.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    run_expect(Command::new("openssl").args(["genpkey", "-algorithm", "ed25519", "-out"]).arg(keys.join("ed.pem")), 0);
    run_expect(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(keys.join("ed.pem"))
            .arg("-out")
            .arg(keys.join("ed.pub")),
        0,
    );
    let (layout, built) = small_image(w);
    let digest = built["manifest_digest"].as_str().unwrap();
    let repo_ref = format!("{}/quarry-test/ed", reg.addr());
    push(&layout, &format!("{repo_ref}:v1"), Some(&keys.join("ed.pem")), &w.join("push-cache"));
    let by_digest = format!("{repo_ref}@{digest}");
    let v = tool(
        &image,
        &keys,
        &["cosign", "verify", "--key", "ed.pub", "--insecure-ignore-tlog", "--allow-http-registry", &by_digest],
    );
    assert!(v.status.success(), "cosign verify (Ed25519): {}", text(&v));

    // A wrong password, a key of another kind, a file that is no key: each
    // named, exit 1, nothing pushed.
    let o = tool(&image, &keys, &["cosign", "generate-key-pair"]);
    assert!(o.status.success(), "{}", text(&o));
    write(&keys.join("rsa.pem"), "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n");
    write(&keys.join("garbage.key"), "not a key\n");
    for (key, password, says) in [
        ("cosign.key", "wrong", "password"),
        ("cosign.key", "", "COSIGN_PASSWORD"),
        ("rsa.pem", "", "RSA PRIVATE KEY"),
        ("garbage.key", "", "PEM"),
    ] {
        let target = format!("{}/quarry-test/refused-{}:v1", reg.addr(), key.replace('.', "-"));
        let mut c = quarry();
        c.arg("push").arg(&layout).arg(&target).args(["--plain-http", "--sign-key"]).arg(keys.join(key));
        c.arg("--cache-dir").arg(w.join("push-cache")).env_remove("COSIGN_PASSWORD");
        if !password.is_empty() {
            c.env("COSIGN_PASSWORD", password);
        }
        let e = String::from_utf8_lossy(&run_expect(&mut c, 1).stderr).to_string();
        assert!(e.contains(key) && e.contains(says), "{key}: {e}");
        let probe = Command::new("skopeo")
            .args(["inspect", "--tls-verify=false"])
            .arg(format!("docker://{target}"))
            .output()
            .unwrap();
        assert!(!probe.status.success(), "{key}: the image was pushed though its key was refused");
    }
}
