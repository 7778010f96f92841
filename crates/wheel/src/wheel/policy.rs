//! manylinux policies, from auditwheel's policy file vendored as data
//! (`policy/manylinux-policy.json`, MIT, see `policy/LICENSE-auditwheel`).
//! For one architecture, the policies are kept sorted by priority, lowest
//! (the plain `linux` tag) first, so a policy is identified by its index and
//! "the lower of two policies" is the smaller index.

use super::WheelError;
use crate::elf::Architecture;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

const POLICY_JSON: &str = include_str!("policy/manylinux-policy.json");

#[derive(Deserialize)]
struct RawPolicy {
    name: String,
    aliases: Vec<String>,
    priority: u32,
    symbol_versions: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    lib_whitelist: Vec<String>,
    blacklist: BTreeMap<String, Vec<String>>,
}

/// One policy for one architecture.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `manylinux_2_17_x86_64`, or `linux_x86_64`.
    pub name: String,
    /// `manylinux_2_17`.
    pub base: String,
    /// `manylinux2014_x86_64`.
    pub aliases: Vec<String>,
    pub priority: u32,
    /// Allowed versions per namespace, as full names (`GLIBC` -> `GLIBC_2.5`...).
    pub symbol_versions: BTreeMap<String, BTreeSet<String>>,
    /// Libraries a wheel may link without bundling them.
    pub whitelist: BTreeSet<String>,
    /// Symbols a wheel may not use from a whitelisted library.
    pub blacklist: BTreeMap<String, BTreeSet<String>>,
}

/// The policies of one architecture, sorted by priority: index 0 is plain
/// `linux`, then the newest manylinux policy (the least compatible), up to
/// the most compatible one (`manylinux_2_5` on x86_64) at the highest index.
#[derive(Debug, Clone)]
pub struct Policies {
    pub arch: Architecture,
    list: Vec<Policy>,
}

impl Policies {
    /// The manylinux policies for `arch`.
    pub fn for_arch(arch: Architecture) -> Result<Policies, WheelError> {
        let raw: Vec<RawPolicy> = serde_json::from_str(POLICY_JSON)
            .map_err(|e| WheelError::Policy(format!("the vendored policy file does not parse: {e}")))?;
        let a = arch.as_str();
        let mut list: Vec<Policy> = raw
            .into_iter()
            .filter(|p| p.name == "linux" || p.symbol_versions.contains_key(a))
            .map(|p| {
                let symbol_versions = p
                    .symbol_versions
                    .get(a)
                    .filter(|_| p.name != "linux")
                    .map(|m| {
                        m.iter()
                            .map(|(ns, vs)| (ns.clone(), vs.iter().map(|v| format!("{ns}_{v}")).collect()))
                            .collect()
                    })
                    .unwrap_or_default();
                Policy {
                    name: format!("{}_{a}", p.name),
                    aliases: p.aliases.iter().map(|al| format!("{al}_{a}")).collect(),
                    base: p.name,
                    priority: p.priority,
                    symbol_versions,
                    whitelist: p.lib_whitelist.into_iter().collect(),
                    blacklist: p.blacklist.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect(),
                }
            })
            .collect();
        list.sort_by_key(|p| p.priority);
        if list.first().map(|p| p.base.as_str()) != Some("linux") || list.len() < 2 {
            return Err(WheelError::Policy(format!("the policy file has no manylinux policies for {a}")));
        }
        Ok(Policies { arch, list })
    }

    pub fn get(&self, index: usize) -> &Policy {
        &self.list[index]
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (usize, &Policy)> {
        self.list.iter().enumerate()
    }

    /// The plain `linux_<arch>` policy.
    pub const LINUX: usize = 0;

    /// The least preferred manylinux policy (the newest, `manylinux_2_41`).
    pub fn lowest(&self) -> usize {
        1
    }

    /// The most preferred policy (the most compatible, `manylinux_2_5`).
    pub fn highest(&self) -> usize {
        self.list.len() - 1
    }

    /// Find a policy by name or alias, with or without the architecture
    /// suffix (`manylinux_2_17_x86_64`, `manylinux2014`, `manylinux_2_17`).
    pub fn find(&self, name: &str) -> Option<usize> {
        let suffixed = format!("{name}_{}", self.arch.as_str());
        self.list.iter().position(|p| {
            p.name == name || p.aliases.iter().any(|a| a == name) || p.name == suffixed || p.aliases.contains(&suffixed)
        })
    }

    /// Names accepted by [`Policies::find`], for error messages.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().skip(1).map(|p| p.name.clone()).collect()
    }

