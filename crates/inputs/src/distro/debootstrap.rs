//! The archive a distribution's own installer would use: Debian's
//! `debootstrap` package names each release's default mirror in its suite
//! scripts (`/usr/share/debootstrap/scripts/noble`: a `default_mirror`
//! line for each architecture). `mirror = "host"` falls back
//! to it when this machine's apt sources name no archive for the suite (an
//! Ubuntu image built on a Debian machine), so no mirror is written into a
//! definition and none is guessed by quarry.
//!
//! The scripts are shell; what matters is one shape, a `case $ARCH` and a
//! `case $SUITE` around `default_mirror` lines, read here by a small
//! evaluator of those `case` arms (first match wins, `*` matches all), not by
//! running a shell: the scripts' other lines call debootstrap's functions.

use std::path::{Path, PathBuf};

/// Where debootstrap keeps its suite scripts (`QUARRY_DEBOOTSTRAP_SCRIPTS`
/// overrides, for tests).
pub fn scripts_dir() -> PathBuf {
    std::env::var_os("QUARRY_DEBOOTSTRAP_SCRIPTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/debootstrap/scripts"))
}

/// The default mirror of `suite` for the Debian architecture `arch`, from
/// the script named `script` (the suite's own, or another release's of the
/// same distribution when this debootstrap predates the suite); a script
/// that names none (Debian's) takes debootstrap's own default, the
/// `DEF_MIRROR` of the program beside the scripts (`/usr/sbin/debootstrap`).
pub fn default_mirror(dir: &Path, script: &str, suite: &str, arch: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(script)).ok()?;
    evaluate(&text, suite, arch).or_else(|| {
        let program = dir.ancestors().nth(3)?.join("sbin/debootstrap");
        let text = std::fs::read_to_string(program).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("DEF_MIRROR="))
            .map(|v| v.trim_matches('"').trim_end_matches('/').to_string())
    })
}

/// One `case` being read: the variable it tests, whether an arm matched
/// already, and whether the current arm is taken.
struct Case {
    value: String,
    matched: bool,
    taking: bool,
}

fn evaluate(text: &str, suite: &str, arch: &str) -> Option<String> {
    let mut cases: Vec<Case> = Vec::new();
    let taking = |cases: &[Case]| cases.iter().all(|c| c.taking);
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(rest) = line.strip_prefix("case ") {
            let var = rest.trim_end_matches(" in").trim().trim_matches('"');
            let value = match var {
                "$ARCH" | "${ARCH}" => arch,
                "$SUITE" | "${SUITE}" => suite,
                _ => "",
            };
            cases.push(Case { value: value.to_string(), matched: false, taking: false });
        } else if line == "esac" {
            cases.pop();
        } else if line == ";;" || line.ends_with(";;") && !line.contains(')') {
            if let Some(c) = cases.last_mut() {
                c.taking = false;
            }
        } else if let Some(patterns) = line.strip_suffix(')').filter(|_| !cases.is_empty() && !line.contains(' ')) {
            let c = cases.last_mut().expect("checked above");
            let hit = patterns.split('|').any(|p| p == "*" || p == c.value);
            c.taking = !c.matched && hit;
            c.matched |= hit;
        } else if let Some(url) = line.strip_prefix("default_mirror ") {
            if taking(&cases) {
                return Some(url.trim().trim_end_matches('/').to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of debootstrap's `gutsy` script, which every Ubuntu release's links to.
    const UBUNTU: &str = "case $ARCH in\n  amd64|i386)\n\tcase $SUITE in\n\t  gutsy|hardy|zesty)\n\tdefault_mirror http://old.example/ubuntu\n\t  ;;\n\t  *)\n\tdefault_mirror http://archive.example/ubuntu\n\t;;\n\tesac\n\t;;\n  sparc)\n\tdefault_mirror http://sparc.example/ubuntu-ports\n\t;;\n  *)\n\tdefault_mirror http://ports.example/ubuntu-ports\n\t;;\nesac\nmirror_style release\nkeyring /usr/share/keyrings/ubuntu-archive-keyring.gpg\n";

    #[test]
    fn the_arms_for_the_architecture_and_suite() {
        assert_eq!(evaluate(UBUNTU, "noble", "amd64").as_deref(), Some("http://archive.example/ubuntu"));
        assert_eq!(evaluate(UBUNTU, "hardy", "i386").as_deref(), Some("http://old.example/ubuntu"));
        assert_eq!(evaluate(UBUNTU, "noble", "arm64").as_deref(), Some("http://ports.example/ubuntu-ports"));
        assert_eq!(evaluate(UBUNTU, "noble", "sparc").as_deref(), Some("http://sparc.example/ubuntu-ports"));
        // Debian's `sid` script names no mirror (debootstrap's own default applies).
        assert_eq!(evaluate("mirror_style release\nkeyring /k.gpg\n", "trixie", "amd64"), None);
    }

    #[test]
    fn reads_a_script_file_or_the_program_default() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("usr/share/debootstrap/scripts");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("gutsy"), UBUNTU).unwrap();
        std::os::unix::fs::symlink("gutsy", d.join("jammy")).unwrap();
        std::fs::write(d.join("sid"), "mirror_style release\nkeyring /usr/share/keyrings/debian-archive-keyring.gpg\n")
            .unwrap();
        assert_eq!(default_mirror(&d, "jammy", "noble", "amd64").as_deref(), Some("http://archive.example/ubuntu"));
        assert_eq!(default_mirror(&d, "noble", "noble", "amd64"), None, "no such script");
        assert_eq!(default_mirror(&d, "sid", "trixie", "amd64"), None, "no program beside the scripts");
        std::fs::create_dir_all(root.path().join("usr/sbin")).unwrap();
        std::fs::write(
            root.path().join("usr/sbin/debootstrap"),
            "#!/bin/sh\nDEF_MIRROR=\"http://deb.example/debian\"\n",
        )
        .unwrap();
        assert_eq!(default_mirror(&d, "sid", "trixie", "amd64").as_deref(), Some("http://deb.example/debian"));
    }
}
