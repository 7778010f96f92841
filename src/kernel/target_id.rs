//! Matching requested target ids against the code objects a file holds,
//! the way the HIP runtime picks a code object for a GPU. A target id is a
//! processor and optional features (`gfx90a:xnack+`, `gfx942:sramecc+:xnack-`).
//! A code object built with a feature unset ("any") runs in either mode of
//! that feature; one built with `xnack+` runs only where xnack is on, with
//! `xnack-` only where it is off. A requested feature fixes the GPU's mode;
//! a feature left out of the request may be either way on the GPU, so both
//! modes must be covered (by an "any" code object, or by a `+` and a `-` one).
//! A file with no code object for the processor lacks the target as requested.

/// One target id, features as (name, on) in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TargetId {
    processor: String,
    features: Vec<(String, bool)>,
}

impl TargetId {
    fn parse(id: &str) -> TargetId {
        let mut parts = id.split(':');
        let processor = parts.next().unwrap_or_default().to_string();
        let mut features: Vec<(String, bool)> = parts
            .filter_map(|f| {
                let on = f.ends_with('+');
                let name = f.strip_suffix(['+', '-'])?;
                Some((name.to_string(), on))
            })
            .collect();
        features.sort();
        TargetId { processor, features }
    }

    fn setting(&self, name: &str) -> Option<bool> {
        self.features.iter().find(|(n, _)| n == name).map(|(_, on)| *on)
    }

    fn render(&self) -> String {
        let mut s = self.processor.clone();
        for (name, on) in &self.features {
            s.push(':');
            s.push_str(name);
            s.push(if *on { '+' } else { '-' });
        }
        s
    }
}

/// What a file lacks of one requested target id: the target ids (GPU modes)
/// no code object of `have` (full target ids) runs on. Empty: covered.
/// With no code for the processor at all, the request itself, as written.
pub fn uncovered(requested: &str, have: &[String]) -> Vec<String> {
    let want = TargetId::parse(requested);
    let codes: Vec<TargetId> =
        have.iter().map(|h| TargetId::parse(h)).filter(|c| c.processor == want.processor).collect();
    if codes.is_empty() {
        return vec![requested.to_string()];
    }
    // Features the request leaves open and some code object fixes: each may be on or off.
    let mut open: Vec<String> = codes
        .iter()
        .flat_map(|c| c.features.iter().map(|(n, _)| n.clone()))
        .filter(|n| want.setting(n).is_none())
        .collect();
    open.sort();
    open.dedup();
    let mut missing = Vec::new();
    for bits in 0u32..(1 << open.len()) {
        let mut mode = want.clone();
        mode.features.extend(open.iter().enumerate().map(|(i, n)| (n.clone(), bits & (1 << i) != 0)));
        mode.features.sort();
        let runs = |c: &TargetId| c.features.iter().all(|(n, on)| mode.setting(n).is_none_or(|m| m == *on));
        if !codes.iter().any(runs) {
            missing.push(mode.render());
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn matching_follows_the_hip_runtime() {
        // A feature unset in the code object runs in either mode.
        assert!(uncovered("gfx90a:xnack+", &ids(&["gfx90a"])).is_empty());
        assert!(uncovered("gfx90a", &ids(&["gfx90a"])).is_empty());
        // Features must agree where both say something.
        assert_eq!(uncovered("gfx90a:xnack+", &ids(&["gfx90a:xnack-"])), ["gfx90a:xnack+"]);
        assert_eq!(uncovered("gfx942:sramecc+:xnack-", &ids(&["gfx942:sramecc-:xnack+"])), ["gfx942:sramecc+:xnack-"]);
        assert!(uncovered("gfx942:sramecc+:xnack-", &ids(&["gfx942:sramecc+"])).is_empty());
        // A request without features: both modes of every feature code fixes.
        assert_eq!(uncovered("gfx90a", &ids(&["gfx90a:xnack+"])), ["gfx90a:xnack-"]);
        assert!(uncovered("gfx90a", &ids(&["gfx90a:xnack+", "gfx90a:xnack-"])).is_empty());
        assert_eq!(
            uncovered("gfx942", &ids(&["gfx942:sramecc+:xnack-", "gfx942:sramecc-"])),
            ["gfx942:sramecc+:xnack+"]
        );
        // Another processor's code does not count; the request is named as written.
        assert_eq!(uncovered("gfx908:xnack-", &ids(&["gfx90a", "gfx1100"])), ["gfx908:xnack-"]);
        assert!(uncovered("gfx1100", &ids(&["gfx1100", "gfx90a:xnack+"])).is_empty());
    }
}
