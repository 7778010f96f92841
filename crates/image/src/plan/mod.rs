//! definition -> Plan. A `Plan` is plain typed data: the layers of an image
//! in order (its base's first), each with its kind, its fully resolved
//! inputs (pins from `IMAGE.lock`, read once, in `lockfile`), its cache key
//! and whether the cache has it. `quarry plan` prints one, `quarry lock`
//! makes one with fresh pins and writes them, `quarry build` executes one
//! (see `build`). Making a plan fetches or reads only what a key truly
//! needs: a packages layer that must be resolved over layers not built yet
//! says so (its key is unknown) instead of building them. A plan made to be
//! built at once may leave the files of a source new to the cache unhashed
//! (`KeyHashing`): packing reads them anyway, and their layer's key is
//! known once it is packed (`files_keyed`), the same key hashing first gives.

pub mod keys;
pub mod lockfile;
mod make;
mod pins;

pub use crate::source::hashes::KeyHashing;
pub use make::{files_keyed, make, resolve_packages};

use crate::cache::key::Key;
use crate::cache::Cache;
use crate::definition::{Image, Layer, PackageSet, PackagesBase, Platform, PypiRequest, RunDef};
use crate::distro::pins::PackagePins;
use crate::layer::compress::LayerCodec;
use crate::oci::Digest;
use crate::source::FilesScan;
use lockfile::LockFile;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    #[error("{file}: base.packages: {err}")]
    Distro { file: String, err: Box<crate::distro::DistroError> },
    #[error("{file}: layer `{layer}`: packages: {err}")]
    DistroLayer { file: String, layer: String, err: Box<crate::distro::DistroError> },
    #[error("{file}: `{field}`: {err}")]
    Pypi { file: String, field: String, err: Box<crate::pypi::PypiError> },
    #[error(transparent)]
    LockFile(#[from] lockfile::LockFileError),
    #[error("base image `{path}`: {message}")]
    Base { path: String, message: String },
    #[error("{file}: base `registry`: {err}")]
    Registry { file: String, err: crate::registry::RegistryError },
    #[error(transparent)]
    Layout(#[from] crate::oci::layout::LayoutError),
}

impl PlanError {
    /// What to do about it, printed after the error (see `cli::exit`).
    pub fn hint(&self) -> Option<String> {
        match self {
            PlanError::Distro { err, .. } | PlanError::DistroLayer { err, .. } => err.hint(),
            _ => None,
        }
    }
}

/// Whose pins a plan uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// Each image's `IMAGE.lock` when it has one; what is not locked is
    /// resolved now (a `quarry build` without a lock).
    Locked,
    /// The planned image's pins are made anew (`quarry lock`); images it is
    /// built on keep their own locks.
    Fresh,
}

pub struct PlanOptions {
    pub cache: Cache,
    /// The layers' format (compression and level), part of every key.
    pub codec: LayerCodec,
    pub source_date_epoch: u64,
    /// Rehash every input file instead of trusting the stat memo.
    pub verify: bool,
    pub pins: PinMode,
    /// Whether a files layer new to the cache may get its key from packing.
    pub key_hashing: KeyHashing,
}

/// An image's layers, ready to build.
#[derive(serde::Serialize)]
pub struct Plan {
    pub name: String,
    pub tag: String,
    pub file: PathBuf,
    #[serde(serialize_with = "display")]
    pub platform: Platform,
    pub base: BaseSummary,
    pub layers: Vec<Node>,
    /// The definitions the layers come from: images this one is built on
    /// first, this image last.
    #[serde(skip)]
    pub scopes: Vec<Scope>,
    #[serde(skip)]
    pub start: Key,
    #[serde(skip)]
    pub format: String,
}

fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// What the image's base is, for people reading a plan.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BaseSummary {
    pub kind: &'static str,
    /// The file, directory, reference or definition named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// One image definition of the plan and the pins it uses.
pub struct Scope {
    pub image: Image,
    pub lock_path: PathBuf,
    /// Pins are made anew for this image (`quarry lock`).
    pub fresh: bool,
    /// The pins this plan uses for this image: from its lock, or made now.
    pub pins: LockFile,
    /// What its layers are built on, for its config.
    pub base: ScopeBase,
}

pub enum ScopeBase {
    /// Scratch, a rootfs or packages: no config to inherit.
    Own,
    /// An OCI layout or registry image: its config comes with its layers.
    Imported,
    /// Another definition, by scope index.
    Image(usize),
}

