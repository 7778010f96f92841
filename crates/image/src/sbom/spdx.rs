//! The SPDX 2.3 JSON document of an inventory.
//!
//! Shape: the document DESCRIBES one package for the image (its manifest
//! digest as a SHA256 checksum and a `pkg:oci` purl when built); the image
//! CONTAINS one package per Debian package, PyPI file and local source; the
//! image is a DESCENDANT_OF its base (SPDX 2.3: "SPDXRef-A is a descendant of
//! (same lineage) SPDXRef-B": the image continues the base's layer chain;
//! CONTAINS would claim the base as one part among the packages, and
//! DEPENDS_ON/BUILD_DEPENDENCY_OF describe software needs, not lineage).
//!
//! Local sources are SPDX packages, not SPDX files: an SPDX 2.3 file must
//! carry a SHA1 checksum, and quarry hashes with sha256 only.
//!
//! The document types are written here rather than taken from a crate: the
//! subset quarry writes is small, and owning the field order and which
//! optional fields appear is what makes the bytes reproducible.
//!
//! Over 400 lines: one SPDX 2.3 document, its types and their checks
//! (under 400); the other 180 are its tests.

use super::inventory::{BaseKind, Inventory, LocalKind};
use super::SbomError;
use crate::oci::digest::sha256_hex;
use serde::Serialize;
use std::collections::BTreeSet;

const NOASSERTION: &str = "NOASSERTION";
const DOCUMENT_ID: &str = "SPDXRef-DOCUMENT";
const IMAGE_ID: &str = "SPDXRef-Image";
const BASE_ID: &str = "SPDXRef-Base";
/// SPDX 2.3 section 6.5: the namespace prefix for creators without a web
/// site of their own (no host of any registry appears in a document).
const NAMESPACE_PREFIX: &str = "https://spdx.org/spdxdocs/";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    spdx_version: &'static str,
    data_license: &'static str,
    #[serde(rename = "SPDXID")]
    spdx_id: &'static str,
    name: String,
    document_namespace: String,
    creation_info: CreationInfo,
    packages: Vec<Package>,
    relationships: Vec<Relationship>,
}

#[derive(Serialize)]
struct CreationInfo {
    created: String,
    creators: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Package {
    #[serde(rename = "SPDXID")]
    spdx_id: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version_info: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    package_file_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    supplier: Option<String>,
    download_location: &'static str,
    files_analyzed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    checksums: Vec<Checksum>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    external_refs: Vec<ExternalRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    primary_package_purpose: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
}

impl Package {
    fn new(spdx_id: String, name: String) -> Package {
        Package {
            spdx_id,
            name,
            version_info: None,
            package_file_name: None,
            supplier: None,
            download_location: NOASSERTION,
            files_analyzed: false,
            checksums: Vec::new(),
            external_refs: Vec::new(),
            primary_package_purpose: None,
            comment: None,
        }
    }

    fn sha256(mut self, hex: String) -> Self {
        self.checksums.push(Checksum { algorithm: "SHA256", checksum_value: hex });
        self
    }

