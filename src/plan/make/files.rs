//! Planning a files layer (and a rootfs base): its wheels pinned, its
//! sources scanned and fingerprinted.

use super::super::pins;
use super::super::{InputRef, NodeKind, PlanError, PypiFile, Work};
use super::{relative, Planner};
use crate::definition::{FilesLayer, Layer, LayerKind, Source, SourceKind};
use crate::plan::lockfile::LockFile;
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
        let shas: BTreeMap<usize, crate::store::Digest> = wheels.iter().map(|(i, w)| (*i, w.sha256)).collect();
        let scan = crate::trace::time("walk (scan)", || crate::source::scan(layer, &shas))?;
        let before = (self.hasher.files_hashed, self.hasher.stale_entries);
        let (own, contents) =
            crate::trace::time("fingerprint", || scan.fingerprint(&mut self.hasher, self.opts.source_date_epoch))?;
        let stale = self.hasher.stale_entries - before.1;
        if stale > 0 {
            log::warn!(
                "layer `{}`: {stale} file(s) changed without their size, times, inode or mode changing; --verify rehashed them",
                layer.name
            );
        }
        let mut inputs = Vec::new();
        let contents: HashMap<usize, String> = contents.into_iter().map(|c| (c.index, c.digest)).collect();
        for (i, s) in files.sources.iter().enumerate() {
            if let Some(r) = source_input(layer, s, contents.get(&i).cloned(), wheels.get(&i)) {
                inputs.push(r);
            }
        }
        let hashed = self.hasher.files_hashed - before.0;
        let n = self.push(scope, layer.name.clone(), kind, Some(history), Work::Files { scan: Box::new(scan), wheels });
        n.own = Some(own);
        n.inputs = inputs;
        n.files_hashed = hashed;
        Ok(())
    }
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
        SourceKind::Remove => return None,
    };
    Some(InputRef { kind, reference, pin: content })
}
