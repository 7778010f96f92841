//! The registry tier: cache entries kept in an OCI registry that many
//! machines share (`--cache-registry HOST[:PORT]/REPO`).
//!
//! An entry is a small OCI artifact tagged by its bucket and key
//! (`layer-<key hex>`, `kernel-<key hex>`...): its config names the bucket
//! and key (and, for a layer, its record), its layers are the content
//! blobs (`entry`). The tag is pushed last, so a killed push leaves no
//! entry; a lookup pulls and verifies every blob (digest and size, and a
//! layer's uncompressed digest) into the local tier before anything is
//! used. Nothing a machine did not verify is trusted, except what no
//! machine can check: that a key's content is what building it gives,
//! which is why pull-request jobs get `--cache-registry-mode ro`.
//!
//! Failures never lose a build: an unreachable registry is reported once
//! and the build goes on locally (`--cache-registry-required` makes it an
//! error); a blob whose bytes do not match is refused, counted, reported,
//! and the entry built here instead. Refused logins are errors: they need
//! the user to act.

mod entry;

use super::tier::SharedTier;
use super::{Bucket, Cache, CacheError, Entry, Key, Sharing, Staged};
use crate::oci::LayerBlob;
use crate::registry::{Client, Reference, ReferenceError, RegistryError};
use std::sync::Mutex;

/// Whether this machine may write to the registry tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Read and write (trusted builders).
    Rw,
    /// Read only: never writes (pull-request jobs).
    Ro,
}

/// What `--cache-registry`, `--cache-registry-mode` and
/// `--cache-registry-required` ask for.
#[derive(Debug, Clone)]
pub struct RegistryTierConfig {
    /// `HOST[:PORT]/REPO`.
    pub reference: String,
    pub mode: Mode,
    /// An unreachable registry is an error instead of a warning.
    pub required: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("--cache-registry `{reference}`: {source}")]
    Reference { reference: String, source: BadRepository },
    #[error("cache registry {reference}: {err} (--cache-registry-required)")]
    Required { reference: String, err: RegistryError },
    #[error("cache registry {reference}: {err}")]
    Registry { reference: String, err: RegistryError },
}

/// Why `--cache-registry` names no repository entries can go to.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BadRepository {
    #[error(transparent)]
    Parse(#[from] ReferenceError),
    #[error("name a repository (HOST[:PORT]/REPO), not a tag or digest: quarry tags entries itself")]
    Tagged,
}

/// What the registry tier did, for reports (`--json`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RemoteReport {
    pub registry: String,
    pub mode: String,
    /// False once the registry could not be reached (the build went on locally).
    pub reachable: bool,
    /// Entries pulled from the registry and verified.
    pub hits: u64,
    /// Lookups the registry had no entry for.
    pub misses: u64,
    /// Entries pushed.
    pub pushed: u64,
    pub bytes_pulled: u64,
    pub bytes_pushed: u64,
    /// Entries refused because a blob did not match its digest (each then built here).
    pub refused: Vec<String>,
    /// Entries kept on this machine only, and why.
    pub not_shared: Vec<String>,
}

pub(crate) struct RegistryTier {
    cfg: RegistryTierConfig,
    parsed: Result<Reference, BadRepository>,
    client: Mutex<Option<Client>>,
    report: Mutex<RemoteReport>,
}

/// How a failed registry call ends.
enum Outcome<T> {
    Done(T),
    /// The entry cannot come from (or go to) the registry now; go on locally.
    Skip,
}

impl RegistryTier {
    pub fn new(cfg: &RegistryTierConfig) -> RegistryTier {
        let parsed = Reference::parse(&cfg.reference).map_err(BadRepository::from).and_then(|r| {
            if r.tag.is_some() || r.digest.is_some() {
                Err(BadRepository::Tagged)
            } else {
                Ok(r)
            }
        });
        let report = RemoteReport {
            registry: cfg.reference.clone(),
            mode: match cfg.mode {
                Mode::Rw => "rw".into(),
                Mode::Ro => "ro".into(),
            },
            reachable: true,
            ..Default::default()
        };
        RegistryTier { cfg: cfg.clone(), parsed, client: Mutex::new(None), report: Mutex::new(report) }
    }

    pub fn report(&self) -> RemoteReport {
        self.report.lock().expect("not poisoned").clone()
    }

    fn reference(&self) -> Result<&Reference, RemoteError> {
        self.parsed
            .as_ref()
            .map_err(|source| RemoteError::Reference { reference: self.cfg.reference.clone(), source: source.clone() })
    }

    fn reachable(&self) -> bool {
        self.report.lock().expect("not poisoned").reachable
    }

