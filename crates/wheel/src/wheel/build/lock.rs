//! `quarry-wheel.lock`: the build requirements a `quarry wheel build`
//! installed, pinned by sha256, one `[[target]]` per interpreter and
//! platform. A build whose project asks for the same requirements installs
//! exactly the files listed (from the cache, or fetched by sha256). What
//! `--test` installs beside a wheel (its `Requires-Dist` and
//! `--test-requires`) is pinned the same way, one `[[test]]` per
//! interpreter and platform of the test image.
//!
//! ```toml
//! version = 1
//!
//! [[target]]
//! python = "cp311"
//! platform = "manylinux_2_36_x86_64"
//! requires = ["setuptools>=80", "setuptools-scm[simple]>=9.2"]
//! backend-requires = []
//!
//! [[target.wheel]]
//! name = "setuptools"
//! version = "80.9.0"
//! file = "setuptools-80.9.0-py3-none-any.whl"
//! sha256 = "062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922"
//! for = "requires"
//! ```

use crate::pypi::resolve::Pin;
use std::path::{Path, PathBuf};

pub const DEFAULT_NAME: &str = "quarry-wheel.lock";
const VERSION: u32 = 1;

/// Why the lock could not be read, written or used.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock `{}`: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("lock `{}` cannot be read: {source}; fix it, or delete it to resolve the build requirements again", path.display())]
    Parse { path: PathBuf, source: Box<toml::de::Error> },
    #[error("lock `{}` has version {found}, this quarry writes version {VERSION}; delete it to resolve again", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("cannot write the lock `{}`: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "the lock's entry for {tag} ({platform}) has no pip (`for = \"installer\"`); delete the entry to resolve again"
    )]
    NoInstaller { tag: String, platform: String },
}

/// Which install a pinned wheel belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// `[build-system] requires` and their dependencies.
    Requires,
    /// What the backend asked for (`get_requires_for_build_wheel`) beyond those.
    BackendRequires,
    /// The pip that installs the others (never installed itself).
    Installer,
    /// What `--test` installs beside the wheel.
    TestRequires,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedWheel {
    pub name: String,
    pub version: String,
    pub file: String,
    pub sha256: String,
    #[serde(rename = "for")]
    pub role: Role,
}

