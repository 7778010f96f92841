//! Turning unpacked packages into a working system without running their
//! maintainer scripts: the merged-/usr layout, the dpkg database (`status`,
//! `info/*.list`, md5sums, conffiles, scripts), and what the scripts of a
//! minimal system would have set up: `/etc/passwd`, `group`, `shadow`,
//! `gshadow` (base-passwd's master files, as `update-passwd` and
//! `shadowconfig on` write them), `/etc/shells` (`update-shells`), the
//! `update-alternatives` links that postinst scripts register, and the
//! accounts the definition asks for.

use super::control::Paragraph;
use super::deb::Deb;
use super::usrmerge::{merged_usr_path, MERGED};
use super::DistroError;
use crate::definition::UserDef;
use crate::layer::path::{display, join, normalize_dest};
use crate::layer::{Kind, Node, Tree};
use md5::Digest as _;
use std::collections::{BTreeMap, BTreeSet};

fn file(data: impl Into<Vec<u8>>, mode: u32) -> Node {
    Node::bytes(data.into(), mode)
}

/// Fields in the order dpkg writes them to its status file; others follow.
const STATUS_ORDER: [&str; 24] = [
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

/// A package's entry in the dpkg status file.
enum StatusEntry {
    /// Unpacked here.
    New(Paragraph),
    /// From the layers below: written back byte for byte.
    Below(String),
}

/// The root filesystem being assembled: a whole rootfs (a base), or a
/// layer over the layers below (`below`).
pub struct System {
    pub tree: Tree,
    /// By (name, architecture for `Multi-Arch: same` else ""): dpkg's order.
    status: BTreeMap<(String, String), StatusEntry>,
    postinsts: Vec<(String, String)>,
    architecture: String,
    /// For a layer: the merged view of the layers below (see `below`).
    below: Option<Tree>,
}

impl System {
    pub fn new(architecture: &str) -> System {
        System {
            tree: Tree::new(),
            status: BTreeMap::new(),
            postinsts: Vec::new(),
            architecture: architecture.to_string(),
            below: None,
        }
    }

    /// A layer over `below`: its dpkg database starts as theirs.
    pub fn over(architecture: &str, below: super::below::Below) -> System {
        let status = below
            .status_paragraphs()
            .into_iter()
            .map(|(p, raw)| (super::below::package_key(&p), StatusEntry::Below(raw)))
            .collect();
        System {
            tree: Tree::new(),
            status,
            postinsts: Vec::new(),
            architecture: architecture.to_string(),
            below: Some(below.tree),
        }
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
    /// `installed`: mark it configured (no maintainer script will run).
    pub fn unpack(&mut self, deb: Deb, installed: bool) -> Result<(), DistroError> {
        let name = deb.control.get("Package").unwrap_or_default().to_string();
        let arch = deb.control.get("Architecture").unwrap_or_default().to_string();
        let key = if deb.control.get("Multi-Arch") == Some("same") { format!("{name}:{arch}") } else { name.clone() };
        let mut list = String::from("/.\n");
        for (path, node) in deb.data.iter() {
            list.push('/');
            list.push_str(&display(path));
            list.push('\n');
            let mut node = node.clone();
            if let Kind::Hardlink(t) = &node.kind {
                node.kind = Kind::Hardlink(self.place(t));
            }
            let target = self.place(path);
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
        let mut conffiles = String::new();
        if let Some(cf) = deb.control_files.get("conffiles") {
            for line in String::from_utf8_lossy(cf).lines() {
                let Some(p) = line.split_whitespace().find(|w| w.starts_with('/')) else {
                    continue;
                };
                let Ok(rel) = normalize_dest(p) else { continue };
                let md5 = match deb.data.get(&rel) {
                    Some(n) if matches!(n.kind, Kind::File { .. }) => {
                        let bytes = n
                            .read_content()
                            .map_err(|e| DistroError::Assemble { message: format!("{name}: `{p}`: {e}") })?;
                        hex::encode(md5::Md5::digest(&bytes))
                    }
                    _ => "newconffile".to_string(),
                };
                conffiles.push_str(&format!("\n {p} {md5}"));
            }
        }
        let info = b"var/lib/dpkg/info";
        self.insert(&join(info, format!("{key}.list").as_bytes()), file(list, 0o644))?;
        for (member, bytes) in &deb.control_files {
            let script = matches!(member.as_str(), "preinst" | "postinst" | "prerm" | "postrm" | "config");
            self.insert(
                &join(info, format!("{key}.{member}").as_bytes()),
                file(bytes.clone(), if script { 0o755 } else { 0o644 }),
            )?;
        }
        if let Some(p) = deb.control_files.get("postinst") {
            self.postinsts.push((name.clone(), String::from_utf8_lossy(p).into_owned()));
        }
        let mut fields: Vec<(String, String)> = deb.control.fields.clone();
        fields.push(("Status".into(), if installed { "install ok installed" } else { "install ok unpacked" }.into()));
        if !conffiles.is_empty() {
            fields.push(("Conffiles".into(), conffiles));
        }
        let rank = |k: &str| STATUS_ORDER.iter().position(|o| o.eq_ignore_ascii_case(k)).unwrap_or(STATUS_ORDER.len());
        // Description and the fields dpkg does not know come after the known ones.
        fields.sort_by_key(|(k, _)| if k == "Description" { STATUS_ORDER.len() } else { rank(k) });
        let arch_key = if key.contains(':') { arch.clone() } else { String::new() };
        self.status.insert((name.clone(), arch_key), StatusEntry::New(Paragraph { fields }));
        Ok(())
    }

    /// Everything after the last package: links, database, accounts.
    pub fn finish(&mut self, users: &[UserDef], groups: &BTreeMap<String, u32>) -> Result<(), DistroError> {
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
        self.dpkg_database()?;
        self.alternatives()?;
        self.shells()?;
        self.pam_configs()?;
        self.script_defaults()?;
        self.accounts(users, groups)?;
        // Last: every library of every package is in place.
        if let Some(cache) = super::ldcache::generate(&self.tree, &self.architecture) {
            self.insert(b"etc/ld.so.cache", file(cache, 0o644))?;
        }
        Ok(())
    }

    /// A layer's finish: the merged dpkg database, the alternatives its
    /// packages register, the loader cache over the merged tree, and the
    /// directories it only implies written as they are below.
    pub fn finish_layer(&mut self) -> Result<(), DistroError> {
        let has_db = self.below.as_ref().is_some_and(|b| b.get(super::below::STATUS).is_some());
        if has_db {
            self.write_status()?;
        } else {
            self.dpkg_database()?;
        }
        self.alternatives()?;
        let below = self.below.take().expect("finish_layer is for layers");
        let implied: Vec<(Vec<u8>, Node)> = self
            .tree
            .iter()
            .filter(|(_, n)| n.implicit)
            .filter_map(|(p, _)| below.get(p).filter(|b| b.kind.is_dir()).map(|b| (p.clone(), b.clone())))
            .collect();
        for (p, mut n) in implied {
            n.mtime = 0;
            self.insert(&p, n)?;
        }
        let mut merged = below.clone();
        for (p, n) in self.tree.iter() {
            let _ = merged.insert(p.clone(), n.clone());
        }
        if let Some(cache) = super::ldcache::generate(&merged, &self.architecture) {
            let before = below.get(b"etc/ld.so.cache").and_then(|n| n.read_content().ok());
            if before.as_deref() != Some(&cache[..]) {
                let at = below.resolve_parents(b"etc/ld.so.cache");
                self.insert(&at, file(cache, 0o644))?;
            }
        }
        self.below = Some(below);
        Ok(())
    }

    fn write_status(&mut self) -> Result<(), DistroError> {
        let mut status = String::new();
        for p in self.status.values() {
            match p {
                StatusEntry::New(p) => p.write_to(&mut status),
                StatusEntry::Below(raw) => status.push_str(raw),
            }
            status.push('\n');
        }
        self.insert(super::below::STATUS, file(status, 0o644))
    }

    fn dpkg_database(&mut self) -> Result<(), DistroError> {
        self.write_status()?;
        let db = b"var/lib/dpkg";
        self.insert(&join(db, b"info/format"), file("1\n", 0o644))?;
        self.insert(&join(db, b"arch"), file(format!("{}\n", self.architecture), 0o644))?;
        for f in ["available", "diversions", "statoverride"] {
            self.insert(&join(db, f.as_bytes()), file(Vec::new(), 0o644))?;
        }
        for f in ["lock", "lock-frontend", "triggers/Lock"] {
            self.insert(&join(db, f.as_bytes()), file(Vec::new(), 0o640))?;
        }
        for d in ["alternatives", "parts", "triggers", "updates"] {
            if self.tree.get(&join(db, d.as_bytes())).is_none() {
                self.insert(&join(db, d.as_bytes()), Node::dir(0o755))?;
            }
        }
        Ok(())
    }

    fn exists(&self, abs: &str) -> bool {
        let Ok(p) = normalize_dest(abs) else { return false };
        let p = self.place(&p);
        self.tree.get(&p).is_some() || self.below.as_ref().is_some_and(|b| b.get(&p).is_some())
    }

    /// `update-alternatives --install` calls of postinst scripts, each
    /// name set to its highest-priority installed choice (`auto` mode).
    fn alternatives(&mut self) -> Result<(), DistroError> {
        // name -> (master link, slave name -> slave link, choices)
        struct Alt {
            link: String,
            slaves: BTreeMap<String, String>,
            choices: Vec<(String, i64, BTreeMap<String, String>)>,
        }
        let mut alts: BTreeMap<String, Alt> = BTreeMap::new();
        for (_, script) in &self.postinsts {
            for call in alternatives_calls(script) {
                let a = alts.entry(call.name.clone()).or_insert_with(|| Alt {
                    link: call.link.clone(),
                    slaves: BTreeMap::new(),
                    choices: Vec::new(),
                });
                let mut slave_paths = BTreeMap::new();
                for (slink, sname, spath) in call.slaves {
                    a.slaves.entry(sname.clone()).or_insert(slink);
                    slave_paths.insert(sname, spath);
                }
                a.choices.push((call.path, call.priority, slave_paths));
            }
        }
        for (name, a) in alts {
            // A layer leaves a name the layers below manage as it is there
            // (`configure = true` runs the scripts that would add the choice).
            let admin_path = format!("var/lib/dpkg/alternatives/{name}");
            if self.below.as_ref().is_some_and(|b| b.get(admin_path.as_bytes()).is_some()) {
                continue;
            }
            let choices: Vec<_> = a.choices.iter().filter(|(p, _, _)| self.exists(p)).collect();
            // Highest priority wins; on a tie, the first registered.
            let Some(best) = choices.iter().copied().reduce(|b, c| if c.1 > b.1 { c } else { b }) else {
                continue;
            };
            let mut admin = format!("auto\n{}\n", a.link);
            for (sname, slink) in &a.slaves {
                admin.push_str(&format!("{sname}\n{slink}\n"));
            }
            admin.push('\n');
            for (path, prio, spaths) in &choices {
                admin.push_str(&format!("{path}\n{prio}\n"));
                for sname in a.slaves.keys() {
                    admin.push_str(spaths.get(sname).map(String::as_str).unwrap_or(""));
                    admin.push('\n');
                }
            }
            admin.push('\n');
            self.insert(format!("var/lib/dpkg/alternatives/{name}").as_bytes(), file(admin, 0o644))?;
            let mut links = vec![(a.link.clone(), name.clone(), best.0.clone())];
            for (sname, slink) in &a.slaves {
                if let Some(sp) = best.2.get(sname).filter(|sp| self.exists(sp)) {
                    links.push((slink.clone(), sname.clone(), sp.clone()));
                }
            }
            for (link, n, target) in links {
                let Ok(l) = normalize_dest(&link) else {
                    continue;
                };
                let Ok(e) = normalize_dest(&format!("etc/alternatives/{n}")) else {
                    continue;
                };
                let e = self.place(&e);
                self.insert(&e, Node::new(Kind::Symlink(target.into_bytes()), 0o777))?;
                let l = self.place(&l);
                self.insert(&l, Node::new(Kind::Symlink(format!("/etc/alternatives/{n}").into_bytes()), 0o777))?;
            }
        }
        Ok(())
    }

    /// `/etc/shells` as `update-shells` writes it on a merged-/usr system.
    fn shells(&mut self) -> Result<(), DistroError> {
        let Some(base) = self.tree.get(b"usr/share/debianutils/shells") else {
            return Ok(());
        };
        let base = String::from_utf8_lossy(&base.read_content().unwrap_or_default()).into_owned();
        let mut header = Vec::new();
        let mut shells: Vec<String> = Vec::new();
        for l in base.lines() {
            if l.starts_with('#') || l.trim().is_empty() {
                header.push(l.to_string());
            } else if !shells.contains(&l.to_string()) {
                shells.push(l.to_string());
            }
        }
        let dir: Vec<Vec<u8>> = self
            .tree
            .iter()
            .filter(|(p, _)| p.starts_with(b"usr/share/debianutils/shells.d/"))
            .map(|(p, _)| p.clone())
            .collect();
        for p in dir {
            if let Ok(b) = self.tree.get(&p).expect("listed").read_content() {
                for l in String::from_utf8_lossy(&b).lines().map(str::trim).filter(|l| l.starts_with('/')) {
                    if !shells.iter().any(|s| s == l) {
                        shells.push(l.to_string());
                    }
                }
            }
        }
        let usr: Vec<String> = shells.iter().filter(|s| !s.starts_with("/usr/")).map(|s| format!("/usr{s}")).collect();
        for u in usr {
            if !shells.contains(&u) {
                shells.push(u);
            }
        }
        let mut text = header.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        for s in shells {
            text.push_str(&s);
            text.push('\n');
        }
        self.insert(b"etc/shells", file(text, 0o644))
    }

    fn group_id(&self, name: &str) -> u64 {
        let Some(Ok(b)) = self.tree.get(b"usr/share/base-passwd/group.master").map(Node::read_content) else {
            return 0;
        };
        String::from_utf8_lossy(&b)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 3 && f[0] == name).then(|| f[2].parse().ok()).flatten()
            })
            .unwrap_or(0)
    }

    /// Is a package (any architecture) unpacked?
    fn installed(&self, name: &str) -> bool {
        self.status.keys().any(|(n, _)| n == name)
    }

    fn add_if_missing(&mut self, path: &str, node: Node) -> Result<(), DistroError> {
        if self.tree.get(path.as_bytes()).is_some() {
            return Ok(());
        }
        self.insert(path.as_bytes(), node)
    }

    /// Copy a file the package keeps under /usr/share to its place in /etc.
    fn install_from_default(&mut self, from: &str, to: &str) -> Result<(), DistroError> {
        let Some(n) = self.tree.get(from.as_bytes()).filter(|n| matches!(n.kind, Kind::File { .. })) else {
            return Ok(());
        };
        let n = n.clone();
        self.add_if_missing(to, n)
    }

    /// What the first `configure` of base-files, libc-bin, tzdata,
    /// libpam-modules and passwd creates (their postinst scripts, bookworm).
    fn script_defaults(&mut self) -> Result<(), DistroError> {
        if self.tree.get(b"usr/share/base-files").is_some() {
            if self.tree.get(b"etc/dpkg/origins/default").is_none() {
                if let Some(o) = ["debian", "ubuntu"]
                    .into_iter()
                    .find(|o| self.tree.get(format!("etc/dpkg/origins/{o}").as_bytes()).is_some())
                {
                    self.insert(b"etc/dpkg/origins/default", Node::new(Kind::Symlink(o.as_bytes().to_vec()), 0o777))?;
                }
            }
            for (from, to) in [
                ("dot.profile", "root/.profile"),
                ("dot.bashrc", "root/.bashrc"),
                ("profile", "etc/profile"),
                ("motd", "etc/motd"),
            ] {
                self.install_from_default(&format!("usr/share/base-files/{from}"), to)?;
            }
            if self.tree.get(b"usr/share/info").is_some_and(|n| n.kind.is_dir()) {
                self.install_from_default("usr/share/base-files/info.dir", "usr/share/info/dir")?;
            }
            let mail = self.group_id("mail");
            let utmp = self.group_id("utmp");
            for (d, mode, gid) in [
                ("mnt", 0o755, 0),
                ("srv", 0o755, 0),
                ("opt", 0o755, 0),
                ("etc/opt", 0o755, 0),
                ("var/opt", 0o755, 0),
                ("media", 0o755, 0),
                ("var/mail", 0o2775, mail),
                ("run/lock", 0o1777, 0),
            ] {
                self.add_if_missing(d, Node::dir(mode).owned(0, gid))?;
            }
            self.add_if_missing("var/spool/mail", Node::new(Kind::Symlink(b"../mail".to_vec()), 0o777))?;
            for (d, to) in [("var/run", "/run"), ("var/lock", "/run/lock")] {
                let empty_dir = self.tree.get(d.as_bytes()).is_some_and(|n| n.kind.is_dir())
                    && !self
                        .tree
                        .iter()
                        .any(|(p, _)| p.len() > d.len() && p.starts_with(d.as_bytes()) && p[d.len()] == b'/');
                if empty_dir || self.tree.get(d.as_bytes()).is_none() {
                    self.insert(d.as_bytes(), Node::new(Kind::Symlink(to.as_bytes().to_vec()), 0o777))?;
                }
            }
            for d in ["", "/share", "/share/man", "/bin", "/games", "/lib", "/include", "/sbin", "/src", "/etc"] {
                self.add_if_missing(&format!("usr/local{d}"), Node::dir(0o755))?;
            }
            self.add_if_missing("usr/local/man", Node::new(Kind::Symlink(b"share/man".to_vec()), 0o777))?;
            for (f, mode) in [("var/log/wtmp", 0o664), ("var/log/btmp", 0o660), ("var/log/lastlog", 0o664)] {
                self.add_if_missing(f, file(Vec::new(), mode).owned(0, utmp))?;
            }
        }
        self.install_from_default("usr/share/libc-bin/nsswitch.conf", "etc/nsswitch.conf")?;
        if self.tree.get(b"usr/share/zoneinfo/Etc/UTC").is_some() {
            self.add_if_missing(
                "etc/localtime",
                Node::new(Kind::Symlink(b"/usr/share/zoneinfo/Etc/UTC".to_vec()), 0o777),
            )?;
            self.add_if_missing("etc/timezone", file("Etc/UTC\n", 0o644))?;
        }
        if self.tree.get(b"etc/security").is_some_and(|n| n.kind.is_dir()) && self.installed("libpam-modules") {
            self.add_if_missing("etc/security/opasswd", file(Vec::new(), 0o600))?;
            self.add_if_missing("etc/environment", file(Vec::new(), 0o644))?;
        }
        Ok(())
    }

    /// `/etc/pam.d/common-*` as `pam-auth-update --package` (libpam-runtime's
    /// postinst) writes them: the templates in /usr/share/pam filled with the
    /// default-enabled profiles of /usr/share/pam-configs, highest priority first.
    fn pam_configs(&mut self) -> Result<(), DistroError> {
        let mut profiles: Vec<(i64, String, BTreeMap<String, String>)> = Vec::new();
        let paths: Vec<Vec<u8>> = self
            .tree
            .iter()
            .filter(|(p, _)| p.starts_with(b"usr/share/pam-configs/"))
            .map(|(p, _)| p.clone())
            .collect();
        for p in paths {
            let Some(Ok(bytes)) = self.tree.get(&p).map(Node::read_content) else {
                continue;
            };
            let prof = parse_pam_profile(&String::from_utf8_lossy(&bytes));
            if prof.get("Default").map(String::as_str) != Some("yes") {
                continue;
            }
            let prio = prof.get("Priority").and_then(|v| v.parse().ok()).unwrap_or(0);
            profiles.push((prio, display(&p), prof));
        }
        profiles.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
        for kind in ["auth", "account", "password", "session", "session-noninteractive"] {
            let dest = format!("etc/pam.d/common-{kind}");
            let Some(Ok(template)) =
                self.tree.get(format!("usr/share/pam/common-{kind}").as_bytes()).map(Node::read_content)
            else {
                continue;
            };
            if self.tree.get(dest.as_bytes()).is_some() {
                continue;
            }
            let uctype = {
                let mut c = kind.chars();
                c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
            };
            let ptype = kind.trim_end_matches("-noninteractive");
            let block = |val: &str| -> Vec<String> {
                let mut lines = Vec::new();
                let mut i = 0;
                for (_, _, prof) in &profiles {
                    if prof.get(&format!("{uctype}-Type")).map(String::as_str) != Some(val) {
                        continue;
                    }
                    let initial = if i == 0 { prof.get(&format!("{uctype}-Initial")) } else { None };
                    i += 1;
                    let Some(text) = initial.or_else(|| prof.get(&uctype)) else {
                        continue;
                    };
                    lines.extend(text.lines().filter(|l| !l.is_empty()).map(String::from));
                }
                lines
            };
            let mut out = String::new();
            let mut state = 0;
            for line in String::from_utf8_lossy(&template).split_inclusive('\n') {
                if state == 1 || state == 3 {
                    let end = if state == 1 {
                        "# here's the fallback if no module succeeds"
                    } else {
                        "# end of pam-auth-update config"
                    };
                    if line.starts_with(end) {
                        out.push_str(line);
                        state += 1;
                    }
                    continue;
                }
                out.push_str(line);
                let (pattern, val) = match state {
                    0 => ("# here are the per-package modules (the \"Primary\" block)", "Primary"),
                    2 => ("# and here are more per-package modules (the \"Additional\" block)", "Additional"),
                    _ => continue,
                };
                if line.starts_with(pattern) {
                    let lines = block(val);
                    let mut count = lines.len() as i64 - i64::from(val == "Additional");
                    if val == "Primary" && lines.is_empty() {
                        out.push_str(&format!("{ptype}\t[default=1]\t\t\tpam_permit.so\n"));
                    }
                    for l in lines {
                        out.push_str(&format!("{ptype}\t{}", pam_line(&l, count)));
                        count -= 1;
                    }
                    state += 1;
                }
            }
            if state == 4 {
                self.insert(dest.as_bytes(), file(out, 0o644))?;
            }
        }
        Ok(())
    }

    /// passwd/group/shadow/gshadow from base-passwd's masters plus the
    /// definition's groups and users.
    fn accounts(&mut self, users: &[UserDef], extra_groups: &BTreeMap<String, u32>) -> Result<(), DistroError> {
        let master = |t: &Tree, p: &[u8]| {
            t.get(p).and_then(|n| n.read_content().ok()).map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let (Some(pw), Some(gr)) = (
            master(&self.tree, b"usr/share/base-passwd/passwd.master"),
            master(&self.tree, b"usr/share/base-passwd/group.master"),
        ) else {
            if users.is_empty() && extra_groups.is_empty() {
                return Ok(());
            }
            return Err(DistroError::Assemble {
                message:
                    "`users` and `groups` need the package `base-passwd` (its master files are the starting point)"
                        .into(),
            });
        };
        let mut passwd: Vec<Vec<String>> =
            pw.lines().filter(|l| !l.is_empty()).map(|l| l.split(':').map(String::from).collect()).collect();
        // (name, gid, members)
        let mut group: Vec<(String, u32, Vec<String>)> = gr
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 3).then(|| (f[0].to_string(), f[2].parse().unwrap_or(0), Vec::new()))
            })
            .collect();
        let err = |m: String| DistroError::Assemble { message: m };
        let mut used_gids: BTreeSet<u32> = group.iter().map(|g| g.1).collect();
        for (name, gid) in extra_groups {
            if group.iter().any(|g| &g.0 == name) {
                return Err(err(format!("group `{name}` exists already in base-passwd; remove it from `groups`")));
            }
            if !used_gids.insert(*gid) {
                return Err(err(format!("group `{name}`: gid {gid} is taken")));
            }
            group.push((name.clone(), *gid, Vec::new()));
        }
        for u in users {
            if passwd.iter().any(|p| p[0] == u.name) {
                return Err(err(format!("user `{}` exists already", u.name)));
            }
            if passwd.iter().any(|p| p.get(2).map(|x| x == &u.uid.to_string()).unwrap_or(false)) {
                return Err(err(format!("user `{}`: uid {} is taken", u.name, u.uid)));
            }
            let gid = u.gid.unwrap_or(u.uid);
            if !group.iter().any(|g| g.1 == gid) {
                if group.iter().any(|g| g.0 == u.name) {
                    return Err(err(format!(
                        "user `{}`: a group of that name exists with another gid; give `gid`",
                        u.name
                    )));
                }
                used_gids.insert(gid);
                group.push((u.name.clone(), gid, Vec::new()));
            }
            for gname in &u.groups {
                if !group.iter().any(|g| &g.0 == gname) {
                    // A system group, allocated like `groupadd --system`: downward from 999.
                    let gid = (100..=999)
                        .rev()
                        .find(|g| !used_gids.contains(g))
                        .ok_or_else(|| err("no free system gid".into()))?;
                    used_gids.insert(gid);
                    group.push((gname.clone(), gid, Vec::new()));
                }
                let g = group.iter_mut().find(|g| &g.0 == gname).expect("added above");
                g.2.push(u.name.clone());
            }
            let home = u.home.clone().unwrap_or_else(|| format!("/home/{}", u.name));
            let shell = u.shell.clone().unwrap_or_else(|| "/bin/bash".into());
            if !self.exists(&shell) {
                return Err(err(format!(
                    "user `{}`: shell `{shell}` is not in the image; add its package or set `shell`",
                    u.name
                )));
            }
            passwd.push(vec![
                u.name.clone(),
                "*".into(),
                u.uid.to_string(),
                gid.to_string(),
                String::new(),
                home.clone(),
                shell,
            ]);
            self.home(u, gid, &home)?;
        }
        // Shadowed, as `shadowconfig on` leaves them. An empty "last change"
        // keeps the files reproducible and never forces a password change.
        let mut pw_text = String::new();
        let mut sh_text = String::new();
        for p in &passwd {
            let mut f = p.clone();
            let pass = std::mem::replace(&mut f[1], "x".into());
            let pass = if pass == "*" && users.iter().any(|u| u.name == f[0]) { "!".to_string() } else { pass };
            pw_text.push_str(&f.join(":"));
            pw_text.push('\n');
            sh_text.push_str(&format!("{}:{}::0:99999:7:::\n", f[0], pass));
        }
        group.sort_by_key(|g| g.1);
        let mut gr_text = String::new();
        let mut gs_text = String::new();
        for (name, gid, members) in &group {
            gr_text.push_str(&format!("{name}:x:{gid}:{}\n", members.join(",")));
            gs_text.push_str(&format!("{name}:*::{}\n", members.join(",")));
        }
        let shadow_gid = group.iter().find(|g| g.0 == "shadow").map(|g| g.1 as u64).unwrap_or(0);
        if self.installed("passwd") {
            // As useradd allocates them: 65536 ids per user from 100000.
            let ranges: String =
                users.iter().enumerate().map(|(i, u)| format!("{}:{}:65536\n", u.name, 100000 + i * 65536)).collect();
            self.insert(b"etc/subuid", file(ranges.clone(), 0o644))?;
            self.insert(b"etc/subgid", file(ranges, 0o644))?;
        }
        self.insert(b"etc/passwd", file(pw_text, 0o644))?;
        self.insert(b"etc/group", file(gr_text, 0o644))?;
        self.insert(b"etc/shadow", file(sh_text, 0o640).owned(0, shadow_gid))?;
        self.insert(b"etc/gshadow", file(gs_text, 0o640).owned(0, shadow_gid))?;
        Ok(())
    }

    /// The home directory with /etc/skel copied in, and the sudoers entry.
    fn home(&mut self, u: &UserDef, gid: u32, home: &str) -> Result<(), DistroError> {
        let h = normalize_dest(home)
            .map_err(|e| DistroError::Assemble { message: format!("user `{}`: home `{home}` {e}", u.name) })?;
        let (uid, gid) = (u.uid as u64, gid as u64);
        self.insert(&h, Node::dir(0o755).owned(uid, gid))?;
        let skel: Vec<(Vec<u8>, Node)> = self
            .tree
            .iter()
            .filter(|(p, _)| p.starts_with(b"etc/skel/"))
            .map(|(p, n)| (p[b"etc/skel/".len()..].to_vec(), n.clone()))
            .collect();
        for (rel, mut node) in skel {
            if matches!(node.kind, Kind::Hardlink(_)) {
                continue;
            }
            node.uid = uid;
            node.gid = gid;
            self.insert(&join(&h, &rel), node)?;
        }
        if u.sudo {
            if !self.exists("/usr/bin/sudo") {
                return Err(DistroError::Assemble {
                    message: format!("user `{}`: `sudo = true` needs the package `sudo` in `include`", u.name),
                });
            }
            let rule = format!("{} ALL=(ALL:ALL) NOPASSWD: ALL\n", u.name);
            self.insert(format!("etc/sudoers.d/{}", u.name).as_bytes(), file(rule, 0o440))?;
        }
        Ok(())
    }
}

