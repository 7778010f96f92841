//! The platform tags a repaired wheel gets, chosen as auditwheel 6.x
//! chooses them: the requested policy (`--plat`, `auto` = the best
//! reachable), refused when a limit forbids it, plus the higher policy the
//! wheel also satisfies unless `--only-plat`.

use super::RepairError;
use crate::wheel::analyze::Analysis;
use crate::wheel::policy::Policies;

/// The platform tags to give the repaired wheel (first = the policy whose
/// whitelist decides what is bundled), as auditwheel chooses them.
pub(super) fn choose_tags(a: &Analysis, plat: Option<&str>, only_plat: bool) -> Result<Vec<String>, RepairError> {
    let p = &a.policies;
    let requested_base = plat.filter(|s| *s != "auto");
    let mut overall = a.graftable_policy();
    // Do not pick a higher policy that would bundle more libraries than the
    // requested one needs.
    let graft_count = |filter: &dyn Fn(usize) -> bool| {
        (1..p.len()).filter(|&i| filter(i)).map(|i| a.external_refs[i].libs.len()).min().unwrap_or(0)
    };
    let requested = match requested_base {
        None => {
            let count = graft_count(&|_| true);
            let graft = (0..p.len()).rev().find(|&i| a.external_refs[i].libs.len() <= count).unwrap_or(Policies::LINUX);
            overall = overall.min(graft);
            if overall == Policies::LINUX {
                p.lowest()
            } else {
                overall
            }
        }
        Some(name) => {
            let idx = p.find(name).filter(|&i| i != Policies::LINUX).ok_or_else(|| RepairError::UnknownPlat {
                plat: name.to_string(),
                arch: p.arch.to_string(),
                known: p.names().join(", "),
            })?;
            let base = format!("{}_", p.get(idx).base);
            let count = graft_count(&|i| p.get(i).name.starts_with(&base));
            let graft = (0..p.len()).rev().find(|&i| a.external_refs[i].libs.len() <= count).unwrap_or(Policies::LINUX);
            overall = overall.min(graft);
            idx
        }
    };
    let name = &p.get(requested).name;
    let limits = [
        (
            a.symbol_policy,
            "it uses symbol versions too recent for it (rebuild on an older toolchain, e.g. a manylinux image)",
        ),
        (a.blacklist_policy, "it uses blacklisted symbols"),
        (a.machine_policy, "it needs CPU instructions above the x86-64 baseline"),
        (a.pyfpe_policy, "it uses the PyFPE_jbuf function"),
    ];
    for (limit, why) in limits {
        if requested > limit {
            let best = a.graftable_policy();
            let reachable =
                if best == Policies::LINUX { "none".to_string() } else { format!("`{}`", p.get(best).name) };
            return Err(RepairError::Unreachable { policy: name.clone(), why, reachable });
        }
    }
    let mut abis: Vec<String> = std::iter::once(name.clone()).chain(p.get(requested).aliases.iter().cloned()).collect();
    // `--only-plat`: the requested policy only, not also a higher one the
    // wheel would satisfy.
    if requested < overall && !only_plat {
        let higher = p.get(overall);
        abis = std::iter::once(higher.name.clone()).chain(higher.aliases.iter().cloned()).chain(abis).collect();
    }
    Ok(abis)
}
