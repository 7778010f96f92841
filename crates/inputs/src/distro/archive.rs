//! A Debian/Ubuntu archive: its signed `InRelease` (verified with `gpgv`
//! against the definition's keyring; only the signed text is parsed), and
//! the `Packages` indexes it lists, checked against the Release hashes.

use super::control::{for_each_paragraph, parse_depends, parse_paragraphs, Depends, DependsError};
use super::fetch::{cached_or_fetch, Fetcher};
use super::DistroError;
use crate::cache::Cache;
use crate::layer::stream::{decoder, Checks, Format};
use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where and what to read.
#[derive(Debug, Clone)]
pub struct Repo {
    /// Base URL, without a trailing `/`.
    pub mirror: String,
    pub suite: String,
    pub components: Vec<String>,
    pub architecture: String,
    pub keyring: PathBuf,
}

/// The verified Release data.
#[derive(Debug, Clone)]
pub struct Release {
    /// The InRelease file as served.
    pub digest: crate::oci::Digest,
    pub by_hash: bool,
    /// Index path -> (sha256, size).
    pub sha256: BTreeMap<String, (String, u64)>,
    pub codename: Option<String>,
    /// apt's default pin priority for the suite's packages: 500, or 1 for
    /// a `NotAutomatic: yes` suite (100 with `ButAutomaticUpgrades: yes`),
    /// which apt takes only when nothing else offers the package.
    pub pin: u16,
}

impl Repo {
    pub fn url(&self, rel: &str) -> String {
        format!("{}/{}", self.mirror, rel.trim_start_matches('/'))
    }

    pub fn release_url(&self) -> String {
        self.url(&format!("dists/{}/InRelease", self.suite))
    }

    /// Fetch InRelease and verify its signature.
    pub fn fetch_release(&self, fetcher: &Fetcher, spool: &Path) -> Result<Release, DistroError> {
        let url = self.release_url();
        let bytes = fetcher.get_bytes(&url).map_err(|e| match e {
            DistroError::NotServed { url, status } => DistroError::NoSuite { suite: self.suite.clone(), url, status },
            e => e,
        })?;
        let signed = verify_signed(&bytes, &self.keyring, &url, spool).map_err(|e| match e {
            DistroError::BadSignature { url, keyring, message, .. } => {
                DistroError::BadSignature { suite: self.suite.clone(), url, keyring, message }
            }
            e => e,
        })?;
        parse_release(&signed, crate::oci::Digest::of_bytes(&bytes), &url)
    }

    /// Every package of every component's index for the architecture.
    pub fn fetch_packages(
        &self,
        fetcher: &Fetcher,
        cache: &Cache,
        release: &Release,
    ) -> Result<Vec<Package>, DistroError> {
        let mut all = Vec::new();
        for comp in &self.components {
            let base = format!("{comp}/binary-{}/Packages", self.architecture);
            let (rel, (sha, size)) = ["xz", "gz", ""]
                .iter()
                .map(|ext| if ext.is_empty() { base.clone() } else { format!("{base}.{ext}") })
                .find_map(|p| release.sha256.get(&p).map(|h| (p.clone(), h.clone())))
                .ok_or_else(|| DistroError::Index {
                    url: self.release_url(),
                    message: format!(
                        "lists no `{base}` index: check `components` and `architecture` (the Release file names what the suite has)"
                    ),
                })?;
            let dir = rel.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
            let url = if release.by_hash {
                self.url(&format!("dists/{}/{dir}/by-hash/SHA256/{sha}", self.suite))
            } else {
                self.url(&format!("dists/{}/{rel}", self.suite))
            };
            let path =
                cached_or_fetch(fetcher, cache, crate::cache::Bucket::Indexes, &|| Ok(url.clone()), &sha, Some(size))?;
            let file = std::fs::File::open(&path).map_err(|e| DistroError::io(&path, e))?;
            // An index is named for its compression (`Packages.xz`), or is plain text.
            let format = Format::of_name(&rel).unwrap_or(Format::Tar);
            let reader =
                decoder(format, BufReader::new(file), Checks::Verify).map_err(|e| DistroError::io(&path, e))?;
            let mut bad = None;
            for_each_paragraph(BufReader::with_capacity(1 << 20, reader), |p| match Package::from_paragraph(&p) {
                Ok(mut pkg) => {
                    pkg.suite = self.suite.clone();
                    pkg.pin = release.pin;
                    all.push(pkg)
                }
                Err(e) => {
                    bad.get_or_insert(e);
                }
            })
            .map_err(|e| DistroError::Index { url: url.clone(), message: format!("cannot read: {e}") })?;
            if let Some(source) = bad {
                return Err(DistroError::Paragraph { url, source });
            }
        }
        Ok(all)
    }
}

