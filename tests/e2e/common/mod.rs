//! Shared helpers for the end-to-end tests: the built binary, fixtures cached
//! outside the clone (see [`test_cache`]), and the rule that in CI (CI set) a
//! missing engine or tool fails the test instead of skipping it.

pub mod deb_archive;
pub mod engines;
pub mod provenance;
pub mod registry;
pub mod remote;
pub mod rocm_rules;
pub mod sigstore;
pub mod slurm;
pub mod venv;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn quarry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quarry"));
    c.env_remove("SOURCE_DATE_EPOCH").env_remove("QUARRY_PATCHELF");
    c
}

pub fn in_ci() -> bool {
    std::env::var_os("CI").map(|v| !v.is_empty()).unwrap_or(false)
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the tests keep what is slow to make (fixtures, downloaded
/// packages), outside the clone so a fresh clone of the same machine (CI)
/// finds it warm: `QUARRY_TEST_CACHE`, else `~/.cache/quarry-tests`. What
/// is in it is named by what made it (see [`script_tag`]) or is a quarry
/// cache (keyed by content): a stale entry is never taken for a new one.
pub fn test_cache() -> PathBuf {
    let d = match std::env::var_os("QUARRY_TEST_CACHE").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/quarry-tests"),
    };
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Cached inputs made by scripts and tests.
pub fn fixtures_dir() -> PathBuf {
    let d = test_cache().join("fixtures");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The quarry cache the tests that build the shipped Debian images share
/// (~900 MB of packages the first time).
pub fn packages_cache() -> PathBuf {
    test_cache().join("packages-cache")
}

/// The first 12 hex digits of the sha256 of `tests/fixtures/<script>`: part
/// of the name of what the script makes, so a changed script makes anew.
pub fn script_tag(script: &str) -> String {
    let text = std::fs::read(repo().join("tests/fixtures").join(script)).unwrap();
    quarry::oci::digest::sha256_hex(&text)[..12].to_string()
}

/// True when `tool` runs; in CI a missing tool is a failure.
pub fn have_tool(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
        || Command::new(tool).arg("--help").output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        assert!(!in_ci(), "CI is set but `{tool}` is missing: .ci/run must install it");
        eprintln!("skipping: `{tool}` is not installed");
    }
    ok
}

/// True when the Docker Engine answers; in CI a missing engine is a failure.
pub fn have_docker() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok =
        *OK.get_or_init(|| Command::new("docker").arg("info").output().map(|o| o.status.success()).unwrap_or(false));
    if !ok {
        assert!(!in_ci(), "CI is set but the Docker Engine does not answer: .ci/run must start dockerd");
        eprintln!("skipping: no Docker Engine");
    }
    ok
}

/// Serializes fixture creation across test binaries running in parallel.
pub fn with_lock<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let lock_path = fixtures_dir().join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).unwrap();
    // SAFETY: flock on a valid descriptor we own.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
    let r = f();
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_UN) };
    r
}

/// A Debian 12 rootfs tarball made by mmdebstrap with `packages` included
/// (comma-separated, may be empty), cached in the fixtures.
pub fn debian_rootfs(packages: &str) -> PathBuf {
    let tag = script_tag("debian-rootfs.sh");
    let name = if packages.is_empty() {
        format!("debian12-minbase-{tag}.tar")
    } else {
        format!("debian12-{tag}-{}.tar", &quarry::oci::digest::sha256_hex(packages.as_bytes())[..12])
    };
    let out = fixtures_dir().join(&name);
    with_lock(&name, || {
        if !out.exists() {
            let st = Command::new("sh")
                .arg(repo().join("tests/fixtures/debian-rootfs.sh"))
                .arg(&out)
                .arg(packages)
                .status()
                .expect("run tests/fixtures/debian-rootfs.sh");
            assert!(st.success(), "making the Debian rootfs fixture failed (is mmdebstrap installed?)");
        }
    });
    out
}

/// Run and return the output, failing with both streams shown when the exit
/// status is not `code`.
pub fn run_expect(cmd: &mut Command, code: i32) -> Output {
    let out = cmd.output().expect("spawn");
    assert_eq!(
        out.status.code(),
        Some(code),
        "command {:?} exited {:?}\nstdout:\n{}\nstderr:\n{}",
        cmd,
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout_json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout)))
}

pub fn write(path: &Path, data: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, data).unwrap();
}

/// Names for engine objects made by a test, unique per process.
pub fn unique(name: &str) -> String {
    format!("quarry-test-{name}-{}", std::process::id())
}

