//! The `rocm_sdk` contract: quarry's ROCm wheels
//! must work under either `rocm` selector, quarry's or the reference's
//! (ROCm's own `rocm_sdk`, `build_tools/packaging/python/templates/rocm/`
//! in ROCm/TheRock), and quarry's `rocm_sdk` must offer the reference's
//! public API with the same arguments, return types and exceptions.
//!
//! The reference's sources cannot be fetched here, so its public names are
//! written below as the contract, checked against every Python file of
//! every wheel quarry writes (read with Python's own `ast`).

use crate::common;

use common::venv::*;
use common::*;
use std::path::Path;

/// What the reference's `rocm_sdk` defines that a wheel may use: its public
/// functions, the devel module's one public entry, and the `rocm-sdk`
/// commands (run as `python -m rocm_sdk ...`).
const REFERENCE_NAMES: &[&str] = &[
    "rocm_sdk",
    "rocm_sdk.__version__",
    "rocm_sdk.find_libraries",
    "rocm_sdk.preload_libraries",
    "rocm_sdk.initialize_process",
    "rocm_sdk._devel",
    "rocm_sdk._devel.get_devel_root",
    "command: rocm-sdk init",
    "command: rocm-sdk init --quiet",
    "command: rocm-sdk path --root",
    "command: rocm-sdk path --bin",
    "command: rocm-sdk path --cmake",
    "command: rocm-sdk version",
    "command: rocm-sdk targets",
    "command: rocm-sdk test",
];

