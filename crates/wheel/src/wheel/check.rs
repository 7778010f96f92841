//! `quarry wheel check`: RECORD verified, every ELF file read, the manylinux
//! policy computed, an `abi3` wheel audited against the Stable ABI; no
//! Python and nothing executed.

use super::analyze::{self, Analysis, ElfEntry, Options};
use super::archive::{Scan, WheelZip};
use super::name::WheelName;
use super::policy::Policies;
use super::{record, WheelError};
use crate::elf::Architecture;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The result of checking one wheel.
#[derive(Debug)]
pub struct CheckReport {
    pub wheel: PathBuf,
    pub name: WheelName,
    pub dist_info: String,
    /// One sentence per RECORD problem, each naming the file.
    pub record_problems: Vec<String>,
    /// None when the wheel holds no ELF file (a pure wheel).
    pub analysis: Option<Analysis>,
    /// The abi3 audit, for a wheel tagged `abi3` that holds ELF files.
    pub abi3: Option<super::abi3::Audit>,
}

/// What `--json` prints per wheel.
#[derive(Debug, serde::Serialize)]
pub struct CheckSummary {
    pub wheel: String,
    /// The policy the wheel satisfies as it is (`manylinux_2_17_x86_64`,
    /// `linux_x86_64`); null for a wheel without ELF files.
    pub policy: Option<String>,
    /// Symbol versions required by the wheel's ELF files, per library.
    pub symbol_versions: BTreeMap<String, BTreeSet<String>>,
    /// Libraries outside the wheel that `repair` would bundle (soname ->
    /// resolved path, null when not found on this machine).
    pub external_libs: BTreeMap<String, Option<String>>,
    /// The symbol versions each external library needs, per library it
    /// needs them from: bundling it brings them in (auditwheel shows them).
    pub external_symbol_versions: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Sonames left out by `--exclude`.
    pub excluded_libs: Vec<String>,
    pub record_ok: bool,
    pub record_problems: Vec<String>,
    /// The limit from symbol versions alone.
    pub symbol_policy: Option<String>,
    /// The policy `repair` can reach by bundling the external libraries.
    pub repairable_policy: Option<String>,
    pub pure: bool,
    pub elfs: Vec<ElfEntry>,
    /// For a wheel tagged `abi3`: true when its ELF files import only
    /// Stable ABI symbols of the minimum Python its tag names; null for
    /// other wheels.
    pub abi3_ok: Option<bool>,
    /// The abi3 audit's details (minimum version, symbols outside it).
    pub abi3: Option<super::abi3::Audit>,
    /// AMD GPU targets of code objects in the wheel (filled by the command
    /// line from `code_objects`, the inspector of `quarry code-objects`).
    pub gpu_targets: Vec<String>,
}

/// The architecture a wheel's platform tags name, when they agree.
pub fn arch_from_name(name: &WheelName) -> Option<Architecture> {
    let archs: BTreeSet<Architecture> =
        name.platform_tags.iter().filter_map(|t| Architecture::from_platform_tag(t)).collect();
    (archs.len() == 1).then(|| *archs.iter().next().expect("one element"))
}

/// Members that may be ELF files: the ELF magic, and not Python sources.
/// AMD GPU code objects (`.hsaco`, Tensile `.co`) are ELF files too, but
/// device code: no host policy applies to them (a device wheel may hold
/// nothing else).
pub fn is_elf_member(name: &str, head: &[u8]) -> bool {
    head.starts_with(&object::elf::ELFMAG)
        && !name.ends_with(".py")
        && crate::code_objects::amdgpu::elf_machine(head) != Some(crate::code_objects::amdgpu::EM_AMDGPU)
}

