//! The provenance of `rocm package`: `NAME.intoto.json` beside each
//! package it wrote (signed with a key as `NAME.intoto.jsonl`, see
//! [`crate::provenance::files`]). Its inputs are the artifacts, each by
//! quarry's fingerprint of its directory tree (names, modes, contents; no
//! times or owners, so the same artifacts touched at another time are the
//! same input, as the packages are the same bytes); its parameters the
//! version (and whether `--version` gave it), the suffix, the split mode and the
//! ELF editor. pip ignores these files in a `--find-links` directory.

use super::{Options, PackageError, PackageReport};
use crate::provenance::files::{write_beside, FileBuild, Written};
use crate::provenance::image::TREE_DIGEST;
use crate::provenance::ResourceDescriptor;
use std::collections::BTreeMap;

/// `buildType` of `rocm package`: what the parameters mean.
pub const ROCM_PACKAGE_BUILD_TYPE: &str = "urn:quarry:build-type:rocm-package:v1";

/// Write the statements beside every package of `report`.
pub fn write(
    o: &Options,
    report: &PackageReport,
    key: Option<&crate::signing::SigningKey>,
) -> Result<Vec<Written>, PackageError> {
    let arts = crate::rocm_artifacts::read(&o.artifact_dir)?;
    let mut inputs = Vec::new();
    for a in &arts.artifacts {
        let k = crate::cache::key::tree_key("rocm-artifact", &a.dir, &[])
            .map_err(|source| PackageError::Io { path: a.dir.clone(), source })?;
        let name = a.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        inputs.push(ResourceDescriptor {
            name: Some(name),
            digest: BTreeMap::from([(TREE_DIGEST.to_string(), k.hex())]),
            ..Default::default()
        });
    }
    let parameters = serde_json::json!({
        // What `--version` gave or the artifacts record (where it was read
        // is a path of this machine, so it is not here).
        "version": report.version,
        "versionGiven": o.version.is_some(),
        "versionSuffix": o.version_suffix,
        "split": report.split,
        "targets": report.targets,
        "elfEditor": report.elf_editor,
    });
    let build = FileBuild { build_type: ROCM_PACKAGE_BUILD_TYPE.into(), parameters, inputs };
    let products: Vec<_> = report.packages.iter().map(|p| p.file.clone()).collect();
    Ok(write_beside(&products, &build, key)?)
}
