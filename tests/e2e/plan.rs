//! `quarry plan`: what a build would do, without building. On a fresh cache
//! every layer is to be built; after the build every one is cached and the
//! image is up to date; after one input changes, exactly that layer and the
//! ones above it are to be built again.

use crate::common;

use common::*;
use std::path::Path;

/// An image of three files layers, `a` below `b` below `c`.
fn three_layers(dir: &Path) -> std::path::PathBuf {
    for l in ["a", "b", "c"] {
        write(&dir.join(format!("{l}.txt")), &format!("layer {l}\n"));
    }
    let img = dir.join("image.toml");
    let mut def = String::from("name = \"three\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n");
    for l in ["a", "b", "c"] {
        def.push_str(&format!(
            "[[layer]]\nname = \"{l}\"\n[[layer.source]]\nfile = \"{l}.txt\"\ndest = \"/{l}.txt\"\nmode = \"0644\"\n"
        ));
    }
    write(&img, &def);
    img
}

fn quarry_in(dir: &Path, verb: &str, extra: &[&str]) -> serde_json::Value {
    let out = run_expect(
        quarry()
            .arg(verb)
            .arg(dir.join("image.toml"))
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .arg("-o")
            .arg(dir.join("out"))
            .arg("--json")
            .args(extra),
        0,
    );
    stdout_json(&out)
}

fn cached(plan: &serde_json::Value) -> Vec<bool> {
    plan["layers"].as_array().unwrap().iter().map(|l| l["cached"].as_bool().unwrap()).collect()
}

fn keys(plan: &serde_json::Value) -> Vec<String> {
    plan["layers"].as_array().unwrap().iter().map(|l| l["key"].as_str().unwrap().to_string()).collect()
}

#[test]
fn plan_tells_what_a_build_would_do() {
    let d = tempfile::tempdir().unwrap();
    three_layers(d.path());

    let fresh = quarry_in(d.path(), "plan", &[]);
    assert_eq!(fresh["name"], "three");
    assert_eq!(fresh["base"]["kind"], "scratch");
    assert_eq!(cached(&fresh), [false, false, false], "{fresh}");
    assert_eq!(fresh["up_to_date"], false);
    let layer = &fresh["layers"][1];
    assert_eq!((layer["name"].as_str(), layer["kind"].as_str()), (Some("b"), Some("files")));
    let input = &layer["inputs"][0];
    assert_eq!((input["kind"].as_str(), input["reference"].as_str()), (Some("file"), Some("b.txt")));
    let sha_b = quarry::oci::Digest::of_bytes(b"layer b\n").to_string();
    assert_eq!(input["pin"].as_str(), Some(sha_b.as_str()), "the input's pin is its content digest");
    assert!(!d.path().join("cache/layers").read_dir().unwrap().any(|_| true), "planning built nothing");

    let built = quarry_in(d.path(), "build", &[]);
    let planned = quarry_in(d.path(), "plan", &[]);
    assert_eq!(cached(&planned), [true, true, true]);
    assert_eq!(planned["up_to_date"], true);
    assert_eq!(planned["manifest_digest"], built["manifest_digest"], "the plan composes what the build wrote");
    assert_eq!(keys(&planned), keys(&fresh), "keys do not depend on the cache");

    // Another output directory is not up to date, though every layer is cached.
    let elsewhere = run_expect(
        quarry()
            .arg("plan")
            .arg(d.path().join("image.toml"))
            .arg("--cache-dir")
            .arg(d.path().join("cache"))
            .arg("-o")
            .arg(d.path().join("other"))
            .arg("--json"),
        0,
    );
    let elsewhere = stdout_json(&elsewhere);
    assert_eq!((cached(&elsewhere), &elsewhere["up_to_date"]), (vec![true, true, true], &serde_json::json!(false)));

    // One input changes: that layer and those above it are to be built.
    write(&d.path().join("b.txt"), "layer b, changed\n");
    let changed = quarry_in(d.path(), "plan", &[]);
    assert_eq!(cached(&changed), [true, false, false], "{changed}");
    assert_eq!(changed["up_to_date"], false);
    let (k0, k1) = (keys(&fresh), keys(&changed));
    assert_eq!(k0[0], k1[0]);
    assert!(k0[1] != k1[1] && k0[2] != k1[2], "b's key and the one above it change");

    // The build then rebuilds exactly those.
    let rebuilt = quarry_in(d.path(), "build", &[]);
    let was_cached: Vec<bool> =
        rebuilt["layers"].as_array().unwrap().iter().map(|l| l["cached"].as_bool().unwrap()).collect();
    assert_eq!(was_cached, [true, false, false]);
    assert_eq!(quarry_in(d.path(), "plan", &[])["up_to_date"], true);
}

#[test]
fn plan_carries_the_sbom_and_a_build_attaches_the_same_inputs() {
    let d = tempfile::tempdir().unwrap();
    three_layers(d.path());
    let plan = quarry_in(d.path(), "plan", &[]);
    let sbom = &plan["sbom"];
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let names: Vec<&str> = sbom["packages"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert!(names.iter().any(|n| n.contains(f)), "the SBOM lists {f}: {names:?}");
    }
    let built = quarry_in(d.path(), "build", &["--sbom"]);
    assert!(built["sbom"].as_str().unwrap().starts_with("sha256:"), "{built}");
}

#[test]
fn human_plan_lists_layers_and_what_is_left() {
    let d = tempfile::tempdir().unwrap();
    let img = three_layers(d.path());
    let out = run_expect(
        quarry()
            .arg("plan")
            .arg(&img)
            .arg("--cache-dir")
            .arg(d.path().join("cache"))
            .arg("-o")
            .arg(d.path().join("out")),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("three:latest") && text.contains("3 layer(s) to build"), "{text}");
    for l in ["a ", "b ", "c "] {
        assert!(text.lines().any(|line| line.starts_with(l) && line.contains("to build")), "{text}");
    }
    // Each printed id says what it is: `plan` the cache key, `build` the digest.
    let plan = stdout_json(&run_expect(
        quarry().arg("plan").arg(&img).arg("--json").arg("--cache-dir").arg(d.path().join("cache")),
        0,
    ));
    let key = plan["layers"][0]["key"].as_str().unwrap().trim_start_matches("sha256:")[..12].to_string();
    assert!(text.lines().any(|line| line.starts_with("a ") && line.contains(&format!("key {key}"))), "{text}");
    let built = run_expect(
        quarry()
            .arg("build")
            .arg(&img)
            .arg("--cache-dir")
            .arg(d.path().join("cache"))
            .arg("-o")
            .arg(d.path().join("o")),
        0,
    );
    let built = String::from_utf8_lossy(&built.stdout);
    let layout = run_expect(quarry().arg("inspect").arg(d.path().join("o")).arg("--json"), 0);
    let digest =
        stdout_json(&layout)["layers"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:")[..12].to_string();
    assert!(built.lines().any(|line| line.starts_with("a ") && line.contains(&format!("digest {digest}"))), "{built}");
    assert!(!built.contains(&key) && !text.contains(&digest), "the two ids must not be confused:\n{built}\n{text}");
}
