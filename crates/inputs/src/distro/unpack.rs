//! Unpacking .debs as `dpkg --unpack` leaves a system, without running
//! anything: the files (on merged /usr for a base; for a layer, through the
//! symlinked directories and the diversions below, as dpkg would place
//! them), conffiles as `*.dpkg-new`, and the database: every package
//! `install ok unpacked` with its conffiles marked `newconffile`, its control
//! files in `info/` and its `.list` in data-tar order, the trigger interests
//! it declares (`triggers/File`, `triggers/<name>`), and the file triggers
//! its files activate in packages installed below. `dpkg --configure -a`
//! takes it from there (see `configure`): it installs the conffiles, runs
//! the postinsts and the triggers, and rewrites the status file.
//!
//! Over 400 lines: one pass that must leave dpkg's database whole for every
//! package at once (lists, info files, status, conffiles, trigger interests
//! and activations, diversions); its parts share that half-built state.

use super::below::{self, Below};
use super::control::{parse_paragraphs, Paragraph};
use super::deb::Deb;
use super::usrmerge::{merged_usr_path, MERGED};
use super::DistroError;
use crate::layer::path::{display, join, normalize_dest};
use crate::layer::{Kind, Node, Tree};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn file(data: impl Into<Vec<u8>>, mode: u32) -> Node {
    Node::bytes(data.into(), mode)
}

/// Fields in the order dpkg writes them to its status file; others follow.
const STATUS_ORDER: [&str; 25] = [
    "Package",
    "Essential",
    "Protected",
    "Status",
    "Priority",
    "Section",
    "Installed-Size",
    "Origin",
    "Maintainer",
    "Bugs",
    "Architecture",
    "Multi-Arch",
    "Source",
    "Version",
    "Config-Version",
    "Replaces",
    "Provides",
    "Depends",
    "Pre-Depends",
    "Recommends",
    "Suggests",
    "Breaks",
    "Conflicts",
    "Enhances",
    "Conffiles",
];

pub const DB: &[u8] = b"var/lib/dpkg";

/// A package this unpack added, in unpack order.
#[derive(Debug, Clone)]
pub struct NewPackage {
    pub name: String,
    /// Its database name: `name:arch` for `Multi-Arch: same`, else `name`.
    pub key: String,
    pub architecture: String,
    pub version: String,
    pub has_preinst: bool,
    /// Named by the definition (not a dependency): apt marks the rest automatic.
    pub named: bool,
    /// In the essential set, which image builders extract before any
    /// script runs and configure first (see [`essential_set`]).
    pub essential: bool,
    /// The control archive's members (`control` too), which dpkg lays out
    /// in `tmp.ci/` while a preinst runs (debconf reads the package's name there).
    pub control_members: Vec<(String, Vec<u8>)>,
}

/// A trigger interest: who, and whether activators wait for it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Interest {
    package: String,
    noawait: bool,
}

impl Interest {
    fn spec(&self) -> String {
        if self.noawait {
            format!("{}/noawait", self.package)
        } else {
            self.package.clone()
        }
    }
    fn parse(spec: &str) -> Interest {
        match spec.strip_suffix("/noawait") {
            Some(p) => Interest { package: p.to_string(), noawait: true },
            None => Interest { package: spec.trim_end_matches("/await").to_string(), noawait: false },
        }
    }
}

/// The rootfs or layer being unpacked.
pub struct Unpacked {
    pub tree: Tree,
    pub packages: Vec<NewPackage>,
    /// Every package's status paragraph, below ones included, by database key.
    status: BTreeMap<DbKey, Paragraph>,
    /// The text of the paragraphs from below this unpack has not changed:
    /// written back byte for byte.
    below_text: BTreeMap<DbKey, String>,
    /// Keys of the packages installed below (not unpacked here).
    installed_below: BTreeSet<String>,
    /// `triggers/File`: (path, interest), below's first, in order.
    file_interests: Vec<(String, Interest)>,
    /// `triggers/<name>`.
    explicit: BTreeMap<String, Vec<Interest>>,
    /// Diversions below: path -> (divert-to, by package).
    diversions: BTreeMap<Vec<u8>, (Vec<u8>, String)>,
    architecture: String,
    below: Option<Tree>,
}