/// One node of the plan: a layer (or, for an OCI or registry base, the
/// layers it brings).
#[derive(serde::Serialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// Unknown (null) until what it is resolved over is built.
    pub key: Option<Key>,
    /// A cache tier has the layer: a build takes it from there.
    pub cached: bool,
    /// Which tier: `local`, `remote` (the shared registry), or null.
    pub tier: Option<crate::cache::Tier>,
    pub inputs: Vec<InputRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip)]
    pub scope: usize,
    /// The node's own key; the chained `key` follows from it.
    #[serde(skip)]
    pub own: Option<Key>,
    /// The image history entry it adds.
    #[serde(skip)]
    pub history: Option<String>,
    /// Input files read and hashed to make its key.
    #[serde(skip)]
    pub files_hashed: u64,
    /// It runs with the network on (a step asking for it): what it makes
    /// stays in the local cache tier, never shared.
    #[serde(skip)]
    pub network: bool,
    /// The packages it installs, once pinned (packages nodes).
    #[serde(skip)]
    pub pins: Option<PackagePins>,
    /// Where its packages come from (packages nodes): provenance names each
    /// .deb by its URL.
    #[serde(skip)]
    pub archive: Option<Archive>,
    #[serde(skip)]
    pub work: Work,
}

/// The archive a packages node's pins are fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// Each suite and the mirror its files are under.
    pub mirrors: Vec<(String, String)>,
    /// The keyring package pinned by the definition: its URL and sha256.
    pub keyring: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A rootfs tarball made into one layer.
    Rootfs,
    /// An OCI layout's layers, reused as they are.
    Oci,
    /// A registry image's layers, pulled by digest.
    Registry,
    /// Debian/Ubuntu packages (a base rootfs, or a layer over the ones below).
    Packages,
    /// Host files, archives, wheels, ROCm trees.
    Files,
    /// A script run in a container of the image so far.
    Step,
}

/// An input of a node: its kind, what names it, and its pin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InputRef {
    pub kind: &'static str,
    pub reference: String,
    pub pin: Option<String>,
}

/// What executing a node needs, resolved. One per layer, a few dozen per
/// plan: the size of the largest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Work {
    Files {
        scan: Box<FilesScan>,
        /// Each `pypi` source's wheel, by source index.
        wheels: BTreeMap<usize, PypiFile>,
    },
    PackagesBase {
        base: Box<PackagesBase>,
        pins: PackagePins,
    },
    Packages {
        layer: Box<Layer>,
        set: PackageSet,
        /// None: resolved over the layers below when they are built.
        pins: Option<PackagePins>,
        /// The pins come from the lock: the layers below must still match.
        from_lock: bool,
    },
    Step {
        layer: Box<Layer>,
        run: RunDef,
        inputs: Vec<StepInput>,
    },
    Oci {
        path: PathBuf,
        reference: Option<String>,
    },
    Registry {
        reference: String,
    },
    /// Executed: what it needed was used up making its layer.
    Spent,
}

/// A file from PyPI: what was asked for and the sha256 it is pinned to.
#[derive(Debug, Clone)]
pub struct PypiFile {
    pub request: PypiRequest,
    pub sha256: Digest,
    /// The file's name (for bills of materials), when known.
    pub file: Option<String>,
}

/// A file copied into a step's container.
#[derive(Debug, Clone)]
pub struct StepInput {
    pub dest: String,
    pub from: StepFrom,
}

#[derive(Debug, Clone)]
pub enum StepFrom {
    File { path: PathBuf, sha256: Digest },
    Pypi(PypiFile),
}

impl Plan {
    /// Recompute every chained key from the nodes' own keys: a node whose
    /// own key, or any node's below it in its image, is unknown has none.
    pub fn rekey(&mut self) {
        let mut last_of_scope: Vec<Option<Key>> = vec![None; self.scopes.len()];
        let mut started = vec![false; self.scopes.len()];
        let mut chain: Option<Key> = None;
        for i in 0..self.layers.len() {
            let s = self.layers[i].scope;
            if !started[s] {
                started[s] = true;
                chain = self.scope_entry(s, &last_of_scope);
            }
            let key = chain.zip(self.layers[i].own).map(|(prev, own)| keys::chained(&prev, &own, &self.format));
            self.layers[i].key = key;
            chain = key;
            last_of_scope[s] = key;
        }
    }

    /// The chained key an image's first layer builds on.
    fn scope_entry(&self, s: usize, last_of_scope: &[Option<Key>]) -> Option<Key> {
        match self.scopes[s].base {
            ScopeBase::Image(inner) => {
                // The inner image's last key (its start, if it has no layers).
                let inner_last = if self.layers.iter().any(|n| n.scope == inner) {
                    last_of_scope[inner]?
                } else {
                    self.scope_entry(inner, last_of_scope)?
                };
                Some(keys::image_base(&self.start, &inner_last, &keys::config(&self.scopes[inner].image.config)))
            }
            _ => Some(self.start),
        }
    }

    /// Every layer is in the cache: building would only write the layout.
    pub fn all_cached(&self) -> bool {
        self.layers.iter().all(|n| n.cached)
    }

    /// The image whose pins `quarry lock` writes.
    pub fn top(&self) -> &Scope {
        self.scopes.last().expect("a plan has its own image")
    }
}

#[cfg(test)]
mod tests;
