//! From the definitions as written (`raw`) to typed values. A layer becomes
//! files, packages or a step (`layer`); each source its own kind, taking the
//! keys that apply to it (`source`); bases (`base`) and package sets
//! (`packages`) likewise. A key given to a kind that does not take it is an
//! error that names the field and the kinds it belongs to. Every error
//! names the file and the field.

mod base;
mod layer;
mod packages;
mod source;

pub(super) use base::{validate_base, validate_config, ValidBase};
pub(super) use layer::validate_layer;

use super::layer::{PypiFormat, PypiRequest};
use super::raw::{self, SourceDef};
use super::{field_err, requirement_name, DefinitionError};
use crate::oci::Digest;
use std::path::Path;

type Result<T> = std::result::Result<T, DefinitionError>;

/// A sha256 pin as written (64 lowercase hex digits).
pub(super) fn check_sha256(file: &Path, field: &str, s: &str) -> Result<Digest> {
    Digest::from_hex(s).map_err(|_| field_err(file, field, format!("`{s}` is not a sha256 (64 lowercase hex digits)")))
}

pub(super) fn parse_owner(file: &Path, field: &str, s: &str) -> Result<(u64, u64)> {
    let bad = || field_err(file, field, format!("`{s}` is not a numeric owner like \"0:0\" or \"1000:1000\""));
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// A mode is a string of octal digits. A TOML integer is refused: `mode =
/// 644` is the decimal number 644 (mode 1204), and TOML's `0o644` is the
/// same value as a decimal 420, so no integer says which the writer meant.
pub(super) fn parse_mode(file: &Path, field: &str, m: &raw::Mode) -> Result<u32> {
    let v = match m {
        raw::Mode::Int(i) => {
            return Err(field_err(
                file,
                field,
                format!("is the TOML integer {i}, which reads as decimal (mode {i:o}); write the mode as a string of octal digits: `mode = \"0{}\"`", i.to_string().trim_start_matches('0')),
            ))
        }
        raw::Mode::Str(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8).ok(),
    };
    match v {
        Some(v) if v <= 0o7777 => Ok(v),
        _ => Err(field_err(file, field, "is not a file mode like \"0644\" or \"4755\"")),
    }
}

/// A validated `pypi` request; the requirement must name one package.
pub(super) fn pypi_request(
    file: &Path,
    f: &str,
    requirement: String,
    format: PypiFormat,
    platform: Option<String>,
    python: Option<String>,
) -> Result<PypiRequest> {
    if let Err(source) = requirement_name(&requirement) {
        return Err(DefinitionError::Requirement {
            file: file.display().to_string(),
            field: format!("{f}.pypi"),
            source,
        });
    }
    if let Some(p) = &platform {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            return Err(field_err(
                file,
                format!("{f}.platform"),
                format!("`{p}` is not a platform tag like \"manylinux_2_28_x86_64\""),
            ));
        }
    }
    if let Some(v) = &python {
        let ok =
            v.split('.').count() == 2 && v.split('.').all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if !ok {
            return Err(field_err(file, format!("{f}.python"), format!("`{v}` is not a Python version like \"3.12\"")));
        }
    }
    Ok(PypiRequest { requirement, format, platform, python })
}

/// The keys of a source that were given, in declaration order.
pub(super) fn given_keys(s: &SourceDef) -> Vec<&'static str> {
    let given = [
        ("dir", s.dir.is_some()),
        ("file", s.file.is_some()),
        ("archive", s.archive.is_some()),
        ("rocm_artifacts", s.rocm_artifacts.is_some()),
        ("rocm", s.rocm.is_some()),
        ("pypi", s.pypi.is_some()),
        ("wheels", s.wheels.is_some()),
        ("extra", s.extra.is_some()),
        ("platform", s.platform.is_some()),
        ("python", s.python.is_some()),
        ("site_packages", s.site_packages.is_some()),
        ("bin", !s.bin.is_empty()),
        ("mode", s.mode.is_some()),
        ("components", !s.components.is_empty()),
        ("targets", !s.targets.is_empty()),
        ("include", !s.include.is_empty()),
        ("exclude", !s.exclude.is_empty()),
        ("strip_components", s.strip_components.is_some()),
        ("map", !s.map.is_empty()),
        ("sha256", s.sha256.is_some()),
        ("devices", s.devices.is_some()),
        ("dest", s.dest.is_some()),
        ("owner", s.owner.is_some()),
        ("remove", !s.remove.is_empty()),
        ("packages", s.packages.is_some()),
    ];
    given.iter().filter(|(_, g)| *g).map(|(k, _)| *k).collect()
}