impl LockedWheel {
    pub fn pin(&self) -> Pin {
        Pin {
            name: self.name.clone(),
            version: self.version.clone(),
            file: self.file.clone(),
            sha256: self.sha256.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LockTarget {
    /// The interpreter tag (`cp311`).
    pub python: String,
    /// The most specific platform tag wheels were chosen for.
    pub platform: String,
    /// `[build-system] requires` as the project wrote them.
    pub requires: Vec<String>,
    /// What the backend asked for, as it asked.
    pub backend_requires: Vec<String>,
    #[serde(default, rename = "wheel")]
    pub wheels: Vec<LockedWheel>,
}

impl LockTarget {
    pub fn pins(&self, roles: &[Role]) -> Vec<Pin> {
        self.wheels.iter().filter(|w| roles.contains(&w.role)).map(LockedWheel::pin).collect()
    }
}

/// The test requirements of one interpreter and platform (`[[test]]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LockTest {
    pub python: String,
    pub platform: String,
    /// The wheel's `Requires-Dist`, then `--test-requires`, as written.
    pub requires: Vec<String>,
    #[serde(default, rename = "wheel")]
    pub wheels: Vec<LockedWheel>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LockFile {
    version: u32,
    #[serde(default)]
    target: Vec<LockTarget>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    test: Vec<LockTest>,
}

/// A lock as read (empty when the file does not exist).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildLock {
    targets: Vec<LockTarget>,
    tests: Vec<LockTest>,
}

impl BuildLock {
    /// What of the lock a build depends on, as bytes: the build
    /// requirements' pins (`[[target]]`), not what tests install. None when
    /// it pins nothing.
    pub fn build_pins(&self) -> Option<Vec<u8>> {
        (!self.targets.is_empty()).then(|| serde_json::to_vec(&self.targets).expect("pins serialize"))
    }

    /// The build requirements pinned per interpreter and platform.
    pub fn targets(&self) -> &[LockTarget] {
        &self.targets
    }

    pub fn read(path: &Path) -> Result<BuildLock, LockError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BuildLock::default()),
            Err(source) => return Err(LockError::Read { path: path.to_path_buf(), source }),
        };
        let f: LockFile =
            toml::from_str(&text).map_err(|e| LockError::Parse { path: path.to_path_buf(), source: Box::new(e) })?;
        if f.version != VERSION {
            return Err(LockError::Version { path: path.to_path_buf(), found: f.version });
        }
        Ok(BuildLock { targets: f.target, tests: f.test })
    }

    pub fn target(&self, python: &str, platform: &str) -> Option<&LockTarget> {
        self.targets.iter().find(|t| t.python == python && t.platform == platform)
    }

    /// Add or replace the entry for `t`'s python and platform.
    pub fn set(&mut self, mut t: LockTarget) {
        t.wheels.sort_by(|a, b| (a.role, &a.file).cmp(&(b.role, &b.file)));
        self.targets.retain(|x| !(x.python == t.python && x.platform == t.platform));
        self.targets.push(t);
        self.targets.sort_by(|a, b| (&a.python, &a.platform).cmp(&(&b.python, &b.platform)));
    }

    pub fn test(&self, python: &str, platform: &str) -> Option<&LockTest> {
        self.tests.iter().find(|t| t.python == python && t.platform == platform)
    }

    /// Add or replace the test entry for `t`'s python and platform.
    pub fn set_test(&mut self, mut t: LockTest) {
        t.wheels.sort_by(|a, b| a.file.cmp(&b.file));
        self.tests.retain(|x| !(x.python == t.python && x.platform == t.platform));
        self.tests.push(t);
        self.tests.sort_by(|a, b| (&a.python, &a.platform).cmp(&(&b.python, &b.platform)));
    }

    pub fn text(&self) -> String {
        let f = LockFile { version: VERSION, target: self.targets.clone(), test: self.tests.clone() };
        let body = toml::to_string(&f).expect("a lock serializes");
        format!(
            "# quarry-wheel.lock: the build requirements of `quarry wheel build`, pinned by sha256.\n\
             # Written by quarry; a build with this lock installs exactly these files.\n{body}"
        )
    }

    /// Write to a temporary name beside `path` and rename.
    pub fn write(&self, path: &Path) -> Result<(), LockError> {
        let err = |source: std::io::Error| LockError::Write { path: path.to_path_buf(), source };
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut tmp = tempfile::Builder::new().prefix(".quarry-wheel-lock-").tempfile_in(dir).map_err(err)?;
        std::io::Write::write_all(&mut tmp, self.text().as_bytes()).map_err(err)?;
        std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(err)?;
        tmp.persist(path).map_err(|e| err(e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel(name: &str, role: Role) -> LockedWheel {
        LockedWheel {
            name: name.into(),
            version: "1.0".into(),
            file: format!("{name}-1.0-py3-none-any.whl"),
            sha256: "ab".repeat(32),
            role,
        }
    }

    #[test]
    fn round_trip_and_replace() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/quarry-wheel.lock");
        assert_eq!(BuildLock::read(&p).unwrap(), BuildLock::default());
        let mut l = BuildLock::default();
        let t = LockTarget {
            python: "cp311".into(),
            platform: "manylinux_2_36_x86_64".into(),
            requires: vec!["setuptools>=80".into()],
            backend_requires: vec!["wheel".into()],
            wheels: vec![
                wheel("wheel", Role::BackendRequires),
                wheel("setuptools", Role::Requires),
                wheel("pip", Role::Installer),
            ],
        };
        l.set(t.clone());
        l.set(LockTarget { python: "cp310".into(), ..t.clone() });
        l.set(LockTarget { requires: vec!["setuptools>=81".into()], ..t.clone() });
        l.write(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("backend-requires = [\"wheel\"]") && text.contains("for = \"backend-requires\""),
            "{text}"
        );
        let back = BuildLock::read(&p).unwrap();
        assert_eq!(back, l);
        let got = back.target("cp311", "manylinux_2_36_x86_64").unwrap();
        assert_eq!(got.requires, ["setuptools>=81"]);
        assert_eq!(got.wheels[0].name, "setuptools", "sorted by role, then file");
        assert_eq!(got.pins(&[Role::Installer])[0].name, "pip");
        assert!(back.target("cp312", "manylinux_2_36_x86_64").is_none());
        let mut with_test = back.clone();
        with_test.set_test(LockTest {
            python: "cp313".into(),
            platform: "manylinux_2_41_x86_64".into(),
            requires: vec!["pycparser".into()],
            wheels: vec![wheel("pycparser", Role::TestRequires)],
        });
        with_test.write(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("[[test]]") && text.contains("for = \"test-requires\""), "{text}");
        assert_eq!(BuildLock::read(&p).unwrap(), with_test);
        back.write(&p).unwrap();

        std::fs::write(&p, "version = 2\n").unwrap();
        assert!(BuildLock::read(&p).unwrap_err().to_string().contains("version 2"));
        std::fs::write(&p, "version = 1\n[[target]]\npython = 3\n").unwrap();
        let e = BuildLock::read(&p).unwrap_err().to_string();
        assert!(e.contains("quarry-wheel.lock") && e.contains("delete it"), "{e}");
    }
}
