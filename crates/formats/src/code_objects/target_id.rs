//! Target ids (`gfx942:sramecc+:xnack-`, LLVM's AMDGPUUsage "Target ID")
//! and how the HIP runtime matches a code object's target id to a device:
//! the processor must be the device's, or a generic processor whose
//! family holds the device's (`gfx11-generic` runs on a gfx1101); every
//! feature the code object fixes (`xnack+`) must be the device's setting,
//! and a feature it leaves unset ("any") matches both settings. Among the
//! code objects that match, the runtime prefers the exact processor over a
//! generic one, then the object that fixes more features (LLVM's comgr
//! `lookup_code_object`): [`best`] does the same.

use std::fmt;

/// A feature setting in a target id: unset (built for "any"), on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Setting {
    #[default]
    Any,
    On,
    Off,
}

/// A parsed target id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetId {
    pub processor: String,
    pub sramecc: Setting,
    pub xnack: Setting,
}

/// Why a target id does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetIdError {
    #[error(
        "`{0}` is not a target id: give a processor such as gfx942, optionally with `:sramecc+`/`:xnack-` features"
    )]
    Processor(String),
    #[error("`{id}`: unknown target feature `{feature}` (target ids take sramecc and xnack, each with + or -)")]
    Feature { id: String, feature: String },
}

/// Generic processors and the processors they run on (LLVM's
/// AMDGPUUsage, "Generic processors"). A code object built for one of these
/// runs on every processor listed with it.
pub const GENERIC: &[(&str, &[&str])] = &[
    ("gfx9-generic", &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"]),
    ("gfx9-4-generic", &["gfx940", "gfx941", "gfx942", "gfx950"]),
    ("gfx10-1-generic", &["gfx1010", "gfx1011", "gfx1012", "gfx1013"]),
    ("gfx10-3-generic", &["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"]),
    ("gfx11-generic", &["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"]),
    ("gfx12-generic", &["gfx1200", "gfx1201"]),
    ("gfx12-5-generic", &["gfx1250", "gfx1251"]),
];

/// The processors a generic processor runs on (None: not a generic one).
pub fn generic_members(processor: &str) -> Option<&'static [&'static str]> {
    GENERIC.iter().find(|(g, _)| *g == processor).map(|(_, m)| *m)
}

impl TargetId {
    /// Parse `gfx90a`, `gfx90a:xnack+`, `gfx942:sramecc+:xnack-`; an
    /// offload bundle's `amdgcn-amd-amdhsa--gfx90a:xnack+` too.
    pub fn parse(id: &str) -> Result<TargetId, TargetIdError> {
        let bare = id.rsplit("--").next().unwrap_or(id);
        let mut parts = bare.split(':');
        let processor = parts.next().unwrap_or_default();
        let ok_processor = processor.starts_with("gfx")
            && processor.len() > 3
            && processor.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok_processor {
            return Err(TargetIdError::Processor(id.to_string()));
        }
        let mut t = TargetId { processor: processor.to_string(), sramecc: Setting::Any, xnack: Setting::Any };
        for f in parts {
            let bad = || TargetIdError::Feature { id: id.to_string(), feature: f.to_string() };
            let (name, setting) = match f.as_bytes().last() {
                Some(b'+') => (&f[..f.len() - 1], Setting::On),
                Some(b'-') => (&f[..f.len() - 1], Setting::Off),
                _ => return Err(bad()),
            };
            match name {
                "sramecc" => t.sramecc = setting,
                "xnack" => t.xnack = setting,
                _ => return Err(bad()),
            }
        }
        Ok(t)
    }

    /// The processor with every feature unset (`gfx90a` for `gfx90a:xnack+`).
    pub fn bare(processor: &str) -> TargetId {
        TargetId { processor: processor.to_string(), sramecc: Setting::Any, xnack: Setting::Any }
    }

    pub fn is_generic(&self) -> bool {
        generic_members(&self.processor).is_some()
    }

    /// Does code built for `self` run on `device` (a device's full id, its
    /// features as the driver reports them; an unset device feature is one
    /// the device does not have, which only "any" code matches)?
    pub fn runs_on(&self, device: &TargetId) -> bool {
        let processor = self.processor == device.processor
            || generic_members(&self.processor).is_some_and(|m| m.contains(&device.processor.as_str()));
        let feature = |code: Setting, dev: Setting| code == Setting::Any || code == dev;
        processor && feature(self.sramecc, device.sramecc) && feature(self.xnack, device.xnack)
    }

    /// How well `self` fits `device` when it runs there: higher is preferred.
    fn rank(&self, device: &TargetId) -> (bool, usize) {
        let fixed = [self.sramecc, self.xnack].iter().filter(|s| **s != Setting::Any).count();
        (self.processor == device.processor, fixed)
    }
}

impl fmt::Display for TargetId {
    /// Features in LLVM's order (sramecc before xnack), unset ones left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, s) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            match s {
                Setting::Any => {}
                Setting::On => write!(f, ":{name}+")?,
                Setting::Off => write!(f, ":{name}-")?,
            }
        }
        Ok(())
    }
}

/// The index of the code object the runtime would load on `device` among
/// `candidates`, if any runs there.
pub fn best(candidates: &[TargetId], device: &TargetId) -> Option<usize> {
    let mut found: Option<(usize, (bool, usize))> = None;
    for (i, c) in candidates.iter().enumerate() {
        if !c.runs_on(device) {
            continue;
        }
        let r = c.rank(device);
        if found.is_none_or(|(_, best)| r > best) {
            found = Some((i, r));
        }
    }
    found.map(|(i, _)| i)
}

