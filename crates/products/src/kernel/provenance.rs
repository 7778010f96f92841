//! The provenance of a kernel build: one statement whose subjects are the
//! output files (by path under the output directory and sha256), written
//! into the output directory as `provenance.intoto.json` (signed with a key
//! as `provenance.intoto.jsonl`). Its inputs are what the build's cache key
//! is made of: the source tree (quarry's tree fingerprint, the build
//! directory left out as for the key) and the builder image (its config
//! digest); its parameters the command, the targets, the environment, the
//! outputs asked for and the network setting. Outputs from the cache get
//! the same statement as when they were built.

use super::{KernelError, KernelOptions, Report};
use crate::provenance::files::{write_statement, FileBuild, Written};
use crate::provenance::image::TREE_DIGEST;
use crate::provenance::ResourceDescriptor;
use std::collections::BTreeMap;

/// `buildType` of a kernel build: what the parameters mean.
pub const KERNEL_BUILD_TYPE: &str = "urn:quarry:build-type:kernel-build:v1";

/// The statement's file name in the output directory.
pub const FILE_NAME: &str = "provenance.intoto.json";

/// Write the statement of `report`'s outputs into its output directory.
pub fn write(
    o: &KernelOptions,
    image_name: &str,
    report: &Report,
    key: Option<&crate::signing::SigningKey>,
) -> Result<Written, KernelError> {
    let mut subjects = Vec::new();
    for f in &report.outputs {
        let path = report.output_dir.join(&f.file);
        let hex = crate::oci::digest::sha256_file(&path).map_err(|source| KernelError::Output { path, source })?;
        subjects.push(ResourceDescriptor::sha256(f.file.clone(), &hex));
    }
    let source_name = o.source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let inputs = vec![
        ResourceDescriptor {
            name: Some(source_name.clone()),
            digest: BTreeMap::from([(TREE_DIGEST.to_string(), report.source_tree.clone())]),
            ..Default::default()
        },
        ResourceDescriptor::sha256(image_name, &report.image),
    ];
    let parameters = serde_json::json!({
        "source": source_name,
        "image": image_name,
        "command": o.cmd,
        "targets": o.targets.targets,
        "env": o.env,
        "outputs": o.outputs,
        "network": o.network,
    });
    let build = FileBuild { build_type: KERNEL_BUILD_TYPE.into(), parameters, inputs };
    Ok(write_statement(&report.output_dir.join(FILE_NAME), subjects, &build, key)?)
}
