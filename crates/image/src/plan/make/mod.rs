//! Making a plan: walk the image (the images it is built on first), make
//! one node per layer with its inputs resolved and its own key, then chain
//! the keys and ask the cache which layers it has. Each kind of layer is
//! planned in its own file (`files`, `packages`, `step`).

mod files;
mod packages;
mod step;

pub use files::files_keyed;
use packages::resolve_over_cached;
pub use packages::resolve_packages;

use super::keys;
use super::lockfile::{lock_path, LockFile};
use super::pins;
use super::{BaseSummary, InputRef, Node, NodeKind, PinMode, Plan, PlanError, PlanOptions, Scope, ScopeBase, Work};
use crate::cache::Tier;
use crate::definition::{
    ArchiveSource, Base, FilesLayer, Image, Layer, LayerKind, RunDef, Source, SourceKind, StepLayer,
};
use crate::source::hashes::ContentHasher;
use std::collections::BTreeMap;
use std::path::Path;

/// Plan the build of `image`.
pub fn make(image: &Image, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let spool = opts.cache.temp_dir("plan-")?;
    let mut p = Planner {
        opts,
        hasher: ContentHasher::new(opts.cache.clone(), opts.verify).with_timing(opts.key_hashing),
        spool: spool.path(),
        nodes: Vec::new(),
        scopes: Vec::new(),
    };
    p.image(image, true)?;
    let base = summary(&image.base);
    let mut plan = Plan {
        name: image.name.clone(),
        tag: image.tag.clone(),
        file: image.file.clone(),
        platform: image.platform.clone(),
        base,
        layers: p.nodes,
        scopes: p.scopes,
        start: keys::chain_start(&image.platform, opts.source_date_epoch),
        format: opts.codec.format_id(),
    };
    plan.rekey();
    // Packages layers over cached layers can be resolved now; then the
    // keys above them are known too.
    resolve_over_cached(&mut plan, opts, spool.path())?;
    mark_cached(&mut plan, &opts.cache)?;
    Ok(plan)
}

fn summary(base: &Base) -> BaseSummary {
    let path = |p: &Path| Some(p.display().to_string());
    match base {
        Base::Scratch => BaseSummary { kind: "scratch", reference: None },
        Base::Rootfs(r) => BaseSummary { kind: "rootfs", reference: path(&r.path) },
        Base::Oci { path: p, reference } => BaseSummary {
            kind: "oci",
            reference: Some(match reference {
                Some(r) => format!("{}:{r}", p.display()),
                None => p.display().to_string(),
            }),
        },
        Base::Registry { reference } => BaseSummary { kind: "registry", reference: Some(reference.clone()) },
        Base::Packages(b) => {
            BaseSummary { kind: "packages", reference: Some(format!("{} {}", b.suite(), b.architecture)) }
        }
        Base::Image(i) => BaseSummary { kind: "image", reference: path(&i.file) },
    }
}

struct Planner<'a> {
    opts: &'a PlanOptions,
    hasher: ContentHasher,
    spool: &'a Path,
    nodes: Vec<Node>,
    scopes: Vec<Scope>,
}

