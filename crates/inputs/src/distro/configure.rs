//! Running the unpacked packages' own maintainer scripts and triggers, as
//! `dpkg --configure -a` does after an unpack, in quarry's sandbox (no
//! container engine): each new package's `preinst install` in unpack order
//! (the files are all there already, as in mmdebstrap's essential phase),
//! then `dpkg --configure -a`, which installs the conffiles, runs every
//! postinst in dependency order and processes the triggers. The policy is
//! the one Debian's image builders use: `policy-rc.d` refuses service
//! starts, debconf is noninteractive and takes its defaults, the locale is
//! C.UTF-8, SOURCE_DATE_EPOCH is the build's, the host name is fixed and
//! there is no network. What the scripts change comes back into the tree,
//! then the rules of `normalize` make it reproducible.

use super::unpack::Unpacked;
use super::DistroError;
use crate::layer::path::display;
use crate::layer::{Content, Kind, Node, Tree};
use crate::sandbox::{self, Entry, EntryKind, Found, Job, Step};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The version of the sandbox's environment and of the rules applied to
/// what the scripts make: part of every packages layer's cache key, so a
/// change to either rebuilds.
pub const RULES: &str = "debian-scripts-3";

/// The host name scripts see (and may write into files).
const HOSTNAME: &str = "localhost";

const POLICY_RC_D: &[u8] = b"usr/sbin/policy-rc.d";

/// Where the run's inputs wait in the tree: each preinst's control archive
/// (for its turn in `tmp.ci/`), the list of preinsts, the essential set,
/// and what the run itself added (removed at its end).
const STAGE: &str = "var/lib/dpkg/.quarry-ci";

/// The configuration, as one shell script over what is staged: run by the
/// sandbox, and by the container step of `configure = "engine"`. Each part
/// says its name in the output first (`==> ...`): a failure is named by the
/// last one. A preinst runs as dpkg runs it: from `tmp.ci/`, beside its
/// control archive's members (debconf reads the package's name there).
pub const SCRIPT: &str = r#"set -e
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 LANG=C.UTF-8 LANGUAGE=C.UTF-8
export DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true DEBCONF_NOWARNINGS=yes
stage=/var/lib/dpkg/.quarry-ci
ci=/var/lib/dpkg/tmp.ci
while read -r key name arch; do
  echo "==> preinst of $name"
  rm -rf "$ci"
  mv "$stage/$key" "$ci"
  DPKG_MAINTSCRIPT_PACKAGE="$name" DPKG_MAINTSCRIPT_PACKAGE_REFCOUNT=1 DPKG_MAINTSCRIPT_ARCH="$arch"     DPKG_MAINTSCRIPT_NAME=preinst DPKG_ADMINDIR=/var/lib/dpkg DPKG_ROOT= "$ci/preinst" install </dev/null
  rm -rf "$ci"
done < "$stage/preinsts"
if [ -s "$stage/essential" ]; then
  echo "==> dpkg --configure (the essential set)"
  dpkg --configure --force-depends --force-confdef --force-confold $(cat "$stage/essential") </dev/null
fi
echo "==> dpkg --configure -a"
dpkg --configure -a --force-confdef --force-confold </dev/null
while read -r p; do rm -rf "/$p"; done < "$stage/scaffolding"
rm -rf "$stage"
# fc-cache (fontconfig's trigger) keeps no cache for a font directory newer
# than SOURCE_DATE_EPOCH, as one a postinst made in this run is: the image
# holds every directory at that time, so those get the cache fc-cache writes then.
if [ -n "${SOURCE_DATE_EPOCH:-}" ] && [ -d /var/cache/fontconfig ] && command -v fc-cache >/dev/null; then
  new=$(find /usr/share/fonts /usr/local/share/fonts -xdev -type d -newermt "@$SOURCE_DATE_EPOCH" 2>/dev/null || true)
  if [ -n "$new" ]; then
    echo "==> fc-cache (font directories made in this run)"
    echo "$new" | while read -r d; do touch -h -d "@$SOURCE_DATE_EPOCH" "$d"; done
    fc-cache -s
  fi
fi
"#;

/// Debian's way to keep a package's postinst from starting its service in
/// an image build: `invoke-rc.d` asks this and gets "forbidden".
const POLICY_RC_D_SCRIPT: &[u8] = b"#!/bin/sh\n# quarry: no service starts while the image is built\nexit 101\n";

