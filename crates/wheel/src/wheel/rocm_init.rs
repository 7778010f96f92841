//! Wheels that run on ROCm's own Python packages: the built wheel is made
//! to require `rocm[libraries]==V` (the version of the ROCm packages it was
//! built against) and carries a `_rocm_init.py` in each package with native
//! code, whose `initialize()` calls `rocm_sdk.initialize_process` with the
//! libraries to preload and the version to check. The package's
//! `__init__.py` calls it first, so ROCm's libraries are loaded (by their
//! SONAMEs, RTLD_GLOBAL) before any extension module that needs them: the
//! loader then finds them already loaded instead of searching a system ROCm.
//!
//! The rewrite is deterministic: the same wheel and pin give the same bytes.

use super::archive;
use super::unpack::unpack;
use super::WheelError;
use std::path::{Path, PathBuf};

/// The name of the module written into each package.
pub const INIT_MODULE: &str = "_rocm_init.py";

/// How closely the wheel pins the ROCm packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VersionPolicy {
    /// `rocm[libraries]==V`: exactly the version built against.
    Exact,
    /// `rocm[libraries]==MAJOR.MINOR.*` (a dev or pre-release stays locked to `==V`).
    Minor,
}

/// What is injected: the ROCm version built against and how it is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocmPin {
    /// The version of the `rocm` packages (`5.7.dev0`, `7.10.0`).
    pub version: String,
    pub policy: VersionPolicy,
    /// Short names (`amdhip64`, `rocblas`...) preloaded by `rocm_sdk`.
    pub preload: Vec<String>,
    /// A version mismatch raises instead of warning.
    pub fail_on_mismatch: bool,
}

