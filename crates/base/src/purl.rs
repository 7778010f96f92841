//! Package URLs (`pkg:TYPE/NAMESPACE/NAME@VERSION?QUALIFIERS`): the one
//! place quarry writes them, so the SPDX documents of images (`sbom`) and
//! the CycloneDX documents of repaired wheels (`wheel::repair::sbom`) name
//! the same package with the same URL.
//!
//! Made by the `packageurl` crate, which follows the purl specification:
//! each type's normalization (`deb` names and namespaces lower-cased,
//! `pypi` names lower-cased with `_` as `-`) and the percent-encoding of
//! each part where the specification asks for it (`+` is `%2B`, a
//! qualifier value's `/` is `%2F`). A `:` is never encoded (the
//! specification: "the colon ':', whether used as a Separator Character or
//! otherwise" is not percent-encoded), so a Debian version with an epoch
//! reads `pkg:deb/debian/attr@1:2.5.1-4`, as the specification's own
//! examples write it; the SPDX validator and CycloneDX (a purl is a string
//! there) take it as it is. Qualifiers come sorted by key; one with an
//! empty value is left out (the specification: the same as none).

use packageurl::PackageUrl;

/// Parts no package URL can hold (an empty name, a bad type or qualifier key).
#[derive(Debug, thiserror::Error)]
#[error("no package URL can hold the {ty} package `{name}`: {source}")]
pub struct PurlError {
    ty: String,
    name: String,
    #[source]
    source: packageurl::Error,
}

/// The package URL of `name` (of type `ty`: `deb`, `rpm`, `pypi`, `oci`)
/// with its parts encoded as the specification says.
pub fn format(
    ty: &str,
    namespace: Option<&str>,
    name: &str,
    version: Option<&str>,
    qualifiers: &[(&str, &str)],
) -> Result<String, PurlError> {
    let bad = |source| PurlError { ty: ty.to_string(), name: name.to_string(), source };
    let mut p = PackageUrl::new(ty.to_string(), name.to_string()).map_err(bad)?;
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
        p.with_namespace(ns.to_string()).map_err(bad)?;
    }
    if let Some(v) = version.filter(|v| !v.is_empty()) {
        p.with_version(v.to_string()).map_err(bad)?;
    }
    for (k, v) in qualifiers.iter().filter(|(_, v)| !v.is_empty()) {
        p.add_qualifier(k.to_string(), v.to_string()).map_err(bad)?;
    }
    p.validate().map_err(bad)?;
    Ok(p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debian_epoch_keeps_its_colon() {
        let p = format("deb", Some("debian"), "attr", Some("1:2.5.1-4"), &[("arch", "amd64")]).unwrap();
        assert_eq!(p, "pkg:deb/debian/attr@1:2.5.1-4?arch=amd64");
        // `+` is encoded; qualifiers sorted; empty ones left out.
        let p = format(
            "deb",
            Some("debian"),
            "libstdc++6",
            Some("1:12.2.0-14+deb12u1"),
            &[("distro", "debian-12"), ("arch", "amd64"), ("file_name", "")],
        )
        .unwrap();
        assert_eq!(p, "pkg:deb/debian/libstdc%2B%2B6@1:12.2.0-14%2Bdeb12u1?arch=amd64&distro=debian-12");
        // What it writes reads back as the same parts.
        let back: PackageUrl = p.parse().unwrap();
        assert_eq!(back.version(), Some("1:12.2.0-14+deb12u1"));
        assert_eq!(back.name(), "libstdc++6");
    }

    #[test]
    fn types_normalize_and_bad_parts_are_refused() {
        let p = format("pypi", None, "Flash_Attn", Some("2.8.3+rocm6.2"), &[("file_name", "a+b.whl")]).unwrap();
        assert_eq!(p, "pkg:pypi/flash-attn@2.8.3%2Brocm6.2?file_name=a%2Bb.whl");
        let p = format("oci", None, "base", Some("sha256:ab"), &[("repository_url", "h:5000/t/base")]).unwrap();
        assert_eq!(p, "pkg:oci/base@sha256:ab?repository_url=h:5000%2Ft%2Fbase");
        let e = format("deb", Some("debian"), "", Some("1"), &[]).unwrap_err().to_string();
        assert!(e.contains("deb package ``"), "{e}");
        assert!(format("pypi", Some("ns"), "x", None, &[]).is_err(), "pypi has no namespace");
    }
}
