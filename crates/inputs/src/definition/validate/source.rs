//! A files layer's sources.

use super::super::field_err;
use super::super::layer::*;
use super::super::raw::SourceDef;
use super::super::resolve_path;
use super::{check_sha256, given_keys, parse_mode, parse_owner, pypi_request, Result};
use crate::oci::Digest;
use std::path::Path;

/// The keys that pick a source's kind, in the order messages list them.
const KIND_KEYS: [&str; 7] = ["dir", "file", "archive", "rocm_artifacts", "rocm", "pypi", "wheels"];

/// Which kinds take each optional key (for the message when another kind is given it).
const KEY_OWNERS: &[(&str, &str)] = &[
    ("platform", "`pypi`"),
    ("python", "`pypi`"),
    ("site_packages", "`pypi` and `wheels`"),
    ("bin", "`pypi` and `wheels`"),
    ("extra", "`wheels`"),
    ("mode", "`file`"),
    ("components", "`rocm_artifacts`"),
    ("targets", "`rocm_artifacts`"),
    ("include", "`dir`"),
    ("exclude", "`dir`"),
    ("strip_components", "`archive`"),
    ("map", "`archive`"),
    ("sha256", "`archive`, `file` and `pypi`"),
    ("devices", "`archive` and `dir`"),
];

/// A files layer's source: its kind from the one kind key given, which then
/// takes the keys that apply to it; any other key given is an error.
pub(super) fn validate_source(file: &Path, f: &str, s: SourceDef) -> Result<Source> {
    let given = given_keys(&s);
    let kinds: Vec<&str> = given.iter().copied().filter(|k| KIND_KEYS.contains(k)).collect();
    if kinds.len() > 1 {
        return Err(field_err(
            file,
            f,
            format!(
                "give one of `dir`, `file`, `archive`, `rocm_artifacts`, `rocm`, `pypi` or `wheels`, not {}",
                kinds.join(" and ")
            ),
        ));
    }
    let sha256 = |s: &Option<String>| -> Result<Option<Digest>> {
        s.as_deref().map(|h| check_sha256(file, &format!("{f}.sha256"), h)).transpose()
    };
    let rocm = |dir: &str| RocmSource {
        dir: resolve_path(file, dir),
        components: s.components.clone(),
        targets: s.targets.clone(),
    };
    // Each kind with the optional keys it takes.
    let (kind, takes): (SourceKind, &[&str]) = match kinds.first().copied() {
        Some("dir") => (
            SourceKind::Dir(DirSource {
                path: resolve_path(file, s.dir.as_deref().unwrap_or_default()),
                include: s.include.clone(),
                exclude: s.exclude.clone(),
                devices: s.devices.unwrap_or(false),
            }),
            &["include", "exclude", "devices"],
        ),
        Some("file") => (
            SourceKind::File(FileSource {
                path: resolve_path(file, s.file.as_deref().unwrap_or_default()),
                mode: s.mode.as_ref().map(|m| parse_mode(file, &format!("{f}.mode"), m)).transpose()?,
                sha256: sha256(&s.sha256)?,
            }),
            &["mode", "sha256"],
        ),
        Some("archive") => (
            SourceKind::Archive(ArchiveSource {
                path: resolve_path(file, s.archive.as_deref().unwrap_or_default()),
                sha256: sha256(&s.sha256)?,
                strip_components: s.strip_components.unwrap_or(0),
                map: validate_map(file, f, &s)?,
                devices: s.devices.unwrap_or(false),
            }),
            &["sha256", "strip_components", "map", "devices"],
        ),
        Some("rocm_artifacts") => (
            SourceKind::RocmArtifacts(rocm(s.rocm_artifacts.as_deref().unwrap_or_default())),
            &["components", "targets"],
        ),
        Some("rocm") => (SourceKind::Rocm(rocm(s.rocm.as_deref().unwrap_or_default())), &["components", "targets"]),
        Some("wheels") => {
            (SourceKind::Wheels(validate_wheels_source(file, f, &s)?), &["extra", "site_packages", "bin"])
        }
        Some(_) => (
            SourceKind::Pypi(validate_pypi_source(file, f, &s)?),
            &["sha256", "platform", "python", "site_packages", "bin"],
        ),
        None if !s.remove.is_empty() => {
            if s.dest.is_some() || s.owner.is_some() {
                return Err(field_err(file, f, "a `remove` source takes no `dest` or `owner`"));
            }
            (SourceKind::Remove, &[])
        }
        None => {
            return Err(field_err(
                file,
                f,
                "give one of `dir`, `file`, `archive`, `rocm_artifacts`, `rocm`, `pypi`, `wheels` or `remove`",
            ))
        }
    };
    let common = ["dest", "owner", "remove"];
    if let Some(k) = given.iter().find(|k| !KIND_KEYS.contains(k) && !takes.contains(k) && !common.contains(k)) {
        let owners = KEY_OWNERS.iter().find(|(key, _)| key == k).map(|(_, o)| *o).unwrap_or("other");
        return Err(field_err(file, format!("{f}.{k}"), format!("applies only to {owners} sources")));
    }
    let owner = s.owner.as_deref().map(|o| parse_owner(file, &format!("{f}.owner"), o)).transpose()?;
    let is_pypi = matches!(kind, SourceKind::Pypi(_) | SourceKind::Wheels(_));
    let dest = s.dest.unwrap_or_else(|| if is_pypi { DEFAULT_PYPI_DEST.into() } else { "/".into() });
    if crate::layer::path::normalize_dest(&dest).is_err() {
        return Err(field_err(file, format!("{f}.dest"), format!("`{dest}` must not contain `..`")));
    }
    for (i, g) in s.include.iter().chain(s.exclude.iter()).enumerate() {
        if let Err(e) = globset::Glob::new(g) {
            return Err(field_err(
                file,
                format!("{f}.include/exclude[{i}]"),
                format!("`{g}` is not a valid glob: {e}"),
            ));
        }
    }
    Ok(Source { kind, dest, owner, remove: s.remove })
}

