//! Stability guards for cache keys. The stored values below are not proof
//! that the keys are right; they catch a change to what a key encodes that
//! was not meant. If one fails after a deliberate change, bump the version
//! of the schema that changed (see `keys`) and update the value here.

use super::*;
use crate::definition::{load_image, PackageSet, PackagesBase, Variant};
use crate::distro::pins::{PackagePins, PinnedPackage};

fn plan_of(text: &str) -> Plan {
    let d = tempfile::tempdir().unwrap();
    plan_in(d.path(), text)
}

/// The plan of the definition `text` written in `dir`.
fn plan_in(dir: &std::path::Path, text: &str) -> Plan {
    let f = dir.join("image.toml");
    std::fs::write(&f, text).unwrap();
    let image = load_image(&f, &Default::default()).unwrap();
    let cache = Cache::open(&dir.join("cache")).unwrap();
    let opts = PlanOptions {
        cache,
        codec: LayerCodec::default(),
        source_date_epoch: 0,
        verify: false,
        pins: PinMode::Locked,
        key_hashing: crate::plan::KeyHashing::Upfront,
    };
    make(&image, &opts).unwrap()
}

#[test]
fn keys_do_not_depend_on_where_the_sources_are() {
    // Two checkouts of one project at different paths (two CI runners)
    // must agree on every key, or a shared cache never hits.
    let layer_keys = |root: &std::path::Path, content: &str| {
        std::fs::create_dir_all(root.join("tree/sub")).unwrap();
        std::fs::write(root.join("tree/sub/a.txt"), "a").unwrap();
        std::fs::write(root.join("file.txt"), content).unwrap();
        let text = "name = \"g\"\nbase = \"scratch\"\n[[layer]]\nname = \"files\"\n\
             [[layer.source]]\ndir = \"tree\"\ndest = \"/t\"\n[[layer.source]]\nfile = \"file.txt\"\ndest = \"/f\"\n";
        plan_in(root, text).layers.iter().map(|n| n.key.unwrap()).collect::<Vec<_>>()
    };
    let d = tempfile::tempdir().unwrap();
    let here = layer_keys(&d.path().join("checkout-one"), "x");
    assert_eq!(here, layer_keys(&d.path().join("elsewhere/checkout-two"), "x"));
    assert_ne!(here, layer_keys(&d.path().join("third"), "y"), "content still counts");
}

#[test]
fn key_stability_guard_files_and_step() {
    // Guards key stability (see the module comment): a remove-only files
    // layer and a step, on no host path, so the keys are the same anywhere.
    let plan = plan_of(
        "name = \"g\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\nenv = { A = \"1\" }\n\
         [[layer]]\nname = \"clean\"\nremove = [\"/tmp/x\"]\n\
         [[layer]]\nname = \"s\"\n[layer.run]\nscript = \"echo hi > /hi\"\n",
    );
    let keys: Vec<String> = plan.layers.iter().map(|n| n.key.unwrap().hex()).collect();
    assert_eq!(
        keys,
        [
            "cda1741e5eb432a8174a3c855e888d579ef86ee63c8b63b17d6afc3fdd4246c4",
            "affc8c9f56daf0aaeeed2853bc65efd02f001f11604bf2f7f17957d155f8a5fd",
        ]
    );
    assert!(plan.layers.iter().all(|n| !n.cached));
}

#[test]
fn key_stability_guard_packages() {
    // Guards key stability (see the module comment). The quarry version is
    // part of package keys on purpose: a new version may unpack differently.
    let set = PackageSet {
        suites: vec!["bookworm".into(), "bookworm-security".into()],
        components: vec!["main".into()],
        architecture: "amd64".into(),
        mirror: crate::definition::Mirror::Host,
        security_mirror: None,
        keyring: crate::definition::Keyring::File("/k.gpg".into()),
        include: vec!["jq".into()],
        configure: crate::definition::Configure::Sandbox,
    };
    let base = PackagesBase { set: set.clone(), variant: Variant::Required, groups: Default::default(), users: vec![] };
    let pins = PackagePins {
        suites: set.suites.clone(),
        architecture: "amd64".into(),
        components: vec!["main".into()],
        variant: Some(Variant::Required),
        include: vec!["jq".into()],
        release: [("bookworm".to_string(), "sha256:00".to_string())].into(),
        below: None,
        packages: vec![PinnedPackage {
            name: "jq".into(),
            version: "1.6".into(),
            architecture: "amd64".into(),
            suite: Some("bookworm-security".into()),
            priority: Some("optional".into()),
            file: "pool/jq.deb".into(),
            sha256: "ab".repeat(32),
            size: 1,
        }],
    };
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(version, "0.1.0", "a new version changes these keys: update the values below with it");
    let mirrors = [
        ("bookworm".to_string(), "http://mirror.example/debian".to_string()),
        ("bookworm-security".to_string(), "http://mirror.example/debian-security".to_string()),
    ];
    assert_eq!(
        keys::packages_base(&base, &pins, &mirrors).hex(),
        "4e9d0b953a3ee52d5f0cfcbff9df8a2759a6b5a77a6b4f7fa00f060eb4777903"
    );
    assert_eq!(
        keys::packages_layer("tools", &set, &pins, &mirrors).hex(),
        "8e8ed4368633b839e8701f713977df28ea60cd6dc8625622907d00c53d764d0f"
    );
}

#[test]
fn keys_chain_and_an_unknown_key_hides_the_ones_above() {
    let mut plan = plan_of(
        "name = \"g\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n\
         [[layer]]\nname = \"one\"\nremove = [\"/a\"]\n[[layer]]\nname = \"two\"\nremove = [\"/b\"]\n",
    );
    let before: Vec<_> = plan.layers.iter().map(|n| n.key).collect();
    assert!(before.iter().all(Option::is_some));
    plan.layers[0].own = None;
    plan.rekey();
    assert!(plan.layers.iter().all(|n| n.key.is_none()), "nothing above an unknown key is known");
    plan.layers[0].own = Some(keys::oci_base(&crate::oci::Digest::of_bytes(b"x")));
    plan.rekey();
    assert!(plan.layers[1].key.is_some() && plan.layers[1].key != before[1], "a change below changes the keys above");
}
