//! `mirror = "host"`: the mirror this machine's apt uses for a suite, read
//! from `/etc/apt/sources.list` (one-line format) and
//! `/etc/apt/sources.list.d/*.list|*.sources` (deb822), so the machine's
//! own mirror choice (and its proxies, through the environment) applies.

use super::control::parse_paragraphs;
use std::path::{Path, PathBuf};

/// One `deb` entry: a URI and the suites and components it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptSource {
    pub uri: String,
    pub suites: Vec<String>,
    pub components: Vec<String>,
    /// The keyring that signs it (`signed-by`), when the entry names one.
    pub signed_by: Option<String>,
    /// The file it was read from (for messages).
    pub file: PathBuf,
}

/// Every `deb` entry under an apt configuration root (normally `/etc/apt`),
/// in the order apt reads them: sources.list first, then sources.list.d sorted.
pub fn read_sources(etc_apt: &Path) -> Vec<AptSource> {
    let mut files = vec![etc_apt.join("sources.list")];
    if let Ok(rd) = std::fs::read_dir(etc_apt.join("sources.list.d")) {
        let mut more: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("list" | "sources")))
            .collect();
        more.sort();
        files.extend(more);
    }
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        if f.extension().and_then(|e| e.to_str()) == Some("sources") {
            out.extend(parse_deb822(&text, &f));
        } else {
            out.extend(parse_one_line(&text, &f));
        }
    }
    out
}

fn parse_one_line(text: &str, file: &Path) -> Vec<AptSource> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut rest = match line.strip_prefix("deb ").or_else(|| line.strip_prefix("deb\t")) {
            Some(r) => r.trim_start(),
            None => continue,
        };
        let mut signed_by = None;
        if rest.starts_with('[') {
            match rest.find(']') {
                Some(i) => {
                    signed_by =
                        rest[1..i].split_whitespace().find_map(|o| o.strip_prefix("signed-by=")).map(String::from);
                    rest = rest[i + 1..].trim_start();
                }
                None => continue,
            }
        }
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(AptSource {
            uri: uri.to_string(),
            suites: vec![suite.to_string()],
            components: words.map(String::from).collect(),
            signed_by,
            file: file.to_path_buf(),
        });
    }
    out
}

fn parse_deb822(text: &str, file: &Path) -> Vec<AptSource> {
    let mut out = Vec::new();
    for p in parse_paragraphs(text) {
        let words = |k: &str| -> Vec<String> { p.get(k).unwrap_or("").split_whitespace().map(String::from).collect() };
        if !words("Types").iter().any(|t| t == "deb") {
            continue;
        }
        if p.get("Enabled").map(|v| v.trim().eq_ignore_ascii_case("no")).unwrap_or(false) {
            continue;
        }
        for uri in words("URIs") {
            out.push(AptSource {
                uri,
                suites: words("Suites"),
                components: words("Components"),
                signed_by: p.get("Signed-By").map(|k| k.trim().to_string()).filter(|k| !k.is_empty()),
                file: file.to_path_buf(),
            });
        }
    }
    out
}

/// The mirror for `suite`, without a trailing `/`: the first entry that
/// lists it (the distribution's own archive before a vendor's entry named
/// after a release), else the first entry for another release of the same
/// archive and pocket (`trixie` from the host's `bookworm` entry, `trixie-security`
/// from its `bookworm-security` one): a Debian mirror serves every Debian
/// release, so a bookworm machine builds trixie images without editing its
/// sources. An unknown codename gets no such guess.
pub fn host_mirror(etc_apt: &Path, suite: &str) -> Option<String> {
    let sources = read_sources(etc_apt);
    let uri = |s: &AptSource| s.uri.trim_end_matches('/').to_string();
    let exact = sources.iter().filter(|s| s.suites.iter().any(|x| x == suite));
    let distribution = SuiteName::parse(suite).map(|n| n.distribution);
    if let Some(s) = exact.min_by_key(|s| distribution.and_then(|d| sibling_rank(s, d)).unwrap_or(2)) {
        return Some(uri(s));
    }
    let wanted = SuiteName::parse(suite)?;
    let (_, source, sibling) = sources
        .iter()
        .filter_map(|s| {
            let sibling = s.suites.iter().find(|x| SuiteName::parse(x) == Some(wanted))?;
            Some((sibling_rank(s, wanted.distribution)?, s, sibling))
        })
        .min_by_key(|(rank, _, _)| *rank)?;
    // Said once per suite: a build asks for the mirror many times.
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == suite) {
        said.push(suite.to_string());
        log::info!(
            "mirror = \"host\": no apt entry lists `{suite}`; using {} (the entry for `{sibling}` in {}, the same archive)",
            uri(source),
            source.file.display()
        );
    }
    Some(uri(source))
}