/// Verify RECORD against what the scan measured.
pub fn record_problems(zip: &mut WheelZip, dist_info: &str, scan: &Scan) -> Result<Vec<String>, WheelError> {
    let record_name = format!("{dist_info}/RECORD");
    if !scan.files.contains_key(&record_name) {
        return Ok(vec![format!("`{record_name}` is missing")]);
    }
    let text = zip.read_file(&record_name)?;
    Ok(match record::parse(&text, &record_name) {
        Ok(rows) => record::verify(&rows, &scan.files, &record_name),
        Err(e) => vec![e.to_string()],
    })
}

/// Check one wheel.
pub fn check(wheel: &Path, options: &Options) -> Result<CheckReport, WheelError> {
    let file_name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = WheelName::parse(&file_name)?;
    let mut zip = WheelZip::open(wheel)?;
    let dist_info = zip.dist_info_dir()?;
    let work = tempfile::Builder::new()
        .prefix("quarry-check-")
        .tempdir()
        .map_err(|source| WheelError::Io { path: std::env::temp_dir(), source })?;
    let scan = zip.scan(Some(work.path()), is_elf_member)?;
    let record_problems = record_problems(&mut zip, &dist_info, &scan)?;
    let analysis = if scan.extracted.is_empty() {
        None
    } else {
        Some(analyze::analyze(wheel, work.path(), &scan.extracted, arch_from_name(&name), options)?)
    };
    let abi3 = match super::abi3::claimed_minimum(&name) {
        Some(minimum) if !scan.extracted.is_empty() => {
            let mut imports = BTreeMap::new();
            for rel in &scan.extracted {
                let info = crate::elf::read(&work.path().join(rel))?;
                imports.insert(rel.clone(), info.undefined_symbols.clone());
            }
            Some(super::abi3::audit(minimum, &imports))
        }
        _ => None,
    };
    Ok(CheckReport { wheel: wheel.to_path_buf(), name, dist_info, record_problems, analysis, abi3 })
}

impl CheckReport {
    pub fn record_ok(&self) -> bool {
        self.record_problems.is_empty()
    }

    /// False when an abi3 wheel uses symbols outside what it promises.
    pub fn abi3_ok(&self) -> Option<bool> {
        self.abi3.as_ref().map(|a| a.violations.is_empty())
    }

    /// The policy the wheel satisfies as it is.
    pub fn policy_name(&self) -> Option<String> {
        self.analysis.as_ref().map(|a| a.policies.get(a.policy()).name.clone())
    }

    /// The policy repair aims at by default: the reachable one, or the
    /// lowest manylinux policy when nothing better is reachable.
    pub fn repair_target(a: &Analysis) -> usize {
        match a.graftable_policy() {
            Policies::LINUX => a.policies.lowest(),
            p => p,
        }
    }

    pub fn summary(&self) -> CheckSummary {
        let wheel = self.wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (symbol_versions, external_libs, excluded_libs, symbol_policy, repairable_policy, elfs): (
            _,
            BTreeMap<String, Option<String>>,
            _,
            _,
            _,
            _,
        ) = match &self.analysis {
            Some(a) => (
                a.versioned_symbols.clone(),
                a.external_libs(Self::repair_target(a))
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_ref().map(|p| p.display().to_string())))
                    .collect(),
                a.excluded.iter().cloned().collect(),
                Some(a.policies.get(a.symbol_policy).name.clone()),
                Some(a.policies.get(a.graftable_policy()).name.clone()),
                a.elfs.clone(),
            ),
            None => Default::default(),
        };
        let external_symbol_versions = match &self.analysis {
            Some(a) => a
                .external_versions
                .iter()
                .filter(|(soname, _)| external_libs.contains_key(soname.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => BTreeMap::new(),
        };
        CheckSummary {
            wheel,
            policy: self.policy_name(),
            symbol_versions,
            external_symbol_versions,
            external_libs,
            excluded_libs,
            record_ok: self.record_ok(),
            record_problems: self.record_problems.clone(),
            symbol_policy,
            repairable_policy,
            pure: self.analysis.is_none(),
            elfs,
            abi3_ok: self.abi3_ok(),
            abi3: self.abi3.clone(),
            gpu_targets: Vec::new(),
        }
    }
}