/// An archive's `map`: member prefix -> destination.
type ArchiveMap = std::collections::BTreeMap<String, String>;

fn validate_map(file: &Path, f: &str, s: &SourceDef) -> Result<ArchiveMap> {
    for (k, v) in &s.map {
        if crate::layer::path::normalize_member(k.trim_start_matches("./").as_bytes()).is_err()
            || crate::layer::path::normalize_dest(v).is_err()
        {
            return Err(field_err(
                file,
                format!("{f}.map"),
                format!("`{k}` = `{v}`: keys are paths inside the archive, values destinations, neither with `..`"),
            ));
        }
    }
    Ok(s.map.clone())
}

/// `site_packages` and `bin` as a `pypi` or `wheels` source takes them.
fn install_keys(file: &Path, f: &str, s: &SourceDef) -> Result<String> {
    let site_packages = s.site_packages.clone().unwrap_or_else(|| DEFAULT_SITE_PACKAGES.into());
    if crate::layer::path::normalize_dest(&site_packages).is_err() {
        return Err(field_err(file, format!("{f}.site_packages"), format!("`{site_packages}` must not contain `..`")));
    }
    for (name, path) in &s.bin {
        let bad_name = name.is_empty() || name.contains('/') || name == "." || name == "..";
        if bad_name || crate::layer::path::normalize_member(path.as_bytes()).map_or(true, |p| p.is_empty()) {
            return Err(field_err(
                file,
                format!("{f}.bin.{name}"),
                format!("`{name}` = `{path}`: keys are command names, values relative paths inside the wheel"),
            ));
        }
    }
    Ok(site_packages)
}

fn validate_pypi_source(file: &Path, f: &str, s: &SourceDef) -> Result<PypiSource> {
    let req = s.pypi.clone().unwrap_or_default();
    let request = pypi_request(file, f, req, PypiFormat::Wheel, s.platform.clone(), s.python.clone())?;
    let site_packages = install_keys(file, f, s)?;
    let sha256 = s.sha256.as_deref().map(|h| check_sha256(file, &format!("{f}.sha256"), h)).transpose()?;
    Ok(PypiSource { request, sha256, site_packages, bin: s.bin.clone() })
}

fn validate_wheels_source(file: &Path, f: &str, s: &SourceDef) -> Result<WheelsSource> {
    let site_packages = install_keys(file, f, s)?;
    if let Some(e) = &s.extra {
        let ok = !e.is_empty() && e.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return Err(field_err(file, format!("{f}.extra"), format!("`{e}` is not an extra name (`device-gfx942`)")));
        }
    }
    Ok(WheelsSource {
        dir: resolve_path(file, s.wheels.as_deref().unwrap_or_default()),
        extra: s.extra.clone(),
        site_packages,
        bin: s.bin.clone(),
    })
}
