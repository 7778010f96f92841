//! Executing a plan's nodes in order: each from the cache when its key is
//! there, else made by its kind's module. The executor keeps what the image
//! so far is (layers, history) and, per image definition of the plan, its
//! composed config, which a step needs to run in and an image built on it
//! inherits.

use super::config::{history, image_config};
use super::{BuildError, BuildOptions, BuiltLayer};
use crate::cache::{Cache, CacheError, Tier};
use crate::oci::LayerBlob;
use crate::plan::{Plan, ScopeBase, Work};
use ocidir::oci_spec::image::{History, ImageConfiguration};
use std::path::Path;

pub struct Executor<'a> {
    pub(super) opts: &'a BuildOptions,
    pub(super) cache: Cache,
    spool: tempfile::TempDir,
    /// Connected on the first step that misses the cache.
    pub(super) engine: Option<crate::engine::Engine>,
    pub layers: Vec<BuiltLayer>,
    pub(super) history: Vec<History>,
    /// Each scope's final config, once its layers are done.
    finals: Vec<Option<ImageConfiguration>>,
    /// Each scope's imported base config (OCI layout, registry).
    pub(super) imported: Vec<Option<ImageConfiguration>>,
    current: Option<usize>,
    /// Nodes executed so far.
    done: usize,
    /// The nodes made (not taken from the cache), by name.
    pub built: Vec<String>,
    /// Compose only: stop at the first node the cache does not have.
    dry: bool,
}

