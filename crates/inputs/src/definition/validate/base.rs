//! Bases and the image config.

use super::super::image::{Base, ConfigDef, RootfsBase};
use super::super::raw::BaseDef;
use super::super::{field_err, resolve_path};
use super::packages::validate_packages_base;
use super::{check_sha256, Result};
use crate::platform::Platform;
use std::path::{Path, PathBuf};

pub(in crate::definition) fn validate_config(file: &Path, c: &ConfigDef) -> Result<()> {
    for (i, port) in c.exposed_ports.iter().enumerate() {
        let (num, proto) = port.split_once('/').unwrap_or((port, "tcp"));
        if num.parse::<u16>().is_err() || !["tcp", "udp", "sctp"].contains(&proto) {
            return Err(field_err(
                file,
                format!("config.exposed_ports[{i}]"),
                format!("`{port}` is not a port like 8080 or 8080/tcp"),
            ));
        }
    }
    Ok(())
}

/// A base as validated: complete, or an image definition still to load.
pub(in crate::definition) enum ValidBase {
    Done(Base),
    Image(PathBuf),
}

pub(in crate::definition) fn validate_base(file: &Path, b: BaseDef, platform: &Platform) -> Result<ValidBase> {
    let done = |b: Base| Ok(ValidBase::Done(b));
    let t = match b {
        BaseDef::Named(n) if n == "scratch" => return done(Base::Scratch),
        BaseDef::Named(n) => return Err(field_err(
            file,
            "base",
            format!("`{n}` is not a base; use \"scratch\", {{ rootfs = \"x.tar\" }}, {{ oci = \"dir\", ref = \"tag\" }}, {{ registry = \"host/repo@sha256:...\" }}, {{ image = \"other.toml\" }} or a [base.packages] table"),
        )),
        BaseDef::Table(t) => t,
    };
    let kinds = [t.rootfs.is_some(), t.oci.is_some(), t.registry.is_some(), t.packages.is_some(), t.image.is_some()]
        .iter()
        .filter(|x| **x)
        .count();
    if kinds != 1 {
        return Err(field_err(file, "base", "give exactly one of `rootfs`, `oci`, `registry`, `image` or `packages`"));
    }
    if let Some(p) = t.packages {
        if t.sha256.is_some() || t.devices.is_some() || t.r#ref.is_some() {
            return Err(field_err(file, "base", "`sha256`, `devices` and `ref` do not apply to `packages` bases"));
        }
        return done(Base::Packages(Box::new(validate_packages_base(file, "base.packages", *p, platform)?)));
    }
    let sha256 = t.sha256.as_deref().map(|s| check_sha256(file, "base.sha256", s)).transpose()?;
    if let Some(r) = t.rootfs {
        if t.r#ref.is_some() {
            return Err(field_err(file, "base.ref", "applies only to `oci` bases"));
        }
        let path = resolve_path(file, &r);
        return done(Base::Rootfs(RootfsBase { path, sha256, devices: t.devices.unwrap_or(false) }));
    }
    if sha256.is_some() || t.devices.is_some() {
        return Err(field_err(file, "base", "`sha256` and `devices` apply only to `rootfs` bases"));
    }
    if let Some(o) = t.oci {
        return done(Base::Oci { path: resolve_path(file, &o), reference: t.r#ref });
    }
    if t.r#ref.is_some() {
        return Err(field_err(file, "base.ref", "applies only to `oci` bases"));
    }
    if let Some(i) = t.image {
        if i.is_empty() {
            return Err(field_err(
                file,
                "base.image",
                "is empty; name an image definition, e.g. \"no_rocm_image_debian12.toml\"",
            ));
        }
        return Ok(ValidBase::Image(resolve_path(file, &i)));
    }
    let reference = t.registry.expect("counted above");
    if reference.is_empty() {
        return Err(field_err(file, "base.registry", "is empty; give HOST/REPO@sha256:DIGEST"));
    }
    done(Base::Registry { reference })
}
