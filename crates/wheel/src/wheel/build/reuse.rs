//! A wheel build from the cache when it can be: the build's key (see
//! [`super::key`]) looked up in the cache's tiers; on a hit the wheels are
//! copied into the output directory and nothing is built (no engine is
//! needed unless `--test` asks); on a miss the image is loaded, the builds
//! run (with the project's compiler cache when the image has ccache), and
//! the wheels are committed under the key. A build in an isolated
//! environment without a lock resolves its requirements, so it cannot be
//! looked up first: it is committed under the key of the lock it wrote.

use super::{key, lock, run_builds, test, BuildOptions, Built, WheelBuildError};
use crate::cache::{Bucket, Cache, Entry, Sharing, Tier};
use crate::engine::build_image::connect;
use crate::engine::compiler_cache::Mode;
use crate::tools::patchelf::ContainerPatchelf;
use std::path::{Path, PathBuf};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WheelBuildError + '_ {
    move |err| WheelBuildError::Io { path: path.to_path_buf(), err }
}

/// Which patchelf repairs, for the key.
fn patchelf_identity(p: &ContainerPatchelf) -> Result<String, WheelBuildError> {
    Ok(match p {
        ContainerPatchelf::Pinned { .. } => format!("pinned {}", crate::tools::patchelf::pinned::VERSION),
        ContainerPatchelf::Host(p) => {
            let sha = crate::oci::digest::sha256_file(p.path()).map_err(io(p.path()))?;
            format!("program {sha}")
        }
    })
}

/// What a build's key is made of, except the lock (read before and after).
struct KeyParts {
    image: crate::oci::Digest,
    source: crate::cache::Key,
    find_links: Option<crate::cache::Key>,
    /// The ROCm packages' content and how they are pinned.
    rocm: Option<crate::cache::Key>,
    patchelf: String,
    epoch: u64,
    lock_path: PathBuf,
}

impl KeyParts {
    fn read(o: &BuildOptions, engine: &mut Option<crate::engine::Engine>) -> Result<KeyParts, WheelBuildError> {
        let image = o.image.digest(engine)?;
        let epoch = o.epoch;
        // An output directory inside a project directory is not part of it.
        let skip: Vec<String> = output_inside(&o.source, &o.output).into_iter().collect();
        let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
        let source = key::source_key(&o.source, &skip).map_err(io(&o.source))?;
        let find_links = match &o.find_links {
            Some(f) => Some(crate::cache::key::tree_key("wheel-find-links", f, &[]).map_err(io(f))?),
            None => None,
        };
        let rocm = match &o.rocm {
            Some(r) => {
                let dir = crate::cache::key::tree_key("wheel-rocm-packages", &r.packages.dir, &[])
                    .map_err(io(&r.packages.dir))?;
                let mut k = crate::cache::key::KeyEncoder::new("wheel-rocm", 1);
                k.key("packages", &dir).list("pin", r.key_fields());
                Some(k.finish())
            }
            None => None,
        };
        let patchelf = patchelf_identity(&o.patchelf)?;
        let lock_path = o.lock.clone().unwrap_or_else(|| o.output.join(lock::DEFAULT_NAME));
        Ok(KeyParts { image, source, find_links, rocm, patchelf, epoch, lock_path })
    }

    fn key(&self, o: &BuildOptions, lock: Option<&[u8]>) -> crate::cache::Key {
        key::key(&key::KeyInputs {
            image: &self.image,
            source: &self.source,
            pythons: o.pythons.as_deref(),
            axes: &o.axes,
            local_version: o.local_version.as_deref(),
            repair: o.repair,
            exclude: &o.exclude,
            patchelf: &self.patchelf,
            isolation: o.isolation,
            lock,
            find_links: self.find_links.as_ref(),
            rocm: self.rocm.as_ref(),
            network: o.network,
            epoch: self.epoch,
            targets: &o.targets.targets,
            split: o.split,
            split_link: o.split_link,
        })
    }

