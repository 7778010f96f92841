//! Which manylinux policy a wheel's ELF files satisfy, computed as
//! auditwheel computes it (so both tools give the same answer): the symbol
//! versions the files require, the libraries they need from outside the
//! wheel and each policy's whitelist, blacklisted symbols, and the x86-64
//! ISA level; the final policy is the lowest of those limits.

use super::ldd::{Libc, Resolver, SystemPaths, Tree};
use super::policy::Policies;
use super::WheelError;
use crate::elf::{Architecture, ElfInfo};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Libraries outside the wheel (soname -> resolved path, None when not
/// found) and blacklisted symbols used (library -> symbols), for one policy.
#[derive(Debug, Clone, Default)]
pub struct ExternalRefs {
    pub libs: BTreeMap<String, Option<PathBuf>>,
    pub blacklist: BTreeMap<String, BTreeSet<String>>,
}

/// One ELF file of the wheel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ElfEntry {
    /// Path inside the wheel.
    pub path: String,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Option<String>,
    pub runpath: Option<String>,
    pub symbol_versions: BTreeMap<String, BTreeSet<String>>,
    pub python_extension: bool,
}

/// The analysis of a wheel's ELF files.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub policies: Policies,
    pub elfs: Vec<ElfEntry>,
    /// Required symbol versions of all the wheel's ELF files, per library.
    pub versioned_symbols: BTreeMap<String, BTreeSet<String>>,
    /// External references per policy index, over the files that count.
    pub external_refs: Vec<ExternalRefs>,
    /// External references per ELF file (path inside the wheel) and policy:
    /// what repair must bundle for each file.
    pub external_refs_by_file: BTreeMap<String, Vec<ExternalRefs>>,
    /// Sonames left out by `--exclude`.
    pub excluded: BTreeSet<String>,
    /// The symbol versions each external library needs (what bundling it
    /// brings into the wheel, so what the repairable policy depends on).
    pub external_versions: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Policy indices of each limit.
    pub symbol_policy: usize,
    pub ref_policy: usize,
    pub blacklist_policy: usize,
    pub machine_policy: usize,
    pub pyfpe_policy: usize,
}

impl Analysis {
    /// The policy the wheel satisfies as it is (libraries outside the wheel
    /// count against it): what `auditwheel show` reports.
    pub fn policy(&self) -> usize {
        self.graftable_policy().min(self.ref_policy)
    }

    /// The policy the wheel can reach once external libraries are bundled.
    pub fn graftable_policy(&self) -> usize {
        self.symbol_policy.min(self.pyfpe_policy).min(self.blacklist_policy).min(self.machine_policy)
    }

    /// The external libraries relative to policy `index`.
    pub fn external_libs(&self, index: usize) -> &BTreeMap<String, Option<PathBuf>> {
        &self.external_refs[index].libs
    }
}

/// How to analyse.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Globs matched against needed sonames and resolved paths.
    pub exclude: Vec<String>,
    /// Library search directories (default: this machine's).
    pub system_paths: Option<SystemPaths>,
}

