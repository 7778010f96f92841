//! Which system package installed a library (for the SBOM of a repaired
//! wheel), asked of the package manager where the library came from: this
//! machine, or the image a repair takes libraries from. Like auditwheel's
//! `whichprovides`: dpkg (Debian, Ubuntu) or rpm (AlmaLinux, the manylinux
//! images); a library no package owns is described without one.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// A system package.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Package {
    /// `deb` or `rpm` (the purl type).
    pub manager: String,
    pub name: String,
    pub version: String,
    pub arch: Option<String>,
    /// `/etc/os-release` ID (`debian`, `almalinux`).
    pub distro_id: Option<String>,
    /// ID-VERSION_ID (`debian-12`).
    pub distro: Option<String>,
}

impl Package {
    /// Its package URL (`pkg:deb/debian/libffi8@3.4.4-1?arch=amd64&distro=debian-12`),
    /// encoded as every SBOM quarry writes encodes it (`crate::purl`).
    pub fn purl(&self) -> Result<String, crate::purl::PurlError> {
        let qualifiers =
            [("arch", self.arch.as_deref().unwrap_or("")), ("distro", self.distro.as_deref().unwrap_or(""))];
        crate::purl::format(&self.manager, self.distro_id.as_deref(), &self.name, Some(&self.version), &qualifiers)
    }
}

/// Prints `os ID VERSION_ID`, then for each argument (a library path) that a
/// package owns `pkg PATH MANAGER NAME VERSION ARCH`, for the path as given
/// and with links followed (merged-/usr systems record either).
pub const SCRIPT: &str = r#"id=; ver=
if [ -r /etc/os-release ]; then id=$(. /etc/os-release; printf %s "${ID:-}"); ver=$(. /etc/os-release; printf %s "${VERSION_ID:-}"); fi
printf 'os\t%s\t%s\n' "$id" "$ver"
for p; do
  r=$(readlink -f "$p" 2>/dev/null || printf %s "$p")
  line=
  if command -v dpkg-query >/dev/null 2>&1; then
    for q in "$r" "$p" "/usr$r" "${r#/usr}"; do
      owner=$(dpkg-query -S "$q" 2>/dev/null | head -n 1 | sed 's/: .*//')
      if [ -n "$owner" ]; then
        line=$(dpkg-query -W -f='deb\t${Package}\t${Version}\t${Architecture}' "$owner" 2>/dev/null | head -n 1)
        break
      fi
    done
  elif command -v rpm >/dev/null 2>&1; then
    line=$(rpm -qf --qf 'rpm\t%{NAME}\t%{VERSION}-%{RELEASE}\t%{ARCH}\n' "$r" 2>/dev/null | head -n 1)
  fi
  case "$line" in
    deb*|rpm*) printf 'pkg\t%s\t%s\n' "$p" "$line"; [ "$r" = "$p" ] || printf 'pkg\t%s\t%s\n' "$r" "$line" ;;
  esac
done"#;

/// Read what [`SCRIPT`] printed: path -> package.
pub fn parse(out: &str) -> BTreeMap<PathBuf, Package> {
    let (mut id, mut ver) = (None, None);
    let mut found = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["os", i, v] => {
                id = Some(i.to_string()).filter(|s| !s.is_empty());
                ver = Some(v.to_string()).filter(|s| !s.is_empty());
            }
            ["pkg", path, manager, name, version, arch] if !name.is_empty() && !version.is_empty() => {
                let distro = match (&id, &ver) {
                    (Some(i), Some(v)) => Some(format!("{i}-{v}")),
                    _ => None,
                };
                found.insert(
                    PathBuf::from(path),
                    Package {
                        manager: manager.to_string(),
                        name: name.to_string(),
                        version: version.to_string(),
                        arch: Some(arch.to_string()).filter(|a| !a.is_empty() && *a != "(none)"),
                        distro_id: id.clone(),
                        distro,
                    },
                );
            }
            _ => {}
        }
    }
    found
}

/// The packages that installed `paths` on this machine (those no package
/// manager knows are left out).
pub fn on_host(paths: Vec<PathBuf>) -> BTreeMap<PathBuf, Package> {
    if paths.is_empty() {
        return BTreeMap::new();
    }
    let out = std::process::Command::new("sh").arg("-c").arg(SCRIPT).arg("sh").args(&paths).output();
    match out {
        Ok(o) => parse(&String::from_utf8_lossy(&o.stdout)),
        Err(e) => {
            log::warn!("cannot ask the package manager which packages hold the bundled libraries: {e}");
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_output_and_purls() {
        let out = "os\tdebian\t12\n\
                   pkg\t/lib/x86_64-linux-gnu/libffi.so.8\tdeb\tlibffi8\t3.4.4-1\tamd64\n\
                   pkg\t/x\tdeb\t\t\t\n";
        let m = parse(out);
        assert_eq!(m.len(), 1);
        let p = &m[&PathBuf::from("/lib/x86_64-linux-gnu/libffi.so.8")];
        assert_eq!(p.purl().unwrap(), "pkg:deb/debian/libffi8@3.4.4-1?arch=amd64&distro=debian-12");
        let rpm = Package {
            manager: "rpm".into(),
            name: "libstdc++".into(),
            version: "8.5.0-22.el8".into(),
            arch: Some("x86_64".into()),
            distro_id: Some("almalinux".into()),
            distro: Some("almalinux-8.10".into()),
        };
        assert_eq!(
            rpm.purl().unwrap(),
            "pkg:rpm/almalinux/libstdc%2B%2B@8.5.0-22.el8?arch=x86_64&distro=almalinux-8.10"
        );
    }

    /// A Debian version with an epoch: the `:` stays (the purl
    /// specification; the SPDX writer gives the same URL, tests/e2e/sbom.rs).
    #[test]
    fn an_epoch_keeps_its_colon() {
        let out = "os\tdebian\t12\npkg\t/usr/lib/x86_64-linux-gnu/libattr.so.1\tdeb\tlibattr1\t1:2.5.1-4\tamd64\n";
        let m = parse(out);
        let p = &m[&PathBuf::from("/usr/lib/x86_64-linux-gnu/libattr.so.1")];
        assert_eq!(p.version, "1:2.5.1-4");
        assert_eq!(p.purl().unwrap(), "pkg:deb/debian/libattr1@1:2.5.1-4?arch=amd64&distro=debian-12");
    }
}
