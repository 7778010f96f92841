//! `quarry build`: definition -> plan (cache keys chained from the base) ->
//! layers (cached or packed) -> OCI layout.

use crate::compress::LayerCodec;
use crate::digest::KeyHasher;
use crate::pack::{pack_tree, PackError};
use crate::progress::Progress;
use crate::source::hashes::ContentHasher;
use crate::source::{self, SourceError};
use crate::spec::{self, Base, Image, Layer, Source, SourceKind, SpecError};
use crate::store::cache::{Cache, CacheError};
use crate::store::layout::{self, LayoutError, OpenImage};
use crate::store::LayerBlob;
use crate::tarball::write::WriteOptions;
use ocidir::oci_spec::image::{
    ConfigBuilder, History, HistoryBuilder, ImageConfiguration, ImageConfigurationBuilder, RootFsBuilder,
};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("layer `{layer}`: {err}")]
    Pack { layer: String, err: PackError },
    #[error("{file}: {message}")]
    Unsupported { file: String, message: String },
    #[error("base image `{path}`: {message}")]
    Base { path: String, message: String },
    #[error(transparent)]
    Step(#[from] crate::engine::step::StepError),
    #[error("layer `{layer}`: {err}")]
    Engine { layer: String, err: crate::engine::EngineError },
    #[error("{file}: base `registry`: {err}")]
    Registry { file: String, err: crate::registry::RegistryError },
    #[error("{file}: base.packages: {err}")]
    Distro { file: String, err: Box<crate::distro::DistroError> },
    #[error("{file}: layer `{layer}`: packages: {err}")]
    DistroLayer { file: String, layer: String, err: Box<crate::distro::DistroError> },
    #[error("{file}: `{field}`: {err}")]
    Pypi { file: String, field: String, err: Box<crate::pypi::PypiError> },
    #[error("{file}: {err}")]
    Lock { file: String, err: Box<crate::distro::DistroError> },
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub sets: BTreeMap<String, String>,
    pub output: Option<PathBuf>,
    pub compression: LayerCodec,
    pub cache_dir: PathBuf,
    pub no_cache: bool,
    /// Rehash every input file instead of trusting the stat memo.
    pub verify: bool,
    pub threads: usize,
    pub source_date_epoch: u64,
    pub progress: Progress,
}

