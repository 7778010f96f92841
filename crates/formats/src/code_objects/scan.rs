//! Finding code objects in files: which container a file is (from its
//! first bytes), where bundles sit in a host ELF (its `.hip_fatbin`
//! sections, else anywhere in the file), walking directories and wheels.
//!
//! Inside `.hip_fatbin`, and in files that are bundles, every bundle magic
//! must start a readable bundle: anything else is a problem. Elsewhere in a
//! file a magic may be a mere string (libamdhip64 holds the bundle magic as
//! a constant), so a candidate that does not read is passed over.

use super::bundle::{self, EntryId};
use super::{amdgpu, compressed, kpack, CodeObject, FileReport, InspectError};
use std::io::Read;
use std::path::Path;

const AR_MAGIC: &[u8] = b"!<arch>\n";
const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
const CODE_OBJECT_EXTENSIONS: &[&str] = &["co", "hsaco", "kpack"];

fn extension(name: &str) -> String {
    Path::new(name).extension().map(|e| e.to_string_lossy().to_lowercase()).unwrap_or_default()
}

/// Whether a file may hold GPU code, from its first bytes and its name.
fn is_candidate(head: &[u8], name: &str) -> bool {
    amdgpu::is_elf(head)
        || [bundle::MAGIC, compressed::MAGIC, kpack::MAGIC, AR_MAGIC].iter().any(|m| head.starts_with(m))
        || CODE_OBJECT_EXTENSIONS.contains(&extension(name).as_str())
}

fn is_wheel(head: &[u8], name: &str) -> bool {
    head.starts_with(ZIP_MAGIC) && matches!(extension(name).as_str(), "whl" | "zip")
}

pub(super) fn inspect_path(path: &Path) -> Result<Vec<FileReport>, InspectError> {
    let meta = std::fs::metadata(path).map_err(|e| InspectError::io(path, e))?;
    if meta.is_dir() {
        return inspect_dir(path);
    }
    let name = path.display().to_string();
    let head = read_head(path)?;
    if is_wheel(&head, &name) {
        let mut reports = inspect_wheel(path)?;
        if reports.is_empty() {
            reports.push(FileReport::new(name));
        }
        return Ok(reports);
    }
    Ok(vec![inspect_file(path, &name, true)?])
}

fn read_head(path: &Path) -> Result<Vec<u8>, InspectError> {
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(path).and_then(|f| f.take(64).read_to_end(&mut head)).map_err(|e| InspectError::io(path, e))?;
    Ok(head)
}

fn inspect_file(path: &Path, name: &str, explicit: bool) -> Result<FileReport, InspectError> {
    let file = std::fs::File::open(path).map_err(|e| InspectError::io(path, e))?;
    let len = file.metadata().map_err(|e| InspectError::io(path, e))?.len();
    if len == 0 {
        return Ok(inspect_bytes(name, &[], explicit));
    }
    // SAFETY: the map is read-only and dropped before this returns; a file
    // truncated meanwhile by another process is outside what we guard.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| InspectError::io(path, e))?;
    let mut report = inspect_bytes(name, &map, explicit);
    super::marker::resolve_beside(&mut report, path);
    Ok(report)
}

fn inspect_dir(root: &Path) -> Result<Vec<FileReport>, InspectError> {
    let mut reports = Vec::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false).sort_by_file_name() {
        let entry =
            entry.map_err(|e| InspectError::Walk { path: root.display().to_string(), message: e.to_string() })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let path = entry.path();
        let name = path.display().to_string();
        let report = match read_head(path) {
            Ok(head) if is_wheel(&head, &name) => {
                reports.extend(inspect_wheel(path)?);
                continue;
            }
            Ok(head) if is_candidate(&head, &name) => inspect_file(path, &name, false),
            Ok(_) => continue,
            Err(e) => Err(e),
        };
        let report = report.unwrap_or_else(|e| {
            let mut r = FileReport::new(name);
            r.problems.push(e.to_string());
            r
        });
        if report.is_interesting() {
            reports.push(report);
        }
    }
    Ok(reports)
}

