//! Give a built wheel a PEP 440 local version label (`+rocm6.2torch2.5`):
//! the file name, METADATA's `Version`, the `.dist-info` (and `.data`)
//! directory names and RECORD all change together.

use super::archive;
use super::metadata;
use super::name::WheelName;
use super::unpack::unpack;
use super::version::with_local_label;
use super::WheelError;
use std::path::{Path, PathBuf};

/// Rewrite `wheel` into `out_dir` with `label` (already expanded from its
/// template, e.g. by [`super::version::expand_template`]) appended to its
/// version. Returns the new wheel's path.
pub fn add_local_version(wheel: &Path, label: &str, out_dir: &Path) -> Result<PathBuf, WheelError> {
    let file_name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let new_version = with_local_label(&WheelName::parse(&file_name)?.version, label)?;
    let u = unpack(wheel, out_dir, "relabel")?;
    let (root, dist_info) = (&u.root, &u.dist_info);

    // `{name}-{version}.dist-info`: the name part has no `-` in a valid wheel.
    let stem = dist_info.strip_suffix(".dist-info").expect("found by suffix");
    let (dist_name, _) = stem.split_once('-').ok_or_else(|| WheelError::Layout {
        wheel: wheel.to_path_buf(),
        why: format!("`{dist_info}` is not `{{name}}-{{version}}.dist-info`"),
    })?;
    let new_dist_info = format!("{dist_name}-{new_version}.dist-info");
    let rename = |from: &str, to: &str| -> Result<(), WheelError> {
        let (a, b) = (root.join(from), root.join(to));
        if a.exists() && from != to {
            std::fs::rename(&a, &b).map_err(|source| WheelError::Io { path: a.clone(), source })?;
        }
        Ok(())
    };
    rename(dist_info, &new_dist_info)?;
    rename(&format!("{stem}.data"), &format!("{dist_name}-{new_version}.data"))?;

    let metadata_path = root.join(&new_dist_info).join("METADATA");
    let text = std::fs::read_to_string(&metadata_path)
        .map_err(|source| WheelError::Io { path: metadata_path.clone(), source })?;
    let text = metadata::set_metadata_version(&text, &new_version)?;
    std::fs::write(&metadata_path, text).map_err(|source| WheelError::Io { path: metadata_path.clone(), source })?;

    let new_name = WheelName { version: new_version, ..u.name.clone() };
    let output = out_dir.join(new_name.to_string());
    archive::pack_dir(root, &new_dist_info, &output, u.zip_time()?)?;
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::archive::WheelZip;
    use crate::wheel::record;

    #[test]
    fn relabels_every_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("src");
        for (name, data) in [
            ("flash_attn/__init__.py", "x = 1\n"),
            ("flash_attn-2.8.3.data/scripts/tool", "#!/bin/sh\n"),
            (
                "flash_attn-2.8.3.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n\nbody\n",
            ),
            ("flash_attn-2.8.3.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n"),
        ] {
            let p = root.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
        }
        let wheel = dir.path().join("flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl");
        archive::pack_dir(&root, "flash_attn-2.8.3.dist-info", &wheel, archive::zip_time(1_700_000_000)).unwrap();

        let out = add_local_version(&wheel, "rocm6.2torch2.5", &dir.path().join("out")).unwrap();
        assert_eq!(out.file_name().unwrap(), "flash_attn-2.8.3+rocm6.2torch2.5-cp311-cp311-linux_x86_64.whl");
        let mut zip = WheelZip::open(&out).unwrap();
        let names = zip.file_names().unwrap();
        assert!(names.contains(&"flash_attn-2.8.3+rocm6.2torch2.5.dist-info/METADATA".to_string()), "{names:?}");
        assert!(names.contains(&"flash_attn-2.8.3+rocm6.2torch2.5.data/scripts/tool".to_string()), "{names:?}");
        let meta =
            String::from_utf8(zip.read_file("flash_attn-2.8.3+rocm6.2torch2.5.dist-info/METADATA").unwrap()).unwrap();
        assert!(meta.contains("\nVersion: 2.8.3+rocm6.2torch2.5\n"), "{meta}");
        let scan = zip.scan(None, |_, _| false).unwrap();
        let rec = "flash_attn-2.8.3+rocm6.2torch2.5.dist-info/RECORD";
        let rows = record::parse(&zip.read_file(rec).unwrap(), rec).unwrap();
        assert!(record::verify(&rows, &scan.files, rec).is_empty());
        // The time of the input is kept when SOURCE_DATE_EPOCH is unset.
        assert_eq!(scan.latest_time, Some(archive::zip_time(1_700_000_000)));
    }
}
