//! Which wheels of a wheelhouse (a directory of wheels, as `wheel split`
//! writes it) a `wheels` source installs: the host set, or what one device
//! extra adds to it. That is how a family of per-target images shares every
//! layer but the device one.
//!
//! Hosts are the wheels with a `device-*` extra. What an extra `E` pulls:
//! the hosts' requirements under `E`, then the plain requirements of every
//! wheel they name, within the directory, never a host again (a device
//! wheel requires its host). The host set is every wheel no device extra
//! pulls (host wheels, their other requirements, unrelated wheels); the set
//! of `E` is what `E` pulls: the target's wheel, its sub-family and family
//! wheels, and what those require (ROCm's `rocm-sdk-device-<target>`).
//! PEP 817 variant wheels (a sixth file-name field that is no build tag)
//! are left out: an installer picks one of them for a machine, never all.
//! The host set's requirements on projects the directory does not hold are
//! left to the image (`rocm-bootstrap` is installed another way, or not
//! needed); a missing wheel that a device extra pulls is an error, as the
//! image would lack that target's code (or what the code needs).

use crate::pypi::metadata::{variant_label_ok, Metadata};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

/// One wheel of the directory.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub meta: Metadata,
}

/// A PEP 817 variant wheel's file name: `name-ver-py-abi-plat-label.whl`
/// (six fields, the third no build tag) or seven fields.
fn is_variant(file_name: &str) -> bool {
    let stem = file_name.strip_suffix(".whl").unwrap_or(file_name);
    let parts: Vec<&str> = stem.split('-').collect();
    let build_tag = |s: &str| s.starts_with(|c: char| c.is_ascii_digit());
    match parts.as_slice() {
        [_, _, p, _, _, l] => !build_tag(p) && variant_label_ok(l),
        [_, _, _, _, _, _, _] => true,
        _ => false,
    }
}

/// The METADATA of the wheel at `path`.
fn metadata_of(path: &Path) -> Result<Metadata, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let mut z = zip::ZipArchive::new(file).map_err(|e| format!("`{}` is not a wheel (zip): {e}", path.display()))?;
    let names: Vec<String> = z
        .file_names()
        .filter_map(|n| n.ok().map(|n| n.into_owned()))
        .filter(|n| n.ends_with(".dist-info/METADATA") && n.matches('/').count() == 1)
        .collect();
    let [name] = names.as_slice() else {
        return Err(format!("`{}` is not a wheel: it must hold exactly one `*.dist-info/METADATA`", path.display()));
    };
    let mut text = String::new();
    z.by_name(name)
        .map_err(|e| e.to_string())
        .and_then(|mut m| m.read_to_string(&mut text).map_err(|e| e.to_string()))
        .map_err(|e| format!("`{}`: cannot read `{name}`: {e}", path.display()))?;
    Ok(Metadata::parse(&text))
}

/// Every wheel of `dir` (variant wheels left out), by normalized name.
pub fn read(dir: &Path) -> Result<BTreeMap<String, Found>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read the wheelhouse `{}`: {e} (give a directory of wheels)", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "whl"))
        .filter(|p| !is_variant(&p.file_name().unwrap_or_default().to_string_lossy()))
        .collect();
    paths.sort();
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for path in paths {
        let meta = metadata_of(&path)?;
        if let Some(other) = found.get(&meta.name) {
            return Err(format!(
                "`{}` and `{}` are both {}: a wheelhouse for an image holds one wheel of each project",
                other.path.display(),
                path.display(),
                meta.shown
            ));
        }
        found.insert(meta.name.clone(), Found { path, meta });
    }
    if found.is_empty() {
        return Err(format!("the wheelhouse `{}` holds no wheel", dir.display()));
    }
    Ok(found)
}

fn is_host(m: &Metadata) -> bool {
    m.extras.iter().any(|e| e.starts_with("device-"))
}

/// What `extra` pulls (see the module comment), or why it cannot.
fn pulled(found: &BTreeMap<String, Found>, extra: &str) -> Result<BTreeSet<String>, String> {
    let mut todo: Vec<(String, String)> = Vec::new();
    for h in found.values().filter(|f| is_host(&f.meta) && f.meta.extras.iter().any(|e| e == extra)) {
        let under = h.meta.requires.iter().filter(|r| r.extra.as_deref() == Some(extra));
        todo.extend(under.map(|r| (r.name.clone(), format!("{}[{extra}]", h.meta.shown))));
    }
    let mut out = BTreeSet::new();
    while let Some((name, by)) = todo.pop() {
        let Some(f) = found.get(&name) else {
            return Err(format!("{by} requires `{name}`, which the wheelhouse does not hold"));
        };
        if is_host(&f.meta) || !out.insert(name) {
            continue;
        }
        let plain = f.meta.requires.iter().filter(|r| r.extra.is_none() && r.variant.is_none());
        todo.extend(plain.map(|r| (r.name.clone(), f.meta.shown.clone())));
    }
    Ok(out)
}

