//! Layers: files, packages or a step, and a step's inputs.

use super::super::field_err;
use super::super::layer::*;
use super::super::raw::{self, LayerBody};
use super::super::resolve_path;
use super::packages::validate_packages_source;
use super::source::validate_source;
use super::{check_sha256, pypi_request, Result};
use crate::platform::Platform;
use std::path::Path;

pub(in crate::definition) fn validate_layer(
    file: &Path,
    prefix: &str,
    body: LayerBody,
    platform: &Platform,
) -> Result<Layer> {
    if body.name.is_empty() {
        return Err(field_err(file, format!("{prefix}name"), "must not be empty"));
    }
    let layer = |kind| Layer { name: body.name.clone(), file: file.to_path_buf(), field_prefix: prefix.into(), kind };
    if let Some(i) = body.source.iter().position(|s| s.packages.is_some()) {
        // The layer is the packages' files plus the merged dpkg database.
        if body.source.len() > 1 || !body.remove.is_empty() || body.run.is_some() || !body.input.is_empty() {
            return Err(field_err(
                file,
                format!("{prefix}source[{i}].packages"),
                format!(
                    "a `packages` source makes the whole layer `{}`; put other sources, removals or a `run` step in a layer of their own",
                    body.name
                ),
            ));
        }
        let s = body.source.into_iter().next().expect("found above");
        return Ok(layer(LayerKind::Packages(validate_packages_source(
            file,
            &format!("{prefix}source[{i}]"),
            s,
            platform,
        )?)));
    }
    if let Some(run) = body.run {
        if !body.source.is_empty() || !body.remove.is_empty() {
            return Err(field_err(
                file,
                format!("{prefix}run"),
                format!(
                    "layer `{}`: a `[run]` step makes its content with its script; move `source`/`remove` to a layer of their own, or copy files in with `[[input]]`",
                    body.name
                ),
            ));
        }
        if run.script.trim().is_empty() {
            return Err(field_err(file, format!("{prefix}run.script"), "is empty"));
        }
        let mut inputs = Vec::new();
        for (i, inp) in body.input.into_iter().enumerate() {
            inputs.push(validate_input(file, &format!("{prefix}input[{i}]"), inp)?);
        }
        return Ok(layer(LayerKind::Step(StepLayer { run, inputs })));
    }
    if !body.input.is_empty() {
        return Err(field_err(
            file,
            format!("{prefix}input"),
            "inputs are copied in for a `[run]` step; add a `run` table or remove them",
        ));
    }
    if body.source.is_empty() && body.remove.is_empty() {
        return Err(field_err(
            file,
            format!("{prefix}source"),
            format!("layer `{}` has no sources, removals or run step", body.name),
        ));
    }
    let mut sources = Vec::new();
    for (i, s) in body.source.into_iter().enumerate() {
        sources.push(validate_source(file, &format!("{prefix}source[{i}]"), s)?);
    }
    Ok(layer(LayerKind::Files(FilesLayer { sources, remove: body.remove })))
}

fn validate_input(file: &Path, f: &str, inp: raw::InputDef) -> Result<Input> {
    let is_pypi = inp.pypi.is_some();
    for (k, given) in
        [("format", inp.format.is_some()), ("platform", inp.platform.is_some()), ("python", inp.python.is_some())]
    {
        if given && !is_pypi {
            return Err(field_err(file, format!("{f}.{k}"), "applies only to `pypi` inputs"));
        }
    }
    let kind = match (inp.file, inp.pypi) {
        (Some(p), None) => InputKind::File(resolve_path(file, &p)),
        (None, Some(req)) => {
            let format = match inp.format.as_deref() {
                None | Some("sdist") => PypiFormat::Sdist,
                Some("wheel") => PypiFormat::Wheel,
                Some(o) => {
                    return Err(field_err(file, format!("{f}.format"), format!("`{o}` is not \"sdist\" or \"wheel\"")))
                }
            };
            if format == PypiFormat::Sdist && (inp.platform.is_some() || inp.python.is_some()) {
                return Err(field_err(
                    file,
                    f,
                    "`platform` and `python` choose a wheel; add `format = \"wheel\"` or remove them",
                ));
            }
            InputKind::Pypi(pypi_request(file, f, req, format, inp.platform, inp.python)?)
        }
        _ => return Err(field_err(file, f, "give exactly one of `file` or `pypi`")),
    };
    let sha256 = inp.sha256.as_deref().map(|s| check_sha256(file, &format!("{f}.sha256"), s)).transpose()?;
    Ok(Input { kind, sha256, dest: inp.dest })
}