/// A package's place in dpkg's status file: by name, then architecture
/// (only `Multi-Arch: same` packages have one in their database name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct DbKey(String, String);

impl DbKey {
    fn of(db_name: &str) -> DbKey {
        match db_name.split_once(':') {
            Some((n, a)) => DbKey(n.to_string(), a.to_string()),
            None => DbKey(db_name.to_string(), String::new()),
        }
    }
}

fn status_key(p: &Paragraph) -> String {
    let name = p.get("Package").unwrap_or_default();
    match (p.get("Multi-Arch"), p.get("Architecture")) {
        (Some("same"), Some(arch)) => format!("{name}:{arch}"),
        _ => name.to_string(),
    }
}

impl Unpacked {
    /// A whole rootfs.
    pub fn new(architecture: &str) -> Unpacked {
        Unpacked {
            tree: Tree::new(),
            packages: Vec::new(),
            status: BTreeMap::new(),
            below_text: BTreeMap::new(),
            installed_below: BTreeSet::new(),
            file_interests: Vec::new(),
            explicit: BTreeMap::new(),
            diversions: BTreeMap::new(),
            architecture: architecture.to_string(),
            below: None,
        }
    }

    /// A layer over `below`: its database starts as theirs.
    pub fn over(architecture: &str, below: Below) -> Unpacked {
        let mut u = Unpacked::new(architecture);
        for (_, raw) in below.status_paragraphs() {
            let p = super::control::parse_exact(&raw);
            let key = status_key(&p);
            if below::is_present(&p) {
                u.installed_below.insert(key.clone());
            }
            u.below_text.insert(DbKey::of(&key), raw);
            u.status.insert(DbKey::of(&key), p);
        }
        let text = |path: &[u8]| below.text(path).unwrap_or_default();
        for line in text(b"var/lib/dpkg/triggers/File").lines() {
            if let Some((path, spec)) = line.split_once(' ') {
                u.file_interests.push((path.to_string(), Interest::parse(spec.trim())));
            }
        }
        for name in below.trigger_names() {
            let specs = text(&join(b"var/lib/dpkg/triggers", name.as_bytes()));
            u.explicit.insert(name, specs.lines().filter(|l| !l.is_empty()).map(Interest::parse).collect());
        }
        let div = text(b"var/lib/dpkg/diversions");
        let lines: Vec<&str> = div.lines().collect();
        for triple in lines.chunks_exact(3) {
            if let (Ok(from), Ok(to)) = (normalize_dest(triple[0]), normalize_dest(triple[1])) {
                u.diversions.insert(from, (to, triple[2].to_string()));
            }
        }
        u.below = Some(below.tree);
        u
    }

    /// Where a package's path lands: under merged /usr for a base; for a
    /// layer, through the symlinked directories below (as dpkg would).
    fn place(&self, p: &[u8]) -> Vec<u8> {
        match &self.below {
            None => merged_usr_path(p),
            Some(b) => b.resolve_parents(p),
        }
    }

    fn insert(&mut self, path: &[u8], node: Node) -> Result<(), DistroError> {
        self.tree
            .insert(path.to_vec(), node)
            .map_err(|e| DistroError::Assemble { message: format!("`/{}`: {e}", display(path)) })
    }

