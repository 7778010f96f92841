//! Package sets: a `[base.packages]` table and a layer's `[source.packages]`.

use super::super::packages::{Configure, Keyring, KeyringDeb, Mirror, PackageSet, PackagesBase, Variant};
use super::super::raw::{self, SourceDef};
use super::super::{field_err, resolve_path};
use super::{given_keys, Result};
use crate::platform::Platform;
use std::path::Path;

fn valid_package_name(n: &str) -> bool {
    n.len() >= 2
        && n.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

fn valid_account_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && n.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn valid_suite(s: &str) -> bool {
    !s.is_empty() && !s.contains(['/', ' '])
}

/// `suite = "bookworm"` or `suites = ["bookworm", "bookworm-updates", ...]`:
/// the release first, then its pockets, each once.
fn suites(file: &Path, prefix: &str, p: &raw::PackagesDef) -> Result<Vec<String>> {
    let f = |k: &str| format!("{prefix}.{k}");
    let (list, field) = match (&p.suite, &p.suites) {
        (Some(s), None) => (vec![s.clone()], f("suite")),
        (None, Some(l)) => (l.clone(), f("suites")),
        (Some(_), Some(_)) => {
            return Err(field_err(
                file,
                f("suites"),
                "give `suite` (one suite) or `suites` (the release and its pockets), not both",
            ))
        }
        (None, None) => {
            return Err(field_err(
                file,
                f("suite"),
                "is missing; name the release (`suite = \"bookworm\"`), or it and its pockets (`suites = [\"noble\", \"noble-updates\", \"noble-security\"]`)",
            ))
        }
    };
    if list.is_empty() {
        return Err(field_err(file, field, "is empty; name the release first, then its pockets"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, s) in list.iter().enumerate() {
        let at = if p.suites.is_some() { format!("{field}[{i}]") } else { field.clone() };
        if !valid_suite(s) {
            return Err(field_err(
                file,
                at,
                format!("`{s}` is not a suite name like \"bookworm\" or \"noble-security\""),
            ));
        }
        if !seen.insert(s.as_str()) {
            return Err(field_err(file, at, format!("`{s}` is listed twice")));
        }
    }
    Ok(list)
}

fn parse_mirror(file: &Path, field: &str, m: &str) -> Result<Mirror> {
    match m {
        "host" => Ok(Mirror::Host),
        m if m.starts_with("http://") || m.starts_with("https://") => {
            Ok(Mirror::Url(m.trim_end_matches('/').to_string()))
        }
        m => Err(field_err(
            file,
            field,
            format!(
                "`{m}` is neither \"host\" (this machine's apt mirror for the suite) nor an http:// or https:// URL"
            ),
        )),
    }
}

fn keyring(file: &Path, field: &str, k: &raw::KeyringDef) -> Result<Keyring> {
    match k {
        raw::KeyringDef::Path(p) if p.is_empty() => Err(field_err(
            file,
            field,
            "is empty; name the keyring that signs the archive, e.g. /usr/share/keyrings/debian-archive-keyring.gpg",
        )),
        raw::KeyringDef::Path(p) => Ok(Keyring::File(resolve_path(file, p))),
        raw::KeyringDef::Deb(d) => {
            let sub = |k: &str| format!("{field}.{k}");
            if !d.deb.ends_with(".deb") || d.deb.starts_with('/') || d.deb.split('/').any(|c| c == "..") {
                return Err(field_err(file, sub("deb"), format!("`{}` is not a package's path below the mirror, like \"pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1-0.2_all.deb\"", d.deb)));
            }
            if d.sha256.len() != 64 || !d.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(field_err(
                    file,
                    sub("sha256"),
                    "expects the package's sha256 (64 hex digits), as the archive's Packages index lists it",
                ));
            }
            if !d.path.starts_with('/') || d.path.split('/').any(|c| c == "..") || d.path.ends_with('/') {
                return Err(field_err(file, sub("path"), format!("`{}` is not an absolute file path inside the package, like \"/usr/share/keyrings/ubuntu-archive-keyring.gpg\"", d.path)));
            }
            let mirror = parse_mirror(file, &sub("mirror"), d.mirror.as_deref().unwrap_or("host"))?;
            let suite = match (&d.suite, &mirror) {
                (Some(s), _) if valid_suite(s) => s.clone(),
                (Some(s), _) => return Err(field_err(file, sub("suite"), format!("`{s}` is not a suite name"))),
                (None, Mirror::Url(_)) => String::new(),
                (None, Mirror::Host) => {
                    return Err(field_err(file, sub("suite"), "is missing: with `mirror = \"host\"` it names the suite whose apt entry gives the mirror (e.g. \"trixie\")"))
                }
            };
            Ok(Keyring::Deb(KeyringDeb {
                deb: d.deb.clone(),
                sha256: d.sha256.to_ascii_lowercase(),
                path: d.path.clone(),
                mirror,
                suite,
            }))
        }
    }
}

/// The keys a packages base and a packages layer share.
fn validate_package_set(file: &Path, prefix: &str, p: &raw::PackagesDef, platform: &Platform) -> Result<PackageSet> {
    let f = |k: &str| format!("{prefix}.{k}");
    let suites = suites(file, prefix, p)?;
    let components = p.components.clone().unwrap_or_else(|| vec!["main".into()]);
    if components.is_empty() || components.iter().any(|c| c.is_empty() || c.contains(' ')) {
        return Err(field_err(file, f("components"), "give one or more component names, e.g. [\"main\"]"));
    }
    let platform_arch = platform.arch.debian();
    let architecture = p.architecture.clone().unwrap_or_else(|| platform_arch.to_string());
    if architecture != platform_arch {
        return Err(field_err(
            file,
            f("architecture"),
            format!("`{architecture}` does not match the image's platform (Debian architecture `{platform_arch}`); set `config.platform` or drop `architecture`"),
        ));
    }
    let mirror = parse_mirror(file, &f("mirror"), &p.mirror)?;
    let security_mirror =
        p.security_mirror.as_deref().map(|m| parse_mirror(file, &f("security_mirror"), m)).transpose()?;
    let keyring = keyring(file, &f("keyring"), &p.keyring)?;
    let mut seen = std::collections::BTreeSet::new();
    for (i, inc) in p.include.iter().enumerate() {
        let (name, version) = match inc.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (inc.as_str(), None),
        };
        if !valid_package_name(name) || version.is_some_and(|v| v.is_empty() || v.contains(' ')) {
            return Err(field_err(
                file,
                format!("{}[{i}]", f("include")),
                format!("`{inc}` is not a package name (optionally `name=version`)"),
            ));
        }
        if !seen.insert(name.to_string()) {
            return Err(field_err(file, format!("{}[{i}]", f("include")), format!("`{name}` is listed twice")));
        }
    }
    Ok(PackageSet {
        suites,
        components,
        architecture,
        mirror,
        security_mirror,
        keyring,
        include: p.include.clone(),
        configure: match &p.configure {
            None | Some(raw::ConfigureDef::Bool(false)) => Configure::Sandbox,
            Some(raw::ConfigureDef::Bool(true)) => Configure::Engine,
            Some(raw::ConfigureDef::Mode(m)) => match m.as_str() {
                "sandbox" => Configure::Sandbox,
                "engine" => Configure::Engine,
                other => {
                    return Err(field_err(
                        file,
                        f("configure"),
                        format!("`{other}` is not \"sandbox\" (run the scripts in quarry's sandbox, the default) or \"engine\" (in a container step)"),
                    ))
                }
            },
        },
    })
}

pub(super) fn validate_packages_base(
    file: &Path,
    prefix: &str,
    p: raw::PackagesDef,
    platform: &Platform,
) -> Result<PackagesBase> {
    let set = validate_package_set(file, prefix, &p, platform)?;
    let f = |k: &str| format!("{prefix}.{k}");
    let variant = match p.variant.as_deref() {
        None | Some("required") => Variant::Required,
        Some("essential") => Variant::Essential,
        Some(v) => return Err(field_err(file, f("variant"), format!("`{v}` is not \"required\" or \"essential\""))),
    };
    for (g, gid) in &p.groups {
        if !valid_account_name(g) || *gid == 0 || *gid >= 65534 {
            return Err(field_err(
                file,
                format!("{}.{g}", f("groups")),
                "expects a group name (lowercase) and a gid between 1 and 65533",
            ));
        }
    }
    for (i, u) in p.users.iter().enumerate() {
        let uf = format!("{}[{i}]", f("users"));
        if !valid_account_name(&u.name) {
            return Err(field_err(
                file,
                format!("{uf}.name"),
                format!("`{}` is not a user name (lowercase letters, digits, `_`, `-`)", u.name),
            ));
        }
        if u.uid == 0 || u.uid >= 65534 || u.gid.is_some_and(|g| g >= 65534) {
            return Err(field_err(file, format!("{uf}.uid"), "uid and gid must be between 1 and 65533"));
        }
        if let Some(g) = u.groups.iter().find(|g| !valid_account_name(g)) {
            return Err(field_err(file, format!("{uf}.groups"), format!("`{g}` is not a group name")));
        }
        for (k, v) in [("shell", &u.shell), ("home", &u.home)] {
            if v.as_ref().is_some_and(|v| !v.starts_with('/') || v.contains("..")) {
                return Err(field_err(file, format!("{uf}.{k}"), "must be an absolute path without `..`"));
            }
        }
    }
    Ok(PackagesBase { set, variant, groups: p.groups, users: p.users })
}

/// `[[source]]` with `[source.packages]`: nothing else in the same source.
pub(super) fn validate_packages_source(file: &Path, f: &str, s: SourceDef, platform: &Platform) -> Result<PackageSet> {
    if let Some(k) = given_keys(&s).into_iter().find(|k| *k != "packages") {
        return Err(field_err(
            file,
            format!("{f}.{k}"),
            "does not go with `packages`; the packages' own keys go inside the `packages` table",
        ));
    }
    let p = *s.packages.expect("called for packages sources");
    let pf = format!("{f}.packages");
    for (k, given) in
        [("variant", p.variant.is_some()), ("users", !p.users.is_empty()), ("groups", !p.groups.is_empty())]
    {
        if given {
            return Err(field_err(
                file,
                format!("{pf}.{k}"),
                "applies only to `[base.packages]`; a packages layer installs what `include` names and what it depends on",
            ));
        }
    }
    let set = validate_package_set(file, &pf, &p, platform)?;
    if set.include.is_empty() {
        return Err(field_err(file, format!("{pf}.include"), "is empty; name the packages this layer installs"));
    }
    Ok(set)
}