/// A dev, pre- or post-release: anything past `MAJOR.MINOR.MICRO`.
fn is_exact_only(version: &str) -> bool {
    !version.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

impl RocmPin {
    /// The version part of the requirement and of the runtime check.
    fn pattern(&self) -> String {
        match self.policy {
            VersionPolicy::Minor if !is_exact_only(&self.version) => {
                let mut parts = self.version.split('.');
                match (parts.next(), parts.next()) {
                    (Some(major), Some(minor)) => format!("{major}.{minor}.*"),
                    _ => self.version.clone(),
                }
            }
            _ => self.version.clone(),
        }
    }

    /// `rocm[libraries]==5.7.dev0` (or `==7.10.*` with the minor policy).
    pub fn requirement(&self) -> String {
        format!("rocm[libraries]=={}", self.pattern())
    }

    /// The pattern `rocm_sdk.initialize_process(check_version=...)` matches
    /// against the installed ROCm's version (`*` matches anything).
    pub fn check_version(&self) -> String {
        self.pattern()
    }

    /// The text of `_rocm_init.py` for `package`.
    pub fn init_py(&self, package: &str) -> String {
        let list = |v: &[String]| v.iter().map(|s| py_str(s)).collect::<Vec<_>>().join(", ");
        format!(
            r#""""Load ROCm's libraries from ROCm's Python packages before {package}'s native code.

Written by quarry when the wheel was built against `{req}`. `{package}/__init__.py`
calls initialize() before anything else; ROCM_SDK_PRELOAD_LIBRARIES adds
libraries to preload (see rocm_sdk.initialize_process).
"""

ROCM_REQUIREMENT = {req_s}
PRELOAD_SHORTNAMES = [{preload}]
CHECK_VERSION = {check}
FAIL_ON_VERSION_MISMATCH = {fail}


def initialize():
    try:
        import rocm_sdk
    except ImportError as e:
        raise ImportError(
            "{package} needs ROCm's Python packages, which are not installed: "
            "pip install '%s'" % ROCM_REQUIREMENT
        ) from e
    rocm_sdk.initialize_process(
        preload_shortnames=PRELOAD_SHORTNAMES,
        check_version=CHECK_VERSION,
        fail_on_version_mismatch=FAIL_ON_VERSION_MISMATCH,
    )
"#,
            req = self.requirement(),
            req_s = py_str(&self.requirement()),
            preload = list(&self.preload),
            check = py_str(&self.check_version()),
            fail = if self.fail_on_mismatch { "True" } else { "False" },
        )
    }
}

/// A Python string literal (the values are version strings and short names).
fn py_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The lines put into `__init__.py`.
const HOOK: &str = "# Added by quarry: ROCm's libraries are loaded (rocm_sdk) before this package's native code.
from . import _rocm_init as _quarry_rocm_init
_quarry_rocm_init.initialize()
del _quarry_rocm_init
";

/// `__init__.py` with the hook after its docstring and `from __future__`
/// imports (which must stay first), else at the top. Idempotent.
pub fn hook_init(text: &str) -> String {
    if text.contains("_quarry_rocm_init.initialize()") {
        return text.to_string();
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut at = 0;
    // A leading docstring (shebang, encoding and comment lines before it kept too).
    while at < lines.len() && (lines[at].trim().is_empty() || lines[at].trim_start().starts_with('#')) {
        at += 1;
    }
    let quote = lines.get(at).map(|l| l.trim_start().trim_start_matches(['r', 'R', 'u', 'U'])).unwrap_or("");
    let delim = ["\"\"\"", "'''"].into_iter().find(|d| quote.starts_with(d));
    let mut after = 0;
    if let Some(d) = delim {
        let rest = &quote[3..];
        let mut end = at;
        if !rest.contains(d) {
            end += 1;
            while end < lines.len() && !lines[end].contains(d) {
                end += 1;
            }
        }
        after = (end + 1).min(lines.len());
    }
    for (i, l) in lines.iter().enumerate().skip(after) {
        if l.trim_start().starts_with("from __future__ import") {
            after = i + 1;
        }
    }
    let mut out: String = lines[..after].concat();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(HOOK);
    out.push_str(&lines[after..].concat());
    out
}

/// METADATA with `Requires-Dist: <requirement>` in place of any earlier
/// requirement on `rocm` itself, at the end of the headers.
pub fn pin_metadata(text: &str, requirement: &str) -> String {
    let (head, body) = match text.find("\n\n") {
        Some(i) => (&text[..i + 1], &text[i + 1..]),
        None => (text, ""),
    };
    let is_rocm = |l: &str| {
        l.strip_prefix("Requires-Dist:").is_some_and(|r| {
            let name: String =
                r.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect();
            name.eq_ignore_ascii_case("rocm")
        })
    };
    let mut out: String = head.split_inclusive('\n').filter(|l| !is_rocm(l)).collect();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("Requires-Dist: {requirement}\n"));
    out.push_str(body);
    out
}

/// What [`inject`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Injected {
    pub wheel: PathBuf,
    pub requirement: String,
    /// The packages given a `_rocm_init.py` (`hipscale`).
    pub packages: Vec<String>,
    /// The short names `_rocm_init.py` preloads.
    pub preload: Vec<String>,
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"\x7fELF"
}

/// ELF files under `dir`, relative to `root`.
fn elf_files(root: &Path, dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && is_elf(e.path()))
        .map(|e| e.path().strip_prefix(root).unwrap_or(e.path()).display().to_string())
        .collect()
}

/// Rewrite `wheel` into `out_dir`: the pin in METADATA, `_rocm_init.py`
/// in every top-level package holding native code, its call at the top of
/// that package's `__init__.py`. `_rocm_init.py` preloads `pin.preload`,
/// or, when that is empty, every library of `provided` (the ROCm packages'
/// sonames) the wheel's ELF files need (see `rocm_preload`). A wheel whose
/// native code is outside any regular package (a top-level extension
/// module) is an error that says what to change: nothing there would run before it.
pub fn inject(
    wheel: &Path,
    pin: &RocmPin,
    provided: &std::collections::BTreeSet<String>,
    out_dir: &Path,
) -> Result<Injected, WheelError> {
    let u = unpack(wheel, out_dir, "rocm-init")?;
    let root = &u.root;
    let needed = super::rocm_preload::needed(root, provided);
    let pin = &RocmPin { preload: super::rocm_preload::choose(&pin.preload, &needed), ..pin.clone() };
    let layout = |why: String| WheelError::Layout { wheel: wheel.to_path_buf(), why };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|source| WheelError::Io { path: root.clone(), source })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let mut packages = Vec::new();
    let mut outside = Vec::new();
    for p in &entries {
        let name = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if name.ends_with(".dist-info") || name.ends_with(".data") {
            continue;
        }
        if p.is_dir() {
            let elfs = elf_files(root, p);
            if elfs.is_empty() {
                continue;
            }
            let init = p.join("__init__.py");
            if !init.is_file() {
                outside.extend(elfs);
                continue;
            }
            let text =
                std::fs::read_to_string(&init).map_err(|source| WheelError::Io { path: init.clone(), source })?;
            std::fs::write(&init, hook_init(&text)).map_err(|source| WheelError::Io { path: init.clone(), source })?;
            let module = p.join(INIT_MODULE);
            std::fs::write(&module, pin.init_py(&name)).map_err(|source| WheelError::Io { path: module, source })?;
            packages.push(name);
        } else if is_elf(p) {
            outside.push(name);
        }
    }
    if let Some(first) = outside.first() {
        return Err(layout(format!(
            "native code `{first}` is not inside a regular package (a directory with `__init__.py`), so nothing \
             can load ROCm's libraries before it; put the extension module into a package whose `__init__.py` \
             imports it (`pkg/_native.so` imported by `pkg/__init__.py`)"
        )));
    }
    if packages.is_empty() {
        return Err(layout(
            "it holds no native code: there is nothing for ROCm's packages to load before; build it without --rocm-packages".into(),
        ));
    }
    let metadata = root.join(&u.dist_info).join("METADATA");
    let text =
        std::fs::read_to_string(&metadata).map_err(|source| WheelError::Io { path: metadata.clone(), source })?;
    std::fs::write(&metadata, pin_metadata(&text, &pin.requirement()))
        .map_err(|source| WheelError::Io { path: metadata.clone(), source })?;
    let output = out_dir.join(wheel.file_name().unwrap_or_default());
    archive::pack_dir(root, &u.dist_info, &output, u.zip_time()?)?;
    Ok(Injected { wheel: output, requirement: pin.requirement(), packages, preload: pin.preload.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(version: &str, policy: VersionPolicy) -> RocmPin {
        RocmPin { version: version.into(), policy, preload: vec!["amdhip64".into()], fail_on_mismatch: false }
    }

    #[test]
    fn requirements_by_policy() {
        assert_eq!(pin("7.10.0", VersionPolicy::Exact).requirement(), "rocm[libraries]==7.10.0");
        assert_eq!(pin("7.10.0", VersionPolicy::Minor).requirement(), "rocm[libraries]==7.10.*");
        assert_eq!(pin("7.10.0", VersionPolicy::Minor).check_version(), "7.10.*");
        // Dev and pre-releases stay locked: `==7.10.*` would not select them.
        assert_eq!(pin("5.7.dev0", VersionPolicy::Minor).requirement(), "rocm[libraries]==5.7.dev0");
        assert_eq!(pin("7.10.0rc1", VersionPolicy::Minor).check_version(), "7.10.0rc1");
        let text = pin("5.7.dev0", VersionPolicy::Exact).init_py("hipscale");
        assert!(text.contains("PRELOAD_SHORTNAMES = [\"amdhip64\"]") && text.contains("CHECK_VERSION = \"5.7.dev0\""));
        assert!(text.contains("FAIL_ON_VERSION_MISMATCH = False") && text.contains("hipscale needs ROCm's"));
    }

    #[test]
    fn hook_goes_after_docstring_and_future_imports() {
        let t = hook_init("\"\"\"Doc\nmore.\"\"\"\nfrom __future__ import annotations\nfrom ._native import scale\n");
        let hook_at = t.find("from . import _rocm_init").unwrap();
        assert!(t.starts_with("\"\"\"Doc\nmore.\"\"\"\nfrom __future__ import annotations\n# Added by quarry"), "{t}");
        assert!(hook_at < t.find("from ._native").unwrap());
        assert_eq!(hook_init(&t), t, "idempotent");
        assert!(hook_init("").starts_with("# Added by quarry"));
        let one = hook_init("'''One line.'''\nimport os\n");
        assert!(one.starts_with("'''One line.'''\n# Added by quarry"), "{one}");
    }

    /// A wheel of `members` (name, bytes), packed as quarry packs wheels.
    fn wheel_of(dir: &Path, members: &[(&str, &[u8])]) -> PathBuf {
        let root = dir.join("root");
        for (name, data) in members {
            let p = root.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
        }
        let out = dir.join("demo-1.0-cp313-cp313-linux_x86_64.whl");
        archive::pack_dir(&root, "demo-1.0.dist-info", &out, archive::zip_time(0)).unwrap();
        out
    }

    #[test]
    fn inject_is_deterministic_and_needs_a_package() {
        let d = tempfile::tempdir().unwrap();
        let meta: &[u8] = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n";
        let wheel = wheel_of(
            d.path(),
            &[
                ("demo/__init__.py", b"from ._native import f\n"),
                ("demo/_native.so", b"\x7fELF-not-really"),
                ("demo-1.0.dist-info/METADATA", meta),
                ("demo-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nTag: cp313-cp313-linux_x86_64\n"),
            ],
        );
        let p = pin("5.7.dev0", VersionPolicy::Exact);
        let a = inject(&wheel, &p, &Default::default(), &d.path().join("a")).unwrap();
        let b = inject(&wheel, &p, &Default::default(), &d.path().join("b")).unwrap();
        assert_eq!(a.packages, ["demo"]);
        assert_eq!(std::fs::read(&a.wheel).unwrap(), std::fs::read(&b.wheel).unwrap());
        let mut z = archive::WheelZip::open(&a.wheel).unwrap();
        assert!(String::from_utf8(z.read_file("demo/_rocm_init.py").unwrap()).unwrap().contains("def initialize"));
        let m = String::from_utf8(z.read_file("demo-1.0.dist-info/METADATA").unwrap()).unwrap();
        assert!(m.ends_with("Requires-Dist: rocm[libraries]==5.7.dev0\n"), "{m}");

        // A top-level extension module: nothing could run before it.
        let d2 = tempfile::tempdir().unwrap();
        let top = wheel_of(
            d2.path(),
            &[
                ("demo.cpython-313-x86_64-linux-gnu.so", b"\x7fELF-not-really"),
                ("demo-1.0.dist-info/METADATA", meta),
                ("demo-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nTag: cp313-cp313-linux_x86_64\n"),
            ],
        );
        let e = inject(&top, &p, &Default::default(), &d2.path().join("out")).unwrap_err().to_string();
        assert!(e.contains("`demo.cpython-313-x86_64-linux-gnu.so` is not inside a regular package"), "{e}");
    }

    #[test]
    fn metadata_pin_replaces_an_earlier_one() {
        let m = "Metadata-Version: 2.1\nName: x\nRequires-Dist: rocm==1.0\nRequires-Dist: rocmx\n\nBody\n";
        let out = pin_metadata(m, "rocm[libraries]==5.7.dev0");
        assert_eq!(
            out,
            "Metadata-Version: 2.1\nName: x\nRequires-Dist: rocmx\nRequires-Dist: rocm[libraries]==5.7.dev0\n\nBody\n"
        );
        assert!(pin_metadata("Name: x\n", "r").ends_with("Name: x\nRequires-Dist: r\n"));
    }
}
