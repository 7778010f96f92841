//! Where bundled libraries go and how files find them: the hashed name in
//! `<pkg>.libs/`, `$ORIGIN`-relative paths, and which existing RPATH
//! entries stay (those inside the wheel).

use crate::wheel::WheelError;
use std::path::{Component, Path};

/// The name a bundled library gets: `{stem}-{sha256[..8]}.{rest}` (its
/// SONAME is set to that name by an edit). Returns (new soname, path inside
/// the wheel, under `libs_dir`).
pub(super) fn library_name(src: &Path, libs_dir: &str) -> Result<(String, String), WheelError> {
    let hash =
        crate::oci::digest::sha256_file(src).map_err(|source| WheelError::Io { path: src.to_path_buf(), source })?;
    let short = &hash[..8];
    let src_name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let new_name = match src_name.split_once('.') {
        Some((stem, _)) if stem.ends_with(&format!("-{short}")) => src_name.clone(),
        Some((stem, rest)) => format!("{stem}-{short}.{rest}"),
        None => format!("{src_name}-{short}"),
    };
    Ok((new_name.clone(), format!("{libs_dir}/{new_name}")))
}

/// Copy a bundled library to `dest` (`--strip` edits a copy), executable.
pub(super) fn copy_library(src: &Path, dest: &Path) -> Result<(), WheelError> {
    use std::os::unix::fs::PermissionsExt;
    let parent = dest.parent().expect("a member has a parent directory");
    std::fs::create_dir_all(parent).map_err(|source| WheelError::Io { path: parent.to_path_buf(), source })?;
    std::fs::copy(src, dest).map_err(|source| WheelError::Io { path: src.to_path_buf(), source })?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|source| WheelError::Io { path: dest.to_path_buf(), source })
}

/// `to` relative to `from`, both relative to the same root (`a/b`, `c` -> `../../c`).
pub(super) fn relative_path(from: &Path, to: &Path) -> String {
    let f: Vec<Component> = from.components().filter(|c| matches!(c, Component::Normal(_))).collect();
    let t: Vec<Component> = to.components().filter(|c| matches!(c, Component::Normal(_))).collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); f.len() - common];
    parts.extend(t[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// True when an existing RPATH entry of `file` points inside the wheel
/// (such entries are kept; others would leak the build machine's paths).
pub(super) fn rpath_within(entry: &str, file: &Path, root: &Path) -> bool {
    let dir = file.parent().unwrap_or(root).to_string_lossy().into_owned();
    let lib = if cfg!(target_pointer_width = "64") { "lib64" } else { "lib" };
    let mut e = entry.to_string();
    for (token, value) in [("ORIGIN", dir.as_str()), ("LIB", lib), ("PLATFORM", std::env::consts::ARCH)] {
        e = e.replace(&format!("${{{token}}}"), value).replace(&format!("${token}"), value);
    }
    let p = Path::new(&e);
    if !p.is_absolute() {
        return false;
    }
    let resolved = p.canonicalize().unwrap_or_else(|_| crate::wheel::ldd::normpath(p));
    resolved.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(relative_path(Path::new(""), Path::new("cffi.libs")), "cffi.libs");
        assert_eq!(relative_path(Path::new("pkg/sub"), Path::new("pkg.libs")), "../../pkg.libs");
        assert_eq!(relative_path(Path::new("pkg"), Path::new("pkg")), ".");
    }
}
