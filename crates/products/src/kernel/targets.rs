//! Which GPU targets a kernel build compiles for, and the names the
//! ecosystem reads them under. `--targets auto` (the default) takes
//! `PYTORCH_ROCM_ARCH` / `GPU_ARCHS` when set, else the GPUs of this
//! machine's KFD topology (as `quarry gpus`), else
//! [`crate::engine::gpu::DEFAULT_TARGETS`].
//!
//! Every convention gets the same list, full target ids with their
//! features, through what it reads itself, so none adds ids of its own
//! beside them: hipcc `HCC_AMDGPU_TARGET` ([`env`]), CMake's HIP language
//! and ROCm's `hip-config.cmake` a toolchain file ([`cmake_toolchain`],
//! named by [`command_env`]); `rocm_agent_enumerator`, which keeps only the
//! processors, is left to the programs that ask it.

use super::KernelError;
use crate::code_objects::target_list::TargetList;
use crate::engine::gpu::{self, GpuInfo};

/// The target list, one per line, as `rocm_agent_enumerator` reads it from
/// `ROCM_TARGET_LST` (it prints the processors only: features are dropped);
/// written by the build container.
pub const TARGETS_FILE: &str = "/quarry/targets.lst";
/// The CMake toolchain file the command's `CMAKE_TOOLCHAIN_FILE` names:
/// [`cmake_toolchain`], then an `include()` of the toolchain file the
/// container's environment named, if any (written by the build container).
pub const TOOLCHAIN_FILE: &str = "/quarry/targets.cmake";

/// `--targets`: `auto` or an explicit list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetsArg {
    Auto,
    List(TargetList),
}

/// Parse `auto` or a target list (`gfx90a,gfx942`, `;` and spaces separate
/// too; a target id may carry features: `gfx942:xnack-`), as
/// [`TargetList::parse`] reads every list.
pub fn parse(s: &str) -> Result<TargetsArg, KernelError> {
    if s.trim() == "auto" {
        return Ok(TargetsArg::Auto);
    }
    Ok(TargetsArg::List(TargetList::parse(s, "--targets").map_err(KernelError::Targets)?))
}

/// The processor of a target id (`gfx942:xnack-` -> `gfx942`).
pub fn processor(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}

/// The targets to build for: the list given, or (auto) the environment,
/// the detected GPUs, the default list.
pub fn resolve(arg: &TargetsArg, detected: &[GpuInfo]) -> TargetList {
    match arg {
        TargetsArg::List(l) => l.clone(),
        TargetsArg::Auto => gpu::build_targets(detected),
    }
}

/// The variables a build reads its targets from, every one with the full
/// target ids (features included): `PYTORCH_ROCM_ARCH`, `GPU_ARCHS` and
/// `HIP_OFFLOAD_ARCH` (`;`-separated), `GPU_TARGETS` and `AMDGPU_TARGETS`
/// (CMake lists, also `;`), `HCC_AMDGPU_TARGET` (`,`), and `ROCM_TARGET_LST`.
///
/// hipcc given no `--offload-arch` compiles for `HCC_AMDGPU_TARGET` when it
/// is set and asks `rocm_agent_enumerator` only when it is not (Debian's
/// perl hipcc and ROCm's C++ one alike); a command naming its own
/// `--offload-arch` gets exactly those. Nothing goes into
/// `HIPCC_COMPILE_FLAGS_APPEND`, which hipcc appends after its own list:
/// there, `gfx90a:xnack+` beside the enumerator's bare `gfx90a` is a mix
/// clang refuses.
///
/// `ROCM_TARGET_LST` names the file `rocm_agent_enumerator` lists instead of
/// the machine's GPUs, for programs that ask it; it prints processors only
/// (`gfx90a`), dropping features. CMake gets the full ids from
/// [`cmake_toolchain`] instead ([`command_env`]).
pub fn env(targets: &[String]) -> Vec<String> {
    let list = targets.join(";");
    vec![
        format!("PYTORCH_ROCM_ARCH={list}"),
        format!("GPU_ARCHS={list}"),
        format!("GPU_TARGETS={list}"),
        format!("AMDGPU_TARGETS={list}"),
        format!("HIP_OFFLOAD_ARCH={list}"),
        format!("HCC_AMDGPU_TARGET={}", targets.join(",")),
        format!("ROCM_TARGET_LST={TARGETS_FILE}"),
    ]
}

/// What the command's environment adds to the container's:
/// `CMAKE_TOOLCHAIN_FILE` (CMake 3.21+ reads it on a build tree's first
/// configure) naming [`cmake_toolchain`]'s file. Set for the command only, so
/// the container's preparation still sees the image's (or `--env`'s) own
/// toolchain file, which quarry's then includes.
pub fn command_env() -> Vec<String> {
    vec![format!("CMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}")]
}

