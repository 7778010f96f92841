//! The HIP runtime's choice of code, done from files: for a fat binary,
//! the code object of each wrapper's bundle that runs on the device (see
//! `code_objects::target_id`); for a device-split binary, ROCm's kpack
//! loader: the marker's search paths with `@GFXARCH@` expanded for each
//! candidate name of the device, most specific first (the device's target
//! id with features dropped from the right, then its generic processor's),
//! and, as [`Loader`] says, either the first candidate for which an
//! archive exists decides (that archive must hold `kernel_name#i`, or the
//! load fails: an xnack-specific archive that lacks a kernel shadows the
//! full one) or a candidate whose archive lacks the kernel falls through to
//! the next, less specific one (the loader since rocm-systems#9953).
//! `ROCM_KPACK_DISABLE` (set, not empty, not starting with `0`) makes the
//! runtime refuse every device-split binary, as it does in both;
//! `ROCM_KPACK_PATH` (archives on the machine) replaces the marker's search
//! paths and `ROCM_KPACK_PATH_PREFIX` comes before them (the lookup is in
//! `super::Archives`).

use crate::code_objects::target_id::{Setting, TargetId, GENERIC};

/// Which kpack loader an install set is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Loader {
    /// The first candidate with an archive decides (ROCm 7's runtime).
    Rocm7,
    /// A candidate whose archive lacks the kernel falls through to the
    /// next (rocm-systems#9953, August 2026; the newest, the default).
    #[default]
    Rocm10,
}

impl Loader {
    pub fn name(self) -> &'static str {
        match self {
            Loader::Rocm7 => "rocm-7",
            Loader::Rocm10 => "rocm-10",
        }
    }

    /// `rocm-7`, `rocm-10`, or a ROCm version (`7.1`, `10.0`: below 10
    /// is the loader without fall-through).
    pub fn parse(s: &str) -> Option<Loader> {
        let v = s.trim().trim_start_matches("rocm-").trim_start_matches("rocm");
        let major: u32 = v.split('.').next()?.parse().ok()?;
        Some(if major >= 10 { Loader::Rocm10 } else { Loader::Rocm7 })
    }

    pub fn falls_through(self) -> bool {
        self == Loader::Rocm10
    }
}

/// Whether `ROCM_KPACK_DISABLE`'s value turns the kpack loader off.
pub fn disabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && !v.starts_with('0'))
}

/// The names the loader tries for `device` (a full target id), in order.
pub fn candidates(device: &TargetId) -> Vec<String> {
    let mut out = Vec::new();
    let generic = GENERIC.iter().find(|(_, m)| m.contains(&device.processor.as_str())).map(|(g, _)| *g);
    for processor in std::iter::once(device.processor.as_str()).chain(generic) {
        let features: Vec<String> = [("sramecc", device.sramecc), ("xnack", device.xnack)]
            .into_iter()
            .filter_map(|(name, s)| match s {
                Setting::Any => None,
                Setting::On => Some(format!("{name}+")),
                Setting::Off => Some(format!("{name}-")),
            })
            .collect();
        let n = features.len();
        for mask in (0..1u32 << n).rev() {
            let mut s = processor.to_string();
            for (i, f) in features.iter().enumerate() {
                if mask & (1 << (n - 1 - i)) != 0 {
                    s.push(':');
                    s.push_str(f);
                }
            }
            out.push(s);
        }
    }
    out
}

/// The device modes a requested target stands for: a feature the request
/// leaves open is checked both ways when some code for the processor fixes
/// it (`gfx90a` with an `xnack+` archive: gfx90a:xnack+ and gfx90a:xnack-).
pub fn modes(requested: &TargetId, available: &[TargetId]) -> Vec<TargetId> {
    let same: Vec<&TargetId> = available.iter().filter(|a| a.processor == requested.processor).collect();
    let open = |pick: fn(&TargetId) -> Setting| {
        if pick(requested) == Setting::Any && same.iter().any(|a| pick(a) != Setting::Any) {
            vec![Setting::On, Setting::Off]
        } else {
            vec![pick(requested)]
        }
    };
    let mut out = Vec::new();
    for sramecc in open(|t| t.sramecc) {
        for xnack in open(|t| t.xnack) {
            out.push(TargetId { processor: requested.processor.clone(), sramecc, xnack });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn candidates_drop_features_from_the_right_then_try_the_generic() {
        assert_eq!(
            candidates(&t("gfx942:sramecc+:xnack-")),
            [
                "gfx942:sramecc+:xnack-",
                "gfx942:sramecc+",
                "gfx942:xnack-",
                "gfx942",
                "gfx9-4-generic:sramecc+:xnack-",
                "gfx9-4-generic:sramecc+",
                "gfx9-4-generic:xnack-",
                "gfx9-4-generic"
            ]
        );
        assert_eq!(candidates(&t("gfx1100")), ["gfx1100", "gfx11-generic"]);
        assert_eq!(candidates(&t("gfx90a:xnack+")), ["gfx90a:xnack+", "gfx90a"]);
    }

    #[test]
    fn open_features_are_checked_both_ways_when_code_fixes_them() {
        let m = modes(&t("gfx90a"), &[t("gfx90a:xnack+"), t("gfx942")]);
        assert_eq!(m, [t("gfx90a:xnack+"), t("gfx90a:xnack-")]);
        assert_eq!(modes(&t("gfx90a"), &[t("gfx90a")]), [t("gfx90a")]);
        assert_eq!(modes(&t("gfx90a:xnack-"), &[t("gfx90a:xnack+")]), [t("gfx90a:xnack-")]);
    }
}