/// What code for `have` (full target ids) leaves uncovered of one
/// requested target id: the GPU modes no code object runs in. A feature
/// the request leaves out may be either way on the GPU, so both modes must
/// be covered (by an "any" object, or a `+` and a `-` one). Empty:
/// covered. With no code for the processor at all, the request as written.
pub fn uncovered(requested: &str, have: &[String]) -> Result<Vec<String>, TargetIdError> {
    let want = TargetId::parse(requested)?;
    let on_processor = |c: &TargetId| c.runs_on(&TargetId::bare(&want.processor)) || c.processor == want.processor;
    let codes: Vec<TargetId> = have.iter().filter_map(|h| TargetId::parse(h).ok()).filter(on_processor).collect();
    if codes.is_empty() {
        return Ok(vec![requested.to_string()]);
    }
    // Features the request leaves open and some code object fixes.
    let fixes =
        |pick: fn(&TargetId) -> Setting| pick(&want) == Setting::Any && codes.iter().any(|c| pick(c) != Setting::Any);
    let open_sramecc = fixes(|t| t.sramecc);
    let open_xnack = fixes(|t| t.xnack);
    let settings = |open: bool, fixed: Setting| if open { vec![Setting::On, Setting::Off] } else { vec![fixed] };
    let mut missing = Vec::new();
    for sramecc in settings(open_sramecc, want.sramecc) {
        for xnack in settings(open_xnack, want.xnack) {
            let mode = TargetId { processor: want.processor.clone(), sramecc, xnack };
            if !codes.iter().any(|c| c.runs_on(&mode)) {
                missing.push(mode.to_string());
            }
        }
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn ids_parse_and_print_in_llvm_order() {
        assert_eq!(t("gfx942:xnack-:sramecc+").to_string(), "gfx942:sramecc+:xnack-");
        assert_eq!(t("amdgcn-amd-amdhsa--gfx90a:xnack+").to_string(), "gfx90a:xnack+");
        assert_eq!(t("gfx11-generic").to_string(), "gfx11-generic");
        assert!(matches!(TargetId::parse("sm_90"), Err(TargetIdError::Processor(_))));
        assert!(matches!(TargetId::parse("gfx90a:xnack"), Err(TargetIdError::Feature { .. })));
        assert!(matches!(TargetId::parse("gfx90a:wave64+"), Err(TargetIdError::Feature { .. })));
    }

    #[test]
    fn the_runtime_rules_for_features_and_generic_processors() {
        let dev = t("gfx90a:sramecc+:xnack-");
        assert!(t("gfx90a").runs_on(&dev));
        assert!(t("gfx90a:xnack-").runs_on(&dev));
        assert!(!t("gfx90a:xnack+").runs_on(&dev));
        assert!(!t("gfx942").runs_on(&dev));
        assert!(t("gfx11-generic").runs_on(&t("gfx1101")));
        assert!(!t("gfx11-generic").runs_on(&t("gfx1030")));
        // A device without the feature takes only code built for "any".
        assert!(!t("gfx1100:xnack+").runs_on(&t("gfx1100")));
    }

    #[test]
    fn the_exact_processor_then_the_most_specific_object_wins() {
        let c = [t("gfx11-generic"), t("gfx1100"), t("gfx90a"), t("gfx90a:xnack+"), t("gfx90a:xnack-")];
        assert_eq!(best(&c, &t("gfx1100")), Some(1));
        assert_eq!(best(&c, &t("gfx1101")), Some(0));
        assert_eq!(best(&c, &t("gfx90a:sramecc+:xnack+")), Some(3));
        assert_eq!(best(&c, &t("gfx90a:sramecc+:xnack-")), Some(4));
        assert_eq!(best(&c, &t("gfx942")), None);
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn coverage_of_a_requested_target() {
        let u = |req: &str, have: &[&str]| uncovered(req, &ids(have)).unwrap();
        // A feature unset in the code object runs in either mode.
        assert!(u("gfx90a:xnack+", &["gfx90a"]).is_empty());
        assert!(u("gfx90a", &["gfx90a"]).is_empty());
        // Features must agree where both say something.
        assert_eq!(u("gfx90a:xnack+", &["gfx90a:xnack-"]), ["gfx90a:xnack+"]);
        assert_eq!(u("gfx942:sramecc+:xnack-", &["gfx942:sramecc-:xnack+"]), ["gfx942:sramecc+:xnack-"]);
        assert!(u("gfx942:sramecc+:xnack-", &["gfx942:sramecc+"]).is_empty());
        // A request without features: both modes of every feature code fixes.
        assert_eq!(u("gfx90a", &["gfx90a:xnack+"]), ["gfx90a:xnack-"]);
        assert!(u("gfx90a", &["gfx90a:xnack+", "gfx90a:xnack-"]).is_empty());
        assert_eq!(u("gfx942", &["gfx942:sramecc+:xnack-", "gfx942:sramecc-"]), ["gfx942:sramecc+:xnack+"]);
        // Another processor's code does not count; the request is named as written.
        assert_eq!(u("gfx908:xnack-", &["gfx90a", "gfx1100"]), ["gfx908:xnack-"]);
        assert!(u("gfx1100", &["gfx1100", "gfx90a:xnack+"]).is_empty());
        // A generic code object covers its family.
        assert!(u("gfx1101", &["gfx11-generic"]).is_empty());
        assert!(matches!(uncovered("sm_90", &[]), Err(TargetIdError::Processor(_))));
    }
}
