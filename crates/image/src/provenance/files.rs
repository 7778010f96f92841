//! The provenance of products that are files (wheels, packages): one
//! statement per product, its subject that file by name and sha256, written
//! beside it as `NAME.intoto.json`; with a key, the statement also in a
//! signed DSSE envelope as `NAME.intoto.jsonl` (the name SLSA's generators
//! give a signed attestation), which `cosign verify-blob-attestation --key
//! K --signature NAME.intoto.jsonl --type slsaprovenance1 NAME` accepts.
//! A product that is a directory of files (a kernel build's outputs) gets
//! one statement with every file as a subject ([`write_statement`]).
//! Each file is written whole to a temporary name and renamed.

use super::statement::{BuildDefinition, ResourceDescriptor, Statement};
use super::ProvenanceError;
use crate::signing::{dsse, SigningKey};
use std::path::{Path, PathBuf};

/// `buildType` of `wheel split` (parameters: devicePrefix, targets, families, compression).
pub const SPLIT_BUILD_TYPE: &str = "urn:quarry:build-type:wheel-split:v1";
/// `buildType` of `wheel build` (parameters: what changes the wheels; see `quarry wheel build`).
pub const WHEEL_BUILD_TYPE: &str = "urn:quarry:build-type:wheel-build:v1";
/// `buildType` of `wheel merge` (parameters: devicePrefix, families, compression).
pub const MERGE_BUILD_TYPE: &str = "urn:quarry:build-type:wheel-merge:v1";

/// What a command that writes files was asked and read.
pub struct FileBuild {
    /// `urn:quarry:build-type:...:v1`: what the parameters mean.
    pub build_type: String,
    pub parameters: serde_json::Value,
    pub inputs: Vec<ResourceDescriptor>,
}

/// The files written beside one product.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    pub provenance: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attestation: Option<PathBuf>,
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> ProvenanceError {
    let path = path.display().to_string();
    move |err| ProvenanceError::Read { path, err }
}

/// A local file as an input: its file name and sha256.
pub fn input_file(path: &Path) -> Result<ResourceDescriptor, ProvenanceError> {
    let hex = crate::oci::digest::sha256_file(path).map_err(read_err(path))?;
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    Ok(ResourceDescriptor::sha256(name, &hex))
}

fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), ProvenanceError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let err = |err| ProvenanceError::Write { path: path.display().to_string(), err };
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// One statement about `subjects` at `path` (`X.intoto.json`), and with
/// `key` its signed envelope beside it (`X.intoto.jsonl`).
pub fn write_statement(
    path: &Path,
    subjects: Vec<ResourceDescriptor>,
    build: &FileBuild,
    key: Option<&SigningKey>,
) -> Result<Written, ProvenanceError> {
    let definition = BuildDefinition {
        build_type: build.build_type.clone(),
        external_parameters: build.parameters.clone(),
        resolved_dependencies: build.inputs.clone(),
    };
    let bytes = Statement::new(subjects, definition, None).to_bytes();
    write_whole(path, &bytes)?;
    let attestation = match key {
        Some(k) => {
            let mut envelope = dsse::sign(crate::oci::IN_TOTO_MEDIA_TYPE, &bytes, k).to_bytes();
            envelope.push(b'\n');
            let mut signed = path.as_os_str().to_owned();
            signed.push("l");
            let signed = PathBuf::from(signed);
            write_whole(&signed, &envelope)?;
            Some(signed)
        }
        None => None,
    };
    Ok(Written { provenance: path.to_path_buf(), attestation })
}

/// `NAME.intoto.json` (and with `key`, `NAME.intoto.jsonl`) beside each product.
pub fn write_beside(
    products: &[PathBuf],
    build: &FileBuild,
    key: Option<&SigningKey>,
) -> Result<Vec<Written>, ProvenanceError> {
    let mut out = Vec::new();
    for p in products {
        let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let path = p.with_file_name(format!("{name}.intoto.json"));
        out.push(write_statement(&path, vec![input_file(p)?], build, key)?);
    }
    Ok(out)
}