/// Stage what [`SCRIPT`] runs into the unpacked tree; the paths to remove
/// when it has run (scaffolding: the stage, and `policy-rc.d` unless the
/// image has its own).
pub fn stage(u: &mut Unpacked) -> Result<Vec<Vec<u8>>, DistroError> {
    let below_has_policy = u.below().is_some_and(|b| b.get(POLICY_RC_D).is_some());
    let mut scaffolding = vec![STAGE.as_bytes().to_vec()];
    let add = |tree: &mut Tree, path: String, node: Node| {
        tree.insert(path.clone().into_bytes(), node).map_err(|e| assemble(path.as_bytes(), e))
    };
    if !below_has_policy && u.tree.get(POLICY_RC_D).is_none() {
        add(&mut u.tree, display(POLICY_RC_D), Node::bytes(POLICY_RC_D_SCRIPT.to_vec(), 0o755))?;
        scaffolding.push(POLICY_RC_D.to_vec());
    }
    let mut preinsts = String::new();
    let mut essential = String::new();
    let mut staged: Vec<(String, Node)> = Vec::new();
    for p in &u.packages {
        if p.essential {
            essential.push_str(&format!("{}\n", p.key));
        }
        if !p.has_preinst {
            continue;
        }
        preinsts.push_str(&format!("{} {} {}\n", p.key, p.name, p.architecture));
        for (member, bytes) in &p.control_members {
            let script = matches!(member.as_str(), "preinst" | "postinst" | "prerm" | "postrm" | "config");
            staged.push((
                format!("{STAGE}/{}/{member}", p.key),
                Node::bytes(bytes.clone(), if script { 0o755 } else { 0o644 }),
            ));
        }
    }
    let lines: String = scaffolding.iter().map(|p| format!("{}\n", display(p))).collect();
    for (name, text) in [("preinsts", preinsts), ("essential", essential), ("scaffolding", lines)] {
        staged.push((format!("{STAGE}/{name}"), Node::bytes(text.into_bytes(), 0o644)));
    }
    for (path, node) in staged {
        add(&mut u.tree, path, node)?;
    }
    Ok(scaffolding)
}

/// The tree as the sandbox's entries, with the files its contents come from.
fn entries(tree: &Tree) -> (Vec<Entry>, Vec<PathBuf>) {
    let mut sources: Vec<PathBuf> = Vec::new();
    let mut index: HashMap<PathBuf, u32> = HashMap::new();
    let mut source = |p: &Path| -> u32 {
        *index.entry(p.to_path_buf()).or_insert_with(|| {
            sources.push(p.to_path_buf());
            (sources.len() - 1) as u32
        })
    };
    let mut out = Vec::with_capacity(tree.len());
    for (path, n) in tree.iter() {
        let kind = match &n.kind {
            Kind::Dir => EntryKind::Dir,
            Kind::File { size, content } => match content {
                Content::Slice { file, offset } => {
                    EntryKind::File { source: source(file), offset: *offset, size: *size }
                }
                Content::Host(p) | Content::HostToHash(p) => {
                    EntryKind::File { source: source(p), offset: 0, size: *size }
                }
                Content::Bytes(b) => EntryKind::Bytes(b.to_vec()),
            },
            Kind::Symlink(t) => EntryKind::Symlink(t.clone()),
            Kind::Hardlink(t) => EntryKind::Hardlink(t.clone()),
            Kind::Fifo => EntryKind::Fifo,
            Kind::CharDev(..) | Kind::BlockDev(..) => continue,
        };
        let capability = n.xattrs.iter().find(|(k, _)| k == "security.capability").map(|(_, v)| v.clone());
        out.push(Entry {
            path: path.clone(),
            kind,
            mode: n.mode,
            uid: n.uid as u32,
            gid: n.gid as u32,
            mtime: n.mtime as i64,
            capability,
        });
    }
    (out, sources)
}