impl<'a> Executor<'a> {
    pub fn new(opts: &'a BuildOptions, cache: &Cache, dry: bool) -> Result<Executor<'a>, CacheError> {
        let spool = cache.temp_dir("spool-")?;
        Ok(Executor {
            opts,
            cache: cache.clone(),
            spool,
            engine: None,
            layers: Vec::new(),
            history: Vec::new(),
            finals: Vec::new(),
            imported: Vec::new(),
            current: None,
            done: 0,
            built: Vec::new(),
            dry,
        })
    }

    pub(super) fn is_dry(&self) -> bool {
        self.dry
    }

    pub(super) fn spool(&self) -> &Path {
        self.spool.path()
    }

    /// Execute nodes `[done, until)` of `plan` (`done`: what this executor
    /// did before). False when composing and a node is not in the cache.
    pub fn run(&mut self, plan: &mut Plan, until: usize) -> Result<bool, BuildError> {
        self.finals.resize(plan.scopes.len(), None);
        self.imported.resize(plan.scopes.len(), None);
        let done = self.done;
        for i in done..until {
            self.enter(plan, plan.layers[i].scope);
            if !self.node(plan, i)? {
                return Ok(false);
            }
            if let Some(h) = &plan.layers[i].history {
                self.history.push(history(h, self.opts.source_date_epoch));
            }
            self.done = i + 1;
        }
        Ok(true)
    }

    /// Move on to scope `s`, finishing the scopes before it.
    fn enter(&mut self, plan: &Plan, s: usize) {
        let from = match self.current {
            Some(c) if c == s => return,
            Some(c) => {
                self.finish(plan, c);
                c + 1
            }
            None => 0,
        };
        for t in from..=s {
            if let ScopeBase::Image(inner) = plan.scopes[t].base {
                // An image built on another continues that one's history.
                if let Some(h) = self.finals[inner].as_ref().and_then(|c| c.history().clone()) {
                    self.history = h;
                }
            }
            if t < s {
                self.finish(plan, t);
            }
        }
        self.current = Some(s);
    }

    fn finish(&mut self, plan: &Plan, s: usize) {
        let c = self.config_for(plan, s);
        self.finals[s] = Some(c);
    }

    /// Scope `s`'s config as the image stands now.
    pub(super) fn config_for(&self, plan: &Plan, s: usize) -> ImageConfiguration {
        let base = match plan.scopes[s].base {
            ScopeBase::Own => None,
            ScopeBase::Imported => self.imported[s].as_ref(),
            ScopeBase::Image(inner) => self.finals[inner].as_ref(),
        };
        image_config(&plan.scopes[s].image, base, &self.layers, self.history.clone(), self.opts.source_date_epoch)
    }

    /// The plan's image config, after every node ran.
    pub fn final_config(&mut self, plan: &Plan) -> ImageConfiguration {
        let last = plan.scopes.len() - 1;
        self.finals.resize(plan.scopes.len(), None);
        self.imported.resize(plan.scopes.len(), None);
        self.enter(plan, last);
        self.config_for(plan, last)
    }

    /// One node: true when its layers were added.
    fn node(&mut self, plan: &mut Plan, i: usize) -> Result<bool, BuildError> {
        let n = &plan.layers[i];
        let reuse = !self.opts.no_cache || self.dry;
        match &n.work {
            Work::Oci { .. } | Work::Registry { .. } => return super::import::run(self, plan, i),
            Work::Packages { .. } => return super::packages::layer(self, plan, i, reuse),
            _ => {}
        }
        if let Some(key) = n.key.filter(|_| reuse) {
            // Composing (a plan's manifest digest) fetches nothing from a registry tier.
            let found = if self.dry {
                self.cache.local_layer(&key).map(|b| (b, Tier::Local))
            } else {
                self.cache.layer(&key, &crate::cache::Sharing::unless_networked(n.network))?.map(|h| (h.value, h.tier))
            };
            if let Some((blob, tier)) = found {
                self.push(n.name.clone(), blob, Some(tier), n.files_hashed);
                return Ok(true);
            }
        }
        if self.dry {
            return Ok(false);
        }
        let work = std::mem::replace(&mut plan.layers[i].work, Work::Spent);
        match work {
            Work::Files { scan, wheels } => super::files::run(self, plan, i, *scan, &wheels)?,
            Work::PackagesBase { base, pins } => super::packages::base(self, plan, i, &base, &pins)?,
            Work::Step { layer, run, inputs } => super::step::run(self, plan, i, &layer, &run, &inputs)?,
            Work::Spent | Work::Oci { .. } | Work::Registry { .. } | Work::Packages { .. } => {
                unreachable!("each node runs once, imports and packages above")
            }
        }
        Ok(true)
    }

    /// Add a layer: `found` in a cache tier, or (None) made now.
    pub(super) fn push(&mut self, name: String, blob: LayerBlob, found: Option<Tier>, files_hashed: u64) {
        let cached = found.is_some();
        if !cached {
            self.built.push(name.clone());
        }
        self.layers.push(BuiltLayer {
            name,
            digest: blob.digest,
            diff_id: blob.diff_id,
            size: blob.size,
            media_type: blob.media_type,
            cached,
            tier: found,
            files_hashed,
        });
    }

    /// Pack `tree` as node `i`'s layer, record it under the node's key and add it.
    pub(super) fn pack(&mut self, plan: &Plan, i: usize, tree: &crate::layer::Tree) -> Result<(), BuildError> {
        let blob = self.pack_blob(plan, i, tree, None)?;
        self.record(plan, i, blob)
    }

    /// Pack `tree` as node `i`'s layer (and, with `host_digests`, hash
    /// every host file as it is read); not recorded yet.
    pub(super) fn pack_blob(
        &mut self,
        plan: &Plan,
        i: usize,
        tree: &crate::layer::Tree,
        host_digests: Option<&mut crate::layer::write::HostDigests>,
    ) -> Result<LayerBlob, BuildError> {
        let n = &plan.layers[i];
        let bar = crate::progress::phase_bytes(format!("packing layer `{}`", n.name), tree.content_bytes());
        let wopts = crate::layer::write::WriteOptions { source_date_epoch: self.opts.source_date_epoch };
        let packing = crate::trace::span("pack (wall)");
        let blob = crate::layer::pack::pack_tree(
            self.cache.blobs(),
            tree,
            self.opts.compression,
            self.opts.threads,
            &wopts,
            &mut |b| bar.inc(b),
            host_digests,
        )
        .map_err(|err| BuildError::Pack { layer: n.name.clone(), err })?;
        drop(packing);
        drop(bar);
        Ok(blob)
    }

    /// Record node `i`'s packed layer under its key and add it.
    pub(super) fn record(&mut self, plan: &Plan, i: usize, blob: LayerBlob) -> Result<(), BuildError> {
        let n = &plan.layers[i];
        let key = n.key.expect("a node is recorded once its key is known");
        let sharing = crate::cache::Sharing::unless_networked(n.network);
        crate::trace::time("cache record", || self.cache.put_layer(&key, &blob, &sharing))?;
        self.push(n.name.clone(), blob, None, n.files_hashed);
        Ok(())
    }
}
