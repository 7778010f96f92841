//! What a kernel build produced and whether it holds code for every
//! requested target: each output file's targets (read natively with
//! `code_objects`) and size; every host ELF output that carries GPU code
//! (a `.hip_fatbin` or an embedded offload bundle) must have code for each
//! requested processor, or the build fails naming the file and the target
//! (`hipErrorNoBinaryForGpu` caught at build time). Bare code objects
//! (`--genco`, one target each by design) and archives are reported, not
//! checked.

use crate::code_objects::inspect_path;
use std::path::Path;

/// One output file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutputFile {
    /// Relative to the output directory.
    pub file: String,
    pub size: u64,
    /// The processors it has code for, sorted (empty: no GPU code).
    pub targets: Vec<String>,
    /// A host ELF with GPU code: held to the requested targets.
    pub checked: bool,
}

/// A requested target an output lacks.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Missing {
    pub file: String,
    pub target: String,
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
pub fn inspect(dir: &Path, files: &[std::path::PathBuf]) -> Result<Vec<OutputFile>, String> {
    let mut out = Vec::new();
    for rel in files {
        let path = dir.join(rel);
        let meta = path.symlink_metadata().map_err(|e| format!("`{}`: {e}", path.display()))?;
        if !meta.is_file() {
            continue;
        }
        let reports = inspect_path(&path).map_err(|e| e.to_string())?;
        let targets = crate::code_objects::all_targets(&reports);
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

/// The requested targets (by processor) each checked output lacks.
pub fn missing(outputs: &[OutputFile], requested: &[String]) -> Vec<Missing> {
    let mut out = Vec::new();
    for o in outputs.iter().filter(|o| o.checked) {
        for t in requested {
            let p = super::targets::processor(t);
            if !o.targets.iter().any(|have| have == p) {
                out.push(Missing { file: o.file.clone(), target: p.to_string() });
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
        assert_eq!(missing(&outs, &want), [Missing { file: "libk.so".into(), target: "gfx942".into() }]);
        assert!(missing(&outs[..1], &want[..1]).is_empty());
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