    /// The lock's build pins now (None without isolation, which has no
    /// lock; or when the lock is missing, unreadable or pins nothing).
    fn lock(&self, o: &BuildOptions) -> Option<Vec<u8>> {
        if !o.isolation {
            return None;
        }
        lock::BuildLock::read(&self.lock_path).ok()?.build_pins()
    }

    /// The key a lookup uses, when one can be made before building: an
    /// isolated build without a lock resolves its requirements first.
    fn lookup_key(&self, o: &BuildOptions) -> Option<crate::cache::Key> {
        let lock = self.lock(o);
        (!o.isolation || lock.is_some()).then(|| self.key(o, lock.as_deref()))
    }
}

/// The key of `o`'s wheels as the cache knows them, when it can be known
/// before building (see [`build`]).
pub fn cache_key(
    o: &BuildOptions,
    engine: &mut Option<crate::engine::Engine>,
) -> Result<Option<crate::cache::Key>, WheelBuildError> {
    Ok(KeyParts::read(o, engine)?.lookup_key(o))
}

/// Build the wheels (or take them from the cache), then test them when asked.
pub fn build(o: &BuildOptions) -> Result<Vec<Built>, WheelBuildError> {
    let cache = &o.cache;
    let mut engine = None;
    let parts = crate::trace::time("wheel: key parts", || KeyParts::read(o, &mut engine))?;
    let image = parts.image;
    let lookup = if o.no_cache { None } else { parts.lookup_key(o) };
    let sharing = Sharing::unless_networked(o.network);
    let hit = crate::trace::time("wheel: cache lookup", || {
        lookup.map(|k| cache.entry(Bucket::Wheels, &k.hex(), &sharing)).transpose()
    })?;
    let mut built = match hit.flatten() {
        Some(hit) => from_entry(&hit.value, &o.output, hit.tier)?,
        None => {
            let engine = crate::trace::time("wheel: engine", || connect(&mut engine))?;
            let reference = o.image.in_engine(engine, &image, &o.cache.tmp_dir())?;
            let project = key::project_key(&image, &o.targets.targets, &key::project_name(&o.source)).hex();
            let restored = if o.compiler_cache == Mode::Off || o.no_cache {
                None
            } else {
                crate::trace::time("wheel: compiler cache lookup", || {
                    cache.entry(Bucket::CompilerObjects, &project, &sharing)
                })?
            };
            let staged_cc = cache.stage()?;
            let session = crate::trace::span("wheel: container session");
            crate::progress::announce(format!("building wheels in a container of {reference}"));
            let ran = run_builds(
                engine,
                &reference,
                o,
                cache,
                (restored.as_ref().map(|h| h.value.files()), &staged_cc.files()),
            )?;
            drop(session);
            if let Some(stats) = ran.compiler_cache {
                log::info!("compiler cache: {} hit(s), {} compiled", stats.hits, stats.misses);
                if stats.misses > 0 || restored.is_none() {
                    crate::trace::time("wheel: compiler cache commit", || {
                        cache.commit(Bucket::CompilerObjects, &project, staged_cc, &sharing)
                    })?;
                }
            }
            let lock_after = parts.lock(o);
            crate::trace::time("wheel: commit", || {
                commit(cache, &parts.key(o, lock_after.as_deref()).hex(), &ran.built, &sharing)
            })?;
            ran.built
        }
    };
    if let Some(cmd) = &o.test {
        let engine = connect(&mut engine)?;
        let scratch = o.cache.tmp_dir();
        let reference = match &o.test_image {
            Some(t) => t.loaded(engine, &scratch)?,
            None => o.image.in_engine(engine, &image, &scratch)?,
        };
        crate::progress::announce(format!("testing the wheels in a container of {reference}"));
        // The tests pin what they install in the lock (`[[test]]`).
        let mut lock = lock::BuildLock::read(&parts.lock_path).map_err(WheelBuildError::Lock)?;
        let mut cx = test::TestContext { cache, lock: &mut lock, lock_path: &parts.lock_path };
        test::test_all(engine, o, &reference, cmd, &mut built, &mut cx)?;
    }
    Ok(built)
}

