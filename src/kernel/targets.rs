//! Which GPU targets a kernel build compiles for, and the names the
//! ecosystem reads them under. `--targets auto` (the default) takes
//! `PYTORCH_ROCM_ARCH` / `GPU_ARCHS` when set, else the GPUs of this
//! machine's KFD topology (as `quarry gpus`), else
//! [`crate::engine::gpu::DEFAULT_TARGETS`].

use super::KernelError;
use crate::engine::gpu::{self, GpuInfo, TargetList};

/// `--targets`: `auto` or an explicit list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetsArg {
    Auto,
    List(Vec<String>),
}

/// Parse `auto` or `gfx90a,gfx942` (`;` and spaces separate too; a target
/// id may carry features: `gfx942:xnack-`). Duplicates are dropped.
pub fn parse(s: &str) -> Result<TargetsArg, KernelError> {
    if s.trim() == "auto" {
        return Ok(TargetsArg::Auto);
    }
    let mut out: Vec<String> = Vec::new();
    for t in s.split([',', ';', ' ']).map(str::trim).filter(|t| !t.is_empty()) {
        let processor = processor(t);
        let ok = processor.len() > 3
            && processor.starts_with("gfx")
            && processor[3..].bytes().all(|b| b.is_ascii_alphanumeric())
            && t.split(':').skip(1).all(|f| f.len() > 1 && (f.ends_with('+') || f.ends_with('-')));
        if !ok {
            return Err(KernelError::BadTarget { target: t.to_string() });
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    if out.is_empty() {
        return Err(KernelError::NoTargets);
    }
    Ok(TargetsArg::List(out))
}

/// The processor of a target id (`gfx942:xnack-` -> `gfx942`).
pub fn processor(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}

/// The targets to build for: the list given, or (auto) the environment,
/// the detected GPUs, the default list.
pub fn resolve(arg: &TargetsArg, detected: &[GpuInfo]) -> TargetList {
    match arg {
        TargetsArg::List(l) => TargetList { targets: l.clone(), source: "--targets".into() },
        TargetsArg::Auto => gpu::build_targets(detected),
    }
}

/// The variables a build reads its targets from: `PYTORCH_ROCM_ARCH`,
/// `GPU_ARCHS` and `HIP_OFFLOAD_ARCH` (`;`-separated), `GPU_TARGETS` and
/// `AMDGPU_TARGETS` (CMake lists, also `;`), hipcc's
/// `HIPCC_COMPILE_FLAGS_APPEND` with one `--offload-arch=` per target, and
/// `ROCM_TARGET_LST`, the file `rocm_agent_enumerator` lists instead of the
/// machine's GPUs: CMake initialises `CMAKE_HIP_ARCHITECTURES` from that
/// tool, ROCm's `hip-config.cmake` its `GPU_TARGETS`, hipcc its default
/// `--offload-arch` list (the file is written by the build container).
pub fn env(targets: &[String]) -> Vec<String> {
    let list = targets.join(";");
    let flags: Vec<String> = targets.iter().map(|t| format!("--offload-arch={t}")).collect();
    vec![
        format!("PYTORCH_ROCM_ARCH={list}"),
        format!("GPU_ARCHS={list}"),
        format!("GPU_TARGETS={list}"),
        format!("AMDGPU_TARGETS={list}"),
        format!("HIP_OFFLOAD_ARCH={list}"),
        format!("HIPCC_COMPILE_FLAGS_APPEND={}", flags.join(" ")),
        format!("ROCM_TARGET_LST={}", super::container::TARGETS_FILE),
    ]
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
        assert_eq!(
            parse("gfx90a, gfx942;gfx1100,gfx90a").unwrap(),
            TargetsArg::List(vec!["gfx90a".into(), "gfx942".into(), "gfx1100".into()])
        );
        assert_eq!(parse("gfx942:xnack-").unwrap(), TargetsArg::List(vec!["gfx942:xnack-".into()]));
        let e = parse("gfx90a,sm_80").unwrap_err().to_string();
        assert!(e.contains("`sm_80`"), "{e}");
        assert!(parse("gfx942:xnack").is_err());
        assert!(parse(" , ").is_err());
        assert_eq!(processor("gfx942:sramecc+:xnack-"), "gfx942");
    }

    #[test]
    fn auto_takes_environment_then_detected_then_default() {
        // One test touches the process environment, so nothing races it.
        std::env::remove_var("PYTORCH_ROCM_ARCH");
        std::env::remove_var("GPU_ARCHS");
        let listed = resolve(&TargetsArg::List(vec!["gfx1100".into()]), &[gpu("gfx942")]);
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
    fn every_name_the_ecosystem_reads() {
        let e = env(&["gfx90a".into(), "gfx942".into()]);
        assert!(e.contains(&"PYTORCH_ROCM_ARCH=gfx90a;gfx942".to_string()));
        assert!(e.contains(&"GPU_ARCHS=gfx90a;gfx942".to_string()));
        assert!(e.contains(&"GPU_TARGETS=gfx90a;gfx942".to_string()));
        assert!(e.contains(&"AMDGPU_TARGETS=gfx90a;gfx942".to_string()));
        assert!(e.contains(&"HIP_OFFLOAD_ARCH=gfx90a;gfx942".to_string()));
        assert!(e.contains(&"HIPCC_COMPILE_FLAGS_APPEND=--offload-arch=gfx90a --offload-arch=gfx942".to_string()));
        assert!(e.contains(&"ROCM_TARGET_LST=/quarry/targets.lst".to_string()));
    }
}
