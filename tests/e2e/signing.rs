//! Signed images, judged by the signature checkers of the field: an image
//! pushed with `--sign-key` to Debian's `docker-registry` is accepted by
//! `cosign verify` and `cosign verify-attestation --type slsaprovenance1`
//! (cosign 2.5, Debian 13) with cosign's own key files and with an Ed25519
//! PKCS#8 key, and by skopeo with a `sigstoreSigned` policy (the policy
//! engine Podman uses, containers/image); another key and an unsigned image
//! are refused by both. Signing is deterministic: pushing again writes the
//! same signature manifests.

use crate::common;

use common::registry::*;
use common::sigstore::{tool, tools_image};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// A P-256 key pair made by openssl: (private PKCS#8 PEM, public PEM).
fn openssl_p256(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (key, public) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.pub")));
    let mut g = Command::new("openssl");
    g.args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"]).arg(&key);
    run_expect(&mut g, 0);
    run_expect(Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&key).arg("-out").arg(&public), 0);
    (key, public)
}

fn verify(target: &str, extra: &[&str], cache: &Path, code: i32) -> Output {
    let mut c = quarry();
    c.arg("verify").arg(target).args(["--json", "--source"]).arg(repo()).arg("--cache-dir").arg(cache);
    c.args(extra).current_dir(repo());
    run_expect(&mut c, code)
}

/// `usr/bin/sudo` of the layout's only layer, written to `to`.
fn extract_sudo(layout: &Path, to: &Path) {
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let image = index["manifests"].as_array().unwrap().iter().find(|m| m.get("artifactType").is_none()).unwrap();
    let blob = |d: &Value| layout.join("blobs/sha256").join(d.as_str().unwrap().trim_start_matches("sha256:"));
    let manifest: Value = serde_json::from_slice(&std::fs::read(blob(&image["digest"])).unwrap()).unwrap();
    std::fs::create_dir_all(to).unwrap();
    let mut t = Command::new("tar");
    t.arg("-xzf").arg(blob(&manifest["layers"][0]["digest"])).arg("-C").arg(to).arg("usr/bin/sudo");
    run_expect(&mut t, 0);
}

/// A copy sharing the files (the tamper script writes new files only).
fn copy_dir(from: &Path, to: &Path) {
    run_expect(Command::new("cp").arg("-al").arg(from).arg(to), 0);
}