impl BuildOptions {
    /// Default options for building a definition on the way to something
    /// else (`load`, `run`): gzip, all cores, SOURCE_DATE_EPOCH from the env.
    pub fn defaults(
        sets: BTreeMap<String, String>,
        cache_dir: PathBuf,
        progress: Progress,
    ) -> Result<BuildOptions, String> {
        Ok(BuildOptions {
            sets,
            output: None,
            compression: LayerCodec::default(),
            cache_dir,
            no_cache: false,
            verify: false,
            threads: crate::compress::default_threads(),
            source_date_epoch: source_date_epoch_from_env()?,
            progress,
        })
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuiltLayer {
    pub name: String,
    pub digest: String,
    pub diff_id: String,
    pub size: u64,
    pub media_type: String,
    pub cached: bool,
    /// Input files read and hashed to compute the layer's cache key (those
    /// whose stat changed since the last build, or all with `--verify`).
    pub files_hashed: u64,
}

impl BuiltLayer {
    pub fn blob(&self) -> LayerBlob {
        LayerBlob {
            digest: self.digest.clone(),
            diff_id: self.diff_id.clone(),
            size: self.size,
            media_type: self.media_type.clone(),
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildResult {
    pub name: String,
    pub tag: String,
    pub output: PathBuf,
    pub manifest_digest: String,
    pub config_digest: String,
    pub layers: Vec<BuiltLayer>,
}

/// SOURCE_DATE_EPOCH from the environment, default 0.
pub fn source_date_epoch_from_env() -> Result<u64, String> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.is_empty() => {
            v.trim().parse().map_err(|_| format!("SOURCE_DATE_EPOCH=`{v}` is not a whole number of seconds"))
        }
        _ => Ok(0),
    }
}

fn rfc3339(epoch: u64) -> String {
    chrono::DateTime::from_timestamp(epoch as i64, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

struct Builder<'a> {
    opts: &'a BuildOptions,
    cache: Cache,
    spool: tempfile::TempDir,
    hasher: ContentHasher,
    /// Files hashed for the layer being built, reported with it.
    files_hashed: u64,
    layers: Vec<BuiltLayer>,
    history: Vec<History>,
    chain: String,
    /// Connected on the first step layer that misses the cache.
    engine: Option<crate::engine::Engine>,
    /// `quarry lock`: resolve every packages base and layer afresh (the
    /// lock beside the image is not read) and collect the pins here.
    relock: Option<crate::distro::lock::LockFile>,
    /// The image's OCI architecture (for pip's platform tags).
    arch: String,
    /// `[[pypi]]` pins from the image's lock file.
    pypi_pins: Vec<crate::lockfile::PypiPin>,
}

impl Builder<'_> {
    fn history(&mut self, created_by: String, comment: Option<String>) {
        let mut h = HistoryBuilder::default().created(rfc3339(self.opts.source_date_epoch)).created_by(created_by);
        if let Some(c) = comment {
            h = h.comment(c);
        }
        self.history.push(h.build().expect("all fields set"));
    }

    /// A PyPI file for a source or input: pinned by the definition or the
    /// lock, from the download cache when there, else fetched with pip.
    fn fetch_pypi(
        &self,
        layer: &Layer,
        field: &str,
        request: &spec::PypiRequest,
        def_pin: Option<&str>,
    ) -> Result<crate::pypi::Fetched, BuildError> {
        let req = crate::pypi::resolved(request, &self.arch);
        let err = |err| BuildError::Pypi {
            file: layer.file.display().to_string(),
            field: field.to_string(),
            err: Box::new(err),
        };
        let lock_pin = crate::pypi::find_pin(&self.pypi_pins, &req);
        let pin = crate::pypi::pinned_sha(&req, def_pin, lock_pin).map_err(err)?;
        if pin.is_none() {
            eprintln!(
                "quarry: layer `{}`: `{}` is not pinned; pip chooses the file on every build (run `quarry lock` on the image, or add `sha256`)",
                layer.name, req.requirement
            );
        }
        crate::pypi::fetch(&self.cache, &req, pin.as_deref()).map_err(err)
    }

    /// Build one layer from its sources, or take it from the cache.
    fn source_layer(&mut self, layer: &Layer, field_prefix: &str) -> Result<(), BuildError> {
        let mut wheels = BTreeMap::new();
        for (i, s) in layer.sources.iter().enumerate() {
            if let SourceKind::Pypi { request, .. } = &s.kind {
                let f = self.fetch_pypi(layer, &format!("{field_prefix}[{i}].pypi"), request, s.sha256.as_deref())?;
                wheels.insert(i, source::FetchedWheel { path: f.path, sha256: f.sha256 });
            }
        }
        let scan = source::scan(layer, field_prefix, &wheels)?;
        let hashed_before = self.hasher.files_hashed;
        let stale_before = self.hasher.stale_entries;
        let fingerprint = scan.fingerprint(&mut self.hasher, self.opts.source_date_epoch)?;
        self.files_hashed = self.hasher.files_hashed - hashed_before;
        let stale = self.hasher.stale_entries - stale_before;
        if stale > 0 {
            eprintln!(
                "quarry: layer `{}`: {stale} file(s) changed without their size, times, inode or mode changing; --verify rehashed them",
                layer.name
            );
        }
        let mut k = KeyHasher::new();
        k.field(&self.chain).field(fingerprint).field(self.opts.compression.format_id());
        let key = k.finish();
        if self.reuse_cached(&key, &layer.name) {
            return Ok(());
        }
        let (tree, report) = scan.into_tree(self.spool.path())?;
        if report.dropped_devices > 0 {
            eprintln!(
                "quarry: layer `{}`: dropped {} device node(s); set `devices = true` on the source to keep them",
                layer.name, report.dropped_devices
            );
        }
        self.pack_and_record(&layer.name, &key, &tree)
    }

    /// A step layer: its script runs in a container of the image built so
    /// far (see `engine::step`); the diff is packed like any layer. Cache
    /// key: parent chain + script and run settings + input contents + env.
    fn step_layer(
        &mut self,
        image: &Image,
        layer: &Layer,
        base: Option<&ImageConfiguration>,
        field: &str,
    ) -> Result<(), BuildError> {
        let run = layer.run.as_ref().expect("called for step layers");
        let file = layer.file.display().to_string();
        if !layer.sources.is_empty() || !layer.remove.is_empty() {
            return Err(BuildError::Unsupported {
                file,
                message: format!(
                    "layer `{}`: a `[run]` step makes its content with its script; move `source`/`remove` to a layer of their own, or copy files in with `[[input]]`",
                    layer.name
                ),
            });
        }
        let mut k = KeyHasher::new();
        k.field(&self.chain).field("step-v1").field(&layer.name);
        k.field(serde_json::to_string(run).unwrap_or_default());
        k.field(format!("{:?}|{:?}|{:?}", image.config.env, image.config.user, image.config.workdir));
        k.field(self.opts.compression.format_id());
        let mut inputs = Vec::new();
        for (j, input) in layer.inputs.iter().enumerate() {
            let f = format!("{field}input[{j}]");
            let path = match &input.kind {
                spec::InputKind::File(p) => p.clone(),
                spec::InputKind::Pypi(req) => {
                    // Fetched, pinned and verified on the host; the step
                    // itself runs without network.
                    let fetched = self.fetch_pypi(layer, &format!("{f}.pypi"), req, input.sha256.as_deref())?;
                    k.field(&input.dest).field(&fetched.sha256);
                    inputs.push(crate::engine::copy::CopyIn { host: fetched.path, dest: input.dest.clone() });
                    continue;
                }
            };
            let path = &path;
            if !path.is_file() {
                return Err(SourceError {
                    file,
                    field: format!("{f}.file"),
                    message: format!("`{}` is not a readable file", path.display()),
                }
                .into());
            }
            let actual = crate::digest::sha256_file(path).map_err(|e| SourceError {
                file: file.clone(),
                field: format!("{f}.file"),
                message: format!("cannot read `{}`: {e}", path.display()),
            })?;
            if let Some(pin) = &input.sha256 {
                source::verify_pin(layer, &format!("{f}.sha256"), path, pin)?;
            }
            k.field(&input.dest).field(&actual);
            inputs.push(crate::engine::copy::CopyIn { host: path.clone(), dest: input.dest.clone() });
        }
        let key = k.finish();
        if self.reuse_cached(&key, &layer.name) {
            return Ok(());
        }
        // The image so far, as a layout the engine can load.
        let partial = self.spool.path().join(format!("partial-{}", self.layers.len()));
        let config = image_config(image, base, &self.layers, self.history.clone(), self.opts.source_date_epoch);
        let blobs: Vec<LayerBlob> = self.layers.iter().map(BuiltLayer::blob).collect();
        let (os, arch, variant) = image.platform();
        layout::write_image(
            &partial,
            &self.cache.root().join("blobs/sha256"),
            &blobs,
            &config,
            "partial",
            layout::parse_platform(&os, &arch, variant.as_deref()),
        )?;
        if self.engine.is_none() {
            let e = crate::engine::Engine::connect()
                .map_err(|err| BuildError::Engine { layer: layer.name.clone(), err })?;
            self.engine = Some(e);
        }
        let engine = self.engine.as_ref().expect("connected above");
        let spool = self.spool.path().to_path_buf();
        let mut tree = engine.run_step(crate::engine::step::StepRequest {
            layer: &layer.name,
            file: &layer.file,
            layout: &partial,
            run,
            inputs,
            epoch: self.opts.source_date_epoch,
            spool: &spool,
        })?;
        let _ = std::fs::remove_dir_all(&partial);
        tree.finalize_hardlinks().map_err(|e| SourceError {
            file: file.clone(),
            field: format!("{field}run"),
            message: format!("the step's diff: {e}"),
        })?;
        self.pack_and_record(&layer.name, &key, &tree)
    }

    fn pack_and_record(&mut self, name: &str, key: &str, tree: &crate::tarball::Tree) -> Result<(), BuildError> {
        let bar = self.opts.progress.bytes(tree.content_bytes(), name.to_string());
        let wopts = WriteOptions { source_date_epoch: self.opts.source_date_epoch };
        let blob = pack_tree(&self.cache, tree, self.opts.compression, self.opts.threads, &wopts, &mut |n| bar.inc(n))
            .map_err(|err| BuildError::Pack { layer: name.to_string(), err })?;
        bar.finish_and_clear();
        self.cache.record(key, &blob)?;
        self.push(name.to_string(), blob, false);
        Ok(())
    }

    /// A rootfs made from distro packages (see `distro`), keyed by the
    /// pinned package set: the lock beside the image, else a fresh resolution.
    fn packages_base(&mut self, spec: &crate::spec::PackagesBase, image: &Image) -> Result<usize, BuildError> {
        use crate::distro;
        let file = image.file.display().to_string();
        let derr = |err| BuildError::Distro { file: file.clone(), err: Box::new(err) };
        let lock = match &mut self.relock {
            Some(pins) => {
                let l = distro::resolve_now(spec, Some(spec.variant), &[], None, &self.cache, self.spool.path())
                    .map_err(derr)?;
                pins.base = Some(l.clone());
                l
            }
            None => distro::locked_or_resolved(spec, &image.file, &self.cache, self.spool.path()).map_err(derr)?.0,
        };
        let mut k = KeyHasher::new();
        k.field(&self.chain).field(distro::fingerprint(spec, &lock)).field(self.opts.compression.format_id());
        let key = k.finish();
        if self.reuse_cached(&key, "base") {
            return Ok(lock.packages.len());
        }
        let debs = distro::fetch_debs(spec, &lock, &self.cache).map_err(derr)?;
        let tree = distro::assemble(spec, &lock, &debs, self.spool.path()).map_err(derr)?;
        self.pack_and_record("base", &key, &tree)?;
        Ok(lock.packages.len())
    }

    /// A `packages` layer: what the layers below lack of the packages it
    /// names, over their dpkg database (see `distro::below`). Keyed like
    /// the base: parent chain + pinned package set.
    /// `pins_only` (`quarry lock`, last packages layer): stop once resolved.
    fn packages_layer(
        &mut self,
        image: &Image,
        layer: &Layer,
        spec: &spec::PackagesBase,
        pins_only: bool,
    ) -> Result<(), BuildError> {
        use crate::distro::{self, lock::LockFile};
        let derr = |err| BuildError::DistroLayer {
            file: layer.file.display().to_string(),
            layer: layer.name.clone(),
            err: Box::new(err),
        };
        let key_of = |chain: &str, lock: &distro::lock::Lock, format: &str| {
            let mut k = KeyHasher::new();
            k.field(chain).field("packages-layer-v1").field(&layer.name);
            k.field(distro::fingerprint(spec, lock)).field(format);
            k.finish()
        };
        let format = self.opts.compression.format_id();
        // With a lock, a warm rebuild needs nothing from the layers below:
        // the parent chain already stands for them.
        if self.relock.is_none() && !self.opts.no_cache {
            let path = distro::lock::lock_path(&image.file);
            let pinned = LockFile::read(&path).map_err(derr)?.and_then(|f| f.layer.get(&layer.name).cloned());
            if let Some(l) = pinned.filter(|l| l.check_matches(spec, None, &path, "").is_ok()) {
                let key = key_of(&self.chain, &l, &format);
                if let Some(blob) = self.cache.lookup(&key) {
                    self.chain = key;
                    self.push(layer.name.clone(), blob, true);
                    return Ok(());
                }
            }
        }
        let blobs: Vec<PathBuf> = self.layers.iter().map(|l| self.cache.blob_path(&l.digest)).collect();
        let below = distro::below::Below::read(&blobs, self.spool.path()).map_err(derr)?;
        let fresh = self.relock.is_some();
        let lock = distro::layer_pins(spec, &layer.name, &image.file, &below, fresh, &self.cache, self.spool.path())
            .map_err(derr)?;
        if let Some(pins) = &mut self.relock {
            pins.layer.insert(layer.name.clone(), lock.clone());
            if pins_only {
                return Ok(());
            }
        }
        let key = key_of(&self.chain, &lock, &format);
        if self.reuse_cached(&key, &layer.name) {
            return Ok(());
        }
        let debs = distro::fetch_debs(spec, &lock, &self.cache).map_err(derr)?;
        let tree = distro::assemble_layer(spec, &lock, &debs, below, self.spool.path()).map_err(derr)?;
        self.pack_and_record(&layer.name, &key, &tree)
    }

    /// The chain moves on to `key`; a layer the cache holds under it (and
    /// `--no-cache` not given) is taken as `name`, and true returned.
    fn reuse_cached(&mut self, key: &str, name: &str) -> bool {
        self.chain = key.to_string();
        if self.opts.no_cache {
            return false;
        }
        match self.cache.lookup(key) {
            Some(blob) => {
                self.push(name.to_string(), blob, true);
                true
            }
            None => false,
        }
    }

    fn push(&mut self, name: String, blob: LayerBlob, cached: bool) {
        let files_hashed = std::mem::take(&mut self.files_hashed);
        self.layers.push(BuiltLayer {
            name,
            digest: blob.digest,
            diff_id: blob.diff_id,
            size: blob.size,
            media_type: blob.media_type,
            cached,
            files_hashed,
        });
    }

    /// Reuse an OCI image's layers as they are, by digest.
    fn oci_base(&mut self, path: &Path, reference: Option<&str>, image: &Image) -> Result<OpenImage, BuildError> {
        let (os, arch, _) = image.platform();
        let base = layout::open_image(path, reference, Some((&os, &arch)))?;
        let diff_ids = base.config.rootfs().diff_ids().clone();
        let descs = base.manifest.layers().clone();
        if diff_ids.len() != descs.len() {
            return Err(BuildError::Base {
                path: path.display().to_string(),
                message: format!("manifest has {} layers but config lists {} diff_ids", descs.len(), diff_ids.len()),
            });
        }
        for (i, (d, diff_id)) in descs.iter().zip(diff_ids.iter()).enumerate() {
            let digest = d.digest().to_string();
            let cached = self.cache.has_blob(&digest, d.size());
            if !cached {
                self.import_blob(&base, d, path)?;
            }
            let blob =
                LayerBlob { digest, diff_id: diff_id.clone(), size: d.size(), media_type: d.media_type().to_string() };
            self.push(format!("base[{i}]"), blob, cached);
        }
        self.history = base.config.history().clone().unwrap_or_default();
        let mut k = KeyHasher::new();
        k.field(&self.chain).field("oci-base").field(&base.manifest_digest);
        self.chain = k.finish();
        Ok(base)
    }

    /// Pull a registry base by digest into the cache and reuse its layers
    /// as they are, like `oci_base`.
    fn registry_base(&mut self, reference: &str, image: &Image) -> Result<ImageConfiguration, BuildError> {
        use crate::registry::pull;
        let (os, arch, variant) = image.platform();
        let err = |err| BuildError::Registry { file: image.file.display().to_string(), err };
        let r = pull::base_reference(reference).map_err(err)?;
        let opts = pull::PullOptions { plain_http: pull::plain_http_default(&r), progress: self.opts.progress };
        let pulled = pull::pull_image(&r, (&os, &arch, variant.as_deref()), &self.cache, &opts).map_err(err)?;
        for (i, l) in pulled.layers.into_iter().enumerate() {
            self.push(format!("base[{i}]"), l.blob, l.cached);
        }
        self.history = pulled.config.history().clone().unwrap_or_default();
        let mut k = KeyHasher::new();
        k.field(&self.chain).field("oci-base").field(&pulled.manifest_digest);
        self.chain = k.finish();
        Ok(pulled.config)
    }

    /// Another definition as the base: its layers are built (or found in
    /// the cache) as for its own build, then reused as they are. Layer
    /// names say where they came from (`BASE/LAYER`).
    fn image_base(&mut self, base: &Image) -> Result<ImageConfiguration, BuildError> {
        let built = assemble(base, self.opts, &self.cache, None)?;
        for l in built.layers {
            self.layers.push(BuiltLayer { name: format!("{}/{}", base.name, l.name), ..l });
        }
        self.history = built.config.history().clone().unwrap_or_default();
        // The base's config (env, user, workdir) shapes the steps built on it.
        let config = serde_json::to_value(&built.config).map(|v| v.to_string()).unwrap_or_default();
        let mut k = KeyHasher::new();
        k.field(&self.chain).field("image-base").field(&built.chain).field(config);
        self.chain = k.finish();
        Ok(built.config)
    }

    /// Copy a base blob into the cache, verifying its digest on the way.
    fn import_blob(
        &self,
        base: &OpenImage,
        d: &ocidir::oci_spec::image::Descriptor,
        path: &Path,
    ) -> Result<(), BuildError> {
        let digest = d.digest().to_string();
        let base_err = |message: String| BuildError::Base { path: path.display().to_string(), message };
        if let Some(f) = base.source.blob_file(&digest) {
            // Hardlink when possible: same bytes, no copy (verified below).
            if std::fs::hard_link(&f, self.cache.blob_path(&digest)).is_ok() {
                let actual = crate::digest::sha256_file(&f).map_err(|e| base_err(e.to_string()))?;
                if format!("sha256:{actual}") != digest {
                    let _ = std::fs::remove_file(self.cache.blob_path(&digest));
                    return Err(base_err(format!("blob {digest} does not match its digest (actual sha256:{actual})")));
                }
                return Ok(());
            }
        }
        let mut r = base.source.blob_reader(d)?;
        let tmp = self.cache.temp_file()?;
        let mut w = crate::digest::HashingWriter::new(std::io::BufWriter::new(
            tmp.reopen().map_err(|e| base_err(e.to_string()))?,
        ));
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r.read(&mut buf).map_err(|e| base_err(format!("reading blob {digest}: {e}")))?;
            if n == 0 {
                break;
            }
            w.write_all(&buf[..n]).map_err(|e| base_err(e.to_string()))?;
        }
        let (mut f, hex, _) = w.finish();
        f.flush().map_err(|e| base_err(e.to_string()))?;
        if format!("sha256:{hex}") != digest {
            return Err(base_err(format!("blob {digest} does not match its digest (actual sha256:{hex})")));
        }
        self.cache.commit_blob(tmp, &hex)?;
        Ok(())
    }
}

/// Merge the base image's config with the definition's.
fn image_config(
    image: &Image,
    base: Option<&ImageConfiguration>,
    layers: &[BuiltLayer],
    history: Vec<History>,
    epoch: u64,
) -> ImageConfiguration {
    let (os, arch, variant) = image.platform();
    let base_cfg = base.and_then(|b| b.config().clone());
    let mut env: Vec<(String, String)> = base_cfg
        .as_ref()
        .and_then(|c| c.env().clone())
        .unwrap_or_default()
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    for (k, v) in &image.config.env {
        match env.iter_mut().find(|(ek, _)| ek == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    let mut labels: HashMap<String, String> = base_cfg.as_ref().and_then(|c| c.labels().clone()).unwrap_or_default();
    labels.extend(image.config.labels.clone());
    let c = &image.config;
    let pick = |ours: &Option<Vec<String>>, theirs: Option<Vec<String>>| ours.clone().or(theirs);
    let mut ports: Vec<String> = base_cfg.as_ref().and_then(|b| b.exposed_ports().clone()).unwrap_or_default();
    for p in &c.exposed_ports {
        let p = if p.contains('/') { p.clone() } else { format!("{p}/tcp") };
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    let mut volumes: Vec<String> = base_cfg.as_ref().and_then(|b| b.volumes().clone()).unwrap_or_default();
    for v in &c.volumes {
        if !volumes.contains(v) {
            volumes.push(v.clone());
        }
    }
    let mut cb = ConfigBuilder::default().env(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>());
    if let Some(e) = pick(&c.entrypoint, base_cfg.as_ref().and_then(|b| b.entrypoint().clone())) {
        cb = cb.entrypoint(e);
    }
    // A new entrypoint resets an inherited cmd, as in Dockerfiles.
    let inherited_cmd = if c.entrypoint.is_some() { None } else { base_cfg.as_ref().and_then(|b| b.cmd().clone()) };
    if let Some(cmd) = pick(&c.cmd, inherited_cmd) {
        cb = cb.cmd(cmd);
    }
    if let Some(w) = c.workdir.clone().or(base_cfg.as_ref().and_then(|b| b.working_dir().clone())) {
        cb = cb.working_dir(w);
    }
    if let Some(u) = c.user.clone().or(base_cfg.as_ref().and_then(|b| b.user().clone())) {
        cb = cb.user(u);
    }
    if !labels.is_empty() {
        cb = cb.labels(labels);
    }
    if !ports.is_empty() {
        cb = cb.exposed_ports(ports);
    }
    if !volumes.is_empty() {
        cb = cb.volumes(volumes);
    }
    if let Some(s) = c.stop_signal.clone().or(base_cfg.as_ref().and_then(|b| b.stop_signal().clone())) {
        cb = cb.stop_signal(s);
    }
    let rootfs = RootFsBuilder::default()
        .typ("layers")
        .diff_ids(layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>())
        .build()
        .expect("all fields set");
    let mut b = ImageConfigurationBuilder::default()
        .created(rfc3339(epoch))
        .architecture(arch.as_str())
        .os(os.as_str())
        .config(cb.build().expect("all fields optional"))
        .rootfs(rootfs)
        .history(history);
    if let Some(v) = variant {
        b = b.variant(v);
    }
    b.build().expect("all fields set")
}

/// The step that runs every maintainer script of a `packages` base or layer.
fn configure_step(name: &str, file: &Path) -> Layer {
    let mut env = BTreeMap::new();
    env.insert("DEBIAN_FRONTEND".to_string(), "noninteractive".to_string());
    Layer {
        name: name.into(),
        file: file.to_path_buf(),
        sources: vec![],
        remove: vec![],
        run: Some(spec::RunDef {
            script: "dpkg --configure -a".into(),
            network: false,
            env,
            user: Some("root".into()),
            workdir: Some("/".into()),
            shell: None,
        }),
        inputs: vec![],
    }
}

/// Build an image definition into an OCI layout.
pub fn build(image_file: &Path, opts: &BuildOptions) -> Result<BuildResult, BuildError> {
    let image = spec::load_image(image_file, &opts.sets)?;
    build_image(&image, opts)
}

pub fn build_image(image: &Image, opts: &BuildOptions) -> Result<BuildResult, BuildError> {
    let cache = Cache::open(&opts.cache_dir)?;
    let done = assemble(image, opts, &cache, None)?;
    let (os, arch, variant) = image.platform();
    let output = opts.output.clone().unwrap_or_else(|| PathBuf::from("out").join(&image.name));
    let blobs: Vec<LayerBlob> = done.layers.iter().map(BuiltLayer::blob).collect();
    let written = layout::write_image(
        &output,
        &cache.root().join("blobs/sha256"),
        &blobs,
        &done.config,
        &image.tag,
        layout::parse_platform(&os, &arch, variant.as_deref()),
    )?;
    Ok(BuildResult {
        name: image.name.clone(),
        tag: image.tag.clone(),
        output,
        manifest_digest: written.manifest_digest,
        config_digest: written.config_digest,
        layers: done.layers,
    })
}

/// `quarry lock`: resolve the image's `packages` base and layers afresh and
/// write `IMAGE.lock`. A packages layer is resolved over the layers below
/// it, so those are built (from the cache when they can be); an image whose
/// only packages are its base's builds nothing.
pub fn lock_image(image: &Image, opts: &BuildOptions) -> Result<(PathBuf, crate::distro::lock::LockFile), BuildError> {
    let file = image.file.display().to_string();
    let cache = Cache::open(&opts.cache_dir)?;
    let distro_err = |err| BuildError::Distro { file: file.clone(), err: Box::new(err) };
    let pypi = crate::pypi::lock_image(image, &cache).map_err(|err| BuildError::Pypi {
        file: file.clone(),
        field: "pypi".into(),
        err: Box::new(err),
    })?;
    let mut lock = if !crate::distro::packages_layers(image).is_empty() {
        assemble(image, opts, &cache, Some(&pypi))?.pins.expect("a lock run collects pins")
    } else if matches!(image.base, Base::Packages(_)) || pypi.is_empty() {
        // No packages at all and no PyPI file is the "nothing to pin" error.
        crate::distro::lock_base(image, &cache).map_err(distro_err)?
    } else {
        crate::distro::lock::LockFile { version: crate::distro::lock::LOCK_VERSION, ..Default::default() }
    };
    lock.pypi = pypi;
    let path = crate::distro::lock::lock_path(&image.file);
    lock.write(&path).map_err(distro_err)?;
    Ok((path, lock))
}

/// A definition's layers and config, before a layout is written.
struct Assembled {
    layers: Vec<BuiltLayer>,
    config: ImageConfiguration,
    /// The cache key chain after the last layer.
    chain: String,
    /// Fresh pins, when assembled to relock (only as far as the last
    /// packages layer).
    pins: Option<crate::distro::lock::LockFile>,
}

/// Build (or take from the cache) the base and every layer of `image`
/// (`relock`, with the PyPI pins just made: only as far as its last packages
/// layer, collecting fresh package pins).
fn assemble(
    image: &Image,
    opts: &BuildOptions,
    cache: &Cache,
    relock: Option<&[crate::lockfile::PypiPin]>,
) -> Result<Assembled, BuildError> {
    // Relocking resolves every package afresh; its PyPI files were just
    // fetched and pinned by the caller and are not fetched again.
    let fresh_pypi_pins = relock;
    let relock = relock.is_some();
    let cache = cache.clone();
    let spool = tempfile::Builder::new().prefix("spool-").tempdir_in(cache.tmp_dir()).map_err(|err| CacheError {
        dir: opts.cache_dir.display().to_string(),
        what: "cannot create a spool directory".into(),
        err,
    })?;
    let (os, arch, variant) = image.platform();
    let mut chain = KeyHasher::new();
    chain.field("quarry-chain-v1").field(format!("{os}/{arch}/{variant:?}")).field(opts.source_date_epoch.to_string());
    let hasher = ContentHasher::new(cache.clone(), opts.verify);
    let mut b = Builder {
        opts,
        cache,
        spool,
        hasher,
        files_hashed: 0,
        layers: Vec::new(),
        history: Vec::new(),
        chain: chain.finish(),
        engine: None,
        relock: relock.then(|| crate::distro::lock::LockFile {
            version: crate::distro::lock::LOCK_VERSION,
            ..Default::default()
        }),
        arch: arch.clone(),
        pypi_pins: Vec::new(),
    };
    if let Some(pins) = fresh_pypi_pins {
        b.pypi_pins = pins.to_vec();
    } else if !crate::pypi::image_requests(image).is_empty() {
        b.pypi_pins = crate::lockfile::read_pypi_pins(&crate::distro::lock::lock_path(&image.file))
            .map_err(|err| BuildError::Lock { file: image.file.display().to_string(), err: Box::new(err) })?;
    }
    let last_packages_layer = crate::distro::packages_layers(image).last().map(|(i, _, _)| *i);

    let mut base_config = None;
    match &image.base {
        Base::Scratch => {}
        Base::Rootfs { path, sha256, devices } => {
            let layer = Layer {
                name: "base".into(),
                file: image.file.clone(),
                sources: vec![Source {
                    sha256: sha256.clone(),
                    devices: *devices,
                    ..Source::new(SourceKind::Archive(path.clone()), "/")
                }],
                remove: vec![],
                run: None,
                inputs: vec![],
            };
            b.source_layer(&layer, "base")?;
            b.history(
                format!(
                    "quarry: base rootfs {}",
                    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
                ),
                None,
            );
        }
        Base::Oci { path, reference } => {
            let base = b.oci_base(path, reference.as_deref(), image)?;
            base_config = Some(base.config);
        }
        Base::Packages(p) => {
            let n = b.packages_base(p, image)?;
            b.history(format!("quarry: packages {} {} ({n} packages)", p.suite, p.architecture), None);
            if p.configure {
                // The packages were left "unpacked": their maintainer scripts
                // run now, as root with no network, as a step layer.
                let configure = configure_step("configure", &image.file);
                b.step_layer(image, &configure, None, "base.packages.configure.")?;
                b.history("quarry: dpkg --configure -a".into(), None);
            }
        }
        Base::Registry { reference } => {
            base_config = Some(b.registry_base(reference, image)?);
        }
        Base::Image(base) => {
            base_config = Some(b.image_base(base)?);
        }
    }
    for (i, layer) in image.layers.iter().enumerate() {
        if relock && last_packages_layer.is_none_or(|last| i > last) {
            break;
        }
        let packages = layer.sources.iter().find_map(|s| match &s.kind {
            SourceKind::Packages(p) => Some(p),
            _ => None,
        });
        if let Some(p) = packages {
            b.packages_layer(image, layer, p, relock && last_packages_layer == Some(i))?;
            if relock && last_packages_layer == Some(i) {
                break;
            }
            b.history(format!("quarry: layer {} (packages {} {})", layer.name, p.suite, p.include.join(" ")), None);
            if p.configure {
                let configure = configure_step(&format!("{}-configure", layer.name), &layer.file);
                let field = if layer.file == image.file { format!("layer[{i}].") } else { String::new() };
                b.step_layer(image, &configure, base_config.as_ref(), &format!("{field}source.packages.configure."))?;
                b.history("quarry: dpkg --configure -a".into(), None);
            }
            continue;
        }
        if layer.run.is_some() {
            let field = if layer.file == image.file { format!("layer[{i}].") } else { String::new() };
            b.step_layer(image, layer, base_config.as_ref(), &field)?;
            b.history(format!("quarry: step {}", layer.name), None);
            continue;
        }
        let prefix = if layer.file == image.file { format!("layer[{}].source", i) } else { "source".to_string() };
        b.source_layer(layer, &prefix)?;
        b.history(format!("quarry: layer {}", layer.name), None);
    }

    let config = image_config(image, base_config.as_ref(), &b.layers, b.history.clone(), opts.source_date_epoch);
    let pins = if relock { b.relock.take() } else { None };
    Ok(Assembled { layers: b.layers, config, chain: b.chain, pins })
}
