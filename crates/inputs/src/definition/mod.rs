//! Image and layer definitions: parsing (unknown fields refused), parameter
//! substitution, layer lookup and validation into typed values that cannot
//! hold an invalid combination (a layer is files, packages or a step; each
//! source kind carries only its own keys). Every error names the file and the
//! field. The format is the "Definitions" section of docs/images-and-locks.md.

mod image;
mod layer;
mod load;
mod packages;
pub mod params;
mod raw;
mod validate;

pub use crate::platform::{Arch, Platform, PlatformError};
pub use image::{Base, ConfigDef, Image, RootfsBase};
pub use layer::{
    requirement_name, ArchiveSource, DirSource, FileSource, FilesLayer, Input, InputKind, Layer, LayerKind, PypiFormat,
    PypiRequest, PypiSource, RequirementError, RocmSource, RunDef, Source, SourceKind, StepLayer, WheelsSource,
    DEFAULT_PYPI_DEST, DEFAULT_SITE_PACKAGES,
};
pub use load::{find_layer_file, load_image, parse_sets};
pub use packages::{Configure, Keyring, KeyringDeb, Mirror, PackageSet, PackagesBase, UserDef, Variant};
pub use raw::InputDef;

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("cannot read {what} `{file}`: {err}")]
    Read { what: &'static str, file: String, err: std::io::Error },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field { file: String, field: String, message: String },
    #[error("--set {name}: {file} has no parameter `{name}`{hint}")]
    UnknownParam { file: String, name: String, hint: String },
    #[error("`--set {set}`: expected KEY=VALUE")]
    SetNoValue { set: String },
    #[error("`--set {set}`: the key is empty")]
    SetEmptyKey { set: String },
    #[error("{file}: field `{field}`: {source}")]
    Platform { file: String, field: String, source: PlatformError },
    #[error("{file}: field `{field}`: {source}")]
    Requirement { file: String, field: String, source: RequirementError },
}

/// A path as written in `base_file`: relative ones from that file's directory.
fn resolve_path(base_file: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_file.parent().unwrap_or(Path::new(".")).join(p)
    }
}

fn field_err(file: &Path, field: impl Into<String>, message: impl Into<String>) -> DefinitionError {
    DefinitionError::Field { file: file.display().to_string(), field: field.into(), message: message.into() }
}

#[cfg(test)]
mod tests;
