//! What a kernel build reads before anything runs: the outputs it will
//! copy out, the source entries that are not inputs, the image's digest and
//! the source's content; from them, its cache keys.

use super::container::{OutputPath, OUT_DIR, SRC_DIR};
use super::{key, KernelError, KernelOptions};
use crate::cache::Key;
use crate::engine::copy::CopyIn;
use crate::engine::Engine;
use crate::oci::Digest;
use std::path::Path;

pub(super) struct Inputs {
    pub outputs: Vec<OutputPath>,
    pub out_paths: Vec<String>,
    /// Top-level source names that are not inputs.
    pub skip: Vec<String>,
    pub image: Digest,
    pub source: Key,
}

impl Inputs {
    pub fn read(o: &KernelOptions, engine: &mut Option<Engine>) -> Result<Inputs, KernelError> {
        if !o.source.is_dir() {
            return Err(KernelError::Input(format!("source `{}` is not a directory", o.source.display())));
        }
        if o.cmd.is_empty() {
            return Err(KernelError::Input("no build command: give it after `--`, e.g. -- make".into()));
        }
        let outputs = output_paths(&o.outputs)?;
        // A host `build/` is where outputs go by default: it is not an input.
        let skip = skipped_inputs(&o.source, &o.output, o.outputs.is_empty());
        let skip_refs: Vec<&str> = skip.iter().map(String::as_str).collect();
        let image = o.image.digest(engine)?;
        let source = key::source_key(&o.source, &skip_refs)
            .map_err(|e| KernelError::Input(format!("reading source `{}`: {e}", o.source.display())))?;
        let out_paths = outputs.iter().map(|p| p.path.clone()).collect();
        Ok(Inputs { outputs, out_paths, skip, image, source })
    }

    pub fn key_inputs<'a>(&'a self, o: &'a KernelOptions) -> key::KeyInputs<'a> {
        key::KeyInputs {
            image: &self.image,
            source: &self.source,
            cmd: &o.cmd,
            targets: &o.targets.targets,
            env: &o.env,
            outputs: &self.out_paths,
            network: o.network,
        }
    }
}

/// The key of `o`'s outputs as the cache knows them.
pub fn cache_key(o: &KernelOptions) -> Result<Key, KernelError> {
    let mut engine = None;
    let read = Inputs::read(o, &mut engine)?;
    Ok(key::key(&read.key_inputs(o)))
}

/// The container paths to copy out: `--output` paths under the source
/// (relative, no `..`), else `build/` and `/out`.
pub fn output_paths(outputs: &[String]) -> Result<Vec<OutputPath>, KernelError> {
    if outputs.is_empty() {
        return Ok(vec![
            OutputPath { path: format!("{SRC_DIR}/build"), required: false },
            OutputPath { path: OUT_DIR.to_string(), required: false },
        ]);
    }
    outputs
        .iter()
        .map(|o| {
            let rel = o.trim_end_matches('/');
            let bad = rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|c| c == ".." || c == ".");
            if bad {
                return Err(KernelError::Input(format!(
                    "--output `{o}`: give a path inside the source directory, relative to it (e.g. build/libkernels.so)"
                )));
            }
            Ok(OutputPath { path: format!("{SRC_DIR}/{rel}"), required: true })
        })
        .collect()
}

/// The source's top-level entries, each copied to the same place under
/// [`SRC_DIR`]; `skip` names are left out.
pub(super) fn source_copies(src: &Path, skip: &[&str]) -> Result<Vec<CopyIn>, KernelError> {
    let io = |e: std::io::Error| KernelError::Input(format!("source `{}`: {e}", src.display()));
    let mut names: Vec<std::ffi::OsString> =
        std::fs::read_dir(src).map_err(io)?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>().map_err(io)?;
    names.sort();
    Ok(names
        .into_iter()
        .filter(|n| !skip.iter().any(|s| n == s))
        .map(|n| CopyIn { host: src.join(&n), dest: format!("{SRC_DIR}/{}", n.to_string_lossy()) })
        .collect())
}

/// Top-level source entries that are not inputs: `build` when it is the
/// default output directory, and the output directory when it is directly
/// in the source (`-o SRC/dist`), so earlier outputs never change the key.
fn skipped_inputs(source: &Path, output: &Path, default_outputs: bool) -> Vec<String> {
    let mut skip: Vec<String> = Vec::new();
    if default_outputs {
        skip.push("build".into());
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (src, out) = (abs(source), abs(output));
    if let Some(name) = out.parent().filter(|p| *p == src).and(out.file_name()) {
        skip.push(name.to_string_lossy().into_owned());
    }
    skip
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn outputs_default_to_build_and_out_and_stay_inside_the_source() {
        let d = output_paths(&[]).unwrap();
        assert_eq!(d.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["/quarry/src/build", "/out"]);
        assert!(d.iter().all(|p| !p.required));
        let given = output_paths(&["dist/lib.so".into()]).unwrap();
        assert_eq!(given, [OutputPath { path: "/quarry/src/dist/lib.so".into(), required: true }]);
        let skipped = skipped_inputs(Path::new("src"), Path::new("src/dist"), true);
        assert_eq!(skipped, ["build", "dist"]);
        assert!(skipped_inputs(Path::new("src"), Path::new("out"), false).is_empty());
        for bad in ["/etc/passwd", "../x", "a/../../b", ""] {
            let e = output_paths(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains("--output"), "{e}");
        }
    }
}
