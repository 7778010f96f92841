//! Planning a files layer (and a rootfs base): its wheels pinned, its
//! sources scanned and fingerprinted.

use super::super::pins;
use super::super::{InputRef, NodeKind, Plan, PlanError, PypiFile, Work};
use super::{relative, Planner};
use crate::cache::key::Key;
use crate::definition::{FilesLayer, Layer, LayerKind, Source, SourceKind};
use crate::plan::lockfile::LockFile;
use crate::source::ScannedContent;
use std::collections::{BTreeMap, HashMap};

impl Planner<'_> {
    pub(super) fn files(
        &mut self,
        scope: usize,
        layer: &Layer,
        _f: &FilesLayer,
        lock: Option<&LockFile>,
    ) -> Result<(), PlanError> {
        self.files_node(scope, layer, lock, NodeKind::Files, format!("quarry: layer {}", layer.name))
    }

    pub(super) fn files_node(
        &mut self,
        scope: usize,
        layer: &Layer,
        lock: Option<&LockFile>,
        kind: NodeKind,
        history: String,
    ) -> Result<(), PlanError> {
        let LayerKind::Files(files) = &layer.kind else { unreachable!("a files layer") };
        let arch = self.scopes[scope].image.platform.arch;
        let fresh = self.scopes[scope].fresh;
        let mut wheels = BTreeMap::new();
        for (i, s) in files.sources.iter().enumerate() {
            if let SourceKind::Pypi(p) = &s.kind {
                let field = format!("{}source[{i}].pypi", layer.field_prefix);
                let request = crate::pypi::resolved(&p.request, arch);
                let made = &mut self.scopes[scope].pins.pypi;
                let file =
                    pins::pypi_file(&self.opts.cache, lock, made, fresh, &request, p.sha256.as_ref(), layer, &field)?;
                wheels.insert(i, file);
            }
        }
        let shas: BTreeMap<usize, crate::oci::Digest> = wheels.iter().map(|(i, w)| (*i, w.sha256)).collect();
        let mut scan = crate::trace::time("walk (scan)", || crate::source::scan(layer, &shas))?;
        let before = (self.hasher.files_hashed, self.hasher.stale_entries);
        let fingerprint =
            crate::trace::time("fingerprint", || scan.fingerprint(&mut self.hasher, self.opts.source_date_epoch))?;
        let stale = self.hasher.stale_entries - before.1;
        if stale > 0 {
            log::warn!(
                "layer `{}`: {stale} file(s) changed without their size, times, inode or mode changing; --verify rehashed them",
                layer.name
            );
        }
        let hashed = self.hasher.files_hashed - before.0;
        let pending = scan.pending_files();
        let (own, contents) = match fingerprint {
            Some((own, contents)) => (Some(own), contents),
            None => (None, Vec::new()),
        };
        let inputs = files_inputs(layer, &contents, &wheels);
        let n = self.push(scope, layer.name.clone(), kind, Some(history), Work::Files { scan: Box::new(scan), wheels });
        n.own = own;
        n.inputs = inputs;
        n.files_hashed = hashed;
        if own.is_none() {
            n.note = Some(format!(
                "{pending} file(s) new to this cache: hashed as the layer is packed, which gives its key (`quarry plan` hashes them first)"
            ));
        }
        Ok(())
    }
}

/// A files node whose key packing gave (see `KeyHashing`): its own key,
/// its inputs' pins and the keys above it are now known.
pub fn files_keyed(
    plan: &mut Plan,
    i: usize,
    layer: &Layer,
    wheels: &BTreeMap<usize, PypiFile>,
    own: Key,
    contents: &[ScannedContent],
    files_hashed: u64,
) {
    let n = &mut plan.layers[i];
    n.own = Some(own);
    n.inputs = files_inputs(layer, contents, wheels);
    n.files_hashed += files_hashed;
    n.note = None;
    plan.rekey();
}

/// A files layer's inputs, each with its content digest when known.
fn files_inputs(layer: &Layer, contents: &[ScannedContent], wheels: &BTreeMap<usize, PypiFile>) -> Vec<InputRef> {
    let LayerKind::Files(files) = &layer.kind else { unreachable!("a files layer") };
    let contents: HashMap<usize, &str> = contents.iter().map(|c| (c.index, c.digest.as_str())).collect();
    let mut inputs = Vec::new();
    for (i, s) in files.sources.iter().enumerate() {
        if let Some(r) = source_input(layer, s, contents.get(&i).map(|d| d.to_string()), wheels.get(&i)) {
            inputs.push(r);
        }
    }
    inputs
}

fn source_input(layer: &Layer, s: &Source, content: Option<String>, wheel: Option<&PypiFile>) -> Option<InputRef> {
    let (kind, reference) = match &s.kind {
        SourceKind::Dir(d) => ("dir", relative(&layer.file, &d.path)),
        SourceKind::File(f) => ("file", relative(&layer.file, &f.path)),
        SourceKind::Archive(a) => ("archive", relative(&layer.file, &a.path)),
        SourceKind::Rocm(r) => ("rocm", relative(&layer.file, &r.dir)),
        SourceKind::RocmArtifacts(r) => ("rocm_artifacts", relative(&layer.file, &r.dir)),
        SourceKind::Pypi(p) => {
            ("pypi", wheel.and_then(|w| w.file.clone()).unwrap_or_else(|| p.request.requirement.clone()))
        }
        SourceKind::Wheels(w) => {
            let dir = relative(&layer.file, &w.dir);
            ("wheels", w.extra.as_ref().map_or(dir.clone(), |e| format!("{dir}[{e}]")))
        }
        SourceKind::Remove => return None,
    };
    Some(InputRef { kind, reference, pin: content })
}
