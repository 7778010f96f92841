//! `quarry wheel build --rocm-packages DIR`: framework builds on ROCm's own
//! Python packages instead of a system ROCm. The packages of DIR are copied
//! into the build container and `rocm[EXTRAS]==V` is installed from them
//! alone (`--no-index`) into each Python's isolated environment; the build
//! then sees the tree `rocm-sdk path` names:
//! `ROCM_HOME`/`ROCM_PATH` (`--root`), `CMAKE_PREFIX_PATH` (`--cmake`), its
//! `bin` first on `PATH`, `PYTORCH_EXTRA_INSTALL_REQUIREMENTS` (the
//! requirement PyTorch's setup adds), and the target list in the variables
//! a kernel build sets. Each built wheel then gets the pin and
//! `_rocm_init.py` ([`crate::wheel::rocm_init`]); repair leaves out every
//! library the packages provide.

use super::isolation::Env;
use super::WheelBuildError;
use crate::engine::exec::ExecOutput;
use crate::engine::run::Session;
use crate::wheel::rocm_init::RocmPin;
use crate::wheel::rocm_packages::RocmPackages;

/// Where the packages are in the build and test containers.
pub const ROCM_PACKAGES_DIR: &str = "/quarry/rocm-packages";

/// A build on ROCm's packages.
#[derive(Debug, Clone)]
pub struct RocmBuild {
    pub packages: RocmPackages,
    /// The extras installed for the build (`libraries`, `devel`).
    pub extras: Vec<String>,
    pub pin: RocmPin,
}

/// What `rocm-sdk path` answered in a build environment.
#[derive(Debug, Clone)]
pub struct SdkPaths {
    pub root: String,
    pub bin: String,
    pub cmake: String,
}

impl RocmBuild {
    /// `rocm[libraries,devel]==5.7.dev0`: what the build environment gets.
    pub fn build_requirement(&self) -> String {
        format!("rocm[{}]=={}", self.extras.join(","), self.packages.version)
    }

    /// What the build's cache key takes from it (with the directory's content).
    pub fn key_fields(&self) -> Vec<String> {
        let p = &self.pin;
        vec![
            self.build_requirement(),
            p.requirement(),
            p.check_version(),
            p.preload.join(","),
            p.fail_on_mismatch.to_string(),
        ]
    }
}

/// Install the packages into `venv` and ask `rocm-sdk` where they are.
pub(super) async fn install(
    s: &Session<'_>,
    id: &str,
    rocm: &RocmBuild,
    venv: &Env,
    python_tag: &str,
    envs: &[String],
) -> Result<SdkPaths, WheelBuildError> {
    let mut cmd: Vec<String> = vec![venv.python(), venv.pip.clone(), "install".into()];
    for a in ["--no-index", "--find-links", ROCM_PACKAGES_DIR, "--no-cache-dir", "--disable-pip-version-check"] {
        cmd.push(a.into());
    }
    cmd.extend(["--no-input".into(), "--no-warn-script-location".into(), "--quiet".into(), "--".into()]);
    cmd.push(rocm.build_requirement());
    let (code, _) = s.exec(id, cmd, envs.to_vec(), None, ExecOutput::Stderr).await?;
    if code != 0 {
        return Err(WheelBuildError::Install {
            python: python_tag.into(),
            what: format!("`{}` from --rocm-packages", rocm.build_requirement()),
            code,
        });
    }
    let mut answers = Vec::new();
    for flag in ["--root", "--bin", "--cmake"] {
        let cmd = vec![format!("{}/bin/rocm-sdk", venv.dir), "path".into(), flag.into()];
        let (code, out) = s.exec(id, cmd, envs.to_vec(), None, ExecOutput::Capture).await?;
        let text = String::from_utf8_lossy(&out).trim().to_string();
        if code != 0 || !text.starts_with('/') {
            return Err(WheelBuildError::Input(format!(
                "`rocm-sdk path {flag}` in the build environment of {python_tag} failed (exit code {code}): {text}; \
                 does --rocm-packages hold the devel package (rocm-sdk-devel)?"
            )));
        }
        answers.push(text.lines().last().unwrap_or_default().to_string());
    }
    let [root, bin, cmake] = <[String; 3]>::try_from(answers).expect("three answers");
    Ok(SdkPaths { root, bin, cmake })
}

