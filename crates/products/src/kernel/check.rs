//! What a kernel build produced and whether it holds code for every
//! requested target: each output file's target ids with their features
//! (read natively with `code_objects`) and size; every host ELF output that
//! carries GPU code (a `.hip_fatbin` or an embedded offload bundle) must
//! have code that runs on each requested target id, matched as the HIP
//! runtime matches ([`super::target_id`]), or the build fails naming the
//! file and the target (`hipErrorNoBinaryForGpu` caught at build time).
//! Bare code objects (`--genco`, one target each by design) and archives
//! are reported, not checked.

use super::KernelError;
use crate::code_objects::inspect_path;
use std::path::Path;

/// One output file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutputFile {
    /// Relative to the output directory.
    pub file: String,
    pub size: u64,
    /// The target ids it has code for, features included (`gfx90a:xnack+`;
    /// a feature built for either setting is not written), sorted (empty: no GPU code).
    pub targets: Vec<String>,
    /// A host ELF with GPU code: held to the requested targets.
    pub checked: bool,
}

/// A requested target an output lacks: the target id (GPU mode) no code
/// object of the file runs on.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Missing {
    pub file: String,
    pub target: String,
    /// The file's code for the same processor, when it has some (of other modes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub has: Vec<String>,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` has no code for {}", self.file, self.target)?;
        if !self.has.is_empty() {
            write!(f, " (only for {})", self.has.join(", "))?;
        }
        Ok(())
    }
}

const EM_AMDGPU: u16 = 224;

/// A host ELF (any machine but AMDGPU).
fn is_host_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    let ok = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok();
    ok && head.starts_with(b"\x7fELF") && u16::from_le_bytes([head[18], head[19]]) != EM_AMDGPU
}

/// Report every regular file of `files` (relative to `dir`).
pub fn inspect(dir: &Path, files: &[std::path::PathBuf]) -> Result<Vec<OutputFile>, KernelError> {
    let mut out = Vec::new();
    for rel in files {
        let path = dir.join(rel);
        let meta = path.symlink_metadata().map_err(|source| KernelError::Output { path: path.clone(), source })?;
        if !meta.is_file() {
            continue;
        }
        let reports = inspect_path(&path)?;
        let mut targets: Vec<String> =
            reports.iter().flat_map(|r| &r.code_objects).map(code_object_id).filter(|t| !t.is_empty()).collect();
        targets.sort();
        targets.dedup();
        let has_code = reports.iter().any(|r| !r.code_objects.is_empty());
        out.push(OutputFile {
            file: rel.to_string_lossy().into_owned(),
            size: meta.len(),
            checked: has_code && is_host_elf(&path),
            targets,
        });
    }
    Ok(out)
}

/// A code object's full target id (`gfx942:sramecc+:xnack-`).
fn code_object_id(c: &crate::code_objects::CodeObject) -> String {
    std::iter::once(c.target.as_str()).chain(c.features.iter().map(String::as_str)).collect::<Vec<_>>().join(":")
}

/// The requested target ids each checked output has no code to run on.
pub fn missing(outputs: &[OutputFile], requested: &[String]) -> Vec<Missing> {
    let mut out = Vec::new();
    for o in outputs.iter().filter(|o| o.checked) {
        for t in requested {
            let processor = super::targets::processor(t);
            let has: Vec<String> =
                o.targets.iter().filter(|h| super::targets::processor(h) == processor).cloned().collect();
            // A request kernel::targets let through but this cannot read is named as missing.
            let uncovered =
                crate::code_objects::target_id::uncovered(t, &o.targets).unwrap_or_else(|_| vec![t.clone()]);
            for target in uncovered {
                out.push(Missing { file: o.file.clone(), target, has: has.clone() });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, targets: &[&str], checked: bool) -> OutputFile {
        OutputFile { file: name.into(), size: 1, targets: targets.iter().map(|t| t.to_string()).collect(), checked }
    }

    #[test]
    fn only_checked_files_are_held_to_the_targets() {
        let outs = [
            file("libk.so", &["gfx1100", "gfx90a"], true),
            file("k.hsaco", &["gfx942"], false),
            file("notes.txt", &[], false),
        ];
        let want = ["gfx90a".to_string(), "gfx942:xnack-".to_string(), "gfx1100".to_string()];
        assert_eq!(
            missing(&outs, &want),
            [Missing { file: "libk.so".into(), target: "gfx942:xnack-".into(), has: vec![] }]
        );
        assert!(missing(&outs[..1], &want[..1]).is_empty());
        // Features count: xnack+ code does not run where xnack is off.
        let plus = [file("libk.so", &["gfx90a:xnack+"], true)];
        let m = missing(&plus, &["gfx90a".to_string()]);
        assert_eq!(
            m,
            [Missing { file: "libk.so".into(), target: "gfx90a:xnack-".into(), has: vec!["gfx90a:xnack+".into()] }]
        );
        assert_eq!(m[0].to_string(), "`libk.so` has no code for gfx90a:xnack- (only for gfx90a:xnack+)");
        assert!(missing(&plus, &["gfx90a:xnack+".to_string()]).is_empty());
    }

    #[test]
    fn plain_files_have_no_targets() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.txt"), "text").unwrap();
        let r = inspect(d.path(), &["a.txt".into()]).unwrap();
        assert_eq!(
            r,
            [file("a.txt", &[], false)].map(|mut f| {
                f.size = 4;
                f
            })
        );
    }
}
