//! The `.dist-info/WHEEL` and `METADATA` files: email-style `Key: Value`
//! headers. Only the lines quarry changes are touched; the rest is kept
//! byte for byte (a full email parser would re-fold and re-encode them).

use super::name::WheelName;
use super::WheelError;
pub use crate::pypi::metadata::{header_values, headers};

/// The platform tags to drop when `new_platform` is added: the plain
/// `linux_<arch>` tag it replaces.
pub fn replaced_platforms(new_platform: &str) -> Vec<String> {
    if new_platform.starts_with("linux") {
        return Vec::new();
    }
    let parts: Vec<&str> = new_platform.split('_').collect();
    let arch_from =
        if new_platform.starts_with("manylinux_") || new_platform.starts_with("musllinux_") { 3 } else { 1 };
    if parts.len() <= arch_from {
        return Vec::new();
    }
    vec![format!("linux_{}", parts[arch_from..].join("_"))]
}

fn unique(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Retag a wheel name as auditwheel does: drop `remove`, add `platforms`,
/// then sort the platform tags.
pub fn retag_name(name: &WheelName, platforms: &[String], remove: &[String]) -> WheelName {
    let mut tags: Vec<String> = name.platform_tags.iter().filter(|t| !remove.contains(t)).cloned().collect();
    tags = unique(tags.into_iter().chain(platforms.iter().cloned()));
    if tags.len() > 1 {
        tags.retain(|t| t != "any");
    }
    tags.sort();
    WheelName { platform_tags: tags, ..name.clone() }
}

/// Rewrite the `Tag:` lines of a WHEEL file: for every python-abi pair
/// present, add `platforms` and drop `remove`. Tag lines move to the end,
/// other lines stay as they were; `Root-Is-Purelib` becomes false when an
/// `any` tag is replaced.
pub fn retag_wheel_file(text: &str, platforms: &[String], remove: &[String]) -> Result<String, WheelError> {
    let tags: Vec<String> = header_values(text, "Tag").into_iter().map(str::to_string).collect();
    if tags.is_empty() {
        return Err(WheelError::BadMetadata { file: "WHEEL".into(), why: "it has no `Tag:` line".into() });
    }
    let pyc_apis = unique(tags.iter().map(|t| t.splitn(3, '-').take(2).collect::<Vec<_>>().join("-")));
    let mut remove: Vec<String> = remove.to_vec();
    let had_any = tags.iter().any(|t| t.ends_with("-any"));
    if had_any {
        remove.push("any".into());
    }
    let unwanted: Vec<String> = pyc_apis.iter().flat_map(|p| remove.iter().map(move |r| format!("{p}-{r}"))).collect();
    let wanted: Vec<String> = pyc_apis.iter().flat_map(|p| platforms.iter().map(move |r| format!("{p}-{r}"))).collect();
    let mut updated: Vec<String> = tags.iter().filter(|t| !unwanted.contains(t)).cloned().collect();
    for t in wanted {
        if !tags.contains(&t) && !updated.contains(&t) {
            updated.push(t);
        }
    }
    let mut out = String::new();
    for line in headers(text) {
        let key = line.split_once(':').map(|(k, _)| k.trim().to_ascii_lowercase());
        match key.as_deref() {
            Some("tag") => continue,
            Some("root-is-purelib") if had_any => out.push_str("Root-Is-Purelib: false\n"),
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for t in &updated {
        out.push_str("Tag: ");
        out.push_str(t);
        out.push('\n');
    }
    // Keep the blank line and any body after the headers.
    let header_len: usize = text.split_inclusive('\n').take_while(|l| !l.trim().is_empty()).map(str::len).sum();
    out.push_str(&text[header_len..]);
    Ok(out)
}

/// Replace the `Version:` header of METADATA.
pub fn set_metadata_version(text: &str, version: &str) -> Result<String, WheelError> {
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_headers = true;
    let mut done = false;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            in_headers = false;
        }
        let is_version =
            in_headers && !done && line.split_once(':').is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("Version"));
        if is_version {
            out.push_str("Version: ");
            out.push_str(version);
            out.push_str(if line.ends_with("\r\n") { "\r\n" } else { "\n" });
            done = true;
        } else {
            out.push_str(line);
        }
    }
    if !done {
        return Err(WheelError::BadMetadata { file: "METADATA".into(), why: "it has no `Version:` header".into() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retagging() {
        assert_eq!(replaced_platforms("manylinux_2_17_x86_64"), ["linux_x86_64"]);
        assert_eq!(replaced_platforms("manylinux2014_x86_64"), ["linux_x86_64"]);
        assert!(replaced_platforms("linux_x86_64").is_empty());

        let name = WheelName::parse("cffi-1.17.1-cp311-cp311-linux_x86_64.whl").unwrap();
        let plats = vec!["manylinux_2_17_x86_64".to_string(), "manylinux2014_x86_64".to_string()];
        let new = retag_name(&name, &plats, &replaced_platforms(&plats[0]));
        assert_eq!(new.to_string(), "cffi-1.17.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl");

        let wheel = "Wheel-Version: 1.0\nGenerator: setuptools (75.1.0)\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n\n";
        let plain = "Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n";
        assert_eq!(
            retag_wheel_file(plain, &plats[..1], &replaced_platforms(&plats[0])).unwrap(),
            "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_17_x86_64\n"
        );
        let out = retag_wheel_file(wheel, &plats, &replaced_platforms(&plats[0])).unwrap();
        assert_eq!(
            out,
            "Wheel-Version: 1.0\nGenerator: setuptools (75.1.0)\nRoot-Is-Purelib: false\n\
             Tag: cp311-cp311-manylinux_2_17_x86_64\nTag: cp311-cp311-manylinux2014_x86_64\n\n"
        );
        assert!(retag_wheel_file("Wheel-Version: 1.0\n", &plats, &[]).is_err());
    }

    #[test]
    fn metadata_version() {
        let m = "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n\nVersion: in the body\n";
        assert_eq!(
            set_metadata_version(m, "1.0+rocm6.2").unwrap(),
            "Metadata-Version: 2.1\nName: x\nVersion: 1.0+rocm6.2\n\nVersion: in the body\n"
        );
        assert!(set_metadata_version("Name: x\n", "1").is_err());
    }
}
