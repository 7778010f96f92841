//! The resolver on small indexes written here.

use super::*;
use crate::distro::control::parse_paragraphs;

fn index(text: &str) -> Vec<Package> {
    parse_paragraphs(text)
        .iter()
        .map(|p| {
            let mut p = p.clone();
            for (k, v) in [("Filename", "pool/x.deb"), ("SHA256", "00"), ("Size", "1"), ("Architecture", "amd64")] {
                if p.get(k).is_none() {
                    p.fields.push((k.into(), v.into()));
                }
            }
            Package::from_paragraph(&p).unwrap()
        })
        .collect()
}

fn names(v: &[&Package]) -> Vec<String> {
    v.iter().map(|p| format!("{}={}", p.name, p.version)).collect()
}

const IDX: &str = "\
Package: base\nVersion: 1\nEssential: yes\nPriority: required\nPre-Depends: libc (>= 2)\n\n\
Package: libc\nVersion: 1\n\n\
Package: libc\nVersion: 2.1\n\n\
Package: req\nVersion: 1\nPriority: required\n\n\
Package: app\nVersion: 1\nDepends: mta | postfix, awk, libfoo (>= 3)\n\n\
Package: mawk\nVersion: 1\nProvides: awk\nPriority: required\n\n\
Package: gawk\nVersion: 1\nProvides: awk\n\n\
Package: exim\nVersion: 1\nProvides: mta\n\n\
Package: libfoo\nVersion: 3.1\n\n\
Package: old\nVersion: 1\nDepends: libfoo (<< 3)\n\n\
Package: top\nVersion: 1\nDepends: old\n\n\
Package: vv\nVersion: 1\nDepends: awk (>= 2)\n";

#[test]
fn resolves_alternatives_virtuals_and_versions() {
    let pkgs = index(IDX);
    let r = resolve(&pkgs, &["app".into()], Some(Variant::Required), &[], "test").unwrap();
    assert_eq!(names(&r), ["app=1", "base=1", "exim=1", "libc=2.1", "libfoo=3.1", "mawk=1", "req=1"]);
    let r = resolve(&pkgs, &["app".into()], Some(Variant::Essential), &[], "test").unwrap();
    // mawk is required-priority: preferred among awk providers.
    assert!(names(&r).contains(&"mawk=1".to_string()));
    assert!(!names(&r).contains(&"req=1".to_string()));
    let r = resolve(&pkgs, &["gawk".into(), "app".into()], Some(Variant::Essential), &[], "test").unwrap();
    assert!(!names(&r).contains(&"mawk=1".to_string()), "an awk already chosen is kept");
}

#[test]
fn installed_packages_satisfy_dependencies() {
    let pkgs = index(IDX);
    let inst = |n: &str, v: &str, prov: &[&str]| Installed {
        name: n.into(),
        version: v.into(),
        provides: prov.iter().map(|p| (p.to_string(), None)).collect(),
    };
    // libfoo 3.1 and an awk are below: only app and an mta are added.
    let below = [inst("libfoo", "3.1", &[]), inst("original-awk", "1", &["awk"])];
    let r = resolve(&pkgs, &["app".into()], None, &below, "test").unwrap();
    assert_eq!(names(&r), ["app=1", "exim=1"]);
    // An installed version that does not fit is not replaced: the chain is named.
    let below = [inst("libfoo", "2", &[])];
    let e = resolve(&pkgs, &["app".into()], None, &below, "test").unwrap_err().to_string();
    assert!(
        e.contains("app needs `libfoo (>= 3)`") && e.contains("`libfoo` 2 is installed in the layers below"),
        "{e}"
    );
    // Asking for what is installed adds nothing; another version is refused.
    assert!(resolve(&pkgs, &["libfoo".into()], None, &[inst("libfoo", "3.1", &[])], "t").unwrap().is_empty());
    let e = resolve(&pkgs, &["libfoo=3.1".into()], None, &[inst("libfoo", "2", &[])], "t").unwrap_err();
    assert!(e.to_string().contains("`libfoo` 2 is installed"), "{e}");
}

#[test]
fn pockets_give_the_highest_version_and_not_automatic_only_as_a_last_resort() {
    let mut pkgs = index("Package: libc\nVersion: 2.36-9\nPriority: required\n\nPackage: ssl\nVersion: 3.0.11\n\n");
    let mut security = index("Package: ssl\nVersion: 3.0.17\nPriority: optional\n\n");
    security[0].suite = "bookworm-security".into();
    let mut backports =
        index("Package: ssl\nVersion: 3.5\n\nPackage: libc\nVersion: 2.40\n\nPackage: new\nVersion: 1\n\n");
    for p in &mut backports {
        p.pin = 1;
    }
    pkgs.extend(security);
    pkgs.extend(backports);
    let r = resolve(&pkgs, &["ssl".into(), "new".into()], Some(Variant::Required), &[], "test").unwrap();
    assert_eq!(names(&r), ["libc=2.36-9", "new=1", "ssl=3.0.17"]);
    assert_eq!(r.iter().find(|p| p.name == "ssl").unwrap().suite, "bookworm-security");
    // Asked for by version, a NotAutomatic suite's package is taken.
    let r = resolve(&pkgs, &["ssl=3.5".into()], None, &[], "test").unwrap();
    assert_eq!(names(&r), ["ssl=3.5"]);
}

#[test]
fn errors_name_the_chain() {
    let pkgs = index(IDX);
    let e = resolve(&pkgs, &["top".into()], Some(Variant::Essential), &[], "test").unwrap_err().to_string();
    assert!(e.contains("top -> old") && e.contains("libfoo (<< 3)") && e.contains("3.1"), "{e}");
    let e = resolve(&pkgs, &["nope".into()], Some(Variant::Essential), &[], "test").unwrap_err().to_string();
    assert!(e.contains("`nope` is not in the index"), "{e}");
    let e = resolve(&pkgs, &["vv".into()], Some(Variant::Essential), &[], "test").unwrap_err().to_string();
    assert!(e.contains("awk (>= 2)"), "{e}");
    let e = resolve(&pkgs, &["libc=9".into()], Some(Variant::Essential), &[], "test").unwrap_err().to_string();
    assert!(e.contains("2.1, 1"), "{e}");
}