/// How surely an entry for another release is the distribution's own
/// archive (lower is surer), or None when it is not: signed by the
/// distribution's archive keyring, else unsigned-by-name with a `main`
/// component. An entry signed by another key is a vendor's repository that
/// happens to name its suite after a release (`bookworm main`).
fn sibling_rank(s: &AptSource, distribution: Distribution) -> Option<u8> {
    let keyring = match distribution {
        Distribution::Debian => "debian-archive-keyring",
        Distribution::Ubuntu => "ubuntu-archive-keyring",
    };
    match &s.signed_by {
        Some(k) if k.contains(keyring) => Some(0),
        Some(_) => None,
        None if s.components.iter().any(|c| c == "main") => Some(1),
        None => None,
    }
}

/// Which archive and pocket a suite name belongs to: `bookworm-security`
/// -> (Debian, `-security`). Equality ignores the release itself.
#[derive(Debug, Clone, Copy)]
struct SuiteName {
    distribution: Distribution,
    pocket: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Distribution {
    Debian,
    Ubuntu,
}

impl PartialEq for SuiteName {
    fn eq(&self, other: &Self) -> bool {
        self.distribution == other.distribution && self.pocket == other.pocket
    }
}

/// Release codenames and aliases (as distro-info-data lists them; a short
/// table rather than a dependency on that package, which hosts may lack).
const DEBIAN_RELEASES: &[&str] = &[
    "buzz",
    "rex",
    "bo",
    "hamm",
    "slink",
    "potato",
    "woody",
    "sarge",
    "etch",
    "lenny",
    "squeeze",
    "wheezy",
    "jessie",
    "stretch",
    "buster",
    "bullseye",
    "bookworm",
    "trixie",
    "forky",
    "duke",
    "sid",
    "oldoldstable",
    "oldstable",
    "stable",
    "testing",
    "unstable",
];
const UBUNTU_RELEASES: &[&str] = &[
    "warty", "hoary", "breezy", "dapper", "edgy", "feisty", "gutsy", "hardy", "intrepid", "jaunty", "karmic", "lucid",
    "maverick", "natty", "oneiric", "precise", "quantal", "raring", "saucy", "trusty", "utopic", "vivid", "wily",
    "xenial", "yakkety", "zesty", "artful", "bionic", "cosmic", "disco", "eoan", "focal", "groovy", "hirsute",
    "impish", "jammy", "kinetic", "lunar", "mantic", "noble", "oracular", "plucky", "questing", "resolute",
];
const DEBIAN_POCKETS: &[&str] = &["-updates", "-security", "-backports-sloppy", "-backports", "-proposed-updates"];
const UBUNTU_POCKETS: &[&str] = &["-updates", "-security", "-backports", "-proposed"];

/// A suite's release and pocket: `bookworm-security` -> `bookworm`, `-security`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pocket {
    pub release: String,
    pub debian: bool,
    pub pocket: &'static str,
}

impl Pocket {
    pub fn of(suite: &str) -> Option<Pocket> {
        let n = SuiteName::parse(suite)?;
        Some(Pocket {
            release: suite[..suite.len() - n.pocket.len()].to_string(),
            debian: n.distribution == Distribution::Debian,
            pocket: n.pocket,
        })
    }

    /// Debian's security suites live in another archive (`debian-security`).
    pub fn is_debian_security(&self) -> bool {
        self.debian && self.pocket == "-security"
    }

