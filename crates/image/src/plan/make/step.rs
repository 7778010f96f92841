//! Planning a step: its inputs pinned and hashed, its key from the script,
//! its settings and the image config it runs with.

use super::super::keys;
use super::super::pins;
use super::super::{InputRef, NodeKind, PlanError, StepFrom, StepInput, Work};
use super::{relative, Planner};
use crate::definition::{InputKind, Layer, LayerKind, StepLayer};
use crate::plan::lockfile::LockFile;

impl Planner<'_> {
    pub(super) fn configure(&mut self, scope: usize, layer: Layer) -> Result<(), PlanError> {
        let LayerKind::Step(s) = &layer.kind else { unreachable!("a configure step") };
        let s = s.clone();
        self.step_node(scope, &layer, &s, None, "quarry: dpkg --configure -a".into())
    }

    pub(super) fn step(
        &mut self,
        scope: usize,
        layer: &Layer,
        s: &StepLayer,
        lock: Option<&LockFile>,
    ) -> Result<(), PlanError> {
        self.step_node(scope, layer, s, lock, format!("quarry: step {}", layer.name))
    }

    pub(super) fn step_node(
        &mut self,
        scope: usize,
        layer: &Layer,
        s: &StepLayer,
        lock: Option<&LockFile>,
        history: String,
    ) -> Result<(), PlanError> {
        let arch = self.scopes[scope].image.platform.arch;
        let fresh = self.scopes[scope].fresh;
        let mut inputs = Vec::new();
        let mut refs = Vec::new();
        for (j, input) in s.inputs.iter().enumerate() {
            let f = format!("{}input[{j}]", layer.field_prefix);
            let from = match &input.kind {
                InputKind::File(path) => {
                    let field = format!("{f}.file");
                    if !path.is_file() {
                        return Err(crate::source::SourceError::new(
                            layer,
                            field,
                            format!("`{}` is not a readable file", path.display()),
                        )
                        .into());
                    }
                    let (actual, _) = crate::oci::digest::digest_file(path).map_err(|e| {
                        crate::source::SourceError::new(
                            layer,
                            field.clone(),
                            format!("cannot read `{}`: {e}", path.display()),
                        )
                    })?;
                    if let Some(pin) = &input.sha256 {
                        crate::source::verify_pin(layer, &format!("{f}.sha256"), path, pin)?;
                    }
                    refs.push(InputRef {
                        kind: "file",
                        reference: relative(&layer.file, path),
                        pin: Some(actual.to_string()),
                    });
                    StepFrom::File { path: path.clone(), sha256: actual }
                }
                InputKind::Pypi(req) => {
                    // Pinned and verified on the host; the step itself runs without network.
                    let request = crate::pypi::resolved(req, arch);
                    let made = &mut self.scopes[scope].pins.pypi;
                    let field = format!("{f}.pypi");
                    let file = pins::pypi_file(
                        &self.opts.cache,
                        lock,
                        made,
                        fresh,
                        &request,
                        input.sha256.as_ref(),
                        layer,
                        &field,
                    )?;
                    refs.push(InputRef {
                        kind: "pypi",
                        reference: file.file.clone().unwrap_or_else(|| request.requirement.clone()),
                        pin: Some(file.sha256.to_string()),
                    });
                    StepFrom::Pypi(file)
                }
            };
            inputs.push(StepInput { dest: input.dest.clone(), from });
        }
        let contents: Vec<(String, crate::oci::Digest)> = inputs
            .iter()
            .map(|i| {
                let d = match &i.from {
                    StepFrom::File { sha256, .. } => *sha256,
                    StepFrom::Pypi(p) => p.sha256,
                };
                (i.dest.clone(), d)
            })
            .collect();
        let own = keys::step(&layer.name, &s.run, &self.scopes[scope].image.config, &contents);
        let work = Work::Step { layer: Box::new(layer.clone()), run: s.run.clone(), inputs };
        let n = self.push(scope, layer.name.clone(), NodeKind::Step, Some(history), work);
        n.own = Some(own);
        n.inputs = refs;
        Ok(())
    }
}
