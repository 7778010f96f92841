//! Two wheels compared by what installing them puts on a machine: the
//! name, version and tags; members added, removed and changed (sizes, and
//! which of content, mode, mtime, compression moved; for content, where:
//! the first ELF section, text line or byte); METADATA's requirements
//! (`Requires-Dist` with its markers, `Requires-Python`, `Provides-Extra`);
//! each ELF member's DT_NEEDED, RPATH and RUNPATH; the GPU targets each
//! member has code for (a fat binary's code objects, a `.kpack` archive's
//! architectures), read as `quarry code-objects` reads them.
//!
//! Members are read whole, one pair at a time, so the memory a diff takes
//! is about twice the largest member, not the wheels.

use super::explain::{explain, Detail};
use super::DiffError;
use crate::wheel::metadata::header_values;
use crate::wheel::name::WheelName;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

#[derive(Debug, Clone, serde::Serialize)]
pub struct WheelDiff {
    pub a: String,
    pub b: String,
    pub identical: bool,
    /// `name`, `version`, `tags` (from the file names).
    pub fields: Vec<FieldChange>,
    pub members: Vec<MemberChange>,
    pub requirements: Vec<RequirementChange>,
    pub elf: Vec<ElfChange>,
    pub gpu_targets: Vec<TargetChange>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FieldChange {
    pub field: &'static str,
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MemberChange {
    pub path: String,
    /// `added`, `removed` or `changed`.
    pub change: &'static str,
    /// What of a changed member differs: `content`, `mode`, `mtime`, `compression`.
    pub what: Vec<&'static str>,
    /// Where the content differs first, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub size_from: u64,
    pub size_to: u64,
}

/// A METADATA header value only one wheel has.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RequirementChange {
    /// `Requires-Dist`, `Requires-Python` or `Provides-Extra`.
    pub field: &'static str,
    /// `added` (only in B) or `removed` (only in A).
    pub change: &'static str,
    pub value: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ElfChange {
    pub member: String,
    /// `NEEDED`, `RPATH` or `RUNPATH`.
    pub field: &'static str,
    pub from: Vec<String>,
    pub to: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetChange {
    pub member: String,
    pub from: Vec<String>,
    pub to: Vec<String>,
}

const METADATA_FIELDS: [&str; 3] = ["Requires-Dist", "Requires-Python", "Provides-Extra"];

pub fn is_wheel(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "whl")
}

/// One member's header fields as the comparison sees them.
#[derive(Clone)]
struct Header {
    size: u64,
    mode: Option<u32>,
    mtime: String,
    compression: String,
}

struct Wheel {
    label: String,
    name: WheelName,
    zip: zip::ZipArchive<std::io::BufReader<std::fs::File>>,
    members: BTreeMap<String, Header>,
}

fn error(path: &Path, message: impl Into<String>) -> DiffError {
    DiffError::Image { path: path.display().to_string(), message: message.into() }
}

fn open(path: &Path) -> Result<Wheel, DiffError> {
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = WheelName::parse(&file_name).map_err(|e| error(path, e.to_string()))?;
    let file = std::fs::File::open(path).map_err(|e| error(path, format!("cannot open: {e}")))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| error(path, format!("not a readable zip ({e}); is it truncated or not a wheel?")))?;
    let mut members = BTreeMap::new();
    for i in 0..zip.len() {
        let m = zip.by_index_raw(i).map_err(|e| error(path, format!("member {i}: {e}")))?;
        if m.is_dir() {
            continue;
        }
        let header = Header {
            size: m.size(),
            mode: m.unix_mode(),
            mtime: format!("{:?}", m.last_modified()),
            compression: format!("{:?}", m.compression()),
        };
        let name = m.name().map_err(|e| error(path, format!("member {i}: {e}")))?.to_string();
        members.insert(name, header);
    }
    Ok(Wheel { label: file_name, name, zip, members })
}

impl Wheel {
    fn read(&mut self, member: &str) -> Result<Vec<u8>, DiffError> {
        let path = Path::new(&self.label);
        let mut m = self.zip.by_name(member).map_err(|e| error(path, format!("{member}: {e}")))?;
        let mut data = Vec::with_capacity(m.size().min(1 << 30) as usize);
        m.read_to_end(&mut data).map_err(|e| error(path, format!("{member}: cannot inflate: {e}")))?;
        Ok(data)
    }