/// A fresh copy of the synthetic ROCm artifacts (`split` or `legacy`), made
/// once by tests/fixtures/rocm-artifacts.sh in the fixtures; tests may
/// change their copy.
pub fn rocm_artifacts(mode: &str, into: &Path) -> PathBuf {
    // Named after the script's contents: a changed script makes a new fixture.
    let tag = script_tag("rocm-artifacts.sh");
    let cached = fixtures_dir().join(format!("rocm-artifacts-{mode}-{tag}"));
    with_lock(&format!("rocm-artifacts-{mode}"), || {
        let st = Command::new("sh")
            .arg(repo().join("tests/fixtures/rocm-artifacts.sh"))
            .arg(&cached)
            .arg(mode)
            .status()
            .unwrap();
        assert!(st.success(), "tests/fixtures/rocm-artifacts.sh failed (is cc installed?)");
    });
    std::fs::create_dir_all(into).unwrap();
    let dest = into.join(format!("artifacts-{mode}"));
    assert!(Command::new("cp").arg("-a").arg(&cached).arg(&dest).status().unwrap().success());
    dest
}

/// quarry-managed containers whose quarry process is gone: leaks. (A
/// container of a quarry still running, e.g. a parallel test's, is not.)
pub fn leaked_quarry_containers() -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=io.quarry.managed=true",
            "--format",
            "{{.ID}} {{.Label \"io.quarry.pid\"}}",
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            let pid = l.split_whitespace().nth(1).unwrap_or("");
            pid.is_empty() || !Path::new("/proc").join(pid).exists()
        })
        .map(String::from)
        .collect()
}

/// PATH with every directory holding a `patchelf` left out (checked: no
/// `patchelf` is found on it), and QUARRY_PATCHELF unset by the caller's
/// `quarry()`: what a fresh machine without patchelf looks like to quarry.
pub fn path_without_patchelf() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    let kept: Vec<String> = std::env::split_paths(&path)
        .filter(|d| !d.join("patchelf").exists())
        .map(|d| d.display().to_string())
        .collect();
    let kept = kept.join(":");
    let found = Command::new("sh").args(["-c", "command -v patchelf"]).env("PATH", &kept).output().unwrap();
    assert!(!found.status.success(), "a patchelf is still on PATH: {}", String::from_utf8_lossy(&found.stdout));
    kept
}

/// The shipped Debian 13 ROCm images (`rocm-runtime-debian13`,
/// `hip-builder-debian13`), built from their locks once through
/// [`packages_cache`] (~900 MB of packages the first time) into OCI layouts
/// in the fixtures; later calls only check the cache (seconds). Every
/// call runs `quarry build`, so the cache is keyed like any build: a changed
/// definition, lock or layer file rebuilds what it changes.
/// Returns (runtime layout, builder layout).
pub fn debian13_rocm_images() -> (PathBuf, PathBuf) {
    let cache = packages_cache();
    let dir = fixtures_dir().join("rocm-debian13");
    // Named by the definitions and locks: another checkout's definitions
    // (a branch, a worktree) build beside these, never over them.
    let mut defs = Vec::new();
    for f in [
        "rocm-runtime-debian13.toml",
        "rocm-runtime-debian13.lock",
        "hip-builder-debian13.toml",
        "hip-builder-debian13.lock",
    ] {
        defs.extend(std::fs::read(repo().join("images").join(f)).unwrap_or_default());
    }
    let tag = quarry::oci::digest::sha256_hex(&defs)[..12].to_string();
    with_lock("rocm-debian13", || {
        let mut layouts = Vec::new();
        for name in ["rocm-runtime-debian13", "hip-builder-debian13"] {
            let out = dir.join(format!("{name}-{tag}"));
            run_expect(
                quarry()
                    .arg("build")
                    .arg(repo().join(format!("images/{name}.toml")))
                    .arg("--cache-dir")
                    .arg(&cache)
                    .arg("-o")
                    .arg(&out)
                    .arg("--quiet"),
                0,
            );
            layouts.push(out);
        }
        (layouts[0].clone(), layouts[1].clone())
    })
}