/// Lists, per `.py` member of each wheel given, every `rocm_sdk` name it
/// uses: imports (`import rocm_sdk._devel`, `from rocm_sdk import x`),
/// attribute chains on those names (`_devel.expand()`), and `rocm-sdk`
/// commands run as `[sys.executable, "-m", "rocm_sdk", ...]`.
const ANALYZER: &str = r#"
import ast, json, sys, zipfile
uses = set()
for whl in sys.argv[1:]:
    z = zipfile.ZipFile(whl)
    for member in z.namelist():
        # quarry's own Python: the pure packages (rocm_sdk_core/...), not the
        # ROCm build's files under the `_`-prefixed platform directories.
        if not member.endswith(".py") or member.startswith("_") or ".dist-info/" in member:
            continue
        where = whl.rsplit("/", 1)[-1] + "/" + member
        if member.startswith("rocm_sdk/"):
            uses.add((where, "defines rocm_sdk itself"))
        tree = ast.parse(z.read(member).decode(), member)
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "rocm_sdk" or a.name.startswith("rocm_sdk."):
                        uses.add((where, a.name))
                        bound[a.asname or "rocm_sdk"] = a.name if a.asname else "rocm_sdk"
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mod = node.module or ""
                if mod == "rocm_sdk" or mod.startswith("rocm_sdk."):
                    uses.add((where, mod))
                    for a in node.names:
                        uses.add((where, mod + "." + a.name))
                        bound[a.asname or a.name] = mod + "." + a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                chain, cur = [], node
                while isinstance(cur, ast.Attribute):
                    chain.append(cur.attr)
                    cur = cur.value
                if isinstance(cur, ast.Name) and cur.id in bound:
                    uses.add((where, bound[cur.id] + "." + ".".join(reversed(chain))))
            elif isinstance(node, (ast.List, ast.Tuple)):
                words = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in node.elts]
                for i in range(len(words) - 1):
                    if words[i] == "-m" and words[i + 1] == "rocm_sdk":
                        uses.add((where, "command: rocm-sdk " + " ".join(w for w in words[i + 2:] if w)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "rocm_sdk." in node.value:
                uses.add((where, "string: " + node.value))
print(json.dumps(sorted(uses)))
"#;

fn package_split(t: &Path) -> std::path::PathBuf {
    let arts = rocm_artifacts("split", &t.join("a"));
    let dest = t.join("out");
    run_expect(
        quarry()
            .args(["rocm", "package", "--json", "--version", "7.10.0.dev0", "--artifact-dir"])
            .arg(&arts)
            .arg("--dest-dir")
            .arg(&dest),
        0,
    );
    dest.join("dist")
}

/// The acceptance test: no Python file in quarry's ROCm wheels uses a
/// `rocm_sdk` name the reference's `rocm_sdk` does not define.
#[test]
fn shipped_python_uses_only_the_references_rocm_sdk_names() {
    if !have_tool("python3") || !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dist = package_split(t.path());
    let wheels: Vec<_> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert!(wheels.len() >= 5, "{wheels:?}");
    let out = run_expect(std::process::Command::new("python3").arg("-c").arg(ANALYZER).args(&wheels), 0);
    let uses: Vec<(String, String)> = serde_json::from_slice(&out.stdout).unwrap();
    let foreign: Vec<&(String, String)> = uses.iter().filter(|(_, n)| !REFERENCE_NAMES.contains(&n.as_str())).collect();
    assert!(foreign.is_empty(), "names the reference's rocm_sdk does not define: {foreign:#?}");
    // The analyzer sees what the core wheel's console scripts do use (so
    // this test cannot pass by seeing nothing).
    assert!(
        uses.iter().any(|(f, n)| f.ends_with("rocm_sdk_core/_cli.py") && n == "command: rocm-sdk init --quiet"),
        "{uses:#?}"
    );
}

/// Item 4: a compiler console script of rocm-sdk-core, run first in a fresh
/// environment, expands the devel tree through the `rocm-sdk init` command
/// (which both selectors define) and runs the tool from it.
#[test]
fn console_scripts_expand_devel_through_the_rocm_sdk_command() {
    if !have_tool("python3") || !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dist = package_split(t.path());
    let bin = venv(&t.path().join("venv"));
    pip_install(&bin, &dist, "rocm[devel]", &[]);
    let site =
        python(&bin, "import rocm_sdk_devel, os; print(os.path.dirname(os.path.dirname(rocm_sdk_devel.__file__)))");
    let site = Path::new(&site);
    assert!(!site.join("_rocm_sdk_devel/__init__.py").exists(), "not expanded before the first tool");
    let out = run_expect(in_venv(&bin, "amdclang").args(["--first", "x"]), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hipinfo-real argc=3 first=--first\n");
    assert!(site.join("_rocm_sdk_devel/__init__.py").is_file(), "expanded by the console script");
    assert!(!site.join("rocm_sdk_devel/_devel.tar").exists());
    // Without the libraries package, a library of it is a ModuleNotFoundError naming the extra.
    let e = python(
        &bin,
        "import rocm_sdk\ntry:\n    rocm_sdk.find_libraries('hipblas')\nexcept ModuleNotFoundError as e:\n    print(e)",
    );
    assert!(e.contains("pip install rocm[libraries]"), "{e}");
}

/// Item 5: the reference's API, as its own tests and its users call it.
#[test]
fn rocm_sdk_api_matches_the_reference() {
    if !have_tool("python3") || !have_tool("cc") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dist = package_split(t.path());
    let bin = venv(&t.path().join("venv"));
    pip_install(&bin, &dist, "rocm[libraries,devel]", &[]);
    let script = r#"
import os, pathlib, re, warnings
import rocm_sdk
assert rocm_sdk.__all__ == ["__version__", "find_libraries", "initialize_process"], rocm_sdk.__all__
import inspect
public = sorted(n for n, v in vars(rocm_sdk).items() if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == "rocm_sdk")
assert public == ["find_libraries", "initialize_process", "preload_libraries"], public
# Unknown short names (rocblas is not one of the reference's) raise ModuleNotFoundError.
for name in ("rocblas", "nosuch"):
    try:
        rocm_sdk.find_libraries(name)
        raise SystemExit("no error for %s" % name)
    except ModuleNotFoundError as e:
        assert "Unknown rocm library '%s'" % name in str(e), e
paths = rocm_sdk.find_libraries("amdhip64")
assert len(paths) == 1 and isinstance(paths[0], pathlib.Path) and paths[0].is_absolute(), paths
# initialize_process: keyword-only, returns None, keeps handles in _ALL_CDLLS.
try:
    rocm_sdk.initialize_process(["amdhip64"])
    raise SystemExit("positional arguments accepted")
except TypeError:
    pass
assert rocm_sdk.initialize_process(preload_shortnames=["amdhip64"]) is None
assert "amdhip64" in rocm_sdk._ALL_CDLLS
rocm_sdk._ALL_CDLLS.clear()
os.environ["ROCM_SDK_PRELOAD_LIBRARIES"] = " ;amdhip64; ;"
rocm_sdk.initialize_process()
assert "amdhip64" in rocm_sdk._ALL_CDLLS
os.environ["ROCM_SDK_PRELOAD_LIBRARIES"] = "nosuch"
try:
    rocm_sdk.initialize_process()
    raise SystemExit("a bad ROCM_SDK_PRELOAD_LIBRARIES passed")
except RuntimeError as e:
    assert "ROCM_SDK_PRELOAD_LIBRARIES='nosuch'" in str(e), e
rocm_sdk.initialize_process(env_override=False)
del os.environ["ROCM_SDK_PRELOAD_LIBRARIES"]
# Version checks: patterns with *, compiled expressions, RuntimeError or a UserWarning.
rocm_sdk.initialize_process(check_version=rocm_sdk.__version__, fail_on_version_mismatch=True)
rocm_sdk.initialize_process(check_version="*", fail_on_version_mismatch=True)
rocm_sdk.initialize_process(check_version=re.compile(".+"), fail_on_version_mismatch=True)
for bad in ("badversion", re.compile("^bad$")):
    try:
        rocm_sdk.initialize_process(check_version=bad, fail_on_version_mismatch=True)
        raise SystemExit("mismatch passed")
    except RuntimeError as e:
        assert "The program was compiled against a ROCm version matching" in str(e), e
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    rocm_sdk.initialize_process(check_version="badversion")
assert len(w) == 1 and w[0].category is UserWarning, [(x.category, str(x.message)) for x in w]
# The devel tree: get_devel_root() returns a Path.
from rocm_sdk import _devel
root = _devel.get_devel_root()
assert isinstance(root, pathlib.Path) and (root / "__init__.py").is_file(), root
print("API-OK")
"#;
    assert_eq!(python(&bin, script), "API-OK");
    // The commands: output and exit codes as the reference's.
    let init = run_expect(in_venv(&bin, "rocm-sdk").arg("init"), 0);
    assert!(String::from_utf8_lossy(&init.stdout).starts_with("Devel contents expanded to '"), "{init:?}");
    let help = run_expect(in_venv(&bin, "python").args(["-m", "rocm_sdk", "--help"]), 0);
    assert!(String::from_utf8_lossy(&help.stdout).contains("usage: rocm-sdk"), "{help:?}");
    let targets = run_expect(in_venv(&bin, "rocm-sdk").arg("targets"), 0);
    assert!(String::from_utf8_lossy(&targets.stdout).contains("gfx"), "{targets:?}");
    run_expect(in_venv(&bin, "pip").args(["uninstall", "-y", "-q", "rocm-sdk-devel"]), 0);
    let path = run_expect(in_venv(&bin, "rocm-sdk").args(["path", "--root"]), 1);
    assert!(
        String::from_utf8_lossy(&path.stderr).contains("ERROR: Could not load the `rocm[devel]` package"),
        "{path:?}"
    );
}
