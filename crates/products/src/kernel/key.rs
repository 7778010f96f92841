//! A kernel build's cache keys: an explicit encoding (see `cache::key`) of
//! the image, the source tree's content, the command, the targets, the
//! environment, the outputs asked for and the network setting. The value,
//! the output tree, is an entry of the cache's `kernels` bucket. The job
//! count is not in the key: it changes how fast, not what. The compiler
//! cache is keyed by the same minus the source ([`project_key`]): every
//! version of one project's sources shares it.

use crate::cache::key::{Key, KeyEncoder};
use crate::oci::Digest;
use std::io;
use std::path::Path;

/// Everything a kernel build's outputs depend on.
pub struct KeyInputs<'a> {
    /// The image's config digest (the engine's image id).
    pub image: &'a Digest,
    pub source: &'a Key,
    pub cmd: &'a [String],
    pub targets: &'a [String],
    /// `K=V`, as given (later ones win, so order counts).
    pub env: &'a [String],
    /// Container paths copied out.
    pub outputs: &'a [String],
    pub network: bool,
}

/// The build's cache key. Bump the version when what it encodes changes,
/// or what a build sees for the same inputs (2: the targets reach hipcc
/// through `HCC_AMDGPU_TARGET` and CMake through a toolchain file).
pub fn key(i: &KeyInputs) -> Key {
    let mut k = KeyEncoder::new("kernel-build", 2);
    k.digest("image", i.image).key("source", i.source).list("cmd", i.cmd).list("targets", i.targets);
    k.list("env", i.env).list("outputs", i.outputs).bool("network", i.network);
    k.finish()
}

/// The key of a project's compiler cache: the build's key without the
/// source's content.
pub fn project_key(i: &KeyInputs) -> Key {
    let mut k = KeyEncoder::new("kernel-project", 1);
    k.digest("image", i.image).list("cmd", i.cmd).list("targets", i.targets);
    k.list("env", i.env).list("outputs", i.outputs);
    k.finish()
}

/// The content of a source tree (see [`crate::cache::key::tree_key`]);
/// top-level names in `skip` are left out (the default output directory `build`).
pub fn source_key(dir: &Path, skip: &[&str]) -> io::Result<Key> {
    crate::cache::key::tree_key("kernel-source", dir, skip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn inputs<'a>(image: &'a Digest, source: &'a Key, cmd: &'a [String], targets: &'a [String]) -> KeyInputs<'a> {
        KeyInputs { image, source, cmd, targets, env: &[], outputs: &[], network: false }
    }

    #[test]
    fn the_key_follows_every_input_and_the_source_content_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/build")).unwrap();
        std::fs::write(d.path().join("src/k.hip"), "kernel").unwrap();
        std::fs::write(d.path().join("src/build/stale.o"), "old").unwrap();
        let src = d.path().join("src");
        let a = source_key(&src, &["build"]).unwrap();
        // The skipped build directory and mtimes do not count...
        std::fs::write(d.path().join("src/build/stale.o"), "older").unwrap();
        std::fs::write(d.path().join("src/k.hip"), "kernel").unwrap();
        assert_eq!(source_key(&src, &["build"]).unwrap(), a);
        assert_ne!(source_key(&src, &[]).unwrap(), a);
        // ...content and the executable bit do.
        std::fs::set_permissions(d.path().join("src/k.hip"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let b = source_key(&src, &["build"]).unwrap();
        assert_ne!(b, a);
        std::fs::write(d.path().join("src/k.hip"), "kernel2").unwrap();
        assert_ne!(source_key(&src, &["build"]).unwrap(), b);

        let image = Digest::of_bytes(b"config");
        let cmd = vec!["make".to_string()];
        let targets = vec!["gfx90a".to_string()];
        let base = key(&inputs(&image, &a, &cmd, &targets));
        assert_eq!(base, key(&inputs(&image, &a, &cmd, &targets)));
        let other_targets = vec!["gfx90a".to_string(), "gfx942".to_string()];
        assert_ne!(base, key(&inputs(&image, &a, &cmd, &other_targets)));
        assert_ne!(base, key(&inputs(&image, &a, &["make".into(), "all".into()], &targets)));
        assert_ne!(base, key(&inputs(&Digest::of_bytes(b"other"), &a, &cmd, &targets)));
        let env = vec!["CFLAGS=-O3".to_string()];
        assert_ne!(base, key(&KeyInputs { env: &env, ..inputs(&image, &a, &cmd, &targets) }));
        assert_ne!(base, key(&KeyInputs { network: true, ..inputs(&image, &a, &cmd, &targets) }));

        // The project's compiler cache: every source version shares it, targets do not.
        let b = source_key(&src, &[]).unwrap();
        let project = project_key(&inputs(&image, &a, &cmd, &targets));
        assert_eq!(project, project_key(&inputs(&image, &b, &cmd, &targets)));
        assert_ne!(project, project_key(&inputs(&image, &a, &cmd, &other_targets)));
    }
}