/// The top-level name of `output` when it sits directly in the project directory `source`.
pub fn output_inside(source: &Path, output: &Path) -> Option<String> {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (src, out) = (abs(source), abs(output));
    out.parent().filter(|p| *p == src).and(out.file_name()).map(|n| n.to_string_lossy().into_owned())
}

/// Keep the build's wheels (and what was said of each) as the entry `name`.
fn commit(cache: &Cache, name: &str, built: &[Built], sharing: &Sharing) -> Result<(), WheelBuildError> {
    let staged = cache.stage()?;
    let mut meta = Vec::new();
    for b in built {
        let file = b.wheel.file_name().unwrap_or_default();
        let dest = staged.files().join(file);
        std::fs::copy(&b.wheel, &dest).map_err(io(&dest))?;
        let mut m = b.clone();
        m.wheel = PathBuf::from(file);
        m.device_wheels.clear();
        for d in &b.device_wheels {
            let file = d.file_name().unwrap_or_default();
            let dest = staged.files().join(file);
            std::fs::copy(d, &dest).map_err(io(&dest))?;
            m.device_wheels.push(PathBuf::from(file));
        }
        meta.push(m);
    }
    let text = serde_json::to_vec(&meta).map_err(|e| WheelBuildError::Input(e.to_string()))?;
    staged.set_meta(&text).map_err(io(&staged.files()))?;
    cache.commit(Bucket::Wheels, name, staged, sharing)?;
    Ok(())
}

/// The entry's wheels, copied into `output` and checked against what was recorded.
fn from_entry(entry: &Entry, output: &Path, tier: Tier) -> Result<Vec<Built>, WheelBuildError> {
    let bad = |why: String| {
        WheelBuildError::Input(format!(
            "a cached wheel build is damaged ({why}); remove it with `quarry cache prune` and build again"
        ))
    };
    let meta: Vec<Built> = serde_json::from_slice(&entry.meta().ok_or_else(|| bad("no meta.json".into()))?)
        .map_err(|e| bad(e.to_string()))?;
    std::fs::create_dir_all(output).map_err(io(output))?;
    let mut out = Vec::new();
    for mut b in meta {
        let name = b.wheel.file_name().ok_or_else(|| bad("a nameless wheel".into()))?.to_owned();
        let dest = output.join(&name);
        std::fs::copy(entry.files().join(&name), &dest).map_err(io(&dest))?;
        let sha = crate::oci::digest::sha256_file(&dest).map_err(io(&dest))?;
        if sha != b.sha256 {
            return Err(bad(format!("{} has sha256 {sha}, recorded {}", name.to_string_lossy(), b.sha256)));
        }
        b.wheel = dest;
        for d in &mut b.device_wheels {
            let name = d.file_name().ok_or_else(|| bad("a nameless device wheel".into()))?.to_owned();
            let dest = output.join(&name);
            std::fs::copy(entry.files().join(&name), &dest).map_err(io(&dest))?;
            *d = dest;
        }
        b.cached = true;
        b.tier = Some(tier);
        b.seconds = 0.0;
        b.session_seconds = 0.0;
        b.tested = false;
        out.push(b);
    }
    Ok(out)
}

/// The key of the build in the local cache at `cache_root` that made the
/// wheel whose sha256 is `sha256` (a host or device wheel), when one did:
/// how `wheel merge` names the build of a shard given as a file.
pub fn built_by(cache_root: &Path, sha256: &str) -> Option<String> {
    crate::cache::peek_entry_metas(cache_root, Bucket::Wheels).into_iter().find_map(|(name, meta)| {
        let built: Vec<Built> = serde_json::from_slice(&meta).ok()?;
        built.iter().any(|b| b.sha256 == sha256).then_some(name)
    })
}
