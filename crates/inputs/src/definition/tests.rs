//! Loading and validation, checked through `load_image` on small definitions.

use super::*;
use std::collections::BTreeMap;

fn load(text: &str) -> Result<Image, DefinitionError> {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("img.toml");
    std::fs::write(&f, text).unwrap();
    load_image(&f, &BTreeMap::new())
}

const PKG: &str = "name = \"x\"\n[config]\nplatform = \"linux/amd64\"\n[base.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\nkeyring = \"k.gpg\"\ninclude = [\"python3\", \"sudo=1.9\"]\n";

#[test]
fn packages_base_parses_with_defaults() {
    let img = load(PKG).unwrap();
    let Base::Packages(p) = &img.base else { panic!("{:?}", img.base) };
    assert_eq!(p.components, ["main"]);
    assert_eq!(p.architecture, "amd64");
    assert_eq!(p.mirror, Mirror::Host);
    assert_eq!(p.variant, Variant::Required);
    let Keyring::File(k) = &p.keyring else { panic!("{:?}", p.keyring) };
    assert!(k.is_absolute() && k.ends_with("k.gpg"), "relative to the definition");
    assert_eq!(p.suites, ["bookworm"]);
    assert_eq!(p.configure, crate::definition::Configure::Sandbox);
}

#[test]
fn packages_take_pockets_and_a_pinned_keyring_package() {
    let text = PKG.replace("suite = \"bookworm\"", "suites = [\"noble\", \"noble-updates\", \"noble-security\"]").replace(
        "keyring = \"k.gpg\"",
        "keyring = { deb = \"pool/main/u/k/k_1_all.deb\", sha256 = \"AB\", path = \"/usr/share/keyrings/k.gpg\", suite = \"trixie\" }",
    );
    let e = load(&text).unwrap_err().to_string();
    assert!(e.contains("base.packages.keyring.sha256") && e.contains("64 hex"), "{e}");
    let img = load(&text.replace("\"AB\"", &format!("\"{}\"", "AB".repeat(32)))).unwrap();
    let Base::Packages(p) = &img.base else { panic!() };
    assert_eq!(p.suites, ["noble", "noble-updates", "noble-security"]);
    assert_eq!(p.suite(), "noble");
    let Keyring::Deb(k) = &p.keyring else { panic!("{:?}", p.keyring) };
    assert_eq!((k.sha256.as_str(), k.suite.as_str(), &k.mirror), ("ab".repeat(32).as_str(), "trixie", &Mirror::Host));
    assert_eq!(p.keyring.image_path(), std::path::Path::new("/usr/share/keyrings/k.gpg"));

    for (bad, field, says) in [
        ("suites = [\"noble\", \"noble\"]", "base.packages.suites[1]", "listed twice"),
        ("suites = []", "base.packages.suites", "empty"),
        ("suites = [\"noble\"]\nsuite = \"noble\"", "base.packages.suites", "not both"),
        ("security_mirror = \"ftp://x\"\nsuite = \"noble\"", "base.packages.security_mirror", "http"),
    ] {
        let t = PKG.replace("suite = \"bookworm\"", bad);
        let e = load(&t).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(says), "{bad}: {e}");
    }
    let t = PKG.replace("keyring = \"k.gpg\"", "keyring = { deb = \"../x.deb\", sha256 = \"00\", path = \"/k\" }");
    let e = load(&t).unwrap_err().to_string();
    assert!(e.contains("base.packages.keyring.deb"), "{e}");
    let t = PKG.replace(
        "keyring = \"k.gpg\"",
        "keyring = { deb = \"pool/x.deb\", sha256 = \"00\", path = \"/k\", colour = 1 }",
    );
    let e = load(&t).unwrap_err().to_string();
    assert!(e.contains("colour"), "{e}");
    let t = PKG.replace("keyring = \"k.gpg\"", "keyring = 3");
    let e = load(&t).unwrap_err().to_string();
    assert!(e.contains("keyring") && e.contains("a keyring path"), "{e}");
}

/// Write `files` (name, text) into a fresh directory and load the first.
fn load_in(files: &[(&str, &str)], sets: &[(&str, &str)]) -> (tempfile::TempDir, Result<Image, DefinitionError>) {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = d.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let sets = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let r = load_image(&d.path().join(files[0].0), &sets);
    (d, r)
}