/// Run `gpgv` on a clearsigned document; return the signed text only.
pub fn verify_signed(doc: &[u8], keyring: &Path, url: &str, spool: &Path) -> Result<String, DistroError> {
    let keyring = keyring.canonicalize().map_err(|e| DistroError::Keyring {
        keyring: keyring.display().to_string(),
        message: format!("cannot read it: {e}"),
    })?;
    let dir = tempfile::Builder::new().prefix("gpgv-").tempdir_in(spool).map_err(|e| DistroError::io(spool, e))?;
    let input = dir.path().join("InRelease");
    let output = dir.path().join("Release");
    std::fs::write(&input, doc).map_err(|e| DistroError::io(&input, e))?;
    let out = Command::new("gpgv")
        // gpgv reads a relative keyring from ~/.gnupg; the path is absolute.
        .arg("--keyring")
        .arg(&keyring)
        .arg("--status-fd")
        .arg("1")
        .arg("--output")
        .arg(&output)
        .arg(&input)
        .env("GNUPGHOME", dir.path())
        .output()
        .map_err(|e| DistroError::Keyring {
            keyring: keyring.display().to_string(),
            message: format!("cannot run `gpgv` ({e}); install it (Debian/Ubuntu package `gpgv`)"),
        })?;
    let status = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !status.lines().any(|l| l.starts_with("[GNUPG:] VALIDSIG")) {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let why: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        return Err(DistroError::BadSignature {
            suite: String::new(),
            url: url.to_string(),
            keyring: keyring.display().to_string(),
            message: why.join("; "),
        });
    }
    std::fs::read_to_string(&output).map_err(|e| DistroError::io(&output, e))
}

fn parse_release(text: &str, digest: crate::oci::Digest, url: &str) -> Result<Release, DistroError> {
    let p = parse_paragraphs(text).into_iter().next().unwrap_or_default();
    let mut sha256 = BTreeMap::new();
    for line in p.get("SHA256").unwrap_or("").lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [hash, size, path] = w[..] {
            if let Ok(size) = size.parse() {
                sha256.insert(path.to_string(), (hash.to_ascii_lowercase(), size));
            }
        }
    }
    if sha256.is_empty() {
        return Err(DistroError::Index {
            url: url.to_string(),
            message: "the signed Release data has no SHA256 list".into(),
        });
    }
    let yes = |k: &str| p.get(k).map(|v| v.trim() == "yes").unwrap_or(false);
    let pin = match (yes("NotAutomatic"), yes("ButAutomaticUpgrades")) {
        (false, _) => 500,
        (true, false) => 1,
        (true, true) => 100,
    };
    Ok(Release { digest, by_hash: yes("Acquire-By-Hash"), sha256, codename: p.get("Codename").map(String::from), pin })
}

/// One binary package of an index.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub architecture: String,
    pub filename: String,
    pub sha256: String,
    pub size: u64,
    pub depends: Depends,
    pub pre_depends: Depends,
    /// (virtual name, version given by `name (= v)`)
    pub provides: Vec<(String, Option<String>)>,
    pub essential: bool,
    /// The index's Priority (which may differ from the package's own
    /// control field: Ubuntu's archive overrides it), as apt reads it.
    pub priority: String,
    /// The suite whose index lists it (set by `Repo::fetch_packages`).
    pub suite: String,
    /// apt's pin priority for it (see `Release::pin`).
    pub pin: u16,
}

/// What is wrong with a paragraph of a `Packages` index.
#[derive(Debug, thiserror::Error)]
pub enum ParagraphError {
    #[error("a paragraph has no `Package` field")]
    NoName,
    #[error("package `{name}` has no `{field}` field")]
    Missing { name: String, field: String },
    #[error("package `{name}`, field `{field}`: {source}")]
    Depends { name: String, field: String, source: DependsError },
    #[error("package `{name}`: `Size` is not a number")]
    Size { name: String, source: std::num::ParseIntError },
}

impl Package {
    pub fn from_paragraph(p: &super::control::Paragraph) -> Result<Package, ParagraphError> {
        let name = p.get("Package").ok_or(ParagraphError::NoName)?.to_string();
        let need = |k: &str| {
            p.get(k).map(String::from).ok_or_else(|| ParagraphError::Missing { name: name.clone(), field: k.into() })
        };
        let deps = |k: &str| {
            parse_depends(p.get(k).unwrap_or("")).map_err(|source| ParagraphError::Depends {
                name: name.clone(),
                field: k.into(),
                source,
            })
        };
        let provides =
            deps("Provides")?.into_iter().flatten().map(|a| (a.name, a.constraint.map(|(_, v)| v))).collect();
        Ok(Package {
            version: need("Version")?,
            architecture: need("Architecture")?,
            filename: need("Filename")?,
            sha256: need("SHA256")?.to_ascii_lowercase(),
            size: need("Size")?.parse().map_err(|source| ParagraphError::Size { name: name.clone(), source })?,
            depends: deps("Depends")?,
            pre_depends: deps("Pre-Depends")?,
            provides,
            essential: p.get("Essential").map(|v| v == "yes").unwrap_or(false),
            priority: p.get("Priority").unwrap_or("optional").to_string(),
            suite: String::new(),
            pin: 500,
            name,
        })
    }
}