/// What `script` leaves in `/work/out` when run in hip-builder-debian13
/// with tests/fixtures/hip at `/work/src` (network off, no GPU), made once
/// into the fixtures as `{name}-{tag}`: the tag hashes the script and the
/// `sources` it compiles (files of tests/fixtures/hip), so a change to
/// either makes anew.
pub fn hip_outputs(name: &str, script: &str, sources: &[&str]) -> PathBuf {
    let mut key = script.to_string();
    for f in sources {
        key.push_str(&std::fs::read_to_string(repo().join("tests/fixtures/hip").join(f)).unwrap());
    }
    let tag = &quarry::oci::digest::sha256_hex(key.as_bytes())[..12];
    let dir = fixtures_dir().join(format!("{name}-{tag}"));
    with_lock(name, || {
        if dir.join("done").exists() {
            return;
        }
        let (_, builder) = debian13_rocm_images();
        let tmp = fixtures_dir().join(format!("{name}-{tag}.tmp"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        run_expect(
            in_image(&builder, &[(&repo().join("tests/fixtures/hip"), "/work/src")])
                .arg("--copy-out")
                .arg(format!("/work/out:{}", tmp.display()))
                .args(["--", "sh", "-ec", script]),
            0,
        );
        // `--copy-out DIR:EXISTING` puts DIR's contents into EXISTING.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir).unwrap();
        std::fs::write(dir.join("done"), "").unwrap();
    });
    dir
}

/// `quarry run IMAGE --gpu none` with the shared package cache and each
/// (host path, container path) copied in; the caller adds `-- CMD...`.
pub fn in_image(image: &Path, copy_in: &[(&Path, &str)]) -> Command {
    let mut c = quarry();
    c.arg("run").arg(image).args(["--gpu", "none", "--cache-dir"]).arg(packages_cache());
    for (host, inside) in copy_in {
        c.arg("--copy-in").arg(format!("{}:{inside}", host.display()));
    }
    c
}

/// The wheel corpus (tests/fixtures/wheel-corpus.sh: popular sdists and
/// runtime wheels as PyPI serves them), fetched once under a lock.
pub fn wheel_corpus() -> PathBuf {
    let d = fixtures_dir().join("wheelcorpus").join(format!("corpus-{}", script_tag("wheel-corpus.sh")));
    std::fs::create_dir_all(d.parent().unwrap()).unwrap();
    with_lock("wheelcorpus-fetch", || {
        let st = Command::new("sh").arg(repo().join("tests/fixtures/wheel-corpus.sh")).arg(&d).status().unwrap();
        assert!(st.success(), "fetching the wheel corpus failed (pip, network?)");
    });
    d
}

/// Give the ELF file at `path` a `.note.nixos.ldcache` section (as Nix's
/// builds carry): quarry's native editor leaves such files to patchelf,
/// which drops that section when it sets a search path. objcopy adds it.
pub fn mark_nix_ldcache(path: &Path) {
    let note = path.with_extension("ldcache-note");
    // One well-formed ELF note: namesz 4, descsz 0, type 1, "Nix\0".
    std::fs::write(&note, [4u32.to_le_bytes(), 0u32.to_le_bytes(), 1u32.to_le_bytes(), *b"Nix\0"].concat()).unwrap();
    let mut section = std::ffi::OsString::from(".note.nixos.ldcache=");
    section.push(&note);
    let st = Command::new("objcopy").arg("--add-section").arg(section).arg(path).status().unwrap();
    assert!(st.success(), "objcopy --add-section failed on {}", path.display());
    std::fs::remove_file(&note).unwrap();
}

/// The pinned `rocm-bootstrap` wheel from PyPI (what split host wheels
/// require), downloaded once into the test cache and checked against its sha256.
pub fn rocm_bootstrap_wheel() -> PathBuf {
    use quarry::code_objects::packaging_chain::{ROCM_BOOTSTRAP_VERSION, ROCM_BOOTSTRAP_WHEEL_SHA256};
    let dir = test_cache().join(format!("rocm-bootstrap-{ROCM_BOOTSTRAP_VERSION}"));
    let wheel = dir.join(format!("rocm_bootstrap-{ROCM_BOOTSTRAP_VERSION}-py3-none-any.whl"));
    with_lock("rocm-bootstrap", || {
        if !wheel.exists() {
            let st = Command::new("python3")
                .args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d"])
                .arg(&dir)
                .arg(format!("rocm-bootstrap=={ROCM_BOOTSTRAP_VERSION}"))
                .status()
                .unwrap();
            assert!(st.success(), "pip download rocm-bootstrap=={ROCM_BOOTSTRAP_VERSION} failed");
        }
    });
    let digest = quarry::oci::digest::sha256_file(&wheel).unwrap();
    assert_eq!(digest, ROCM_BOOTSTRAP_WHEEL_SHA256, "{} is not the pinned wheel", wheel.display());
    wheel
}

/// Every wheel in `dir` by file name, with its bytes, sorted by name.
pub fn wheels_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// `--set` arguments for the mirror parameters a shipped definition has,
/// from the environment (`DEBIAN_MIRROR`, `UBUNTU_MIRROR`) when the user
/// gives them; otherwise the definitions' `host` finds this machine's.
pub fn mirror_sets(definition: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(definition).unwrap_or_default();
    let mut out = Vec::new();
    for name in ["DEBIAN_MIRROR", "UBUNTU_MIRROR"] {
        if let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty() && text.contains(name)) {
            out.push("--set".to_string());
            out.push(format!("{name}={}", v.to_string_lossy()));
        }
    }
    out
}
