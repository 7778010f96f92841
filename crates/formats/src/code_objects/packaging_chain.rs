//! Which packages hold a GPU target's device code in ROCm's Python
//! packaging: the target's own, its sub-family's and its family's
//! (`gfx1151` -> `gfx115x` -> `gfx11`). The table is the data of ROCm's
//! `rocm-bootstrap` 0.3.0 (`targets.py`: `packaging_chain`), MIT licensed;
//! it is Python source, not a data file, so it is carried here as a table
//! and `tests/e2e/packaging_chain.rs` checks it, target by target, against the
//! pinned wheel's own `packaging_chain()` run by Python.

/// The pinned rocm-bootstrap this table comes from (its wheel's sha256).
pub const ROCM_BOOTSTRAP_VERSION: &str = "0.3.0";
pub const ROCM_BOOTSTRAP_WHEEL_SHA256: &str = "62d0160ecdd86f7132dbab9aec257cb2c96327df2592b0633aa6bb56399cc095";

/// (target, sub-family key, family key), in rocm-bootstrap's order.
const CHAIN: &[(&str, &str, &str)] = &[
    ("gfx900", "gfx9_0", "gfx9"),
    ("gfx902", "gfx9_0", "gfx9"),
    ("gfx904", "gfx9_0", "gfx9"),
    ("gfx906", "gfx9_0", "gfx9"),
    ("gfx908", "gfx9_0", "gfx9"),
    ("gfx909", "gfx9_0", "gfx9"),
    ("gfx90a", "gfx9_0", "gfx9"),
    ("gfx90c", "gfx9_0", "gfx9"),
    ("gfx942", "gfx9_4", "gfx9"),
    ("gfx950", "gfx9_5", "gfx9"),
    ("gfx1010", "gfx10_1", "gfx10"),
    ("gfx1011", "gfx10_1", "gfx10"),
    ("gfx1012", "gfx10_1", "gfx10"),
    ("gfx1013", "gfx10_1", "gfx10"),
    ("gfx1030", "gfx10_3", "gfx10"),
    ("gfx1031", "gfx10_3", "gfx10"),
    ("gfx1032", "gfx10_3", "gfx10"),
    ("gfx1033", "gfx10_3", "gfx10"),
    ("gfx1034", "gfx10_3", "gfx10"),
    ("gfx1035", "gfx10_3", "gfx10"),
    ("gfx1036", "gfx10_3", "gfx10"),
    ("gfx1100", "gfx110x", "gfx11"),
    ("gfx1101", "gfx110x", "gfx11"),
    ("gfx1102", "gfx110x", "gfx11"),
    ("gfx1103", "gfx110x", "gfx11"),
    ("gfx1150", "gfx115x", "gfx11"),
    ("gfx1151", "gfx115x", "gfx11"),
    ("gfx1152", "gfx115x", "gfx11"),
    ("gfx1153", "gfx115x", "gfx11"),
    ("gfx1200", "gfx12_0", "gfx12"),
    ("gfx1201", "gfx12_0", "gfx12"),
    ("gfx1250", "gfx12_5", "gfx12"),
    ("gfx1250-strict", "gfx12_5", "gfx12"),
    ("gfx1251", "gfx12_5", "gfx12"),
];

/// Targets that share another target's package (rocm-bootstrap's
/// `package_owners`).
const OWNERS: &[(&str, &str)] = &[("gfx1250-strict", "gfx1250")];

/// The sub-family or family whose package holds code built for an LLVM
/// generic processor (rocm-bootstrap's `llvm_generic` of each bundle).
const GENERIC_GROUPS: &[(&str, &str)] = &[
    ("gfx9-generic", "gfx9_0"),
    ("gfx9-4-generic", "gfx9_4"),
    ("gfx10-1-generic", "gfx10_1"),
    ("gfx10-3-generic", "gfx10_3"),
    ("gfx11-generic", "gfx11"),
    ("gfx12-generic", "gfx12_0"),
];

/// The packages that hold code for one target, narrowest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The package of the target itself (its owner's, for a shared one).
    pub target: &'static str,
    pub sub_family: &'static str,
    pub family: &'static str,
}

impl Chain {
    /// Package name parts, as rocm-bootstrap's `device_dist_name` spells
    /// them (`_` becomes `-`): `gfx1151`, `gfx115x`, `gfx11`.
    pub fn dist_parts(&self) -> [String; 3] {
        [self.target, self.sub_family, self.family].map(|k| k.replace('_', "-"))
    }
}

/// The chain of a processor (`gfx1151`; features are not part of package
/// names), or None for a target rocm-bootstrap does not know (gfx803).
pub fn chain(processor: &str) -> Option<Chain> {
    let (target, sub_family, family) = *CHAIN.iter().find(|(t, _, _)| *t == processor)?;
    let target = OWNERS.iter().find(|(t, _)| *t == target).map_or(target, |(_, o)| o);
    Some(Chain { target, sub_family, family })
}

/// The group (sub-family or family key) whose package holds code for the
/// generic processor `processor` (`gfx11-generic` -> `gfx11`).
pub fn generic_group(processor: &str) -> Option<&'static str> {
    GENERIC_GROUPS.iter().find(|(g, _)| *g == processor).map(|(_, k)| *k)
}

/// Every (generic processor, group) pair the table knows.
pub fn generic_groups() -> impl Iterator<Item = (&'static str, &'static str)> {
    GENERIC_GROUPS.iter().copied()
}

/// Is `group` a family key (`gfx11`), not a sub-family (`gfx110x`)?
pub fn is_family(group: &str) -> bool {
    CHAIN.iter().any(|(_, _, f)| *f == group)
}

/// Every target the table knows, in its order.
pub fn known_targets() -> impl Iterator<Item = &'static str> {
    CHAIN.iter().map(|(t, _, _)| *t)
}

/// The targets of a sub-family or family key (`gfx110x`, `gfx11`).
pub fn members(group: &str) -> Vec<&'static str> {
    CHAIN.iter().filter(|(_, s, f)| *s == group || *f == group).map(|(t, _, _)| *t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_name_target_sub_family_and_family() {
        let c = chain("gfx1151").unwrap();
        assert_eq!(c.dist_parts(), ["gfx1151", "gfx115x", "gfx11"]);
        assert_eq!(chain("gfx942").unwrap().dist_parts(), ["gfx942", "gfx9-4", "gfx9"]);
        assert_eq!(chain("gfx1250-strict").unwrap().target, "gfx1250");
        assert_eq!(chain("gfx803"), None);
        assert_eq!(members("gfx110x"), ["gfx1100", "gfx1101", "gfx1102", "gfx1103"]);
        assert_eq!(known_targets().count(), 34);
    }
}