/// A pam-configs profile: fields, continuation lines trimmed and joined.
fn parse_pam_profile(text: &str) -> BTreeMap<String, String> {
    let mut prof: BTreeMap<String, String> = BTreeMap::new();
    let mut field = String::new();
    for line in text.lines() {
        match line.split_once(':') {
            Some((k, v))
                if !k.is_empty() && !k.starts_with(char::is_whitespace) && !k.contains(char::is_whitespace) =>
            {
                field = k.trim_end_matches("-Final").to_string();
                prof.insert(field.clone(), v.trim().to_string());
            }
            _ => {
                let l = line.trim();
                if !l.is_empty() {
                    let v = prof.entry(field.clone()).or_default();
                    v.push('\n');
                    v.push_str(l);
                    *v = v.trim_start().to_string();
                }
            }
        }
    }
    if !prof.contains_key("Session-Interactive-Only") {
        for (from, to) in [
            ("Session-Type", "Session-noninteractive-Type"),
            ("Session", "Session-noninteractive"),
            ("Session-Initial", "Session-noninteractive-Initial"),
        ] {
            if let Some(v) = prof.get(from).cloned() {
                prof.insert(to.into(), v);
            }
        }
    }
    prof
}

/// One module line with `end` jumps made relative, as pam-auth-update does
/// (`^((\[[^]]+\]|\w+)\s+\S+)\s*(.*)`: control and module kept as written).
fn pam_line(line: &str, count: i64) -> String {
    let control_end = if line.starts_with('[') {
        line.find(']').map(|i| i + 1).unwrap_or(line.len())
    } else {
        line.find(char::is_whitespace).unwrap_or(line.len())
    };
    let rest = &line[control_end..];
    let module_start = control_end + (rest.len() - rest.trim_start().len());
    let module_end = line[module_start..].find(char::is_whitespace).map(|i| module_start + i).unwrap_or(line.len());
    let modline = line[..module_end].replace("end", &count.to_string());
    let opts: Vec<&str> = line[module_end..].split_whitespace().collect();
    format!("{modline} {}\n", opts.join(" "))
}

