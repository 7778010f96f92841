//! The keyring that checks an archive's `InRelease`, as a file `gpgv` can
//! read: a host file as it is, or a file taken out of a package pinned by
//! its sha256 (Debian's `ubuntu-keyring` for Ubuntu's archive), which is
//! fetched into the cache's `debs` bucket like any pinned package and
//! checked on every use. The pin is the trust: a keyring package fetched
//! from the archive it will check could not be checked by that archive.

use super::fetch::{cached_or_fetch, Fetcher};
use super::DistroError;
use crate::cache::{Bucket, Cache};
use crate::definition::{Keyring, PackageSet};
use std::path::{Path, PathBuf};

/// A keyring ready for `gpgv`; a file taken out of a package lives as long as this.
pub struct KeyringFile {
    pub path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

/// The keyring of `set` as a file (fetching its package when it is one).
pub fn materialize(
    set: &PackageSet,
    fetcher: &Fetcher,
    cache: &Cache,
    spool: &Path,
) -> Result<KeyringFile, DistroError> {
    let d = match &set.keyring {
        Keyring::File(p) => return Ok(KeyringFile { path: p.clone(), _dir: None }),
        Keyring::Deb(d) => d,
    };
    let url = || Ok(format!("{}/{}", super::mirrors::keyring_mirror(d, &set.architecture)?, d.deb));
    let deb = cached_or_fetch(fetcher, cache, Bucket::Debs, &url, &d.sha256, None)?;
    let dir = tempfile::Builder::new().prefix("keyring-").tempdir_in(spool).map_err(|e| DistroError::io(spool, e))?;
    let opened = super::deb::read_deb(&deb, dir.path())?;
    let member = d.path.trim_start_matches('/');
    let bytes =
        opened.data.get(member.as_bytes()).and_then(|n| n.read_content().ok()).ok_or_else(|| DistroError::Keyring {
            keyring: set.keyring.describe(),
            message: format!(
                "the package holds no file `{}`; check `keyring.path` (`dpkg-deb -c` lists what it holds)",
                d.path
            ),
        })?;
    let path = dir.path().join("keyring.gpg");
    std::fs::write(&path, bytes).map_err(|e| DistroError::io(&path, e))?;
    Ok(KeyringFile { path, _dir: Some(dir) })
}