impl Planner<'_> {
    /// Plan `image` (after the definition it is built on); returns its scope.
    fn image(&mut self, image: &Image, top: bool) -> Result<usize, PlanError> {
        let inner = match &image.base {
            Base::Image(inner) => {
                let first = self.nodes.len();
                let s = self.image(inner, false)?;
                for n in &mut self.nodes[first..] {
                    n.name = format!("{}/{}", inner.name, n.name);
                }
                Some(s)
            }
            _ => None,
        };
        let path = lock_path(&image.file);
        let lock = LockFile::read(&path)?;
        let fresh = top && self.opts.pins == PinMode::Fresh;
        let base = match (&image.base, inner) {
            (_, Some(s)) => ScopeBase::Image(s),
            (Base::Oci { .. } | Base::Registry { .. }, _) => ScopeBase::Imported,
            _ => ScopeBase::Own,
        };
        let scope = self.scopes.len();
        self.scopes.push(Scope {
            image: image.clone(),
            lock_path: path,
            fresh,
            pins: LockFile { version: super::lockfile::LOCK_VERSION, ..Default::default() },
            base,
        });
        let lock = lock.as_ref();
        self.base(scope, image, lock)?;
        for layer in &image.layers {
            match &layer.kind {
                LayerKind::Files(f) => self.files(scope, layer, f, lock)?,
                LayerKind::Packages(set) => self.packages(scope, layer, set, lock)?,
                LayerKind::Step(s) => self.step(scope, layer, s, lock)?,
            }
        }
        Ok(scope)
    }

    fn push(&mut self, scope: usize, name: String, kind: NodeKind, history: Option<String>, work: Work) -> &mut Node {
        let network = matches!(&work, Work::Step { run, .. } if run.network);
        self.nodes.push(Node {
            name,
            kind,
            key: None,
            cached: false,
            tier: None,
            inputs: Vec::new(),
            note: None,
            scope,
            own: None,
            history,
            files_hashed: 0,
            network,
            pins: None,
            archive: None,
            work,
        });
        self.nodes.last_mut().expect("just pushed")
    }

    fn base(&mut self, scope: usize, image: &Image, lock: Option<&LockFile>) -> Result<(), PlanError> {
        match &image.base {
            Base::Scratch | Base::Image(_) => Ok(()),
            Base::Rootfs(r) => {
                let layer = Layer {
                    name: "base".into(),
                    file: image.file.clone(),
                    field_prefix: "base.".into(),
                    kind: LayerKind::Files(FilesLayer {
                        sources: vec![Source {
                            kind: SourceKind::Archive(ArchiveSource {
                                path: r.path.clone(),
                                sha256: r.sha256,
                                strip_components: 0,
                                map: BTreeMap::new(),
                                devices: r.devices,
                            }),
                            dest: "/".into(),
                            owner: None,
                            remove: vec![],
                        }],
                        remove: vec![],
                    }),
                };
                let file_name = r.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                self.files_node(scope, &layer, lock, NodeKind::Rootfs, format!("quarry: base rootfs {file_name}"))
            }
            Base::Oci { path, reference } => {
                let platform = &image.platform;
                let img = crate::oci::layout::open_image(
                    path,
                    reference.as_deref(),
                    Some((&platform.os, platform.arch.oci())),
                )?;
                let cache = &self.opts.cache;
                let all_in =
                    img.manifest.layers().iter().all(|d| {
                        crate::oci::Digest::try_from(d.digest()).is_ok_and(|dg| cache.has_blob(&dg, d.size()))
                    });
                let own = keys::oci_base(&img.manifest_digest);
                let n = self.push(
                    scope,
                    "base".into(),
                    NodeKind::Oci,
                    None,
                    Work::Oci { path: path.clone(), reference: reference.clone() },
                );
                n.own = Some(own);
                n.cached = all_in;
                n.inputs.push(InputRef {
                    kind: "oci",
                    reference: path.display().to_string(),
                    pin: Some(img.manifest_digest.to_string()),
                });
                Ok(())
            }
            Base::Registry { reference } => {
                let own = keys::registry_base(reference, &image.platform);
                let pin = reference.rsplit_once('@').map(|(_, d)| d.to_string());
                let n = self.push(
                    scope,
                    "base".into(),
                    NodeKind::Registry,
                    None,
                    Work::Registry { reference: reference.clone() },
                );
                n.own = Some(own);
                n.inputs.push(InputRef { kind: "registry", reference: reference.clone(), pin });
                Ok(())
            }
            Base::Packages(b) => {
                let fresh = self.scopes[scope].fresh;
                let path = self.scopes[scope].lock_path.clone();
                let derr = |err| PlanError::Distro { file: image.file.display().to_string(), err };
                let (pins, note) =
                    pins::base_pins(lock, &path, b, fresh, &self.opts.cache, self.spool).map_err(derr)?;
                self.scopes[scope].pins.base = Some(pins.clone());
                let mirror = crate::distro::mirrors(b).map_err(Box::new).map_err(derr)?;
                let own = keys::packages_base(b, &pins, &mirror);
                let history =
                    format!("quarry: packages {} {} ({} packages)", b.suite(), b.architecture, pins.packages.len());
                let inputs = deb_inputs(&pins);
                let n = self.push(
                    scope,
                    "base".into(),
                    NodeKind::Packages,
                    Some(history),
                    Work::PackagesBase { base: b.clone(), pins },
                );
                n.own = Some(own);
                n.inputs = inputs;
                n.note = note;
                n.archive = Some(archive(b, mirror).map_err(derr)?);
                if let Work::PackagesBase { pins, .. } = &n.work {
                    n.pins = Some(pins.clone());
                }
                if b.configure == crate::definition::Configure::Engine {
                    // The packages were left "unpacked": their maintainer
                    // scripts run now, as root with no network, as a step.
                    let script = crate::distro::engine_configure_script(&b.users, &b.groups);
                    let layer = configure_layer("configure", &image.file, "base.packages.configure.", script);
                    self.configure(scope, layer)?;
                }
                Ok(())
            }
        }
    }
}

