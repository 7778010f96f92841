//! Python virtualenvs for the ROCm packaging tests: made with the host's
//! python3, pip run offline against a directory of packages, nothing from
//! the caller's environment that would change what is found or loaded.

use super::run_expect;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh virtualenv; returns its bin directory.
pub fn venv(dir: &Path) -> PathBuf {
    run_expect(Command::new("python3").args(["-m", "venv"]).arg(dir), 0);
    dir.join("bin")
}

/// Commands run in the virtualenv: no pip cache (the selector's metadata
/// depends on the environment), no LD_LIBRARY_PATH.
pub fn in_venv(bin: &Path, tool: &str) -> Command {
    let mut c = Command::new(bin.join(tool));
    c.env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("ROCM_SDK_TARGET_FAMILY")
        .env_remove("PYTHONPATH");
    c
}

/// `pip install SPEC` offline from the packages in `dist`.
pub fn pip_install(bin: &Path, dist: &Path, spec: &str, env: &[(&str, &str)]) {
    run_expect(
        in_venv(bin, "pip")
            .envs(env.iter().copied())
            .args(["install", "-q", "--no-index", "--find-links"])
            .arg(dist)
            .arg(spec),
        0,
    );
}

/// Run Python code in the virtualenv; its stdout, trimmed.
pub fn python(bin: &Path, code: &str) -> String {
    let out = run_expect(in_venv(bin, "python").args(["-c", code]), 0);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The pinned `variantlib` (PyPI's reader of wheel variant metadata) in a
/// virtualenv in the test cache, made once; returns its bin directory.
pub fn variantlib() -> PathBuf {
    const VERSION: &str = "0.2.2";
    let dir = super::test_cache().join(format!("variantlib-{VERSION}"));
    super::with_lock("variantlib", || {
        if !dir.join("bin/variantlib").exists() {
            let _ = std::fs::remove_dir_all(&dir);
            let bin = venv(&dir);
            run_expect(in_venv(&bin, "pip").args(["install", "-q", &format!("variantlib=={VERSION}")]), 0);
        }
    });
    dir.join("bin")
}