    fn metadata(&mut self) -> Result<String, DiffError> {
        let name = self.members.keys().find(|n| n.ends_with(".dist-info/METADATA") && n.matches('/').count() == 1);
        let Some(name) = name.cloned() else {
            return Err(error(Path::new(&self.label), "it has no .dist-info/METADATA: it is not a wheel"));
        };
        Ok(String::from_utf8_lossy(&self.read(&name)?).into_owned())
    }
}

/// Compare wheel `a` with wheel `b`.
pub fn diff(a: &Path, b: &Path) -> Result<WheelDiff, DiffError> {
    let (mut wa, mut wb) = (open(a)?, open(b)?);
    let mut fields = Vec::new();
    let tags =
        |n: &WheelName| format!("{}-{}-{}", n.python_tags.join("."), n.abi_tags.join("."), n.platform_tags.join("."));
    for (field, from, to) in [
        ("name", wa.name.name.clone(), wb.name.name.clone()),
        ("version", wa.name.version.clone(), wb.name.version.clone()),
        ("tags", tags(&wa.name), tags(&wb.name)),
    ] {
        if from != to {
            fields.push(FieldChange { field, from, to });
        }
    }
    let requirements = requirement_changes(&wa.metadata()?, &wb.metadata()?);
    let mut out = WheelDiff {
        a: a.display().to_string(),
        b: b.display().to_string(),
        identical: false,
        fields,
        members: Vec::new(),
        requirements,
        elf: Vec::new(),
        gpu_targets: Vec::new(),
    };
    let names: BTreeSet<String> = wa.members.keys().chain(wb.members.keys()).cloned().collect();
    for name in names {
        let (ha, hb) = (wa.members.get(&name).cloned(), wb.members.get(&name).cloned());
        let da = if ha.is_some() { Some(wa.read(&name)?) } else { None };
        let db = if hb.is_some() { Some(wb.read(&name)?) } else { None };
        member_facts(&mut out, &name, da.as_deref(), db.as_deref());
        let (change, what, detail) = match (&ha, &hb, &da, &db) {
            (Some(x), Some(y), Some(ca), Some(cb)) => {
                let mut what = Vec::new();
                let content = ca != cb;
                if content {
                    what.push("content");
                }
                if x.mode != y.mode {
                    what.push("mode");
                }
                if x.mtime != y.mtime {
                    what.push("mtime");
                }
                if x.compression != y.compression {
                    what.push("compression");
                }
                if what.is_empty() {
                    continue;
                }
                let detail = if content { explain(ca, cb).map(|d| describe(&d)) } else { None };
                ("changed", what, detail)
            }
            (Some(_), None, ..) => ("removed", Vec::new(), None),
            _ => ("added", Vec::new(), None),
        };
        out.members.push(MemberChange {
            path: name.clone(),
            change,
            what,
            detail,
            size_from: ha.as_ref().map_or(0, |h| h.size),
            size_to: hb.as_ref().map_or(0, |h| h.size),
        });
    }
    out.identical = out.fields.is_empty() && out.members.is_empty() && out.requirements.is_empty();
    Ok(out)
}

/// METADATA values only one side has, per field, in the order of the files.
fn requirement_changes(a: &str, b: &str) -> Vec<RequirementChange> {
    let mut out = Vec::new();
    for field in METADATA_FIELDS {
        let (va, vb) = (header_values(a, field), header_values(b, field));
        out.extend(va.iter().filter(|v| !vb.contains(v)).map(|v| RequirementChange {
            field,
            change: "removed",
            value: v.to_string(),
        }));
        out.extend(vb.iter().filter(|v| !va.contains(v)).map(|v| RequirementChange {
            field,
            change: "added",
            value: v.to_string(),
        }));
    }
    out
}

/// The ELF dynamic entries and GPU targets of one member on each side.
fn member_facts(out: &mut WheelDiff, name: &str, a: Option<&[u8]>, b: Option<&[u8]>) {
    if a == b {
        return;
    }
    let dynamic = |data: Option<&[u8]>| {
        let info = data.filter(|d| d.starts_with(b"\x7fELF"))?;
        let info = crate::elf::read_bytes(info, Path::new(name)).ok()?;
        let list = |s: &Option<String>| s.iter().flat_map(|p| p.split(':')).map(str::to_string).collect::<Vec<_>>();
        Some([("NEEDED", info.needed.clone()), ("RPATH", list(&info.rpath)), ("RUNPATH", list(&info.runpath))])
    };
    let (ea, eb) = (dynamic(a), dynamic(b));
    if ea.is_some() || eb.is_some() {
        let empty = || [("NEEDED", vec![]), ("RPATH", vec![]), ("RUNPATH", vec![])];
        for ((field, from), (_, to)) in ea.unwrap_or_else(empty).into_iter().zip(eb.unwrap_or_else(empty)) {
            if from != to {
                out.elf.push(ElfChange { member: name.to_string(), field, from, to });
            }
        }
    }
    let targets = |data: Option<&[u8]>| {
        data.map(|d| crate::code_objects::inspect_bytes(name, d, false).targets).unwrap_or_default()
    };
    let (ta, tb) = (targets(a), targets(b));
    if ta != tb {
        out.gpu_targets.push(TargetChange { member: name.to_string(), from: ta, to: tb });
    }
}

/// Where two versions of a member differ, said without "given"/"rebuilt".
fn describe(d: &Detail) -> String {
    match d {
        Detail::Elf { section, offset } => format!("ELF section {section} differs first, at {offset:#x} in it"),
        Detail::Zip { member, field } => format!("nested zip member {member}: {field} differs"),
        Detail::Text { line, given, rebuilt } => format!("line {line}: {given:?} -> {rebuilt:?}"),
        Detail::Bytes { offset } => format!("first differing byte at {offset:#x}"),
    }
}