    /// The most compatible policy whose symbol versions include every required one
    /// (per namespace the policy lists; namespaces it does not list, like
    /// `hip_6.0` or `OPENSSL_1_1_0`, are ignored). Keys of `required` are
    /// library names; values are version names such as `GLIBC_2.14`.
    pub fn versioned_symbols_policy(&self, required: &BTreeMap<String, BTreeSet<String>>) -> usize {
        let mut by_namespace: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for versions in required.values() {
            for v in versions {
                let ns = v.split('_').next().unwrap_or(v);
                by_namespace.entry(ns).or_default().insert(v.as_str());
            }
        }
        (0..self.list.len())
            .rev()
            .find(|&i| {
                let allowed = &self.list[i].symbol_versions;
                by_namespace.iter().all(|(ns, needed)| match allowed.get(*ns) {
                    None => true,
                    Some(set) => needed.iter().all(|v| set.contains(*v)),
                })
            })
            .unwrap_or(Self::LINUX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        pairs.iter().map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect())).collect()
    }

    #[test]
    fn x86_64_policies_match_the_reference_table() {
        let p = Policies::for_arch(Architecture::X86_64).unwrap();
        assert_eq!(p.get(Policies::LINUX).name, "linux_x86_64");
        // Sorted by priority: the most compatible policy ranks highest.
        assert_eq!(p.get(p.highest()).name, "manylinux_2_5_x86_64");
        assert_eq!(p.get(p.lowest()).name, "manylinux_2_41_x86_64");
        assert_eq!(
            p.find("manylinux2014_x86_64").map(|i| p.get(i).name.clone()).as_deref(),
            Some("manylinux_2_17_x86_64")
        );
        assert_eq!(p.find("manylinux_2_28").map(|i| p.get(i).name.clone()).as_deref(), Some("manylinux_2_28_x86_64"));
        // Highest allowed versions from the reference table (GLIBC, GLIBCXX, CXXABI, GCC).
        let table = [
            ("manylinux_2_5", "GLIBC_2.5", "GLIBCXX_3.4.8", "CXXABI_1.3.1", "GCC_4.2.0"),
            ("manylinux_2_17", "GLIBC_2.17", "GLIBCXX_3.4.19", "CXXABI_1.3.7", "GCC_4.8.0"),
            ("manylinux_2_28", "GLIBC_2.28", "GLIBCXX_3.4.24", "CXXABI_1.3.11", "GCC_7.0.0"),
            ("manylinux_2_34", "GLIBC_2.34", "GLIBCXX_3.4.29", "CXXABI_1.3.13", "GCC_7.0.0"),
        ];
        for (name, glibc, glibcxx, cxxabi, gcc) in table {
            let i = p.find(name).unwrap();
            let r = req(&[("libc.so.6", &[glibc]), ("libstdc++.so.6", &[glibcxx, cxxabi]), ("libgcc_s.so.1", &[gcc])]);
            assert_eq!(p.versioned_symbols_policy(&r), i, "{name}");
        }
        let r = req(&[("libc.so.6", &["GLIBC_2.14", "GLIBC_2.2.5"])]);
        assert_eq!(p.get(p.versioned_symbols_policy(&r)).name, "manylinux_2_17_x86_64");
        let m217 = p.get(p.find("manylinux_2_17").unwrap());
        assert!(m217.symbol_versions["GLIBC"].contains("GLIBC_2.17"));
        assert!(!m217.symbol_versions["GLIBC"].contains("GLIBC_2.18"));
        // A version newer than every policy gives plain linux.
        let r = req(&[("libc.so.6", &["GLIBC_2.99"])]);
        assert_eq!(p.versioned_symbols_policy(&r), Policies::LINUX);
        // Namespaces no policy lists are ignored.
        let r = req(&[("libamdhip64.so.6", &["hip_6.0"]), ("libc.so.6", &["GLIBC_2.2.5"])]);
        assert_eq!(p.versioned_symbols_policy(&r), p.highest());
        // The whitelist from the reference notes.
        let m228 = p.get(p.find("manylinux_2_28").unwrap());
        for lib in ["libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1", "libGL.so.1"] {
            assert!(m228.whitelist.contains(lib), "{lib}");
        }
        assert!(!m228.whitelist.contains("libffi.so.8"));
    }

    #[test]
    fn other_architectures_come_from_the_same_data() {
        for arch in [Architecture::Aarch64, Architecture::Ppc64le, Architecture::I686, Architecture::S390x] {
            let p = Policies::for_arch(arch).unwrap();
            assert!(p.len() > 5, "{arch}");
            assert!(p.get(p.lowest()).name.ends_with(arch.as_str()));
        }
    }
}