/// Run the scripts of `u`'s packages over the layers `lower` (blobs,
/// lowest first, `lower_bytes` of content; none for a base). The result:
/// the whole tree (a base) or what the layer adds and changes over `lower`,
/// deletions as whiteouts.
pub fn run_scripts(
    mut u: Unpacked,
    lower: &[PathBuf],
    lower_bytes: u64,
    spool: &Path,
    epoch: u64,
) -> Result<Tree, DistroError> {
    let _phase = crate::progress::phase(format!(
        "running the maintainer scripts and triggers of {} packages (no network)",
        u.packages.len()
    ));
    let work = tempfile::Builder::new().prefix("scripts-").tempdir_in(spool).map_err(|e| DistroError::io(spool, e))?;
    let root = work.path().join("root");
    std::fs::create_dir(&root).map_err(|e| DistroError::io(&root, e))?;
    let scaffolding = stage(&mut u)?;
    let (entries, sources) = entries(&u.tree);
    let spool_file = work.path().join("changed");
    let kept = tempfile::Builder::new()
        .prefix("scripts-changed-")
        .tempfile_in(spool)
        .map_err(|e| DistroError::io(spool, e))?;
    let (_, kept) = kept.keep().map_err(|e| DistroError::io(spool, e.error))?;
    let env = vec![
        ("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into()),
        ("HOME".into(), "/root".into()),
        ("SOURCE_DATE_EPOCH".into(), epoch.to_string()),
    ];
    let job = Job {
        root: root.clone(),
        backing: sandbox::backing_for(lower_bytes + u.tree.content_bytes()),
        lower: lower.to_vec(),
        sources,
        entries,
        steps: vec![Step { label: "configure".into(), argv: vec!["/bin/sh".into(), "-c".into(), SCRIPT.into()], env }],
        remove_after: scaffolding.clone(),
        hostname: HOSTNAME.into(),
        epoch,
        report: work.path().join("report"),
        spool: spool_file.clone(),
        log: work.path().join("log"),
    };
    let report = sandbox::run(&job, work.path()).map_err(|e| DistroError::Sandbox(Box::new(e)))?;
    let d = |(wall, cpu): (f64, f64)| {
        (std::time::Duration::from_secs_f64(wall), std::time::Duration::from_secs_f64(cpu.max(0.0)))
    };
    for (stage, t) in [
        ("packages: sandbox lay out", report.timings.layout),
        ("packages: scripts", report.timings.steps),
        ("packages: sandbox read back", report.timings.read_back),
    ] {
        let (wall, cpu) = d(t);
        crate::trace::add(stage, wall, cpu);
    }
    if let Some(f) = &report.failed {
        let log = std::fs::read_to_string(&job.log).unwrap_or_default();
        return Err(script_failure(f.code, &log));
    }
    // The changed files' bytes outlive the work directory: the layer reads them.
    std::fs::rename(&spool_file, &kept).map_err(|e| DistroError::io(&kept, e))?;
    let kept = Arc::new(kept);
    let layer = u.below().is_some();
    let mut tree = std::mem::take(&mut u.tree);
    for p in &scaffolding {
        tree.remove(p);
    }
    for path in report.removed.iter().filter(|p| !scaffolding.contains(p)) {
        if tree.get(path).is_some() {
            tree.remove(path);
        } else if layer {
            tree.whiteout(path).map_err(|e| assemble(path, e))?;
        }
    }
    for c in report.changed {
        let kind = match c.found {
            Found::Dir => Kind::Dir,
            Found::File { offset, size } => Kind::File { size, content: Content::Slice { file: kept.clone(), offset } },
            Found::Symlink(t) => Kind::Symlink(t),
            Found::Hardlink(t) => Kind::Hardlink(t),
            Found::Fifo => Kind::Fifo,
            Found::Device { block: false, major, minor } => Kind::CharDev(major, minor),
            Found::Device { block: true, major, minor } => Kind::BlockDev(major, minor),
        };
        let mut node = Node::new(kind, c.mode).owned(c.uid as u64, c.gid as u64);
        node.mtime = epoch;
        if let Some(cap) = c.capability {
            node.xattrs.push(("security.capability".into(), cap));
        }
        tree.insert(c.path.clone(), node).map_err(|e| assemble(&c.path, e))?;
    }
    super::normalize::apply(&mut tree, u.below(), epoch)?;
    Ok(tree)
}

fn assemble(path: &[u8], e: impl std::fmt::Display) -> DistroError {
    DistroError::Assemble { message: format!("after the scripts, `/{}`: {e}", display(path)) }
}

/// Name the package and script that failed, with the end of its output.
fn script_failure(mut code: i32, log: &str) -> DistroError {
    let part = log.lines().filter_map(|l| l.strip_prefix("==> ")).next_back().unwrap_or("configure").to_string();
    let (mut package, mut script) = match part.strip_prefix("preinst of ") {
        Some(p) => (p.to_string(), "preinst".to_string()),
        None => (String::new(), part.clone()),
    };
    let section = &log[log.rfind(&format!("==> {part}")).unwrap_or(0)..];
    // dpkg: error processing package foo (--configure):
    //  installed foo package post-installation script subprocess returned error exit status 1
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("dpkg: error processing package ") {
            if package.is_empty() {
                package = rest.split_whitespace().next().unwrap_or_default().to_string();
            }
        }
        if let Some(i) = line.find(" package ").filter(|_| line.contains("script subprocess")) {
            script = line[i + " package ".len()..].split(" script").next().unwrap_or_default().trim().to_string();
            if let Some(status) = line.rsplit("exit status ").next().and_then(|n| n.trim().parse().ok()) {
                code = status;
            }
        }
    }
    let lines: Vec<&str> = section.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    DistroError::Script { package: if package.is_empty() { "?".into() } else { package }, script, code, output: tail }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_the_package_and_script() {
        let log = "==> preinst of a\n==> dpkg --configure -a\nSetting up b (1) ...\nboom\n\
                   dpkg: error processing package b (--configure):\n installed b package post-installation script subprocess returned error exit status 3\n";
        match script_failure(1, log) {
            DistroError::Script { package, script, code, output } => {
                assert_eq!((package.as_str(), script.as_str(), code), ("b", "post-installation", 3));
                assert!(output.starts_with("==> dpkg --configure -a") && output.contains("boom"), "{output}");
            }
            e => panic!("{e}"),
        }
        match script_failure(4, "==> preinst of badpre\nno room\n") {
            DistroError::Script { package, script, code, .. } => {
                assert_eq!((package.as_str(), script.as_str(), code), ("badpre", "preinst", 4))
            }
            e => panic!("{e}"),
        }
    }
}
