//! The CycloneDX SBOM `quarry wheel repair` writes into a repaired wheel
//! (`<name>.dist-info/sboms/quarry.cdx.json`, listed in RECORD), shaped as
//! auditwheel 6.5+ writes `auditwheel.cdx.json`: CycloneDX 1.4, the wheel
//! as `metadata.component` (a `pkg:pypi` purl with the file name), one
//! `library` component per bundled library and a dependency of the wheel on
//! each. Where auditwheel names only the system package, quarry's component
//! is the library file itself: name = its SONAME, `hashes` = the sha256 of
//! the file as the wheel holds it, `purl`/`version` = the system package
//! that installed it when the package manager knows one, and properties
//! with its path in the wheel and where it came from. No timestamp and no
//! random serial number: the same repair gives the same bytes.

use super::Bundled;
use crate::purl::PurlError;
use crate::wheel::name::WheelName;
use serde_json::{json, Value};

/// The wheel's package URL (`pkg:pypi/cffi@1.17.1?file_name=...`).
pub fn wheel_purl(name: &WheelName) -> Result<String, PurlError> {
    crate::purl::format("pypi", None, &name.name, Some(&name.version), &[("file_name", &name.to_string())])
}

/// The SBOM of a repaired wheel (`name`: its final file name) bundling
/// `bundled`, as pretty JSON. Package URLs are encoded by `crate::purl`,
/// as in the SPDX documents of images.
pub fn document(name: &WheelName, bundled: &[Bundled]) -> Result<String, PurlError> {
    let wheel_ref = wheel_purl(name)?;
    let wheel = json!({
        "type": "library",
        "bom-ref": wheel_ref,
        "name": name.name,
        "version": name.version,
        "purl": wheel_ref,
    });
    let mut components = vec![wheel.clone()];
    let mut depends = Vec::new();
    let mut dependencies = Vec::new();
    for b in bundled {
        // Unique per file, stable across runs: the path inside the wheel.
        let purl = b.package.as_ref().map(|p| p.purl()).transpose()?;
        let bom_ref = format!("{}#{}", purl.as_deref().unwrap_or("file"), b.path);
        let mut c = json!({
            "type": "library",
            "bom-ref": bom_ref,
            "name": b.soname,
            "hashes": [{ "alg": "SHA-256", "content": b.sha256 }],
            "properties": [
                { "name": "quarry:path", "value": b.path },
                { "name": "quarry:source", "value": b.source.display().to_string() },
            ],
        });
        if let Some(p) = &b.package {
            c["version"] = Value::from(p.version.clone());
            c["purl"] = Value::from(purl.clone());
            c["properties"]
                .as_array_mut()
                .expect("an array")
                .push(json!({ "name": "quarry:package", "value": p.name }));
        }
        components.push(c);
        depends.push(Value::from(bom_ref.clone()));
        dependencies.push(json!({ "ref": bom_ref }));
    }
    dependencies.insert(0, json!({ "ref": wheel_ref, "dependsOn": depends }));
    let doc = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.4",
        "version": 1,
        "metadata": {
            "component": wheel,
            "tools": [{ "name": "quarry", "version": env!("CARGO_PKG_VERSION") }],
        },
        "components": components,
        "dependencies": dependencies,
    });
    let mut text = serde_json::to_string_pretty(&doc).expect("JSON values serialize");
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::provides::Package;

    #[test]
    fn components_carry_names_hashes_and_purls() {
        let name = WheelName::parse("cffi-1.17.1-cp311-cp311-manylinux_2_36_x86_64.whl").unwrap();
        let bundled = vec![Bundled {
            soname: "libffi.so.8".into(),
            source: "/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2".into(),
            path: "cffi.libs/libffi-1234abcd.so.8.1.2".into(),
            sha256: "ab".repeat(32),
            package: Some(Package {
                manager: "deb".into(),
                name: "libffi8".into(),
                version: "3.4.4-1".into(),
                arch: Some("amd64".into()),
                distro_id: Some("debian".into()),
                distro: Some("debian-12".into()),
            }),
        }];
        let doc: Value = serde_json::from_str(&document(&name, &bundled).unwrap()).unwrap();
        assert_eq!(doc["bomFormat"], "CycloneDX");
        assert_eq!(doc["specVersion"], "1.4");
        assert_eq!(
            doc["metadata"]["component"]["purl"],
            "pkg:pypi/cffi@1.17.1?file_name=cffi-1.17.1-cp311-cp311-manylinux_2_36_x86_64.whl"
        );
        let lib = &doc["components"][1];
        assert_eq!(lib["name"], "libffi.so.8");
        assert_eq!(lib["hashes"][0]["content"], "ab".repeat(32));
        assert_eq!(lib["purl"], "pkg:deb/debian/libffi8@3.4.4-1?arch=amd64&distro=debian-12");
        assert_eq!(doc["dependencies"][0]["dependsOn"][0], lib["bom-ref"]);
        assert_eq!(document(&name, &bundled).unwrap(), document(&name, &bundled).unwrap());
    }

    /// A Debian version with an epoch keeps its `:` (the purl
    /// specification), as in the SPDX documents of images (tests/e2e/sbom.rs
    /// compares the two writers); a local version's `+` is `%2B`.
    #[test]
    fn an_epoch_version_is_written_as_the_purl_spec_says() {
        let name = WheelName::parse("flash_attn-2.8.3+rocm62-cp311-cp311-manylinux_2_36_x86_64.whl").unwrap();
        let package = Package {
            manager: "deb".into(),
            name: "libattr1".into(),
            version: "1:2.5.1-4".into(),
            arch: Some("amd64".into()),
            distro_id: Some("debian".into()),
            distro: Some("debian-12".into()),
        };
        let bundled = vec![Bundled {
            soname: "libattr.so.1".into(),
            source: "/usr/lib/x86_64-linux-gnu/libattr.so.1.1.2501".into(),
            path: "flash_attn.libs/libattr-1234abcd.so.1.1.2501".into(),
            sha256: "cd".repeat(32),
            package: Some(package),
        }];
        let doc: Value = serde_json::from_str(&document(&name, &bundled).unwrap()).unwrap();
        let lib = &doc["components"][1];
        assert_eq!(lib["purl"], "pkg:deb/debian/libattr1@1:2.5.1-4?arch=amd64&distro=debian-12");
        assert_eq!(lib["version"], "1:2.5.1-4");
        assert_eq!(
            doc["metadata"]["component"]["purl"],
            "pkg:pypi/flash-attn@2.8.3%2Brocm62?file_name=flash_attn-2.8.3%2Brocm62-cp311-cp311-manylinux_2_36_x86_64.whl"
        );
    }
}