/// The target list in the other variables ROCm's tools read, as a kernel
/// build exports them (`GPU_TARGETS`, `AMDGPU_TARGETS`, `HIP_OFFLOAD_ARCH`,
/// and hipcc's own default list `HCC_AMDGPU_TARGET`, comma-separated, which
/// hipcc takes instead of asking `rocm_agent_enumerator` and ignores when the
/// command names `--offload-arch`): taken from
/// the build's final `PYTORCH_ROCM_ARCH` (an axis of that name wins over
/// quarry's list), each left alone when an axis sets it.
fn target_env(env: &[String]) -> Vec<String> {
    let value = |name: &str| env.iter().rev().find_map(|e| e.strip_prefix(name)?.strip_prefix('=')).map(str::to_string);
    let Some(list) = value("PYTORCH_ROCM_ARCH") else { return Vec::new() };
    let targets = match crate::code_objects::target_list::TargetList::parse(&list, "PYTORCH_ROCM_ARCH") {
        Ok(l) => l.targets,
        Err(e) => {
            log::warn!(
                "PYTORCH_ROCM_ARCH={list} is not a target list ({e}): GPU_TARGETS and the others are left unset"
            );
            return Vec::new();
        }
    };
    [
        ("GPU_TARGETS", targets.join(";")),
        ("AMDGPU_TARGETS", targets.join(";")),
        ("HIP_OFFLOAD_ARCH", targets.join(";")),
        ("HCC_AMDGPU_TARGET", targets.join(",")),
    ]
    .into_iter()
    .filter(|(name, _)| value(name).is_none())
    .map(|(name, v)| format!("{name}={v}"))
    .collect()
}

/// The build's environment pointed at the packages' tree.
pub(super) fn apply_env(env: &mut Vec<String>, paths: &SdkPaths, rocm: &RocmBuild) {
    for e in env.iter_mut() {
        if let Some(rest) = e.strip_prefix("PATH=") {
            // After the environment's own bin (its python, rocm-sdk), before the system's.
            *e = match rest.split_once(':') {
                Some((first, others)) => format!("PATH={first}:{}:{others}", paths.bin),
                None => format!("PATH={rest}:{}", paths.bin),
            };
        }
    }
    env.extend(target_env(env));
    env.push(format!("ROCM_HOME={}", paths.root));
    env.push(format!("ROCM_PATH={}", paths.root));
    env.push(format!("CMAKE_PREFIX_PATH={}", paths.cmake));
    env.push(format!("PYTORCH_EXTRA_INSTALL_REQUIREMENTS={}", rocm.pin.requirement()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::rocm_init::VersionPolicy;

    #[test]
    fn environment_points_at_the_packages() {
        let rocm = RocmBuild {
            packages: RocmPackages {
                dir: "/d".into(),
                version: "5.7.dev0".into(),
                files: vec![],
                libraries: Default::default(),
            },
            extras: vec!["libraries".into(), "devel".into()],
            pin: RocmPin {
                version: "5.7.dev0".into(),
                policy: VersionPolicy::Exact,
                preload: vec![],
                fail_on_mismatch: false,
            },
        };
        assert_eq!(rocm.build_requirement(), "rocm[libraries,devel]==5.7.dev0");
        let paths = SdkPaths { root: "/r".into(), bin: "/r/bin".into(), cmake: "/r/lib/cmake".into() };
        let mut env = vec![
            "PYTORCH_ROCM_ARCH=gfx942".to_string(),
            "PATH=/quarry/env/cp313/bin:/usr/bin:/bin".to_string(),
            "PYTORCH_ROCM_ARCH=gfx90a;gfx1100".to_string(),
            "AMDGPU_TARGETS=gfx90a".to_string(),
        ];
        apply_env(&mut env, &paths, &rocm);
        assert_eq!(env[1], "PATH=/quarry/env/cp313/bin:/r/bin:/usr/bin:/bin");
        // The axis's targets (the later value), not quarry's list; an axis's own variable kept.
        assert!(env.contains(&"GPU_TARGETS=gfx90a;gfx1100".to_string()), "{env:?}");
        assert!(env.contains(&"HCC_AMDGPU_TARGET=gfx90a,gfx1100".to_string()), "{env:?}");
        assert!(!env.iter().any(|e| e.starts_with("HIPCC_COMPILE_FLAGS_APPEND=")), "{env:?}");
        assert_eq!(env.iter().filter(|e| e.starts_with("AMDGPU_TARGETS=")).count(), 1, "{env:?}");
        assert!(env.contains(&"CMAKE_PREFIX_PATH=/r/lib/cmake".to_string()));
        assert!(env.contains(&"PYTORCH_EXTRA_INSTALL_REQUIREMENTS=rocm[libraries]==5.7.dev0".to_string()));
    }

    #[test]
    fn the_other_variables_follow_pytorch_rocm_arch_unless_set() {
        let env = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got =
            target_env(&env(&["PYTORCH_ROCM_ARCH=gfx942", "PYTORCH_ROCM_ARCH=gfx90a,gfx942", "GPU_TARGETS=gfx1100"]));
        assert_eq!(
            got,
            ["AMDGPU_TARGETS=gfx90a;gfx942", "HIP_OFFLOAD_ARCH=gfx90a;gfx942", "HCC_AMDGPU_TARGET=gfx90a,gfx942"]
        );
        assert!(target_env(&env(&["PYTORCH_ROCM_ARCH=sm_80"])).is_empty());
        assert!(target_env(&env(&["PATH=/bin"])).is_empty());
    }
}