    fn purl(mut self, purl: String) -> Self {
        self.external_refs.push(ExternalRef {
            reference_category: "PACKAGE-MANAGER",
            reference_type: "purl",
            reference_locator: purl,
        });
        self
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Checksum {
    algorithm: &'static str,
    checksum_value: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExternalRef {
    reference_category: &'static str,
    reference_type: &'static str,
    reference_locator: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Relationship {
    spdx_element_id: String,
    relationship_type: &'static str,
    related_spdx_element: String,
}

fn relationship(from: &str, kind: &'static str, to: &str) -> Relationship {
    Relationship { spdx_element_id: from.to_string(), relationship_type: kind, related_spdx_element: to.to_string() }
}

fn input_error(what: impl Into<String>, message: impl Into<String>) -> SbomError {
    SbomError::Input { what: what.into(), message: message.into() }
}

fn is_hex64(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hex of a `sha256:<hex>` digest, checked.
fn digest_hex<'a>(digest: &'a str, what: &str) -> Result<&'a str, SbomError> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| is_hex64(h))
        .ok_or_else(|| input_error(what, format!("digest `{digest}` is not `sha256:` and 64 lowercase hex digits")))
}

fn checked_hex<'a>(hex: &'a str, what: &str) -> Result<&'a str, SbomError> {
    if is_hex64(hex) {
        Ok(hex)
    } else {
        Err(input_error(what, format!("sha256 `{hex}` is not 64 lowercase hex digits")))
    }
}

/// A package URL from its parts (see `crate::purl`: the one encoder of
/// every SBOM quarry writes).
fn purl(
    ty: &str,
    namespace: Option<&str>,
    name: &str,
    version: &str,
    qualifiers: &[(&str, &str)],
    what: &str,
) -> Result<String, SbomError> {
    crate::purl::format(ty, namespace, name, Some(version), qualifiers).map_err(|e| input_error(what, e.to_string()))
}

/// Unique SPDX identifiers (`SPDXRef-` then letters, digits, `.` and `-`).
#[derive(Default)]
struct Ids(BTreeSet<String>);

impl Ids {
    fn make(&mut self, parts: &[&str]) -> String {
        let raw = parts.join("-");
        let clean: String =
            raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' }).collect();
        let base = format!("SPDXRef-{clean}");
        let mut id = base.clone();
        let mut n = 2;
        while !self.0.insert(id.clone()) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }
}

/// `created`: whole seconds, UTC, as SPDX writes it (`2023-11-14T22:13:20Z`).
fn created(epoch: u64) -> Result<String, SbomError> {
    let bad = || input_error("created_epoch", format!("{epoch} is not a time SPDX can write (years 1970-9999)"));
    let secs = i64::try_from(epoch).map_err(|_| bad())?;
    let t = chrono::DateTime::<chrono::Utc>::from_timestamp(secs, 0).ok_or_else(bad)?;
    if t.format("%Y").to_string().len() != 4 {
        return Err(bad());
    }
    Ok(t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// A UUID-shaped name from a content hash (RFC 9562 version 8, "custom"):
/// unique per document content, the same for the same content.
fn content_uuid(hex: &str) -> String {
    let mut h: Vec<char> = hex[..32].chars().collect();
    h[12] = '8';
    // The variant bits `10`: the nibble is one of 8, 9, a, b.
    let v = h[16].to_digit(16).unwrap_or(0);
    h[16] = std::char::from_digit(8 | (v & 3), 16).unwrap_or('8');
    let s: String = h.into_iter().collect();
    format!("{}-{}-{}-{}-{}", &s[0..8], &s[8..12], &s[12..16], &s[16..20], &s[20..32])
}

/// The last path component of a name, as an OCI purl name (the spec:
/// "the last fragment of the repository name").
fn oci_name(reference: &str) -> String {
    let no_digest = reference.split('@').next().unwrap_or(reference);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    let no_tag = last.split(':').next().unwrap_or(last);
    no_tag.to_ascii_lowercase()
}

fn image_package(inv: &Inventory) -> Result<Package, SbomError> {
    let mut p = Package::new(IMAGE_ID.to_string(), inv.image_name.clone());
    p.version_info = Some(inv.image_tag.clone());
    p.primary_package_purpose = Some("CONTAINER");
    match &inv.image_digest {
        Some(d) => {
            let what = format!("image `{}`", inv.image_name);
            let hex = digest_hex(d, &what)?;
            let locator = purl("oci", None, &oci_name(&inv.image_name), d, &[("tag", &inv.image_tag)], &what)?;
            p = p.sha256(hex.to_string()).purl(locator);
        }
        None => p.comment = Some("not built yet: the image manifest digest is not known".into()),
    }
    Ok(p)
}

fn base_package(base: &super::BaseImage) -> Result<Package, SbomError> {
    let what = format!("base `{}`", base.reference);
    let mut p = Package::new(BASE_ID.to_string(), base.reference.clone());
    p.primary_package_purpose = Some(if base.kind == BaseKind::Rootfs { "ARCHIVE" } else { "CONTAINER" });
    let Some(d) = &base.digest else {
        p.comment = Some("digest not known yet".into());
        return Ok(p);
    };
    p = p.sha256(digest_hex(d, &what)?.to_string());
    match base.kind {
        BaseKind::Registry => {
            let r =
                crate::registry::Reference::parse(&base.reference).map_err(|e| input_error(&what, e.to_string()))?;
            let repository_url = format!("{}/{}", r.registry, r.repository);
            let mut q: Vec<(&str, &str)> = vec![("repository_url", &repository_url)];
            if let Some(t) = &r.tag {
                q.push(("tag", t));
            }
            p = p.purl(purl("oci", None, &oci_name(&r.repository), d, &q, &what)?);
        }
        BaseKind::Oci | BaseKind::Image => {
            let name = oci_name(base.reference.trim_end_matches(".toml"));
            p = p.purl(purl("oci", None, &name, d, &[], &what)?);
        }
        BaseKind::Rootfs => p.comment = Some("a root filesystem tarball; the checksum is of its bytes".into()),
    }
    Ok(p)
}

/// The document's bytes: built once without a namespace to derive the
/// namespace from the content, then again with it.
pub(super) fn document_bytes(inv: &Inventory) -> Result<Vec<u8>, SbomError> {
    let mut doc = document(inv)?;
    let body = serde_json::to_vec(&doc).expect("an SPDX document always serializes");
    let slug: String = inv
        .image_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '-' })
        .collect();
    doc.document_namespace = format!("{NAMESPACE_PREFIX}{slug}-{}", content_uuid(&sha256_hex(&body)));
    let mut out = serde_json::to_vec_pretty(&doc).expect("an SPDX document always serializes");
    out.push(b'\n');
    Ok(out)
}

fn document(inv: &Inventory) -> Result<Document, SbomError> {
    let mut ids = Ids::default();
    ids.0.extend([DOCUMENT_ID.to_string(), IMAGE_ID.to_string(), BASE_ID.to_string()]);
    let mut packages = vec![image_package(inv)?];
    let mut relationships = vec![relationship(DOCUMENT_ID, "DESCRIBES", IMAGE_ID)];
    if let Some(b) = &inv.base {
        packages.push(base_package(b)?);
        relationships.push(relationship(IMAGE_ID, "DESCENDANT_OF", BASE_ID));
    }

    // Sorted, so that the order the inventory was collected in never shows.
    let mut debs: Vec<_> = inv.debs.iter().collect();
    debs.sort_by(|a, b| {
        (&a.name, &a.version, &a.architecture, &a.layer, &a.sha256).cmp(&(
            &b.name,
            &b.version,
            &b.architecture,
            &b.layer,
            &b.sha256,
        ))
    });
    for d in debs {
        let what = format!("Debian package `{}` {} ({})", d.name, d.version, d.architecture);
        let hex = checked_hex(&d.sha256, &what)?;
        let mut q: Vec<(&str, &str)> = vec![("arch", &d.architecture)];
        if let Some(s) = &d.suite {
            q.push(("distro", s));
        }
        let locator = purl("deb", Some(d.distro.as_str()), &d.name, &d.version, &q, &what)?;
        let id = ids.make(&["deb", &d.name, &d.architecture, &hex[..12]]);
        let mut p = Package::new(id, d.name.clone()).sha256(hex.to_string()).purl(locator);
        p.version_info = Some(d.version.clone());
        p.supplier = Some(format!("Organization: {}", if d.distro.as_str() == "debian" { "Debian" } else { "Ubuntu" }));
        p.comment = Some(format!("in layer `{}`", d.layer));
        packages.push(p);
    }

    let mut pypi: Vec<_> = inv.pypi.iter().collect();
    pypi.sort_by(|a, b| (&a.name, &a.version, &a.file, &a.layer).cmp(&(&b.name, &b.version, &b.file, &b.layer)));
    for f in pypi {
        let what = format!("PyPI file `{}`", f.file);
        let hex = checked_hex(&f.sha256, &what)?;
        let locator = purl("pypi", None, &f.name, &f.version, &[], &what)?;
        let id = ids.make(&["pypi", &f.name, &hex[..12]]);
        let mut p = Package::new(id, f.name.clone()).sha256(hex.to_string()).purl(locator);
        p.version_info = Some(f.version.clone());
        p.package_file_name = Some(f.file.clone());
        p.comment = Some(format!("in layer `{}`", f.layer));
        packages.push(p);
    }

    let mut local: Vec<_> = inv.local.iter().collect();
    local.sort_by(|a, b| (&a.path, a.kind, &a.layer, &a.digest).cmp(&(&b.path, b.kind, &b.layer, &b.digest)));
    for l in local {
        let what = format!("{} source `{}` of layer `{}`", l.kind.as_str(), l.path, l.layer);
        let hex = digest_hex(&l.digest, &what)?;
        let id = ids.make(&["local", l.kind.as_str(), &hex[..12]]);
        let mut p = Package::new(id, l.path.clone());
        p.primary_package_purpose = Some(match l.kind {
            LocalKind::File => "FILE",
            LocalKind::Archive => "ARCHIVE",
            LocalKind::Dir | LocalKind::Rocm => "OTHER",
        });
        p.comment = Some(if l.kind.digest_is_content() {
            format!("a local {}, in layer `{}`", l.kind.as_str(), l.layer)
        } else {
            // A tree fingerprint is no checksum of any one file's bytes.
            format!(
                "a local {} tree, in layer `{}`; quarry fingerprint of its names, modes, owners and contents: {}",
                l.kind.as_str(),
                l.layer,
                l.digest
            )
        });
        if l.kind.digest_is_content() {
            p = p.sha256(hex.to_string());
        }
        packages.push(p);
    }

    for p in &packages[1 + usize::from(inv.base.is_some())..] {
        relationships.push(relationship(IMAGE_ID, "CONTAINS", &p.spdx_id));
    }
    Ok(Document {
        spdx_version: "SPDX-2.3",
        data_license: "CC0-1.0",
        spdx_id: DOCUMENT_ID,
        name: format!("{}:{}", inv.image_name, inv.image_tag),
        document_namespace: String::new(),
        creation_info: CreationInfo {
            created: created(inv.created_epoch)?,
            creators: vec![format!("Tool: quarry-{}", env!("CARGO_PKG_VERSION"))],
        },
        packages,
        relationships,
    })
}

#[cfg(test)]
mod tests {
    use super::super::inventory::*;
    use super::*;