/// The main job's image, pushed signed, is rebuilt from its provenance in a
/// private cache: `reproduced`, from the registry (with the key; another
/// key refused) and from a layout `quarry pull` wrote. A compromised copy
/// (one byte of /usr/bin/sudo's .text changed, everything re-hashed so
/// every digest checks) is named down to that file and section, where
/// diffoscope puts it too. A provenance made for another image and a
/// signature of another image are refused, nothing written.
#[test]
fn quarry_verify_reproduces_the_main_job_and_names_a_tampered_sudo_down_to_its_section() {
    if !have_docker() || !have_registry() || !have_tool("openssl") || !have_tool("diffoscope") {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (key, public) = openssl_p256(w, "signer");
    let (_, other) = openssl_p256(w, "other");
    let main = w.join("main");
    let mut b = quarry();
    b.arg("build").arg(repo().join("images/no_rocm_image_debian12.toml")).arg("-o").arg(&main);
    b.arg("--json").arg("--cache-dir").arg(packages_cache()).current_dir(repo());
    let built = stdout_json(&run_expect(&mut b, 0));
    let digest = built["manifest_digest"].as_str().unwrap().to_string();
    let repo_ref = format!("{}/quarry-test/main-job", reg.addr());
    push(&main, &format!("{repo_ref}:v1"), Some(&key), &w.join("push-cache"));

    // From the registry, signatures checked: one cold rebuild, in a cache of its own.
    let cache = w.join("verify-cache");
    let by_digest = format!("{repo_ref}@{digest}");
    let v = stdout_json(&verify(&by_digest, &["--key", public.to_str().unwrap()], &cache, 0));
    assert_eq!(v["reproduced"], true, "{v}");
    assert_eq!(v["rebuilt"], digest.as_str());
    assert_eq!(v["provenance_reproduced"], true, "{v}");
    assert_eq!(v["signatures"]["signature"], format!("sha256-{}.sig", digest.trim_start_matches("sha256:")));
    let refused = verify(&by_digest, &["--key", other.to_str().unwrap()], &cache, 1);
    let e = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(e.contains("signature") && e.contains("verifies with this key"), "{e}");

    // From a layout pulled into a fresh directory (the provenance comes along).
    let fresh = w.join("fresh");
    let mut p = quarry();
    p.arg("pull").arg(format!("{repo_ref}:v1")).arg("-o").arg(&fresh).arg("--plain-http");
    p.arg("--cache-dir").arg(w.join("pull-cache"));
    run_expect(&mut p, 0);
    let v = stdout_json(&verify(fresh.to_str().unwrap(), &[], &cache, 0));
    assert_eq!(v["reproduced"], true, "{v}");

    // The compromised copy.
    let tampered = w.join("tampered");
    copy_dir(&fresh, &tampered);
    let t = run_expect(
        Command::new("python3").arg(repo().join("tests/tools/tamper_image.py")).arg(&tampered).arg("usr/bin/sudo"),
        0,
    );
    let made: Value = serde_json::from_slice(&t.stdout).unwrap();
    let v = stdout_json(&verify(tampered.to_str().unwrap(), &[], &cache, 1));
    assert_eq!(v["reproduced"], false);
    assert_eq!(v["given"], made["manifest"], "{v}");
    assert_eq!(v["rebuilt"], digest.as_str(), "{v}");
    let files = v["layer"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "only sudo differs: {v}");
    assert_eq!(files[0]["path"], "/usr/bin/sudo");
    assert_eq!(files[0]["what"], serde_json::json!(["content"]));
    assert_eq!(files[0]["detail"]["kind"], "elf", "{v}");
    assert_eq!(files[0]["detail"]["section"], ".text", "{v}");
    assert!(v["inputs"].as_array().unwrap().is_empty(), "the inputs are the same: {v}");
    let (a, b) = (w.join("sudo-given"), w.join("sudo-rebuilt"));
    extract_sudo(&tampered, &a);
    extract_sudo(&main, &b);
    // diffoscope shows a set-uid file as bytes only: compare the files as plain ones.
    for d in [&a, &b] {
        std::fs::set_permissions(d.join("usr/bin/sudo"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let d = Command::new("diffoscope").arg(a.join("usr/bin/sudo")).arg(b.join("usr/bin/sudo")).output().unwrap();
    let report = String::from_utf8_lossy(&d.stdout).to_string();
    assert_eq!(d.status.code(), Some(1), "diffoscope finds a difference: {report}");
    assert!(report.contains("--section=.text"), "diffoscope puts it elsewhere:\n{report}");

    // A provenance made for another image: refused before any rebuild, nothing written.
    let wrong = w.join("wrong-subject");
    copy_dir(&fresh, &wrong);
    run_expect(
        Command::new("python3").arg(repo().join("tests/tools/tamper_image.py")).arg(&wrong).arg("--subject-only"),
        0,
    );
    let before = std::fs::read(wrong.join("index.json")).unwrap();
    let e =
        String::from_utf8_lossy(&verify(wrong.to_str().unwrap(), &[], &w.join("unused-cache"), 1).stderr).to_string();
    assert!(e.contains(&format!("sha256:{}", "0".repeat(64))) && e.contains("not this image"), "{e}");
    assert_eq!(std::fs::read(wrong.join("index.json")).unwrap(), before);
    assert!(!w.join("unused-cache").exists(), "a refused provenance made a cache");

    // A signature made over another image: the tampered image pushed,
    // the original's signature copied to its tag.
    push(&tampered, &format!("{repo_ref}:tampered"), None, &w.join("push-cache"));
    let sig_of = |d: &str| format!("sha256-{}.sig", d.trim_start_matches("sha256:"));
    let (ok, bad) = (digest.clone(), made["manifest"].as_str().unwrap().to_string());
    let url = |tag: &str| format!("http://{}/v2/quarry-test/main-job/manifests/{tag}", reg.addr());
    let mt = "application/vnd.oci.image.manifest.v1+json";
    let got = run_expect(Command::new("curl").args(["-sf", "-H", &format!("Accept: {mt}")]).arg(url(&sig_of(&ok))), 0);
    std::fs::write(w.join("sig.json"), &got.stdout).unwrap();
    let mut put = Command::new("curl");
    put.args(["-sf", "-X", "PUT", "-H", &format!("Content-Type: {mt}"), "--data-binary"]);
    put.arg(format!("@{}", w.join("sig.json").display())).arg(url(&sig_of(&bad)));
    run_expect(&mut put, 0);
    let e = verify(&format!("{repo_ref}@{bad}"), &["--key", public.to_str().unwrap()], &cache, 1);
    let e = String::from_utf8_lossy(&e.stderr).to_string();
    assert!(e.contains("signs another image") && e.contains(&ok), "{e}");
}
