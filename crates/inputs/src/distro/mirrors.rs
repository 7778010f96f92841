//! Which mirror serves each suite of a package set. `mirror = "host"`: this
//! machine's apt entry for the suite (`sources`), else the distribution's
//! archive as Debian's `debootstrap` names it (`debootstrap`), said once.
//! A URL: that mirror for every suite, except Debian's `-security` suites,
//! which live in another archive: `security_mirror` when given, else the
//! `debian-security` archive beside a `.../debian` URL (the layout of
//! every Debian mirror that carries both).

use super::sources::{self, Pocket};
use super::DistroError;
use crate::definition::{KeyringDeb, Mirror, PackageSet};
use std::path::PathBuf;

fn apt_etc() -> PathBuf {
    std::env::var_os("QUARRY_APT_ETC").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/etc/apt"))
}

/// The mirror for `suite` of `set`, without a trailing `/`.
pub fn mirror_for(set: &PackageSet, suite: &str) -> Result<String, DistroError> {
    let debian_security = Pocket::of(suite).is_some_and(|p| p.is_debian_security());
    match (&set.mirror, &set.security_mirror) {
        (_, Some(m)) if debian_security || suite.ends_with("-security") => of(m, suite, &set.architecture),
        (Mirror::Url(u), None) if debian_security => match u.strip_suffix("/debian") {
            Some(root) => Ok(format!("{root}/debian-security")),
            None => Err(DistroError::NoSecurityMirror { suite: suite.to_string(), mirror: u.clone() }),
        },
        (m, _) => of(m, suite, &set.architecture),
    }
}

/// Each suite of `set` with its mirror, in the order of `suites`.
pub fn mirrors(set: &PackageSet) -> Result<Vec<(String, String)>, DistroError> {
    set.suites.iter().map(|s| Ok((s.clone(), mirror_for(set, s)?))).collect()
}

/// The mirror a keyring's package comes from.
pub fn keyring_mirror(k: &KeyringDeb, architecture: &str) -> Result<String, DistroError> {
    of(&k.mirror, &k.suite, architecture)
}

fn of(m: &Mirror, suite: &str, architecture: &str) -> Result<String, DistroError> {
    match m {
        Mirror::Url(u) => Ok(u.clone()),
        Mirror::Host => host(suite, architecture),
    }
}

/// This machine's mirror for `suite`: its apt sources, else debootstrap's
/// default for the release (not for Debian's security archive, which
/// debootstrap does not name).
fn host(suite: &str, architecture: &str) -> Result<String, DistroError> {
    let etc = apt_etc();
    if let Some(m) = sources::host_mirror(&etc, suite) {
        return Ok(m);
    }
    let pocket = Pocket::of(suite).filter(|p| !p.is_debian_security());
    let dir = super::debootstrap::scripts_dir();
    let found = pocket.as_ref().and_then(|p| {
        std::iter::once(p.release.as_str())
            .chain(p.releases_newest_first())
            .filter(|r| dir.join(r).is_file())
            .find_map(|r| super::debootstrap::default_mirror(&dir, r, &p.release, architecture).map(|m| (r, m)))
    });
    let Some((script, mirror)) = found else {
        return Err(DistroError::NoHostMirror { suite: suite.to_string(), etc: etc.display().to_string() });
    };
    // Said once per suite: a build asks for the mirror many times.
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == suite) {
        said.push(suite.to_string());
        log::info!(
            "mirror = \"host\": this machine's apt sources name no archive for `{suite}`; using {mirror}, the default of debootstrap's `{}` script",
            dir.join(script).display()
        );
    }
    Ok(mirror)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{Configure, Keyring};

    fn set(mirror: Mirror, security: Option<Mirror>, suites: &[&str]) -> PackageSet {
        PackageSet {
            suites: suites.iter().map(|s| s.to_string()).collect(),
            components: vec!["main".into()],
            architecture: "amd64".into(),
            mirror,
            security_mirror: security,
            keyring: Keyring::File("/k.gpg".into()),
            include: vec![],
            configure: Configure::Sandbox,
        }
    }

    #[test]
    fn debian_security_lives_beside_the_archive() {
        let url = |u: &str| Mirror::Url(u.to_string());
        let s = set(url("http://m.example/debian"), None, &["bookworm", "bookworm-updates", "bookworm-security"]);
        assert_eq!(
            mirrors(&s).unwrap(),
            [
                ("bookworm".to_string(), "http://m.example/debian".to_string()),
                ("bookworm-updates".to_string(), "http://m.example/debian".to_string()),
                ("bookworm-security".to_string(), "http://m.example/debian-security".to_string()),
            ]
        );
        // Ubuntu's pockets are all in its archive.
        let u = set(url("http://m.example/ubuntu"), None, &["noble", "noble-security"]);
        assert_eq!(mirror_for(&u, "noble-security").unwrap(), "http://m.example/ubuntu");
        // A mirror not laid out as Debian's: security_mirror says where.
        let odd = set(url("http://m.example/deb"), None, &["bookworm", "bookworm-security"]);
        let e = mirror_for(&odd, "bookworm-security").unwrap_err().to_string();
        assert!(e.contains("bookworm-security") && e.contains("security_mirror"), "{e}");
        let given =
            set(url("http://m.example/deb"), Some(url("http://sec.example/x")), &["bookworm", "bookworm-security"]);
        assert_eq!(mirror_for(&given, "bookworm-security").unwrap(), "http://sec.example/x");
        assert_eq!(mirror_for(&given, "bookworm").unwrap(), "http://m.example/deb");
    }
}
