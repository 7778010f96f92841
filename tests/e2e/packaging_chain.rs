//! quarry's packaging-chain table against the data it was taken from: the
//! pinned `rocm-bootstrap` wheel from PyPI (checked against its sha256),
//! imported by Python from the wheel itself, `packaging_chain()` of every
//! target it knows. A target, sub-family or family that differs, or a
//! target one side lacks, fails.

use crate::common;

use quarry::code_objects::packaging_chain;
use std::collections::BTreeMap;
use std::process::Command;

fn pinned_wheel() -> std::path::PathBuf {
    common::rocm_bootstrap_wheel()
}

#[test]
fn the_table_is_rocm_bootstraps_packaging_chain() {
    let wheel = pinned_wheel();
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from rocm_bootstrap import targets as t
out = {}
for g in t.ALL_TARGETS:
    chain = t.packaging_chain(g.name)
    out[g.name] = [b.key for b in chain]
generic = {v.llvm_generic: v.key for v in vars(t).values()
           if isinstance(v, t.TargetBundle) and v.llvm_generic}
print(json.dumps({"chains": out, "generic": generic}))
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(&wheel).output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    #[derive(serde::Deserialize)]
    struct Data {
        chains: BTreeMap<String, Vec<String>>,
        generic: BTreeMap<String, String>,
    }
    let data: Data = serde_json::from_slice(&out.stdout).unwrap();
    let theirs = data.chains;
    let ours: BTreeMap<String, String> =
        packaging_chain::generic_groups().map(|(g, k)| (g.to_string(), k.to_string())).collect();
    assert_eq!(ours, data.generic, "generic processors and the groups that hold their code");
    assert!(theirs.len() >= 30, "rocm-bootstrap listed only {} targets", theirs.len());
    for (target, keys) in &theirs {
        let ours = packaging_chain::chain(target).unwrap_or_else(|| panic!("quarry's table lacks {target}"));
        assert_eq!(keys, &[ours.target, ours.sub_family, ours.family], "the chain of {target}");
    }
    for target in packaging_chain::known_targets() {
        assert!(theirs.contains_key(target), "rocm-bootstrap does not know {target}, which quarry's table lists");
    }
}
