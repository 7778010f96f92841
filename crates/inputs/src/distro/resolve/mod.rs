//! Dependency resolution over one architecture's indexes (a release and its
//! pockets together: the candidate of a package is apt's, highest pin
//! priority then highest version): the requested packages plus the base
//! set (Essential, and `Priority: required` for the `required` variant, as
//! mmdebstrap's: Ubuntu's apt is `important`, so an image that wants it
//! names it), closed over Pre-Depends and Depends. Alternatives
//! are tried in order, preferring one already chosen; virtual packages are
//! satisfied through Provides (versioned Provides for versioned deps).
//! Deterministic: inputs are visited in a fixed order, ties broken by name.
//! Recommends, Suggests, Conflicts and Breaks are not considered.
//! For a layer, the packages present in the layers below satisfy
//! dependencies as they are (versions checked); they are never replaced.

use super::archive::Package;
use super::control::Atom;
use super::version::compare;
pub use crate::definition::Variant;
use std::collections::{BTreeMap, HashMap, VecDeque};

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("package `{name}` is not in the index of {origin}; check its spelling, `components` and `architecture`")]
    Missing { name: String, origin: String },
    #[error("package `{name}` has no version `{version}` in the index of {origin} (it has: {have})")]
    MissingVersion { name: String, version: String, origin: String, have: String },
    #[error("unsatisfiable dependency: {chain} needs `{clause}`, but {}", why.iter().map(Unmet::to_string).collect::<Vec<_>>().join("; "))]
    Unsatisfiable { chain: String, clause: String, why: Vec<Unmet> },
    #[error("`{request}`: `{name}` {have} is installed in the layers below; a packages layer does not replace installed packages (ask for it in the layer that installs it)")]
    Installed { request: String, name: String, have: String },
}

/// Why one alternative of a dependency cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmet {
    #[error("`{name}` {version} is chosen already")]
    Chosen { name: String, version: String },
    #[error("`{name}` {version} is installed in the layers below (a layer resolves over the suites it names: give it the pockets the layers below came from)")]
    Installed { name: String, version: String },
    #[error("the index has `{name}` only as version {versions}")]
    OtherVersions { name: String, versions: String },
    #[error("no package is or provides `{atom}` in the index")]
    Nothing { atom: String },
}

/// A package present in the layers below (from their dpkg status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub version: String,
    pub provides: Vec<(String, Option<String>)>,
}

impl Installed {
    /// From a status paragraph (None when it has no name or version).
    pub fn from_status(p: &super::control::Paragraph) -> Option<Installed> {
        let provides = super::control::parse_depends(p.get("Provides").unwrap_or(""))
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .map(|a| (a.name, a.constraint.map(|(_, v)| v)))
            .collect();
        Some(Installed { name: p.get("Package")?.to_string(), version: p.get("Version")?.to_string(), provides })
    }
}

struct Index<'a> {
    by_name: HashMap<&'a str, Vec<&'a Package>>,
    providers: HashMap<&'a str, Vec<(&'a Package, Option<&'a str>)>>,
    installed: HashMap<&'a str, &'a Installed>,
    installed_providers: HashMap<&'a str, Vec<Option<&'a str>>>,
}

impl<'a> Index<'a> {
    fn new(pkgs: &'a [Package], installed: &'a [Installed]) -> Index<'a> {
        let mut by_name: HashMap<&str, Vec<&Package>> = HashMap::new();
        let mut providers: HashMap<&str, Vec<(&Package, Option<&str>)>> = HashMap::new();
        for p in pkgs {
            by_name.entry(&p.name).or_default().push(p);
            for (v, ver) in &p.provides {
                providers.entry(v).or_default().push((p, ver.as_deref()));
            }
        }
        // The candidate apt would take first: the highest pin priority (a
        // `NotAutomatic` suite's packages only where no other suite has
        // them), then the highest version.
        for v in by_name.values_mut() {
            v.sort_by(|a, b| {
                b.pin
                    .cmp(&a.pin)
                    .then_with(|| compare(&b.version, &a.version))
                    .then_with(|| a.filename.cmp(&b.filename))
            });
        }
        let mut installed_providers: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
        for i in installed {
            for (v, ver) in &i.provides {
                installed_providers.entry(v).or_default().push(ver.as_deref());
            }
        }
        let installed = installed.iter().map(|i| (i.name.as_str(), i)).collect();
        Index { by_name, providers, installed, installed_providers }
    }
}

fn priority_rank(p: &str) -> u8 {
    match p {
        "required" => 0,
        "important" => 1,
        "standard" => 2,
        "optional" => 3,
        _ => 4,
    }
}

fn atom_ok(version: &str, atom: &Atom) -> bool {
    match &atom.constraint {
        Some((rel, want)) => rel.holds(version, want),
        None => true,
    }
}

