//! What apt itself would have left in an image it installed: a sources
//! entry naming the archive the packages came from (so `apt-get update &&
//! apt-get install X` works inside), and `extended_states` with the
//! automatic marks (so `apt-get autoremove` knows what was only a
//! dependency). No maintainer script writes either.

use super::unpack::{file, NewPackage};
use super::DistroError;
use crate::definition::PackageSet;
use crate::layer::Tree;

const EXTENDED: &[u8] = b"var/lib/apt/extended_states";

fn text(tree: &Tree, p: &[u8]) -> Option<String> {
    tree.get(p).and_then(|n| n.read_content().ok()).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The distribution's name for its sources file (`debian`, `ubuntu`).
fn vendor(tree: &Tree, below: Option<&Tree>) -> String {
    let os_release = ["etc/os-release", "usr/lib/os-release"]
        .iter()
        .find_map(|p| text(tree, p.as_bytes()).or_else(|| below.and_then(|b| text(b, p.as_bytes()))))
        .unwrap_or_default();
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("ID="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or_else(|| "quarry".into())
}

/// A deb822 sources paragraph for `suites` of `set` from `mirror`.
fn paragraph(set: &PackageSet, mirror: &str, suites: &[&str], keyring_in_image: bool) -> String {
    let mut p =
        format!("Types: deb\nURIs: {mirror}\nSuites: {}\nComponents: {}\n", suites.join(" "), set.components.join(" "));
    if keyring_in_image {
        p.push_str(&format!("Signed-By: {}\n", set.keyring.image_path().display()));
    }
    p
}

/// Does a sources text (deb822 or one-line) name `mirror` and `suite`?
fn names(text: &str, mirror: &str, suite: &str) -> bool {
    let mirror = mirror.trim_end_matches('/');
    let one_line = text.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().filter(|w| !w.starts_with('[')).collect();
        w.first() == Some(&"deb")
            && w.get(1).map(|u| u.trim_end_matches('/')) == Some(mirror)
            && w.get(2) == Some(&suite)
    });
    one_line
        || text.split("\n\n").any(|p| {
            let field = |k: &str| p.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("").to_string();
            field("URIs:").split_whitespace().any(|u| u.trim_end_matches('/') == mirror)
                && field("Suites:").split_whitespace().any(|s| s == suite)
        })
}

/// Add the archive to the image's apt sources: one paragraph per mirror
/// (`mirrors`: each suite with its mirror), naming the suites no entry
/// there names already. `below`: the layers under a layer.
pub fn add_sources(
    tree: &mut Tree,
    below: Option<&Tree>,
    set: &PackageSet,
    mirrors: &[(String, String)],
) -> Result<(), DistroError> {
    let is_source = |p: &[u8]| p == b"etc/apt/sources.list" || p.starts_with(b"etc/apt/sources.list.d/");
    let mut texts: Vec<String> = tree.iter().filter(|(p, _)| is_source(p)).filter_map(|(p, _)| text(tree, p)).collect();
    if let Some(b) = below {
        texts.extend(b.iter().filter(|(p, _)| is_source(p)).filter_map(|(p, _)| text(b, p)));
    }
    // Mirrors in the order their first suite comes, each with its suites not named yet.
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for (suite, mirror) in mirrors {
        if texts.iter().any(|t| names(t, mirror, suite)) {
            continue;
        }
        match groups.iter_mut().find(|(m, _)| m == mirror) {
            Some((_, suites)) => suites.push(suite),
            None => groups.push((mirror, vec![suite])),
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    let keyring = set.keyring.image_path().to_string_lossy().trim_start_matches('/').as_bytes().to_vec();
    let keyring_in_image = tree.get(&keyring).is_some() || below.is_some_and(|b| b.get(&keyring).is_some());
    let name = format!("etc/apt/sources.list.d/{}.sources", vendor(tree, below));
    let mut body =
        text(tree, name.as_bytes()).or_else(|| below.and_then(|b| text(b, name.as_bytes()))).unwrap_or_default();
    for (mirror, suites) in groups {
        let kept = body.trim_end().len();
        body.truncate(kept);
        if !body.is_empty() {
            body.push_str("\n\n");
        }
        body.push_str(&paragraph(set, mirror, &suites, keyring_in_image));
    }
    tree.insert(name.into_bytes(), file(body, 0o644))
        .map_err(|e| DistroError::Assemble { message: format!("apt sources: {e}") })
}

/// Mark the packages no definition named as automatically installed, as
/// apt does for dependencies (for a base, mmdebstrap installs the
/// essential and `required` packages without marks).
pub fn mark_automatic(
    tree: &mut Tree,
    below: Option<&Tree>,
    packages: &[NewPackage],
    arch: &str,
) -> Result<(), DistroError> {
    let mut body = text(tree, EXTENDED).or_else(|| below.and_then(|b| text(b, EXTENDED))).unwrap_or_default();
    let auto: Vec<&NewPackage> = packages.iter().filter(|p| !p.named).collect();
    if auto.is_empty() && tree.get(EXTENDED).is_none() && below.is_some() {
        return Ok(());
    }
    for p in auto {
        body.push_str(&format!(
            "Package: {}\nArchitecture: {}\nAuto-Installed: 1\n\n",
            p.name,
            if p.architecture == "all" { arch } else { &p.architecture }
        ));
    }
    tree.insert(EXTENDED.to_vec(), file(body, 0o644))
        .map_err(|e| DistroError::Assemble { message: format!("apt's extended_states: {e}") })
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_source_names_an_archive_in_either_format() {
        let deb822 =
            "Types: deb\nURIs: http://m.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n";
        assert!(names(deb822, "http://m.example/debian", "bookworm"));
        assert!(!names(deb822, "http://m.example/debian", "trixie"));
        let one_line = "deb [signed-by=/k.gpg] http://m.example/debian trixie main\n";
        assert!(names(one_line, "http://m.example/debian/", "trixie"));
        assert!(!names(one_line, "http://other.example/debian", "trixie"));
    }
}