    /// Unpack one package, as `dpkg --unpack` would, and record it.
    /// `named`: the definition asked for it (apt would mark it manual).
    /// `essential`: in the essential set, whose files (conffiles too) are
    /// in place before anything is configured, as mmdebstrap and debootstrap
    /// extract them first: a conffile is then both in place and `.dpkg-new`
    /// (dpkg finds them identical and installs it quietly).
    pub fn unpack(&mut self, deb: Deb, named: bool, essential: bool) -> Result<(), DistroError> {
        let name = deb.control.get("Package").unwrap_or_default().to_string();
        let arch = deb.control.get("Architecture").unwrap_or_default().to_string();
        let key = status_key(&deb.control);
        let conffiles = conffile_paths(&deb);
        let mut list = String::from("/.\n");
        let mut activated: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for path in &deb.order {
            let Some(node) = deb.data.get(path) else { continue };
            list.push('/');
            list.push_str(&display(path));
            list.push('\n');
            self.activate_file_triggers(path, &mut activated);
            let mut node = node.clone();
            if let Kind::Hardlink(t) = &node.kind {
                node.kind = Kind::Hardlink(self.place(t));
            }
            let mut target = match self.diversions.get(path) {
                Some((to, by)) if *by != name => self.place(to),
                _ => self.place(path),
            };
            if conffiles.contains(path) && !node.kind.is_dir() {
                if essential {
                    self.insert(&target, node.clone())?;
                }
                target.extend_from_slice(b".dpkg-new");
            }
            // The merged-/usr links themselves (newer base-files ship them)
            // are made once in `finish`; and, as with dpkg, a directory is
            // never replaced by a file or link (that would drop its contents).
            if MERGED.contains(&&path[..]) && !node.kind.is_dir() {
                continue;
            }
            if !node.kind.is_dir() && self.tree.get(&target).is_some_and(|n| n.kind.is_dir()) {
                continue;
            }
            // A directory shipped by several packages: the first keeps it.
            if node.kind.is_dir() && self.tree.get(&target).is_some_and(|n| n.kind.is_dir() && !n.implicit) {
                continue;
            }
            // Over the layers below, dpkg keeps what is there: a directory is
            // not replaced by a file, a symlink to a directory stays one, and
            // an existing directory keeps its owner and mode.
            if let Some(b) = self.below.as_ref().and_then(|b| b.get(&target)) {
                match (&b.kind, node.kind.is_dir()) {
                    (Kind::Dir, false) | (Kind::Symlink(_), true) => continue,
                    (Kind::Dir, true) => {
                        node.mode = b.mode;
                        node.uid = b.uid;
                        node.gid = b.gid;
                    }
                    _ => {}
                }
            }
            self.insert(&target, node)?;
        }
        let info = join(DB, b"info");
        self.insert(&join(&info, format!("{key}.list").as_bytes()), file(list, 0o644))?;
        for (member, bytes) in &deb.control_files {
            let script = matches!(member.as_str(), "preinst" | "postinst" | "prerm" | "postrm" | "config");
            self.insert(
                &join(&info, format!("{key}.{member}").as_bytes()),
                file(bytes.clone(), if script { 0o755 } else { 0o644 }),
            )?;
        }
        if let Some(t) = deb.control_files.get("triggers") {
            self.declare_triggers(&key, &String::from_utf8_lossy(t), &mut activated);
        }
        for (pkg, names) in activated {
            self.set_pending(&pkg, names);
        }
        let mut fields: Vec<(String, String)> = super::control::parse_exact(&deb.control_text).fields;
        fields.push(("Status".into(), "install ok unpacked".into()));
        let declared = conffile_lines(&deb);
        if !declared.is_empty() {
            let listed: String = declared
                .iter()
                .map(|(p, flags)| {
                    format!("\n {p} newconffile{}", flags.iter().map(|f| format!(" {f}")).collect::<String>())
                })
                .collect();
            fields.push(("Conffiles".into(), listed));
        }
        self.below_text.remove(&DbKey::of(&key));
        self.status.insert(DbKey::of(&key), sorted(fields));
        self.packages.push(NewPackage {
            name,
            key,
            architecture: arch,
            version: deb.control.get("Version").unwrap_or_default().to_string(),
            has_preinst: deb.control_files.contains_key("preinst"),
            named,
            essential,
            control_members: std::iter::once(("control".to_string(), deb.control_text.clone().into_bytes()))
                .chain(deb.control_files.iter().map(|(k, v)| (k.clone(), v.clone())))
                .collect(),
        });
        Ok(())
    }