/// The CMake toolchain file of the build: the targets, features included, as
/// cache entries, the way a user's `-D` would give them.
/// `CMAKE_HIP_ARCHITECTURES` is CMake's HIP language's list: unset, CMake
/// asks `rocm_agent_enumerator` and strips features from what it prints.
/// `GPU_TARGETS` and `AMDGPU_TARGETS` are ROCm's `hip-config.cmake`'s
/// (`hip::device` gets one `--offload-arch` per entry): unset, it gives none
/// and clang compiles for its default processor. A value given with `-D`, or
/// set by the project before `project()`, wins.
pub fn cmake_toolchain(targets: &[String]) -> String {
    let list = cmake_quoted(&targets.join(";"));
    let mut out = String::from("# Written by `quarry kernel build`: the GPU targets (--targets), features included.\n");
    for (name, doc) in [
        ("CMAKE_HIP_ARCHITECTURES", "HIP architectures"),
        ("GPU_TARGETS", "GPU targets to compile for"),
        ("AMDGPU_TARGETS", "AMD GPU targets to compile for"),
    ] {
        out.push_str(&format!("set({name} {list} CACHE STRING \"{doc} (quarry kernel build --targets)\")\n"));
    }
    out
}

/// A CMake quoted argument.
fn cmake_quoted(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(target: &str) -> GpuInfo {
        GpuInfo {
            node: 1,
            gfx_target: target.into(),
            family: target.into(),
            families: vec![target.into()],
            render_node: None,
            gid: None,
            simd_count: None,
            unique_id: None,
        }
    }

    #[test]
    fn explicit_lists_parse_and_bad_ones_are_named() {
        assert_eq!(parse("auto").unwrap(), TargetsArg::Auto);
        let list = |t: &[&str]| {
            TargetsArg::List(TargetList {
                targets: t.iter().map(|t| t.to_string()).collect(),
                source: "--targets".into(),
            })
        };
        assert_eq!(parse("gfx90a, gfx942;gfx1100,gfx90a").unwrap(), list(&["gfx90a", "gfx942", "gfx1100"]));
        assert_eq!(parse("gfx942:xnack-").unwrap(), list(&["gfx942:xnack-"]));
        let e = parse("gfx90a,sm_80").unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(chain.starts_with("--targets (`auto` or a target list): `sm_80` is not a target id"), "{chain}");
        assert!(parse("gfx942:xnack").is_err());
        assert!(parse(" , ").is_err());
        assert_eq!(processor("gfx942:sramecc+:xnack-"), "gfx942");
    }

    #[test]
    fn auto_takes_environment_then_detected_then_default() {
        // One test touches the process environment, so nothing races it.
        std::env::remove_var("PYTORCH_ROCM_ARCH");
        std::env::remove_var("GPU_ARCHS");
        let listed = resolve(&parse("gfx1100").unwrap(), &[gpu("gfx942")]);
        assert_eq!((listed.targets, listed.source.as_str()), (vec!["gfx1100".to_string()], "--targets"));
        let detected = resolve(&TargetsArg::Auto, &[gpu("gfx942"), gpu("gfx942"), gpu("gfx90a")]);
        assert_eq!((detected.targets, detected.source.as_str()), (vec!["gfx942".into(), "gfx90a".into()], "detected"));
        let fallback = resolve(&TargetsArg::Auto, &[]);
        assert_eq!(fallback.source, "default");
        assert_eq!(fallback.targets, gpu::DEFAULT_TARGETS);
        std::env::set_var("GPU_ARCHS", "gfx908;gfx90a");
        let from_env = resolve(&TargetsArg::Auto, &[gpu("gfx942")]);
        assert_eq!((from_env.targets, from_env.source.as_str()), (vec!["gfx908".into(), "gfx90a".into()], "GPU_ARCHS"));
        std::env::set_var("PYTORCH_ROCM_ARCH", "gfx1201");
        assert_eq!(resolve(&TargetsArg::Auto, &[]).source, "PYTORCH_ROCM_ARCH");
        std::env::remove_var("PYTORCH_ROCM_ARCH");
        std::env::remove_var("GPU_ARCHS");
    }

    #[test]
    fn every_name_the_ecosystem_reads_with_full_target_ids() {
        let targets = ["gfx90a:xnack+".to_string(), "gfx942:sramecc+:xnack-".into(), "gfx1100".into()];
        let e = env(&targets);
        let list = "gfx90a:xnack+;gfx942:sramecc+:xnack-;gfx1100";
        for name in ["PYTORCH_ROCM_ARCH", "GPU_ARCHS", "GPU_TARGETS", "AMDGPU_TARGETS", "HIP_OFFLOAD_ARCH"] {
            assert!(e.contains(&format!("{name}={list}")), "{name}: {e:?}");
        }
        // hipcc's own default list (commas), never flags appended beside it.
        assert!(e.contains(&"HCC_AMDGPU_TARGET=gfx90a:xnack+,gfx942:sramecc+:xnack-,gfx1100".to_string()), "{e:?}");
        assert!(!e.iter().any(|v| v.starts_with("HIPCC_COMPILE_FLAGS_APPEND=")), "{e:?}");
        assert!(e.contains(&"ROCM_TARGET_LST=/quarry/targets.lst".to_string()));
        assert_eq!(command_env(), ["CMAKE_TOOLCHAIN_FILE=/quarry/targets.cmake"]);
        let toolchain = cmake_toolchain(&targets);
        for name in ["CMAKE_HIP_ARCHITECTURES", "GPU_TARGETS", "AMDGPU_TARGETS"] {
            assert!(toolchain.contains(&format!("set({name} \"{list}\" CACHE STRING ")), "{toolchain}");
        }
        assert_eq!(cmake_quoted("a\"b$c\\"), "\"a\\\"b\\$c\\\\\"");
    }
}