#[test]
fn image_base_loads_the_named_definition_with_this_images_params() {
    let top =
        "name = \"top\"\nbase = { image = \"${BASE}\" }\n[params]\nBASE = \"sub/base.toml\"\nGREETING = \"top\"\n";
    let base = "name = \"base\"\nbase = \"scratch\"\n[params]\nGREETING = \"base\"\nOWN = \"x\"\n\
                [config]\nuser = \"tester\"\nlabels = { g = \"${GREETING}-${OWN}\" }\n";
    let (d, r) = load_in(&[("top.toml", top), ("sub/base.toml", base)], &[]);
    let img = r.unwrap();
    let Base::Image(b) = &img.base else { panic!("{:?}", img.base) };
    assert_eq!(b.name, "base");
    assert_eq!(b.file, d.path().join("sub/base.toml"));
    assert_eq!(b.config.labels["g"], "top-x", "this image's params override the base's defaults");
    assert_eq!(img.root_image().name, "base");
    // --set reaches the base too.
    let (_d, r) = load_in(&[("top.toml", top), ("sub/base.toml", base)], &[("OWN", "y")]);
    let Base::Image(b) = &r.unwrap().base else { panic!() };
    assert_eq!(b.config.labels["g"], "top-y");
}

#[test]
fn image_base_errors_name_the_field() {
    // A missing file.
    let (_d, r) = load_in(&[("a.toml", "name = \"a\"\nbase = { image = \"nope.toml\" }\n")], &[]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("a.toml: field `base.image`") && e.contains("nope.toml"), "{e}");
    // Itself, and a longer cycle.
    let (_d, r) = load_in(&[("a.toml", "name = \"a\"\nbase = { image = \"a.toml\" }\n")], &[]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("field `base.image`") && e.contains("cycle"), "{e}");
    let (_d, r) = load_in(
        &[
            ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n"),
            ("b.toml", "name = \"b\"\nbase = { image = \"c.toml\" }\n"),
            ("c.toml", "name = \"c\"\nbase = { image = \"a.toml\" }\n"),
        ],
        &[],
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("c.toml: field `base.image`") && e.contains("cycle"), "{e}");
    assert!(e.contains("a.toml -> ") && e.contains("b.toml -> ") && e.contains("c.toml -> "), "{e}");
    // A base defined twice in a chain is no cycle.
    let (_d, r) = load_in(
        &[
            ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n"),
            ("b.toml", "name = \"b\"\nbase = { image = \"c.toml\" }\n"),
            ("c.toml", "name = \"c\"\nbase = \"scratch\"\n"),
        ],
        &[],
    );
    assert_eq!(r.unwrap().root_image().name, "c");
    // Errors inside the base name the base's file.
    let (_d, r) = load_in(
        &[
            ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n"),
            ("b.toml", "name = \"b\"\nbase = \"scratch\"\nbogus = 1\n"),
        ],
        &[],
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("b.toml") && e.contains("bogus"), "{e}");
    // Another platform, keys of other kinds, an empty name.
    let (_d, r) = load_in(
        &[
            ("a.toml", "name = \"a\"\nbase = { image = \"b.toml\" }\n[config]\nplatform = \"linux/amd64\"\n"),
            ("b.toml", "name = \"b\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/arm64\"\n"),
        ],
        &[],
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("field `base.image`") && e.contains("linux/arm64") && e.contains("config.platform"), "{e}");
    for (text, field) in [
        ("base = { image = \"b.toml\", ref = \"x\" }", "base.ref"),
        ("base = { image = \"b.toml\", sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\" }", "base"),
        ("base = { image = \"b.toml\", rootfs = \"x.tar\" }", "base"),
        ("base = { image = \"\" }", "base.image"),
    ] {
        let (_d, r) = load_in(
            &[("a.toml", &format!("name = \"a\"\n{text}\n")), ("b.toml", "name = \"b\"\nbase = \"scratch\"\n")],
            &[],
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains(&format!("field `{field}`")), "{text}: {e}");
    }
}

