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
        if rest.starts_with('[') {
            match rest.find(']') {
                Some(i) => rest = rest[i + 1..].trim_start(),
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
                file: file.to_path_buf(),
            });
        }
    }
    out
}

/// The first mirror serving `suite`, without a trailing `/`.
pub fn host_mirror(etc_apt: &Path, suite: &str) -> Option<String> {
    read_sources(etc_apt)
        .into_iter()
        .find(|s| s.suites.iter().any(|x| x == suite))
        .map(|s| s.uri.trim_end_matches('/').to_string())
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
        assert_eq!(host_mirror(d.path(), "jammy"), None);
    }
}
