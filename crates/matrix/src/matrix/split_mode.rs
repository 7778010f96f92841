//! How a matrix file asks for its wheels to be split: `split = true` (each
//! wheel split into host and device wheels), or sharded by GPU target
//! (`merge = true`, or `split = "by-target"`: one shard per value of the
//! target axis, merged by `collect`; see `sharding`).

use std::collections::BTreeMap;

/// Axes that carry the GPU target list: quarry's own `targets`, or one
/// named after a variable builds read it from (the axis `pytorch_rocm_arch`
/// sets `PYTORCH_ROCM_ARCH`).
pub const TARGET_AXES: [&str; 5] = ["targets", "pytorch_rocm_arch", "gpu_targets", "amdgpu_targets", "gpu_archs"];

/// `split` as a matrix file may write it: `true`/`false`, or `"by-target"`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum RawSplit {
    Flag(bool),
    Mode(String),
}

/// How a wheel job's products are split: (split each wheel, merge shards).
pub fn resolve(
    split: Option<RawSplit>,
    merge: bool,
    wheel_job: bool,
    axes: &BTreeMap<String, Vec<String>>,
) -> Result<(bool, bool), (&'static str, String)> {
    let (split, by_target) = match split {
        None | Some(RawSplit::Flag(false)) => (false, false),
        Some(RawSplit::Flag(true)) => (true, false),
        Some(RawSplit::Mode(m)) if m == "by-target" => (false, true),
        Some(RawSplit::Mode(m)) => {
            return Err(("job.split", format!("`{m}`: give true, false or \"by-target\" (shards merged by collect)")))
        }
    };
    let merge = merge || by_target;
    if (split || merge) && !wheel_job {
        let field = if split { "job.split" } else { "job.merge" };
        return Err((field, "only wheel jobs split their products into host and device wheels".into()));
    }
    if split && merge {
        return Err(("job.split", "a merged matrix splits once, when collect merges: leave split out".into()));
    }
    if merge && target_axis(axes).is_none() {
        return Err((
            "job.merge",
            format!(
                "merging shards needs an axis over GPU targets (one of: {}), one target set per value",
                TARGET_AXES.join(", ")
            ),
        ));
    }
    Ok((split, merge))
}

/// The matrix's axis of GPU targets, when it has one.
pub fn target_axis(axes: &BTreeMap<String, Vec<String>>) -> Option<&'static str> {
    TARGET_AXES.iter().copied().find(|a| axes.contains_key(*a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axes(names: &[&str]) -> BTreeMap<String, Vec<String>> {
        names.iter().map(|n| (n.to_string(), vec!["x".to_string()])).collect()
    }

    #[test]
    fn split_and_merge_are_read_and_checked() {
        let t = axes(&["targets", "python"]);
        assert_eq!(resolve(None, false, true, &t), Ok((false, false)));
        assert_eq!(resolve(Some(RawSplit::Flag(true)), false, true, &t), Ok((true, false)));
        assert_eq!(resolve(Some(RawSplit::Mode("by-target".into())), false, true, &t), Ok((false, true)));
        assert_eq!(resolve(None, true, true, &axes(&["pytorch_rocm_arch"])), Ok((false, true)));
        assert_eq!(resolve(None, true, true, &axes(&["python"])).unwrap_err().0, "job.merge");
        assert_eq!(resolve(None, true, false, &t).unwrap_err().0, "job.merge");
        assert_eq!(resolve(Some(RawSplit::Mode("sideways".into())), false, true, &t).unwrap_err().0, "job.split");
        assert_eq!(resolve(Some(RawSplit::Flag(true)), true, true, &t).unwrap_err().0, "job.split");
    }
}