#[test]
fn packages_base_errors_name_the_field() {
    let cases = [
        (PKG.replace("mirror = \"host\"", "mirror = \"ftp://x\""), "base.packages.mirror"),
        (PKG.replace("\"python3\"", "\"Python3\""), "base.packages.include[0]"),
        (PKG.replace("\"sudo=1.9\"", "\"python3\""), "base.packages.include[1]"),
        (format!("{PKG}architecture = \"arm64\"\n"), "base.packages.architecture"),
        (format!("{PKG}variant = \"tiny\"\n"), "base.packages.variant"),
        (format!("{PKG}users = [{{ name = \"Bad\", uid = 1000 }}]\n"), "base.packages.users[0].name"),
        (format!("{PKG}users = [{{ name = \"t\", uid = 0 }}]\n"), "base.packages.users[0].uid"),
    ];
    for (text, field) in cases {
        let e = load(&text).unwrap_err().to_string();
        assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
    }
    let e = load(&format!("{PKG}flavour = 1\n")).unwrap_err().to_string();
    assert!(e.contains("flavour"), "{e}");
    let e =
        load(&PKG.replace("[base.packages]", "[base]\nrootfs = \"x.tar\"\n[base.packages]")).unwrap_err().to_string();
    assert!(e.contains("exactly one of"), "{e}");
}

const PKG_LAYER: &str = "name = \"x\"\nbase = \"scratch\"\n[config]\nplatform = \"linux/amd64\"\n[[layer]]\nname = \"tools\"\n[[layer.source]]\n[layer.source.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\nkeyring = \"k.gpg\"\ninclude = [\"jq\"]\n";

#[test]
fn packages_layer_source_parses() {
    let img = load(PKG_LAYER).unwrap();
    let Some(p) = img.layers[0].packages() else { panic!("{:?}", img.layers[0]) };
    assert_eq!(p.include, ["jq"]);
    assert_eq!(p.architecture, "amd64");
    assert!(matches!(&p.keyring, Keyring::File(k) if k.is_absolute()));
    let cases = [
        (format!("{PKG_LAYER}users = [{{ name = \"t\", uid = 1000 }}]\n"), "layer[0].source[0].packages.users"),
        (format!("{PKG_LAYER}variant = \"essential\"\n"), "layer[0].source[0].packages.variant"),
        (PKG_LAYER.replace("include = [\"jq\"]", "include = []"), "layer[0].source[0].packages.include"),
        (
            PKG_LAYER.replace("[layer.source.packages]", "dest = \"/x\"\n[layer.source.packages]"),
            "layer[0].source[0].dest",
        ),
        (format!("{PKG_LAYER}[[layer.source]]\ndir = \".\"\n"), "layer[0].source[0].packages"),
        (PKG_LAYER.replace("mirror = \"host\"", "mirror = \"x\""), "layer[0].source[0].packages.mirror"),
    ];
    for (text, field) in cases {
        let e = load(&text).unwrap_err().to_string();
        assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
    }
}

#[test]
fn an_unknown_set_is_an_error_naming_the_known_parameters() {
    let img = "name = \"hello\"\nbase = \"scratch\"\n[params]\nGREETING = \"hello\"\n\
               [config]\nlabels = { g = \"${GREETING}\", r = \"${ROOTFS_TAG}\" }\n";
    let (_d, r) = load_in(&[("hello.toml", img)], &[("GREETNG", "hi"), ("ROOTFS_TAG", "x")]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("--set GREETNG") && e.contains("did you mean `GREETING`?"), "{e}");
    assert!(e.contains("known: GREETING, ROOTFS_TAG"), "{e}");
    // A parameter declared only by the image base is known too.
    let top = "name = \"top\"\nbase = { image = \"base.toml\" }\n";
    let base = "name = \"base\"\nbase = \"scratch\"\n[params]\nOWN = \"x\"\n";
    let (_d, r) = load_in(&[("top.toml", top), ("base.toml", base)], &[("OWN", "y")]);
    r.unwrap();
    let (_d, r) = load_in(&[("top.toml", top), ("base.toml", base)], &[("ZZZZZZ", "y")]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("has no parameter `ZZZZZZ` (known: OWN)"), "{e}");
}
