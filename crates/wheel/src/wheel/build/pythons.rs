//! The Pythons of a build image: the manylinux layout
//! (`/opt/python/cp3*/bin/python`), else `python3` on PATH, each with its
//! version, glibc and machine (what build requirements are chosen for).

/// A Python found in the image.
#[derive(Debug, Clone, PartialEq)]
pub struct Python {
    /// `cp311` (with ABI flags: `cp313t`).
    pub tag: String,
    /// `3.11`.
    pub version: String,
    /// glibc's minor version (`36` for 2.36); None without glibc.
    pub glibc_minor: Option<u32>,
    /// `x86_64`.
    pub machine: String,
    pub path: String,
}

/// Lists `TAG VERSION GLIBC MACHINE PATH` for each Python: the manylinux
/// layout, else python3.
pub(super) const FIND_PYTHONS: &str = r#"info='import os, platform, sys
v = sys.version_info
try:
    g = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
except Exception:
    g = "-"
print("cp%d%d%s %d.%d %s %s" % (v[0], v[1], getattr(sys, "abiflags", ""), v[0], v[1], g, platform.machine()))'
found=0
for p in /opt/python/cp3*/bin/python; do
  if [ -x "$p" ]; then found=1; echo "$("$p" -c "$info") $p"; fi
done
if [ $found = 0 ] && p=$(command -v python3); then echo "$("$p" -c "$info") $p"; fi"#;

pub(super) fn parse_pythons(out: &str) -> Vec<Python> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [tag, version, glibc, machine, path] = f.as_slice() else { return None };
            let glibc_minor = glibc.strip_prefix("2.").and_then(|m| m.split('.').next()?.parse().ok());
            Some(Python {
                tag: tag.to_string(),
                version: version.to_string(),
                glibc_minor,
                machine: machine.to_string(),
                path: path.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn python_listing() {
        let p = super::parse_pythons(
            "cp311 3.11 2.28 x86_64 /opt/python/cp311-cp311/bin/python\ncp312 3.12 - aarch64 /usr/bin/python3\nnoise\n",
        );
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].version.as_str(), p[0].glibc_minor, p[0].machine.as_str()), ("3.11", Some(28), "x86_64"));
        assert_eq!((p[1].path.as_str(), p[1].glibc_minor), ("/usr/bin/python3", None));
    }
}
