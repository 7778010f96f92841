//! The suites of a package set, the release and its pockets: where each
//! one's Release and indexes are (`sources`, for plans, without network),
//! and all of them fetched, each InRelease checked with the keyring, into
//! one list of packages for the resolver.

use super::fetch::Fetcher;
use super::{archive, keyring, mirror_for, DistroError};
use crate::cache::Cache;
use crate::definition::PackageSet;
use std::path::{Path, PathBuf};

/// What resolving a package set reads, without network access: each
/// suite's Release, and its indexes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sources {
    /// The release's InRelease (the first suite).
    pub release: String,
    pub indexes: Vec<String>,
    /// Every suite's InRelease, in the order of `suites`.
    pub releases: Vec<String>,
    pub keyring: String,
}

pub fn sources(spec: &PackageSet) -> Result<Sources, DistroError> {
    let mut releases = Vec::new();
    let mut indexes = Vec::new();
    for suite in &spec.suites {
        let repo = repo(spec, suite, PathBuf::new())?;
        releases.push(repo.release_url());
        indexes.extend(
            spec.components
                .iter()
                .map(|c| repo.url(&format!("dists/{suite}/{c}/binary-{}/Packages.xz", spec.architecture))),
        );
    }
    Ok(Sources { release: releases[0].clone(), indexes, releases, keyring: spec.keyring.describe() })
}

fn repo(spec: &PackageSet, suite: &str, keyring: PathBuf) -> Result<archive::Repo, DistroError> {
    Ok(archive::Repo {
        mirror: mirror_for(spec, suite)?,
        suite: suite.to_string(),
        components: spec.components.clone(),
        architecture: spec.architecture.clone(),
        keyring,
    })
}

/// Every package of every suite's indexes, each suite's InRelease checked
/// with the keyring: suite -> InRelease digest, and the packages. A version
/// that several pockets list (Ubuntu copies security fixes into -updates)
/// is taken once, from the last of them in `suites` (the most specific
/// pocket, by the convention release, -updates, -security).
pub(super) fn fetch_indexes(
    spec: &PackageSet,
    cache: &Cache,
    spool: &Path,
) -> Result<(std::collections::BTreeMap<String, String>, Vec<archive::Package>), DistroError> {
    let fetcher = Fetcher::new();
    let keyring = keyring::materialize(spec, &fetcher, cache, spool)?;
    let mut releases = std::collections::BTreeMap::new();
    let mut all: Vec<archive::Package> = Vec::new();
    for suite in &spec.suites {
        let repo = repo(spec, suite, keyring.path.clone())?;
        let _phase =
            crate::progress::phase(format!("reading `{suite}` ({} {})", repo.mirror, spec.components.join(" ")));
        let release = repo.fetch_release(&fetcher, spool)?;
        let pkgs = repo.fetch_packages(&fetcher, cache, &release)?;
        releases.insert(suite.clone(), release.digest.to_string());
        let seen: std::collections::HashSet<(String, String, String)> =
            pkgs.iter().map(|p| (p.name.clone(), p.version.clone(), p.architecture.clone())).collect();
        all.retain(|p| !seen.contains(&(p.name.clone(), p.version.clone(), p.architecture.clone())));
        all.extend(pkgs);
    }
    Ok((releases, all))
}