    fn hex(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    fn sample() -> Inventory {
        Inventory {
            image_name: "demo".into(),
            image_tag: "v1".into(),
            image_digest: Some(format!("sha256:{}", hex('a'))),
            created_epoch: 1_700_000_000,
            base: Some(BaseImage {
                kind: BaseKind::Registry,
                reference: "127.0.0.1:5000/team/base:12".into(),
                digest: Some(format!("sha256:{}", hex('b'))),
            }),
            debs: vec![
                DebPackage {
                    name: "libstdc++6".into(),
                    version: "12.2.0-14+deb12u1".into(),
                    architecture: "amd64".into(),
                    sha256: hex('c'),
                    distro: Distro::Debian,
                    suite: Some("bookworm".into()),
                    layer: "base".into(),
                },
                DebPackage {
                    name: "attr".into(),
                    version: "1:2.5.1-4".into(),
                    architecture: "amd64".into(),
                    sha256: hex('d'),
                    distro: Distro::Debian,
                    suite: None,
                    layer: "tools".into(),
                },
            ],
            pypi: vec![PypiFile {
                name: "Flash_Attn".into(),
                version: "2.8.3".into(),
                file: "Flash_Attn-2.8.3-py3-none-any.whl".into(),
                sha256: hex('e'),
                layer: "py".into(),
            }],
            local: vec![
                LocalSource {
                    kind: LocalKind::Dir,
                    path: "dist".into(),
                    digest: format!("sha256:{}", hex('f')),
                    layer: "d".into(),
                },
                LocalSource {
                    kind: LocalKind::File,
                    path: "motd.txt".into(),
                    digest: format!("sha256:{}", hex('1')),
                    layer: "motd".into(),
                },
            ],
        }
    }

    fn json(inv: &Inventory) -> serde_json::Value {
        serde_json::from_slice(&document_bytes(inv).unwrap()).unwrap()
    }

    fn locators(v: &serde_json::Value) -> Vec<String> {
        v["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["externalRefs"][0]["referenceLocator"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn purls_follow_the_spec() {
        let v = json(&sample());
        assert_eq!(
            locators(&v),
            [
                format!("pkg:oci/demo@sha256:{}?tag=v1", hex('a')),
                format!("pkg:oci/base@sha256:{}?repository_url=127.0.0.1:5000%2Fteam%2Fbase&tag=12", hex('b')),
                // The purl spec's own example: the epoch colon stays, `+` is encoded.
                "pkg:deb/debian/attr@1:2.5.1-4?arch=amd64".to_string(),
                "pkg:deb/debian/libstdc%2B%2B6@12.2.0-14%2Bdeb12u1?arch=amd64&distro=bookworm".to_string(),
                // pypi names: lowercase, `_` as `-`.
                "pkg:pypi/flash-attn@2.8.3".to_string(),
            ]
        );
    }

    #[test]
    fn relationships_and_ids() {
        let v = json(&sample());
        let rels: Vec<(String, String, String)> = v["relationships"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["spdxElementId"].as_str().unwrap().to_string(),
                    r["relationshipType"].as_str().unwrap().to_string(),
                    r["relatedSpdxElement"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(rels[0], ("SPDXRef-DOCUMENT".into(), "DESCRIBES".into(), "SPDXRef-Image".into()));
        assert_eq!(rels[1], ("SPDXRef-Image".into(), "DESCENDANT_OF".into(), "SPDXRef-Base".into()));
        let packages = v["packages"].as_array().unwrap();
        assert_eq!(packages.len(), 7);
        // Every package but the image and its base is contained, once.
        let contained: Vec<&str> = rels.iter().filter(|r| r.1 == "CONTAINS").map(|r| r.2.as_str()).collect();
        let ids: Vec<&str> = packages[2..].iter().map(|p| p["SPDXID"].as_str().unwrap()).collect();
        assert_eq!(contained, ids);
        assert!(ids.contains(&format!("SPDXRef-deb-libstdc--6-amd64-{}", &hex('c')[..12]).as_str()), "{ids:?}");
        let dir = packages.iter().find(|p| p["name"] == "dist").unwrap();
        assert!(dir.get("checksums").is_none(), "a tree fingerprint is no checksum");
        assert!(dir["comment"].as_str().unwrap().contains(&hex('f')));
        let file = packages.iter().find(|p| p["name"] == "motd.txt").unwrap();
        assert_eq!(file["checksums"][0]["checksumValue"], hex('1').as_str());
        assert_eq!(v["creationInfo"]["created"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn same_inventory_same_bytes_whatever_the_order() {
        let a = sample();
        let mut b = sample();
        b.debs.reverse();
        b.local.reverse();
        assert_eq!(document_bytes(&a).unwrap(), document_bytes(&b).unwrap());
        let ns = json(&a)["documentNamespace"].as_str().unwrap().to_string();
        assert!(ns.starts_with("https://spdx.org/spdxdocs/demo-"), "{ns}");
        // Another input: another namespace.
        b.debs[0].version = "12.2.0-14+deb12u2".into();
        assert_ne!(json(&b)["documentNamespace"].as_str().unwrap(), ns);
    }

    #[test]
    fn duplicates_get_distinct_ids_and_bad_digests_are_named() {
        let mut inv = sample();
        let mut twin = inv.debs[0].clone();
        twin.layer = "again".into();
        inv.debs.push(twin);
        let v = json(&inv);
        let ids: BTreeSet<&str> =
            v["packages"].as_array().unwrap().iter().map(|p| p["SPDXID"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), 8);

        inv.debs[0].sha256 = "xyz".into();
        let e = document_bytes(&inv).unwrap_err().to_string();
        assert!(e.contains("libstdc++6") && e.contains("xyz"), "{e}");
        let mut inv = sample();
        inv.image_digest = Some("md5:00".into());
        assert!(document_bytes(&inv).unwrap_err().to_string().contains("image `demo`"));
        inv.image_digest = None;
        inv.created_epoch = u64::MAX;
        assert!(document_bytes(&inv).unwrap_err().to_string().contains("created_epoch"));
    }

    #[test]
    fn unbuilt_image_has_no_digest() {
        let mut inv = sample();
        inv.image_digest = None;
        inv.base.as_mut().unwrap().digest = None;
        let v = json(&inv);
        assert!(v["packages"][0].get("checksums").is_none());
        assert!(v["packages"][0].get("externalRefs").is_none());
        assert!(v["packages"][1].get("externalRefs").is_none());
    }

    #[test]
    fn uuid_shape() {
        let u = content_uuid(&hex('f'));
        assert_eq!(u, "ffffffff-ffff-8fff-bfff-ffffffffffff");
    }
}