    /// Run `f` with the session (made on first use), and sort its failure.
    fn call<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Client, &str) -> Result<T, RegistryError>,
    ) -> Result<Outcome<T>, RemoteError> {
        let r = self.reference()?.clone();
        if !self.reachable() {
            return Ok(Outcome::Skip);
        }
        let mut guard = self.client.lock().expect("not poisoned");
        if guard.is_none() {
            let plain = crate::registry::pull::plain_http_default(&r);
            let mut c = Client::new(&r.registry, plain).map_err(|err| self.registry_error(err))?;
            let actions = if self.cfg.mode == Mode::Rw { "pull,push" } else { "pull" };
            c.add_scope(&r.repository, actions);
            *guard = Some(c);
        }
        let client = guard.as_mut().expect("made above");
        match f(client, &r.repository) {
            Ok(v) => Ok(Outcome::Done(v)),
            Err(err) => self.failed(what, err),
        }
    }

    fn registry_error(&self, err: RegistryError) -> RemoteError {
        RemoteError::Registry { reference: self.cfg.reference.clone(), err }
    }

    fn failed<T>(&self, what: &str, err: RegistryError) -> Result<Outcome<T>, RemoteError> {
        match err {
            RegistryError::Connect { .. } => {
                if self.cfg.required {
                    return Err(RemoteError::Required { reference: self.cfg.reference.clone(), err });
                }
                let mut rep = self.report.lock().expect("not poisoned");
                if rep.reachable {
                    rep.reachable = false;
                    log::warn!(
                        "cache registry {} cannot be reached ({err}); building with the local cache only (--cache-registry-required makes this an error)",
                        self.cfg.reference
                    );
                }
                Ok(Outcome::Skip)
            }
            RegistryError::DigestMismatch { .. } | RegistryError::SizeMismatch { .. } => {
                log::warn!("cache registry {}: refused {what}: {err}; it is built here instead", self.cfg.reference);
                self.report.lock().expect("not poisoned").refused.push(what.to_string());
                Ok(Outcome::Skip)
            }
            RegistryError::Unauthorized { .. } | RegistryError::Denied { .. } | RegistryError::Config { .. } => {
                Err(self.registry_error(err))
            }
            other => {
                if self.cfg.required {
                    return Err(RemoteError::Required { reference: self.cfg.reference.clone(), err: other });
                }
                log::warn!("cache registry {}: {what}: {other}; going on without it", self.cfg.reference);
                Ok(Outcome::Skip)
            }
        }
    }

    fn tag(bucket: Bucket, name: &str) -> String {
        format!("{}-{name}", bucket.tag_prefix().expect("a shared bucket"))
    }

    fn count(&self, hit: bool, bytes: u64) {
        let mut rep = self.report.lock().expect("not poisoned");
        if hit {
            rep.hits += 1;
            rep.bytes_pulled += bytes;
        } else {
            rep.misses += 1;
        }
    }

    /// Whether a push may happen; notes why not.
    fn may_push(&self, what: &str, sharing: &Sharing) -> bool {
        if self.cfg.mode == Mode::Ro {
            return false;
        }
        if let Sharing::Local { why } = sharing {
            let mut rep = self.report.lock().expect("not poisoned");
            rep.not_shared.push(format!("{what}: {why}"));
            log::warn!("{what} is not shared through the cache registry: {why}");
            return false;
        }
        true
    }

    fn pushed(&self, bytes: u64) {
        let mut rep = self.report.lock().expect("not poisoned");
        rep.pushed += 1;
        rep.bytes_pushed += bytes;
    }
}

/// The registry tier as the cache sees every shared tier.
impl SharedTier for RegistryTier {
    /// Whether the registry has the entry (fetching nothing).
    fn has(&self, bucket: Bucket, name: &str) -> Result<bool, CacheError> {
        let tag = Self::tag(bucket, name);
        let what = format!("{bucket} entry {tag}");
        Ok(matches!(
            self.call(&what, |c, repo| crate::registry::artifact::has_manifest(c, repo, &tag))?,
            Outcome::Done(true)
        ))
    }

    /// A layer's record, its blob pulled into the cache's blob directory and verified.
    fn fetch_layer(&self, key: &Key, cache: &Cache) -> Result<Option<LayerBlob>, CacheError> {
        let tag = Self::tag(Bucket::Layers, &key.hex());
        let what = format!("layer entry {tag}");
        let got = self.call(&what, |c, repo| entry::fetch_layer(c, repo, &tag, key, cache))?;
        let found = match got {
            Outcome::Done(found) => found,
            Outcome::Skip => return Ok(None),
        };
        self.count(found.is_some(), found.as_ref().map_or(0, |b| b.size));
        Ok(found)
    }

    /// A directory entry, pulled, verified and unpacked into a staging directory.
    fn fetch_entry(&self, bucket: Bucket, name: &str, cache: &Cache) -> Result<Option<Staged>, CacheError> {
        let tag = Self::tag(bucket, name);
        let what = format!("{bucket} entry {tag}");
        let got = self.call(&what, |c, repo| entry::fetch_dir(c, repo, &tag, bucket, name, cache))?;
        let found = match got {
            Outcome::Done(found) => found,
            Outcome::Skip => return Ok(None),
        };
        self.count(found.is_some(), found.as_ref().map_or(0, |(_, n)| *n));
        Ok(found.map(|(s, _)| s))
    }

    fn push_layer(&self, key: &Key, blob: &LayerBlob, cache: &Cache, sharing: &Sharing) -> Result<(), CacheError> {
        let tag = Self::tag(Bucket::Layers, &key.hex());
        let what = format!("layer entry {tag}");
        if !self.may_push(&what, sharing) {
            return Ok(());
        }
        if let Outcome::Done(bytes) = self.call(&what, |c, repo| entry::push_layer(c, repo, &tag, key, blob, cache))? {
            self.pushed(bytes);
        }
        Ok(())
    }

    fn push_entry(
        &self,
        bucket: Bucket,
        name: &str,
        e: &Entry,
        cache: &Cache,
        sharing: &Sharing,
    ) -> Result<(), CacheError> {
        let tag = Self::tag(bucket, name);
        let what = format!("{bucket} entry {tag}");
        if !self.may_push(&what, sharing) {
            return Ok(());
        }
        if let Outcome::Done(bytes) =
            self.call(&what, |c, repo| entry::push_dir(c, repo, &tag, bucket, name, e, cache))?
        {
            self.pushed(bytes);
        }
        Ok(())
    }

    fn writable(&self) -> bool {
        self.cfg.mode == Mode::Rw
    }

    fn report(&self) -> RemoteReport {
        RegistryTier::report(self)
    }
}