/// Resolve `requests` (`name` or `name=version`) plus the base set of
/// `variant` (none for a layer) over what is `installed` already. `origin`
/// names the index in messages. Returns the packages to add, sorted by name.
pub fn resolve<'a>(
    pkgs: &'a [Package],
    requests: &[String],
    variant: Option<Variant>,
    installed: &'a [Installed],
    origin: &str,
) -> Result<Vec<&'a Package>, ResolveError> {
    let idx = Index::new(pkgs, installed);
    let mut chosen: BTreeMap<&str, &Package> = BTreeMap::new();
    let mut parent: HashMap<&str, &str> = HashMap::new();
    let mut queue: VecDeque<&Package> = VecDeque::new();

    for r in requests {
        let (name, version) = match r.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (r.as_str(), None),
        };
        if let Some(have) = idx.installed.get(name) {
            if version.is_none_or(|v| v == have.version) {
                continue;
            }
            return Err(ResolveError::Installed { request: r.clone(), name: name.into(), have: have.version.clone() });
        }
        let cands =
            idx.by_name.get(name).ok_or_else(|| ResolveError::Missing { name: name.into(), origin: origin.into() })?;
        let pick = match version {
            Some(v) => *cands.iter().find(|p| p.version == v).ok_or_else(|| ResolveError::MissingVersion {
                name: name.into(),
                version: v.into(),
                origin: origin.into(),
                have: cands.iter().map(|p| p.version.as_str()).collect::<Vec<_>>().join(", "),
            })?,
            None => cands[0],
        };
        if chosen.insert(&pick.name, pick).is_none() {
            queue.push_back(pick);
        }
    }
    let mut base: Vec<&Package> = idx
        .by_name
        .values()
        .map(|v| v[0])
        .filter(|p| match variant {
            None => false,
            Some(v) => p.essential || (v == Variant::Required && p.priority == "required"),
        })
        .collect();
    base.sort_by(|a, b| a.name.cmp(&b.name));
    for p in base {
        if !chosen.contains_key(p.name.as_str()) {
            chosen.insert(&p.name, p);
            queue.push_back(p);
        }
    }

    while let Some(pkg) = queue.pop_front() {
        for clause in pkg.pre_depends.iter().chain(pkg.depends.iter()) {
            if satisfied(clause, &chosen, &idx) {
                continue;
            }
            let mut why = Vec::new();
            let mut picked = None;
            for atom in clause {
                match candidate(atom, &chosen, &idx) {
                    Ok(p) => {
                        picked = Some(p);
                        break;
                    }
                    Err(w) => why.push(w),
                }
            }
            let Some(p) = picked else {
                let clause_text = clause.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" | ");
                return Err(ResolveError::Unsatisfiable { chain: chain(&pkg.name, &parent), clause: clause_text, why });
            };
            parent.insert(&p.name, &pkg.name);
            chosen.insert(&p.name, p);
            queue.push_back(p);
        }
    }
    Ok(chosen.into_values().collect())
}

/// Is the clause met by what is chosen already?
fn satisfied(clause: &[Atom], chosen: &BTreeMap<&str, &Package>, idx: &Index) -> bool {
    clause.iter().any(|a| {
        if chosen.get(a.name.as_str()).is_some_and(|p| atom_ok(&p.version, a)) {
            return true;
        }
        if idx.installed.get(a.name.as_str()).is_some_and(|i| atom_ok(&i.version, a)) {
            return true;
        }
        let provided_below = idx.installed_providers.get(a.name.as_str()).is_some_and(|vs| {
            vs.iter().any(|pv| match (&a.constraint, pv) {
                (None, _) => true,
                (Some((rel, want)), Some(v)) => rel.holds(v, want),
                (Some(_), None) => false,
            })
        });
        if provided_below {
            return true;
        }
        idx.providers.get(a.name.as_str()).is_some_and(|provs| {
            provs.iter().any(|(p, pv)| {
                chosen.get(p.name.as_str()).is_some_and(|c| c.version == p.version)
                    && match (&a.constraint, pv) {
                        (None, _) => true,
                        (Some((rel, want)), Some(v)) => rel.holds(v, want),
                        (Some(_), None) => false,
                    }
            })
        })
    })
}

/// The package to add for one alternative, or why there is none.
fn candidate<'a>(atom: &Atom, chosen: &BTreeMap<&str, &'a Package>, idx: &Index<'a>) -> Result<&'a Package, Unmet> {
    if let Some(p) = chosen.get(atom.name.as_str()) {
        // Only one version of a package can be installed.
        return Err(Unmet::Chosen { name: atom.name.clone(), version: p.version.clone() });
    }
    if let Some(i) = idx.installed.get(atom.name.as_str()) {
        return Err(Unmet::Installed { name: atom.name.clone(), version: i.version.clone() });
    }
    if let Some(cands) = idx.by_name.get(atom.name.as_str()) {
        if let Some(p) = cands.iter().find(|p| atom_ok(&p.version, atom)) {
            return Ok(p);
        }
    }
    let mut provs: Vec<&Package> = idx
        .providers
        .get(atom.name.as_str())
        .map(|v| {
            v.iter()
                .filter(|(_, pv)| match (&atom.constraint, pv) {
                    (None, _) => true,
                    (Some((rel, want)), Some(v)) => rel.holds(v, want),
                    (Some(_), None) => false,
                })
                .filter(|(p, _)| !chosen.contains_key(p.name.as_str()) && !idx.installed.contains_key(p.name.as_str()))
                .map(|(p, _)| *p)
                .collect()
        })
        .unwrap_or_default();
    provs.sort_by(|a, b| {
        priority_rank(&a.priority)
            .cmp(&priority_rank(&b.priority))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| compare(&b.version, &a.version))
    });
    if let Some(p) = provs.first() {
        return Ok(p);
    }
    match idx.by_name.get(atom.name.as_str()) {
        Some(c) => Err(Unmet::OtherVersions {
            name: atom.name.clone(),
            versions: c.iter().map(|p| p.version.as_str()).collect::<Vec<_>>().join(", "),
        }),
        None => Err(Unmet::Nothing { atom: atom.to_string() }),
    }
}

fn chain(name: &str, parent: &HashMap<&str, &str>) -> String {
    let mut v = vec![name.to_string()];
    let mut cur = name;
    while let Some(p) = parent.get(cur) {
        if v.len() > 64 || v.iter().any(|x| x == p) {
            break;
        }
        v.push(p.to_string());
        cur = p;
    }
    v.reverse();
    v.join(" -> ")
}

#[cfg(test)]
mod tests;
