//! Reading the provenance a build attached to its layout, and checking it
//! with the in-toto attestation models (tests/tools/check_provenance.py).

use super::{repo, run_expect};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The bytes of the in-toto statement attached to the image `built` (a
/// `build --json` result) in the layout `dir`, after checking the artifact
/// refers to that image.
pub fn provenance_of(dir: &Path, built: &Value) -> Vec<u8> {
    let artifact = built["provenance"].as_str().expect("a build reports its provenance artifact");
    let blob = |d: &str| dir.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
    let manifest: Value = serde_json::from_slice(&std::fs::read(blob(artifact)).unwrap()).unwrap();
    assert_eq!(manifest["artifactType"], "application/vnd.in-toto+json", "{manifest}");
    assert_eq!(manifest["subject"]["digest"], built["manifest_digest"], "{manifest}");
    let bytes = std::fs::read(blob(manifest["layers"][0]["digest"].as_str().unwrap())).unwrap();
    let statement: Value = serde_json::from_slice(&bytes).unwrap();
    let subject = format!("sha256:{}", statement["subject"][0]["digest"]["sha256"].as_str().unwrap());
    assert_eq!(subject, built["manifest_digest"].as_str().unwrap(), "the subject is the image");
    bytes
}

/// Parse `bytes` with the in-toto attestation models (as SLSA Provenance v1);
/// returns what the checker counted.
pub fn check_with_in_toto_models(bytes: &[u8], scratch: &Path) -> Value {
    let file = scratch.join("provenance.intoto.json");
    std::fs::write(&file, bytes).unwrap();
    let o = run_expect(Command::new("python3").arg(repo().join("tests/tools/check_provenance.py")).arg(&file), 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every package of a lock's `[base]` table is a resolved dependency: by
/// its sha256, at its archive URL ending in the lock's `file`.
pub fn assert_lists_every_locked_deb(statement: &[u8], lock: &str) {
    let doc: Value = serde_json::from_slice(statement).unwrap();
    let deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"].as_array().unwrap();
    let pins: toml::Value = toml::from_str(lock).unwrap();
    let pinned = pins["base"]["package"].as_array().unwrap();
    assert!(pinned.len() > 100, "the image pins its packages");
    for p in pinned {
        let (name, sha, file) =
            (p["name"].as_str().unwrap(), p["sha256"].as_str().unwrap(), p["file"].as_str().unwrap());
        // A purl percent-encodes `+` (libstdc++-12-dev).
        let purl_name = format!("/{}@", name.replace('+', "%2B"));
        let found = deps.iter().any(|d| {
            d["digest"]["sha256"] == sha
                && d["uri"].as_str().is_some_and(|u| u.ends_with(&format!("/{file}")))
                && d["name"].as_str().is_some_and(|n| n.starts_with("pkg:deb/") && n.contains(&purl_name))
        });
        assert!(found, "the provenance lacks {name} ({sha}, {file})");
    }
}

/// The statement `quarry` wrote beside the product file `path`
/// (`NAME.intoto.json`), after checking its subject is that file by sha256
/// and that the in-toto models take it; returns its bytes.
pub fn beside(path: &Path, scratch: &Path) -> Vec<u8> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let file = path.with_file_name(format!("{name}.intoto.json"));
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["subject"].as_array().map(Vec::len), Some(1), "{doc}");
    assert_eq!(doc["subject"][0]["name"], name.as_str(), "{doc}");
    let sha = quarry::oci::digest::sha256_file(path).unwrap();
    assert_eq!(doc["subject"][0]["digest"]["sha256"], sha.as_str(), "{doc}");
    check_with_in_toto_models(&bytes, scratch);
    bytes
}

/// The resolved dependencies of a statement, as (name, algorithm, digest).
pub fn inputs(statement: &[u8]) -> Vec<(String, String, String)> {
    let doc: Value = serde_json::from_slice(statement).unwrap();
    let deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"].as_array().unwrap().clone();
    deps.iter()
        .flat_map(|d| {
            let name = d["name"].as_str().unwrap_or_default().to_string();
            d["digest"]
                .as_object()
                .unwrap()
                .iter()
                .map(move |(a, v)| (name.clone(), a.clone(), v.as_str().unwrap().to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}
