//! A step layer: its script runs in a container of the image built so far
//! (see `engine::step`); the container's diff is packed like any layer.

use super::{BuildError, Executor};
use crate::definition::{Layer, RunDef};
use crate::engine::copy::CopyIn;
use crate::oci::LayerBlob;
use crate::plan::{Plan, PlanError, StepFrom, StepInput};

pub(super) fn run(
    exec: &mut Executor,
    plan: &Plan,
    i: usize,
    layer: &Layer,
    run: &RunDef,
    inputs: &[StepInput],
) -> Result<(), BuildError> {
    crate::progress::announce(format!(
        "step `{}`: its script in a container ({})",
        layer.name,
        if run.network { "with the network" } else { "no network" }
    ));
    let mut copies = Vec::new();
    for (j, input) in inputs.iter().enumerate() {
        let host = match &input.from {
            StepFrom::File { path, .. } => path.clone(),
            StepFrom::Pypi(p) => {
                // Fetched, pinned and verified on the host; the step itself runs without network.
                crate::pypi::fetch(&exec.cache, &p.request, Some(&p.sha256.hex()))
                    .map_err(|err| PlanError::Pypi {
                        file: layer.file.display().to_string(),
                        field: format!("{}input[{j}].pypi", layer.field_prefix),
                        err: Box::new(err),
                    })?
                    .path
            }
        };
        copies.push(CopyIn { host, dest: input.dest.clone() });
    }
    // The image so far, as a layout the engine can load.
    let scope = plan.layers[i].scope;
    let partial = exec.spool().join(format!("partial-{}", exec.layers.len()));
    let config = exec.config_for(plan, scope);
    let blobs: Vec<LayerBlob> = exec.layers.iter().map(super::BuiltLayer::blob).collect();
    crate::oci::layout::write_image(
        &partial,
        exec.cache.blobs(),
        &blobs,
        &config,
        ("quarry-partial", "partial"),
        plan.scopes[scope].image.platform.to_oci(),
    )?;
    if exec.engine.is_none() {
        let e =
            crate::engine::Engine::connect().map_err(|err| BuildError::Engine { layer: layer.name.clone(), err })?;
        exec.engine = Some(e);
    }
    let spool = exec.spool().to_path_buf();
    let engine = exec.engine.as_ref().expect("connected above");
    let mut tree = engine.run_step(crate::engine::step::StepRequest {
        layer: &layer.name,
        file: &layer.file,
        layout: &partial,
        run,
        inputs: copies,
        epoch: exec.opts.source_date_epoch,
        spool: &spool,
    })?;
    let _ = std::fs::remove_dir_all(&partial);
    tree.finalize_hardlinks().map_err(|e| {
        crate::source::SourceError::new(layer, format!("{}run", layer.field_prefix), format!("the step's diff: {e}"))
    })?;
    exec.pack(plan, i, &tree)
}