/// One `update-alternatives --install LINK NAME PATH PRIORITY [--slave LINK NAME PATH]...`.
#[derive(Debug, PartialEq)]
pub struct AltCall {
    pub link: String,
    pub name: String,
    pub path: String,
    pub priority: i64,
    pub slaves: Vec<(String, String, String)>,
}

/// The literal `update-alternatives --install` calls of a script. Calls
/// that use shell variables or substitutions are skipped: only what can be
/// known without running the script is applied.
pub fn alternatives_calls(script: &str) -> Vec<AltCall> {
    let joined = script.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let Some(i) = line.find("update-alternatives") else {
            continue;
        };
        let rest = &line[i + "update-alternatives".len()..];
        let mut words = Vec::new();
        for w in rest.split_whitespace() {
            if matches!(w, ";" | "||" | "&&" | "|" | "fi" | "then" | "done")
                || w.starts_with('>')
                || w.starts_with("2>")
            {
                break;
            }
            if let Some(last) = w.strip_suffix(';') {
                words.push(last);
                break;
            }
            words.push(w);
        }
        if words.iter().any(|w| w.contains(['$', '`', '"', '\'', '(', ')'])) {
            continue;
        }
        let words: Vec<&str> = words.into_iter().filter(|w| !matches!(*w, "--quiet" | "--force")).collect();
        let Some(pos) = words.iter().position(|w| *w == "--install") else {
            continue;
        };
        let w = &words[pos + 1..];
        if w.len() < 4 {
            continue;
        }
        let Ok(priority) = w[3].parse() else { continue };
        let mut call =
            AltCall { link: w[0].into(), name: w[1].into(), path: w[2].into(), priority, slaves: Vec::new() };
        let mut rest = &w[4..];
        while rest.len() >= 4 && rest[0] == "--slave" {
            call.slaves.push((rest[1].into(), rest[2].into(), rest[3].into()));
            rest = &rest[4..];
        }
        if call.link.starts_with('/') && call.path.starts_with('/') {
            out.push(call);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_alternatives_calls() {
        let s = "if [ \"$1\" = configure ]; then\n        update-alternatives --install /usr/bin/awk awk /usr/bin/mawk 5 \\\n            --slave /usr/share/man/man1/awk.1.gz awk.1.gz /usr/share/man/man1/mawk.1.gz \\\n            --slave /usr/bin/nawk nawk /usr/bin/mawk\nfi\nupdate-alternatives --install /usr/bin/x x $X 10\nupdate-alternatives --quiet --install /bin/more pager /bin/more 50 || true\n";
        let c = alternatives_calls(s);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0].name, "awk");
        assert_eq!(c[0].priority, 5);
        assert_eq!(c[0].slaves[1], ("/usr/bin/nawk".into(), "nawk".into(), "/usr/bin/mawk".into()));
        assert_eq!(c[1].link, "/bin/more");
        assert_eq!(c[1].priority, 50);
    }

    #[test]
    fn pam_lines_like_pam_auth_update() {
        assert_eq!(
            pam_line("[success=end default=ignore]\tpam_unix.so nullok", 1),
            "[success=1 default=ignore]\tpam_unix.so nullok\n"
        );
        assert_eq!(pam_line("required\tpam_unix.so", 0), "required\tpam_unix.so \n");
        let p = parse_pam_profile(
            "Name: Unix\nDefault: yes\nAccount-Type: Primary\nAccount:\n\t[success=end]\tpam_unix.so\n\tx y\n",
        );
        assert_eq!(p["Account"], "[success=end]\tpam_unix.so\nx y");
        assert_eq!(p["Default"], "yes");
    }

    #[test]
    fn shipped_merged_usr_links_and_dir_replacements_are_ignored() {
        let deb = |name: &str, entries: Vec<(&[u8], Node)>| {
            let mut data = Tree::new();
            for (p, n) in entries {
                data.insert(p.to_vec(), n).unwrap();
            }
            let control = Paragraph {
                fields: vec![
                    ("Package".into(), name.into()),
                    ("Version".into(), "1".into()),
                    ("Architecture".into(), "amd64".into()),
                ],
            };
            Deb { control, control_files: BTreeMap::new(), data }
        };
        let mut sys = System::new("amd64");
        let link = |t: &str| Node::new(Kind::Symlink(t.as_bytes().to_vec()), 0o777);
        sys.unpack(deb("base-files", vec![(b"bin", link("usr/bin")), (b"usr/bin", Node::dir(0o755))]), true).unwrap();
        sys.unpack(deb("coreutils", vec![(b"bin/ls", file("ls", 0o755))]), true).unwrap();
        sys.unpack(deb("evil", vec![(b"usr/bin", link("/tmp"))]), true).unwrap();
        sys.finish(&[], &BTreeMap::new()).unwrap();
        assert!(matches!(sys.tree.get(b"usr/bin/ls").unwrap().kind, Kind::File { .. }));
        assert!(sys.tree.get(b"usr/bin").unwrap().kind.is_dir());
        assert!(matches!(&sys.tree.get(b"bin").unwrap().kind, Kind::Symlink(t) if t == b"usr/bin"));
        let status = String::from_utf8(sys.tree.get(b"var/lib/dpkg/status").unwrap().read_content().unwrap()).unwrap();
        assert!(status.starts_with("Package: base-files\nStatus: install ok installed\n"), "{status}");
    }

    #[test]
    fn merged_usr() {
        assert_eq!(merged_usr_path(b"bin/sh"), b"usr/bin/sh");
        assert_eq!(merged_usr_path(b"lib64"), b"usr/lib64");
        assert_eq!(merged_usr_path(b"library/x"), b"library/x");
        assert_eq!(merged_usr_path(b"usr/bin/x"), b"usr/bin/x");
    }
}