    /// A file of a package being unpacked activates the file triggers of
    /// installed packages interested in it or a directory above it (dpkg
    /// ignores interests of packages not yet configured: their postinst does
    /// the work).
    fn activate_file_triggers(&self, path: &[u8], activated: &mut BTreeMap<String, BTreeSet<String>>) {
        let p = format!("/{}", display(path));
        for (dir, interest) in &self.file_interests {
            let hit = p == *dir || (p.starts_with(dir.as_str()) && p.as_bytes().get(dir.len()) == Some(&b'/'));
            if hit && self.installed_below.contains(&interest.package) {
                activated.entry(interest.package.clone()).or_default().insert(dir.clone());
            }
        }
    }

    /// A package's `triggers` control file: its interests join the
    /// database; its `activate` directives reach installed packages.
    fn declare_triggers(&mut self, key: &str, text: &str, activated: &mut BTreeMap<String, BTreeSet<String>>) {
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let Some((directive, name)) = line.split_once(char::is_whitespace) else { continue };
            let name = name.trim().to_string();
            match directive {
                "interest" | "interest-await" | "interest-noawait" => {
                    let i = Interest { package: key.to_string(), noawait: directive == "interest-noawait" };
                    if name.starts_with('/') {
                        self.file_interests.push((name, i));
                    } else {
                        let list = self.explicit.entry(name).or_default();
                        if !list.contains(&i) {
                            list.push(i);
                        }
                    }
                }
                "activate" | "activate-await" | "activate-noawait" => {
                    for i in self.explicit.get(&name).into_iter().flatten() {
                        if self.installed_below.contains(&i.package) {
                            activated.entry(i.package.clone()).or_default().insert(name.clone());
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn set_pending(&mut self, package: &str, names: BTreeSet<String>) {
        let Some(p) = self.status.get_mut(&DbKey::of(package)) else { return };
        self.below_text.remove(&DbKey::of(package));
        let mut pending: BTreeSet<String> =
            p.get("Triggers-Pending").map(|v| v.split_whitespace().map(String::from).collect()).unwrap_or_default();
        pending.extend(names);
        let mut fields: Vec<(String, String)> =
            p.fields.iter().filter(|(k, _)| k != "Triggers-Pending" && k != "Status").cloned().collect();
        fields.push(("Status".into(), "install ok triggers-pending".into()));
        fields.push(("Triggers-Pending".into(), pending.into_iter().collect::<Vec<_>>().join(" ")));
        *p = sorted(fields);
    }

    /// Is there anything for `dpkg --configure` to run: a maintainer
    /// script, a trigger declared, or one pending below?
    pub fn needs_scripts(&self) -> bool {
        let runs = |p: &NewPackage| {
            p.control_members.iter().any(|(m, _)| matches!(m.as_str(), "preinst" | "postinst" | "config" | "triggers"))
        };
        self.packages.iter().any(runs) || self.status.values().any(|p| p.get("Triggers-Pending").is_some())
    }

    /// What `dpkg --configure -a` does for packages with no script and no
    /// trigger (nothing runs): each conffile moved from `.dpkg-new` into
    /// place with its md5 recorded, each package `install ok installed`.
    /// Call before `finish`.
    pub fn settle_without_scripts(&mut self) -> Result<(), DistroError> {
        use md5::Digest as _;
        for p in &self.packages {
            let Some(status) = self.status.get_mut(&DbKey::of(&p.key)) else { continue };
            let mut fields: Vec<(String, String)> = Vec::new();
            for (k, v) in &status.fields {
                match k.as_str() {
                    "Status" => fields.push((k.clone(), "install ok installed".into())),
                    "Conffiles" => {
                        let mut listed = String::new();
                        for line in v.lines().filter(|l| !l.trim().is_empty()) {
                            let words: Vec<&str> = line.split_whitespace().collect();
                            let (Some(path), Some(_)) = (words.first(), words.get(1)) else { continue };
                            let flags: String = words[2..].iter().map(|f| format!(" {f}")).collect();
                            let hash = match normalize_dest(path) {
                                Ok(rel) if !flags.contains("remove-on-upgrade") => {
                                    let at = match &self.below {
                                        None => merged_usr_path(&rel),
                                        Some(b) => b.resolve_parents(&rel),
                                    };
                                    let mut new = at.clone();
                                    new.extend_from_slice(b".dpkg-new");
                                    match self.tree.get(&new).cloned() {
                                        Some(node) => {
                                            let bytes = node.read_content().map_err(|e| DistroError::Assemble {
                                                message: format!("conffile `{path}`: {e}"),
                                            })?;
                                            self.tree.remove(&new);
                                            self.tree.insert(at, node).map_err(|e| DistroError::Assemble {
                                                message: format!("conffile `{path}`: {e}"),
                                            })?;
                                            hex::encode(md5::Md5::digest(&bytes))
                                        }
                                        None => "newconffile".into(),
                                    }
                                }
                                _ => "newconffile".into(),
                            };
                            listed.push_str(&format!("\n {path} {hash}{flags}"));
                        }
                        fields.push((k.clone(), listed));
                    }
                    _ => fields.push((k.clone(), v.clone())),
                }
            }
            *status = Paragraph { fields };
        }
        Ok(())
    }

    /// After the last package: the merged-/usr links (a base) and the database.
    pub fn finish(&mut self) -> Result<(), DistroError> {
        if self.below.is_none() {
            for d in MERGED {
                let usr = join(b"usr", d);
                let always = matches!(d, b"bin" | b"sbin" | b"lib");
                if always || self.tree.get(&usr).is_some() {
                    if self.tree.get(&usr).is_none() {
                        self.insert(&usr, Node::dir(0o755))?;
                    }
                    self.insert(d, Node::new(Kind::Symlink(usr.clone()), 0o777))?;
                }
            }
            self.insert(&join(DB, b"info/format"), file("1\n", 0o644))?;
            self.insert(&join(DB, b"arch"), file(format!("{}\n", self.architecture), 0o644))?;
            for d in ["alternatives", "info", "parts", "triggers", "updates"] {
                if self.tree.get(&join(DB, d.as_bytes())).is_none() {
                    self.insert(&join(DB, d.as_bytes()), Node::dir(0o755))?;
                }
            }
        }
        let mut status = String::new();
        for (key, p) in &self.status {
            match self.below_text.get(key) {
                Some(raw) => status.push_str(raw),
                None => p.write_to(&mut status),
            }
            status.push('\n');
        }
        self.write_db(b"status", status)?;
        let mut file_list = String::new();
        for (path, i) in &self.file_interests {
            file_list.push_str(&format!("{path} {}\n", i.spec()));
        }
        self.write_db(b"triggers/File", file_list)?;
        for (name, interests) in &self.explicit.clone() {
            let text: String = interests.iter().map(|i| format!("{}\n", i.spec())).collect();
            self.write_db(&join(b"triggers", name.as_bytes()), text)?;
        }
        if self.tree.get(&join(DB, b"triggers/Unincorp")).is_none() && self.below.is_none() {
            self.write_db(b"triggers/Unincorp", String::new())?;
        }
        Ok(())
    }

    /// A database file, where the layers below have it (a symlinked /var).
    fn write_db(&mut self, rel: &[u8], text: String) -> Result<(), DistroError> {
        let at = self.place(&join(DB, rel));
        self.insert(&at, file(text, 0o644))
    }

    /// The tree below, for a layer.
    pub fn below(&self) -> Option<&Tree> {
        self.below.as_ref()
    }
}

/// The essential set: `Essential: yes` packages and what they depend on
/// (Depends, Pre-Depends; the first alternative the set holds, by name or
/// by what provides it), among `controls`. Names. What mmdebstrap installs
/// with dpkg before apt installs the rest (so apt marks none of them
/// automatic).
pub fn essential_set(controls: &[&Paragraph]) -> BTreeSet<String> {
    let mut providers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut by_name: BTreeMap<String, &Paragraph> = BTreeMap::new();
    for c in controls {
        let name = c.get("Package").unwrap_or_default().to_string();
        providers.entry(name.clone()).or_default().push(name.clone());
        for clause in super::control::parse_depends(c.get("Provides").unwrap_or_default()).unwrap_or_default() {
            for atom in clause {
                providers.entry(atom.name).or_default().push(name.clone());
            }
        }
        by_name.insert(name, c);
    }
    let mut set = BTreeSet::new();
    let mut todo: Vec<String> = controls
        .iter()
        .filter(|c| c.get("Essential") == Some("yes"))
        .filter_map(|c| c.get("Package").map(String::from))
        .collect();
    while let Some(name) = todo.pop() {
        if !set.insert(name.clone()) {
            continue;
        }
        let Some(c) = by_name.get(&name) else { continue };
        for field in ["Pre-Depends", "Depends"] {
            for clause in super::control::parse_depends(c.get(field).unwrap_or_default()).unwrap_or_default() {
                if let Some(p) = clause.iter().find_map(|a| providers.get(&a.name).and_then(|p| p.first())) {
                    todo.push(p.clone());
                }
            }
        }
    }
    set
}

fn sorted(mut fields: Vec<(String, String)>) -> Paragraph {
    let rank = |k: &str| STATUS_ORDER.iter().position(|o| o.eq_ignore_ascii_case(k)).unwrap_or(STATUS_ORDER.len());
    // Description and the fields dpkg does not know come after the known ones.
    fields.sort_by_key(|(k, _)| if k == "Description" { STATUS_ORDER.len() } else { rank(k) });
    Paragraph { fields }
}

/// The conffiles a package declares, as written (`/etc/x`), with their
/// flags (`remove-on-upgrade`: not shipped, but recorded).
fn conffile_lines(deb: &Deb) -> Vec<(String, Vec<String>)> {
    let Some(cf) = deb.control_files.get("conffiles") else { return Vec::new() };
    String::from_utf8_lossy(cf)
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| w.starts_with('/'))?;
            let flags = words.iter().enumerate().filter(|(i, _)| *i != at).map(|(_, w)| w.to_string()).collect();
            Some((words[at].to_string(), flags))
        })
        .collect()
}

/// The shipped conffiles (unpacked as `*.dpkg-new`).
fn conffile_paths(deb: &Deb) -> BTreeSet<Vec<u8>> {
    conffile_lines(deb)
        .iter()
        .filter(|(_, flags)| !flags.iter().any(|f| f == "remove-on-upgrade"))
        .filter_map(|(p, _)| normalize_dest(p).ok())
        .collect()
}

/// The `control` paragraph of each package in a status text.
pub fn status_paragraphs(text: &str) -> Vec<Paragraph> {
    parse_paragraphs(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(text: &str) -> Paragraph {
        super::super::control::parse_exact(text)
    }

    #[test]
    fn the_essential_set_follows_dependencies_and_provides() {
        let ps = [
            control("Package: dpkg\nEssential: yes\nPre-Depends: libc6 (>= 2.36)\n"),
            control("Package: libc6\nDepends: libgcc-s1\n"),
            control("Package: libgcc-s1\n"),
            control("Package: init-system-helpers\nEssential: yes\nDepends: usrmerge | usr-is-merged\n"),
            control("Package: usrmerge\nProvides: usr-is-merged\nDepends: perl\n"),
            control("Package: perl\n"),
            control("Package: apt\nDepends: gpgv\n"),
            control("Package: gpgv\n"),
        ];
        let set = essential_set(&ps.iter().collect::<Vec<_>>());
        let names: Vec<&str> = set.iter().map(String::as_str).collect();
        assert_eq!(names, ["dpkg", "init-system-helpers", "libc6", "libgcc-s1", "perl", "usrmerge"]);
    }

    #[test]
    fn interests_keep_their_await_mode() {
        assert_eq!(Interest::parse("libc-bin").spec(), "libc-bin");
        assert_eq!(Interest::parse("debianutils/noawait").spec(), "debianutils/noawait");
        assert!(Interest::parse("x/noawait").noawait && !Interest::parse("x/await").noawait);
    }
}