/// A path as the definition wrote it, relative to the definition's directory when inside it.
fn relative(definition: &Path, path: &Path) -> String {
    let dir = definition.parent().unwrap_or(Path::new(""));
    path.strip_prefix(dir).unwrap_or(path).display().to_string()
}

/// Ask the cache which layers it has, and in which tier (nothing is fetched).
pub(super) fn mark_cached(plan: &mut Plan, cache: &crate::cache::Cache) -> Result<(), PlanError> {
    for n in &mut plan.layers {
        match &n.work {
            // Decided when planned: its blobs are in the cache or not.
            Work::Oci { .. } => n.tier = n.cached.then_some(Tier::Local),
            Work::Registry { reference } => {
                let platform = &plan.scopes[n.scope].image.platform;
                n.cached = crate::registry::pull::cached_layers(reference, platform, cache.blobs()).is_some();
                n.tier = n.cached.then_some(Tier::Local);
            }
            _ => {
                n.tier = match n.key {
                    Some(k) => cache.layer_tier(&k)?,
                    None => None,
                };
                n.cached = n.tier.is_some();
            }
        }
    }
    Ok(())
}

/// The step that runs every maintainer script of a `packages` base or layer.
fn configure_layer(name: &str, file: &Path, field_prefix: &str, script: String) -> Layer {
    let mut env = BTreeMap::new();
    env.insert("DEBIAN_FRONTEND".to_string(), "noninteractive".to_string());
    Layer {
        name: name.into(),
        file: file.to_path_buf(),
        field_prefix: field_prefix.into(),
        kind: LayerKind::Step(StepLayer {
            run: RunDef {
                script,
                network: false,
                env,
                // By number: before base-passwd's scripts run there is no /etc/passwd.
                user: Some("0:0".into()),
                workdir: Some("/".into()),
                shell: None,
            },
            inputs: vec![],
        }),
    }
}

/// Where a package set's files come from, for provenance.
fn archive(
    set: &crate::definition::PackageSet,
    mirrors: Vec<(String, String)>,
) -> Result<crate::plan::Archive, Box<crate::distro::DistroError>> {
    let keyring = match &set.keyring {
        crate::definition::Keyring::Deb(k) => {
            let mirror = crate::distro::mirrors::keyring_mirror(k, &set.architecture)?;
            Some((format!("{}/{}", mirror.trim_end_matches('/'), k.deb), k.sha256.clone()))
        }
        crate::definition::Keyring::File(_) => None,
    };
    Ok(crate::plan::Archive { mirrors, keyring })
}

fn deb_inputs(pins: &crate::distro::pins::PackagePins) -> Vec<InputRef> {
    pins.packages
        .iter()
        .map(|p| InputRef {
            kind: "deb",
            reference: format!("{}={} ({})", p.name, p.version, p.architecture),
            pin: Some(format!("sha256:{}", p.sha256)),
        })
        .collect()
}