/// The members of a wheel (or any zip) that hold GPU code, as
/// `WHEEL/MEMBER`, in member-name order. Members are spooled to an
/// anonymous temporary file, so memory stays flat however large they are.
pub fn inspect_wheel(path: &Path) -> Result<Vec<FileReport>, InspectError> {
    let zip_err =
        |e: zip::result::ZipError| InspectError::Zip { path: path.display().to_string(), message: e.to_string() };
    let file = std::fs::File::open(path).map_err(|e| InspectError::io(path, e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(zip_err)?;
    let mut members: Vec<(String, usize)> = (0..zip.len())
        .filter_map(|i| zip.name_for_index(i).and_then(Result::ok).map(|n| (n.to_string(), i)))
        .filter(|(n, _)| !n.ends_with('/'))
        .collect();
    members.sort();
    let mut reports = Vec::new();
    for (member, i) in members {
        let name = format!("{}/{member}", path.display());
        let mut entry = zip.by_index(i).map_err(zip_err)?;
        let mut head = Vec::with_capacity(64);
        let spooled = (&mut entry).take(64).read_to_end(&mut head).and_then(|_| {
            if !is_candidate(&head, &member) {
                return Ok(None);
            }
            let mut tmp = tempfile::tempfile()?;
            std::io::Write::write_all(&mut tmp, &head)?;
            std::io::copy(&mut entry, &mut tmp)?;
            Ok(Some(tmp))
        });
        let report = match spooled {
            Ok(None) => continue,
            Ok(Some(tmp)) => {
                let len = tmp.metadata().map(|m| m.len()).unwrap_or(0);
                if len == 0 {
                    inspect_bytes(&name, &[], false)
                } else {
                    // SAFETY: our own anonymous file, mapped read-only.
                    match unsafe { memmap2::Mmap::map(&tmp) } {
                        Ok(map) => inspect_bytes(&name, &map, false),
                        Err(e) => problem_report(&name, format!("cannot map the spooled member: {e}")),
                    }
                }
            }
            Err(e) => problem_report(&name, format!("reading the member: {e}")),
        };
        if report.is_interesting() {
            reports.push(report);
        }
    }
    Ok(reports)
}

fn problem_report(name: &str, problem: String) -> FileReport {
    let mut r = FileReport::new(name.to_string());
    r.problems.push(problem);
    r
}

/// Inspect bytes named `name`. `explicit`: the user named this file, so
/// anything in it is looked for, and a `.co` that is no code object is a
/// problem rather than a file to pass over.
pub fn inspect_bytes(name: &str, data: &[u8], explicit: bool) -> FileReport {
    let mut r = FileReport::new(name.to_string());
    let is_code_name = CODE_OBJECT_EXTENSIONS.contains(&extension(name).as_str());
    if amdgpu::elf_machine(data) == Some(amdgpu::EM_AMDGPU) {
        match amdgpu::parse_header(data) {
            Ok(t) => r.code_objects.push(elf_code_object(t, data.len() as u64, "code-object", None)),
            Err(e) => r.problems.push(format!("AMDGPU code object: {e}")),
        }
    } else if amdgpu::is_elf(data) {
        host_elf(&mut r, data);
    } else if data.starts_with(bundle::MAGIC) || data.starts_with(compressed::MAGIC) {
        scan(&mut r, data, "", true);
    } else if data.starts_with(kpack::MAGIC) {
        match kpack::read(data) {
            Ok(kernels) => {
                for k in kernels {
                    add_entry(&mut r, &k.arch, &k.head, k.size, "kpack", None, k.compression, Some(k.binary));
                }
            }
            Err(e) => r.problems.push(format!("kpack archive: {e}")),
        }
    } else if is_code_name {
        r.problems.push(format!(
            "a `.{}` file that is neither an AMDGPU code object, an offload bundle nor a kpack archive (no known magic)",
            extension(name)
        ));
    } else if data.starts_with(AR_MAGIC) {
        archive_members(&mut r, data);
    } else if explicit {
        scan(&mut r, data, "", false);
    }
    r.finish()
}

/// A host ELF: its `.hip_fatbin` sections strictly, else the whole file.
/// Relocatable objects made with `-fgpu-rdc` hold each target's code in a
/// section of its own, named `__CLANG_OFFLOAD_BUNDLE__` + the entry id.
fn host_elf(r: &mut FileReport, data: &[u8]) {
    use object::{Object, ObjectSection};
    let parsed = object::File::parse(data).ok();
    super::marker::attach(r, parsed.as_ref());
    let mut sectioned = false;
    for s in parsed.iter().flat_map(|f| f.sections()) {
        let (Ok(name), Some((off, size))) = (s.name(), s.file_range()) else { continue };
        let Some(id) = name.strip_prefix("__CLANG_OFFLOAD_BUNDLE__") else { continue };
        sectioned = true;
        let Some(entry) = EntryId::parse(id).filter(|e| !e.is_host() && size > 0) else { continue };
        let code = &data[off as usize..(off + size).min(data.len() as u64) as usize];
        let head = &code[..code.len().min(amdgpu::HEADER_LEN)];
        add_entry(r, &entry.target, head, size, "offload-bundle", Some(id.to_string()), None, None);
    }
    if sectioned {
        return;
    }
    let ranges: Option<Vec<(u64, u64)>> =
        parsed.map(|f| f.sections().filter(|s| s.name() == Ok(".hip_fatbin")).filter_map(|s| s.file_range()).collect());
    match ranges {
        Some(ranges) if !ranges.is_empty() => {
            for (off, size) in ranges {
                match off.checked_add(size).filter(|end| *end <= data.len() as u64) {
                    Some(end) => scan(
                        r,
                        &data[off as usize..end as usize],
                        &format!(".hip_fatbin (file offset {off:#x}) "),
                        true,
                    ),
                    None => r.problems.push(format!(
                        "its .hip_fatbin section (offset {off:#x}, {size} bytes) runs past the end of the file"
                    )),
                }
            }
        }
        _ => scan(r, data, "", false),
    }
}

/// A static library: each ELF member as a host object (`-fgpu-rdc`
/// objects keep their device code in sections).
fn archive_members(r: &mut FileReport, data: &[u8]) {
    let mut ar = ar::Archive::new(data);
    while let Some(member) = ar.next_entry() {
        let mut member = match member {
            Ok(m) => m,
            Err(e) => {
                r.problems.push(format!("reading the archive: {e}"));
                return;
            }
        };
        let mut bytes = Vec::new();
        if let Err(e) = member.read_to_end(&mut bytes) {
            r.problems.push(format!("reading an archive member: {e}"));
            return;
        }
        if amdgpu::is_elf(&bytes) && amdgpu::elf_machine(&bytes) != Some(amdgpu::EM_AMDGPU) {
            host_elf(r, &bytes);
        }
    }
}

/// Every bundle in `data`, plain or compressed, one after another.
fn scan(r: &mut FileReport, data: &[u8], where_: &str, strict: bool) {
    let plain = memchr::memmem::Finder::new(bundle::MAGIC);
    let packed = memchr::memmem::Finder::new(compressed::MAGIC);
    // The next match of each magic at or after `pos`, searched again only
    // once `pos` has passed it (searching both each time is quadratic).
    let next_from = |f: &memchr::memmem::Finder, from: usize| f.find(&data[from..]).map(|i| from + i);
    let (mut next_plain, mut next_packed) = (next_from(&plain, 0), next_from(&packed, 0));
    let mut pos = 0usize;
    while pos < data.len() {
        if next_plain.is_some_and(|n| n < pos) {
            next_plain = next_from(&plain, pos);
        }
        if next_packed.is_some_and(|n| n < pos) {
            next_packed = next_from(&packed, pos);
        }
        let Some(at) = [next_plain, next_packed].into_iter().flatten().min() else { break };
        let rest = &data[at..];
        let result = if rest.starts_with(bundle::MAGIC) {
            bundle::read(&mut &rest[..], Some(rest.len() as u64)).map(|b| (b, None, "offload-bundle"))
        } else {
            compressed::read(rest).map(|c| {
                let method = c.header.method.name();
                let len = c.consumed;
                let mut b = c.bundle;
                b.len = len;
                (b, Some(method), "compressed-offload-bundle")
            })
        };
        match result {
            Ok((b, compression, container)) => {
                for e in &b.entries {
                    let Some(id) = EntryId::parse(&e.id) else {
                        r.problems.push(format!(
                            "{where_}bundle at offset {at:#x}: entry id `{}` is not `KIND-TRIPLE-TARGET`",
                            e.id
                        ));
                        continue;
                    };
                    if id.is_host()
                        || e.size == 0
                        || !id.triple.starts_with("amdgcn") && !id.triple.starts_with("spirv")
                    {
                        continue;
                    }
                    add_entry(r, &id.target, &e.head, e.size, container, Some(e.id.clone()), compression, None);
                }
                pos = at + (b.len.max(1) as usize).min(rest.len());
            }
            Err(e) if strict => {
                r.problems.push(format!("{where_}bundle at offset {at:#x}: {e}"));
                pos = at + 4;
            }
            Err(e) => {
                log::debug!("{}: no bundle at offset {at:#x} ({e})", r.file);
                pos = at + 4;
            }
        }
    }
}

fn elf_code_object(t: amdgpu::Target, size: u64, container: &str, bundle_id: Option<String>) -> CodeObject {
    let mut features = t.features;
    features.sort();
    CodeObject {
        target: t.processor,
        features,
        size,
        container: container.into(),
        format: "elf".into(),
        bundle_id,
        compression: None,
        binary: None,
        code_object_version: Some(t.code_object_version),
    }
}

/// One bundle entry or kpack kernel: named `named` (a target id), its code
/// starting with `head`. ELF code must agree with the name.
#[allow(clippy::too_many_arguments)]
fn add_entry(
    r: &mut FileReport,
    named: &str,
    head: &[u8],
    size: u64,
    container: &str,
    bundle_id: Option<String>,
    compression: Option<&str>,
    binary: Option<String>,
) {
    let label = bundle_id
        .clone()
        .map(|b| format!("bundle entry `{b}`"))
        .unwrap_or_else(|| format!("kpack kernel `{}` @ {named}", binary.as_deref().unwrap_or("")));
    let mut features: Vec<String> = named.split(':').skip(1).map(String::from).collect();
    features.sort();
    let processor = named.split(':').next().unwrap_or("").to_string();
    let mut co = if amdgpu::is_elf(head) {
        match amdgpu::parse_header(head) {
            Ok(t) => {
                let elf_id = t.id();
                let co = elf_code_object(t, size, container, bundle_id.clone());
                if co.target != processor || co.features != features {
                    r.problems.push(format!(
                        "{label} holds a code object for `{elf_id}` (its ELF header): the two must agree"
                    ));
                }
                co
            }
            Err(e) => {
                r.problems.push(format!("{label}: {e}"));
                return;
            }
        }
    } else {
        let format = if head.starts_with(b"BC\xc0\xde") || head.starts_with(&[0xde, 0xc0, 0x17, 0x0b]) {
            "bitcode"
        } else if head.starts_with(&[0x03, 0x02, 0x23, 0x07]) {
            "spirv"
        } else {
            r.problems.push(format!("{label} holds neither an ELF code object, LLVM bitcode nor SPIR-V"));
            "unknown"
        };
        CodeObject {
            target: processor,
            features,
            size,
            container: container.into(),
            format: format.into(),
            bundle_id,
            compression: None,
            binary: None,
            code_object_version: None,
        }
    };
    co.compression = compression.map(String::from);
    co.binary = binary;
    r.code_objects.push(co);
}