    /// The releases of the same distribution, newest first (codenames only).
    pub fn releases_newest_first(&self) -> Vec<&'static str> {
        let all = if self.debian { &DEBIAN_RELEASES[..DEBIAN_RELEASES.len() - 6] } else { UBUNTU_RELEASES };
        all.iter().rev().copied().collect()
    }
}

impl SuiteName {
    fn parse(suite: &str) -> Option<SuiteName> {
        for (distribution, releases, pockets) in [
            (Distribution::Debian, DEBIAN_RELEASES, DEBIAN_POCKETS),
            (Distribution::Ubuntu, UBUNTU_RELEASES, UBUNTU_POCKETS),
        ] {
            let pocket = pockets.iter().find(|p| suite.ends_with(**p)).copied().unwrap_or("");
            if releases.contains(&&suite[..suite.len() - pocket.len()]) {
                return Some(SuiteName { distribution, pocket });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_formats() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("sources.list"),
            "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main contrib\ndeb-src http://src.example/debian bookworm main\n",
        )
        .unwrap();
        std::fs::create_dir(d.path().join("sources.list.d")).unwrap();
        std::fs::write(
            d.path().join("sources.list.d/x.sources"),
            "Types: deb deb-src\nURIs: http://two.example/ubuntu/\nSuites: noble noble-updates\nComponents: main universe\n\nTypes: deb\nURIs: http://off.example/\nSuites: jammy\nEnabled: no\n",
        )
        .unwrap();
        std::fs::write(d.path().join("sources.list.d/y.list.disabled"), "deb http://never.example/ jammy main\n")
            .unwrap();
        let all = read_sources(d.path());
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].components, ["main", "contrib"]);
        assert_eq!(host_mirror(d.path(), "bookworm").unwrap(), "http://one.example/debian");
        assert_eq!(host_mirror(d.path(), "noble-updates").unwrap(), "http://two.example/ubuntu");
        // jammy is only in disabled entries: it gets the enabled Ubuntu mirror.
        assert_eq!(host_mirror(d.path(), "jammy").unwrap(), "http://two.example/ubuntu");
        assert_eq!(host_mirror(d.path(), "sid"), None);
    }

    #[test]
    fn another_release_of_the_same_archive_and_pocket() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sources.list.d")).unwrap();
        // A bookworm host as Debian installs it (deb822), plus a third-party entry first.
        std::fs::write(
            d.path().join("sources.list.d/debian.sources"),
            "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
             Types: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\nComponents: main\n",
        )
        .unwrap();
        // Vendors' entries named after releases come first in apt's order.
        std::fs::write(
            d.path().join("sources.list.d/a-vendor.list"),
            "deb http://vendor.example/apt stable main\n\
             deb [arch=amd64 signed-by=/usr/share/keyrings/vendor.gpg] http://signed.example/debian/12/prod bookworm main\n\
             deb http://docker.example/linux/debian bookworm stable\n",
        )
        .unwrap();
        let m = |s: &str| host_mirror(d.path(), s);
        assert_eq!(m("bookworm").unwrap(), "http://deb.example/debian");
        assert_eq!(m("trixie").unwrap(), "http://deb.example/debian");
        assert_eq!(m("trixie-updates").unwrap(), "http://deb.example/debian");
        assert_eq!(m("trixie-security").unwrap(), "http://deb.example/debian-security");
        // No backports entry on the host, no Ubuntu entry, an unknown codename: no guess.
        assert_eq!(m("trixie-backports"), None);
        assert_eq!(m("noble"), None);
        assert_eq!(m("mycorp-2024"), None);
        // `stable` is listed (by the vendor's entry) and is taken as listed.
        assert_eq!(m("stable").unwrap(), "http://vendor.example/apt");
    }

    #[test]
    fn suite_names() {
        let p = |s| SuiteName::parse(s).map(|n| (n.distribution, n.pocket));
        assert_eq!(p("trixie"), Some((Distribution::Debian, "")));
        assert_eq!(p("bookworm-backports-sloppy"), Some((Distribution::Debian, "-backports-sloppy")));
        assert_eq!(p("noble-proposed"), Some((Distribution::Ubuntu, "-proposed")));
        assert_eq!(p("noble-proposed-updates"), None);
        assert_eq!(p("-security"), None);
        assert_eq!(p(""), None);
    }
}