/// The wheels a `wheels` source of `dir` installs: the host set, or with
/// `extra` what that extra pulls; sorted by path.
pub fn select(dir: &Path, extra: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let found = read(dir)?;
    let names: BTreeSet<String> = match extra {
        Some(e) => {
            let offered: BTreeSet<&str> = found
                .values()
                .filter(|f| is_host(&f.meta))
                .flat_map(|f| f.meta.extras.iter().map(String::as_str))
                .collect();
            if !offered.contains(e) {
                let list: Vec<&str> = offered.into_iter().collect();
                return Err(format!(
                    "no wheel in `{}` has the extra `{e}`; its wheels offer {}",
                    dir.display(),
                    if list.is_empty() {
                        "no device extra (split them with `quarry wheel split`)".into()
                    } else {
                        list.join(", ")
                    }
                ));
            }
            pulled(&found, e)?
        }
        None => {
            let mut device = BTreeSet::new();
            let extras: BTreeSet<String> = found
                .values()
                .filter(|f| is_host(&f.meta))
                .flat_map(|f| f.meta.extras.iter().filter(|e| e.starts_with("device-")).cloned())
                .collect();
            for e in &extras {
                device.extend(pulled(&found, e)?);
            }
            found.keys().filter(|k| !device.contains(*k)).cloned().collect()
        }
    };
    let mut paths: Vec<PathBuf> = names.iter().map(|n| found[n].path.clone()).collect();
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A wheel holding only its METADATA (what selection reads).
    fn wheel(dir: &Path, file: &str, metadata: &str) {
        let stem: Vec<&str> = file.split('-').take(2).collect();
        let mut z = zip::ZipWriter::new(std::fs::File::create(dir.join(file)).unwrap());
        z.start_file(format!("{}-{}.dist-info/METADATA", stem[0], stem[1]), zip::write::SimpleFileOptions::default())
            .unwrap();
        z.write_all(metadata.as_bytes()).unwrap();
        z.finish().unwrap();
    }

    fn names(paths: Vec<PathBuf>) -> Vec<String> {
        paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
    }

    /// torch-like: a device wheel requires its family wheel and ROCm's
    /// per-target wheel; the host set keeps the host and unrelated wheels.
    #[test]
    fn an_extra_pulls_its_family_and_what_they_require() {
        let d = tempfile::tempdir().unwrap();
        let tag = "1.0-cp311-cp311-linux_x86_64.whl";
        wheel(
            d.path(),
            &format!("p-{tag}"),
            "Name: p\nRequires-Dist: rocm-bootstrap\nRequires-Dist: numpy\n\
             Provides-Extra: device-gfx1100\nRequires-Dist: p-device-gfx1100 == 1.0; extra == \"device-gfx1100\"\n\
             Provides-Extra: device-gfx942\nRequires-Dist: p-device-gfx942 == 1.0; extra == \"device-gfx942\"\n",
        );
        wheel(
            d.path(),
            &format!("p_device_gfx1100-{tag}"),
            "Name: p-device-gfx1100\nRequires-Dist: p == 1.0\nRequires-Dist: rocm-sdk-device-gfx1100 == 7.1\n\
             Requires-Dist: p-device-gfx11 == 1.0\n",
        );
        wheel(d.path(), &format!("p_device_gfx11-{tag}"), "Name: p-device-gfx11\nRequires-Dist: p == 1.0\n");
        wheel(d.path(), &format!("p_device_gfx942-{tag}"), "Name: p-device-gfx942\nRequires-Dist: p == 1.0\n");
        wheel(d.path(), &format!("rocm_sdk_device_gfx1100-{tag}"), "Name: rocm-sdk-device-gfx1100\n");
        wheel(d.path(), &format!("numpy-{tag}"), "Name: numpy\n");
        wheel(d.path(), "p-1.0-cp311-cp311-linux_x86_64-gfx942.whl", "Name: p\n");
        let host = names(select(d.path(), None).unwrap());
        assert_eq!(host, [format!("numpy-{tag}"), format!("p-{tag}")]);
        let gfx1100 = names(select(d.path(), Some("device-gfx1100")).unwrap());
        assert_eq!(
            gfx1100,
            [
                format!("p_device_gfx11-{tag}"),
                format!("p_device_gfx1100-{tag}"),
                format!("rocm_sdk_device_gfx1100-{tag}")
            ]
        );
        let e = select(d.path(), Some("device-gfx90a")).unwrap_err();
        assert!(e.contains("device-gfx1100, device-gfx942"), "{e}");
        std::fs::remove_file(d.path().join(format!("p_device_gfx11-{tag}"))).unwrap();
        let e = select(d.path(), Some("device-gfx1100")).unwrap_err();
        assert!(e.contains("requires `p_device_gfx11`, which the wheelhouse does not hold"), "{e}");
    }

    #[test]
    fn variant_wheels_are_told_from_build_tags() {
        assert!(is_variant("p-1.0-cp311-cp311-linux_x86_64-gfx942.whl"));
        assert!(is_variant("p-1.0-1-cp311-cp311-linux_x86_64-gfx942.whl"));
        assert!(!is_variant("p-1.0-1-cp311-cp311-linux_x86_64.whl"));
        assert!(!is_variant("p-1.0-cp311-cp311-linux_x86_64.whl"));
    }
}