/// Analyse the ELF files `elf_files` (paths inside the wheel) of the wheel
/// unpacked under `root`; `wheel` names it in errors, `arch_hint` is the
/// architecture its file name states, if any.
pub fn analyze(
    wheel: &Path,
    root: &Path,
    elf_files: &[String],
    arch_hint: Option<Architecture>,
    options: &Options,
) -> Result<Analysis, WheelError> {
    let root = root.canonicalize().map_err(|source| WheelError::Io { path: root.to_path_buf(), source })?;
    let system = options.system_paths.clone().unwrap_or_else(SystemPaths::from_host);
    let mut resolver = Resolver::new(system, &options.exclude)?;
    let unsupported = |why: String| WheelError::Unsupported { wheel: wheel.to_path_buf(), why };

    let in_purelib: Vec<&String> =
        elf_files.iter().filter(|f| f.split('/').rev().skip(1).any(|c| c == "purelib")).collect();
    if !in_purelib.is_empty() {
        return Err(unsupported(format!(
            "shared libraries in purelib ({}); a binary wheel must put them in platlib",
            in_purelib.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }

    let mut arch = arch_hint;
    let mut policies: Option<Policies> = None;
    let mut py_trees: BTreeMap<String, Tree> = BTreeMap::new();
    let mut nonpy_trees: BTreeMap<String, Tree> = BTreeMap::new();
    let mut versioned_symbols: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut elfs = Vec::new();
    let mut uses_pyfpe = false;

    for rel in elf_files {
        let tree = resolver.ldd(&root.join(rel))?;
        let Some(elf_arch) = tree.info.architecture() else {
            continue; // auditwheel ignores files of unknown architecture
        };
        match arch {
            None => arch = Some(elf_arch),
            Some(a) if a != elf_arch => continue,
            _ => {}
        }
        if tree.libc == Some(Libc::Musl) {
            return Err(unsupported(format!("`{rel}` links musl libc; quarry checks manylinux (glibc) wheels only")));
        }
        if policies.is_none() {
            policies = Some(Policies::for_arch(elf_arch)?);
        }
        let own_versions = tree.info.required_versions();
        for (lib, vs) in &own_versions {
            versioned_symbols.entry(lib.clone()).or_default().extend(vs.iter().cloned());
        }
        let python_extension = is_python_extension(rel, &tree.info);
        elfs.push(ElfEntry {
            path: rel.clone(),
            soname: tree.info.soname.clone(),
            needed: tree.info.needed.clone(),
            rpath: tree.info.rpath.clone(),
            runpath: tree.info.runpath.clone(),
            symbol_versions: own_versions,
            python_extension,
        });
        if python_extension {
            uses_pyfpe |=
                ["PyFPE_jbuf", "PyFPE_dummy", "PyFPE_counter"].iter().any(|s| tree.info.undefined_symbols.contains(*s));
            py_trees.insert(rel.clone(), tree);
        } else {
            nonpy_trees.insert(rel.clone(), tree);
        }
    }
    let Some(policies) = policies else {
        return Err(unsupported(
            "it holds no ELF file of a known architecture; it is not a platform wheel".to_string(),
        ));
    };

    fixup_trees(&py_trees, &mut nonpy_trees);

    let mut external_refs_by_file: BTreeMap<String, Vec<ExternalRefs>> = BTreeMap::new();
    // The files whose references count for the policy: Python extensions,
    // and other ELF files no file in the wheel needs.
    let mut counted: Vec<String> = py_trees.keys().cloned().collect();
    for (rel, tree) in &py_trees {
        external_refs_by_file.insert(rel.clone(), external_references(&policies, tree, &root));
    }
    let needed_by_any: BTreeSet<&str> =
        py_trees.values().chain(nonpy_trees.values()).flat_map(|t| t.needed.iter().map(String::as_str)).collect();
    for (rel, tree) in &nonpy_trees {
        let file_name = rel.rsplit('/').next().unwrap_or(rel);
        if !needed_by_any.contains(file_name) {
            counted.push(rel.clone());
        }
        external_refs_by_file.insert(rel.clone(), external_references(&policies, tree, &root));
    }

    let mut external_refs: Vec<ExternalRefs> = vec![ExternalRefs::default(); policies.len()];
    for rel in &counted {
        for (i, refs) in external_refs_by_file[rel].iter().enumerate() {
            for (lib, syms) in &refs.blacklist {
                external_refs[i].blacklist.entry(lib.clone()).or_default().extend(syms.iter().cloned());
            }
            for (lib, path) in &refs.libs {
                external_refs[i].libs.insert(lib.clone(), path.clone());
            }
        }
    }

    // The symbol versions of each external library, for policies that
    // would have to bundle it.
    let mut external_versions: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for refs in external_refs.iter().skip(1) {
        for (soname, path) in &refs.libs {
            let Some(path) = path else { continue };
            if external_versions.contains_key(soname) {
                continue;
            }
            if let Ok(info) = crate::elf::read(path) {
                external_versions.insert(soname.clone(), info.required_versions());
            }
        }
    }
    let mut symbol_policy: Option<usize> = None;
    for (i, refs) in external_refs.iter().enumerate().skip(1) {
        let mut symbols = versioned_symbols.clone();
        for soname in refs.libs.keys() {
            if let Some(ext) = external_versions.get(soname) {
                for (k, vs) in ext {
                    symbols.entry(k.clone()).or_default().extend(vs.iter().cloned());
                }
            }
        }
        let found = i.min(policies.versioned_symbols_policy(&symbols));
        if symbol_policy.is_none_or(|s| found > s) {
            symbol_policy = Some(found);
        }
    }
    let symbol_policy = symbol_policy.unwrap_or_else(|| policies.versioned_symbols_policy(&versioned_symbols));
    let ref_policy = (0..policies.len()).rev().find(|&i| external_refs[i].libs.is_empty()).unwrap_or(Policies::LINUX);
    let blacklist_policy =
        (0..policies.len()).rev().find(|&i| external_refs[i].blacklist.is_empty()).unwrap_or(Policies::LINUX);

    let external_sonames: BTreeSet<String> = external_refs
        .iter()
        .skip(1)
        .flat_map(|r| r.libs.iter().filter(|(_, p)| p.is_some()).map(|(s, _)| s.clone()))
        .collect();
    let counted_trees: Vec<&Tree> =
        counted.iter().filter_map(|rel| py_trees.get(rel).or_else(|| nonpy_trees.get(rel))).collect();
    let machine_policy = machine_policy(&policies, &counted_trees, &external_sonames);
    let pyfpe_policy = if uses_pyfpe { Policies::LINUX } else { policies.highest() };

    Ok(Analysis {
        policies,
        elfs,
        versioned_symbols,
        external_versions,
        external_refs,
        external_refs_by_file,
        excluded: resolver.excluded,
        symbol_policy,
        ref_policy,
        blacklist_policy,
        machine_policy,
        pyfpe_policy,
    })
}

/// A Python extension module exports `PyInit_<module>` (or the Python 2 /
/// PyPy cffi equivalents) as a defined function.
fn is_python_extension(rel: &str, info: &ElfInfo) -> bool {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    let module = file.split('.').next().unwrap_or(file);
    let names = [format!("PyInit_{module}"), format!("init{module}"), format!("_cffi_pypyinit_{module}")];
    info.module_init_functions.iter().any(|f| names.contains(f))
}

/// auditwheel's rule: a library in the wheel that could not resolve its own
/// dependencies borrows them from a fully resolved tree that loads it (a
/// bundled library finds its siblings through the extension's RPATH).
fn fixup_trees(py: &BTreeMap<String, Tree>, nonpy: &mut BTreeMap<String, Tree>) {
    let resolved: Vec<Tree> = py.values().chain(nonpy.values()).filter(|t| t.fully_resolved()).cloned().collect();
    for tree in nonpy.values_mut() {
        if tree.fully_resolved() {
            continue;
        }
        let own = super::ldd::follow_links(&tree.path);
        let Some(reference) = resolved
            .iter()
            .find(|r| r.libraries.values().any(|l| l.realpath.as_deref().is_some_and(|p| same_file(p, &own))))
        else {
            continue;
        };
        let mut new_libs = BTreeMap::new();
        let mut all: BTreeSet<String> = tree.libraries.keys().cloned().collect();
        for (soname, lib) in &tree.libraries {
            if lib.realpath.is_none() {
                if let Some(found) = reference.libraries.get(soname) {
                    new_libs.insert(soname.clone(), found.clone());
                    let mut pending: BTreeSet<String> =
                        found.needed.iter().filter(|n| !all.contains(*n)).cloned().collect();
                    while !pending.is_empty() {
                        all.extend(pending.iter().cloned());
                        let mut next = BTreeSet::new();
                        for n in &pending {
                            if let Some(l) = reference.libraries.get(n) {
                                new_libs.insert(n.clone(), l.clone());
                                next.extend(l.needed.iter().filter(|x| !all.contains(*x)).cloned());
                            }
                        }
                        pending = next;
                    }
                    continue;
                }
            }
            new_libs.insert(soname.clone(), lib.clone());
        }
        tree.libraries = new_libs;
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// For each policy: the libraries `tree` needs (transitively) that the
/// policy does not whitelist and that are not inside the wheel, and the
/// blacklisted symbols it uses.
fn external_references(policies: &Policies, tree: &Tree, root: &Path) -> Vec<ExternalRefs> {
    let mut out = Vec::with_capacity(policies.len());
    for (i, policy) in policies.iter() {
        let mut refs = ExternalRefs::default();
        if i != Policies::LINUX {
            let keep = |lib: &String| !crate::elf::is_dynamic_loader(lib) && !policy.whitelist.contains(lib);
            for lib in tree.needed.iter().filter(|l| policy.blacklist.contains_key(*l)) {
                let bad: BTreeSet<String> = policy.blacklist[lib]
                    .iter()
                    .filter(|s| *s == "*" || tree.info.undefined_symbols.contains(*s))
                    .cloned()
                    .collect();
                if !bad.is_empty() {
                    refs.blacklist.insert(lib.clone(), bad);
                }
            }
            let mut pending: Vec<String> = tree.needed.iter().filter(|l| keep(l)).cloned().collect();
            let mut reached: BTreeSet<String> = BTreeSet::new();
            while let Some(lib) = pending.pop() {
                if !reached.insert(lib.clone()) {
                    continue;
                }
                if let Some(l) = tree.libraries.get(&lib) {
                    pending.extend(l.needed.iter().filter(|d| keep(d) && !reached.contains(*d)).cloned());
                }
            }
            for lib in reached {
                let realpath = tree.libraries.get(&lib).and_then(|l| l.realpath.clone());
                if realpath.as_deref().is_some_and(|p| p.starts_with(root)) {
                    continue; // found inside the wheel (through RPATH): not external
                }
                refs.libs.insert(lib, realpath);
            }
        }
        out.push(refs);
    }
    out
}

/// The highest policy every counted file's CPU level allows: an x86-64-v2+
/// file gives plain linux, unless it is an external library some policy
/// whitelists.
fn machine_policy(policies: &Policies, trees: &[&Tree], external_sonames: &BTreeSet<String>) -> usize {
    let mut result = policies.highest();
    let mut checked: BTreeSet<PathBuf> = BTreeSet::new();
    let mut candidates: Vec<(Option<String>, Arc<ElfInfo>)> = Vec::new();
    for tree in trees {
        if checked.insert(tree.path.clone()) {
            candidates.push((None, tree.info.clone()));
        }
        for lib in tree.libraries.values() {
            let (Some(real), Some(info)) = (&lib.realpath, &lib.info) else {
                continue;
            };
            if external_sonames.contains(&lib.soname) && checked.insert(real.clone()) {
                candidates.push((Some(lib.soname.clone()), info.clone()));
            }
        }
    }
    for (soname, info) in candidates {
        if info.x86_isa_needed.is_none() && !info.x86_isa_unknown {
            continue;
        }
        if let Some(soname) = soname {
            let whitelisted = policies.iter().filter(|(_, p)| p.whitelist.contains(&soname)).map(|(i, _)| i).max();
            if let Some(i) = whitelisted.filter(|&i| i > Policies::LINUX) {
                result = result.min(i);
                continue;
            }
        }
        result = Policies::LINUX;
    }
    result
}
