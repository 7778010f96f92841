//! What maintainer scripts write that depends on the run rather than on
//! the packages, made reproducible by rule (applied to what the scripts
//! changed, before the layer is written). Each rule names what it touches
//! and why; the first ones are mmdebstrap's own `cleanup/reproducible`,
//! `cleanup/run` and `cleanup/tmp` steps. Times need no rule: every time in
//! a layer is clamped to SOURCE_DATE_EPOCH, and the tree the scripts ran in
//! already had its times clamped (so a cache that records a directory's time
//! records the one the image holds).

use super::DistroError;
use crate::layer::{Kind, Node, Tree};

pub struct Rule {
    pub name: &'static str,
    pub why: &'static str,
    apply: fn(&mut Tree, Option<&Tree>, u64),
}

/// Files removed outright.
const RUN_RECORDS: [&str; 7] = [
    "var/log/dpkg.log",
    "var/log/alternatives.log",
    "var/log/apt/history.log",
    "var/log/apt/term.log",
    "var/log/apt/eipp.log.xz",
    "var/cache/ldconfig/aux-cache",
    "var/lib/dbus/machine-id",
];

fn children(tree: &Tree, dir: &[u8]) -> Vec<Vec<u8>> {
    tree.iter()
        .map(|(p, _)| p)
        .filter(|p| p.len() > dir.len() + 1 && p.starts_with(dir) && p[dir.len()] == b'/')
        .filter(|p| !p[dir.len() + 1..].contains(&b'/'))
        .cloned()
        .collect()
}

pub const RULES: [Rule; 6] = [
    Rule {
        name: "run-records",
        why: "dpkg's and apt's logs and ldconfig's aux-cache record when and on which inodes the scripts ran",
        apply: |t, _, _| {
            for p in RUN_RECORDS {
                t.remove(p.as_bytes());
            }
        },
    },
    Rule {
        name: "machine-id",
        why: "machine-id(5): an image shared by many machines holds an empty /etc/machine-id, filled at boot",
        apply: |t, _, _| {
            if let Some(n) = t.get(b"etc/machine-id") {
                let (mode, uid, gid) = (n.mode, n.uid, n.gid);
                let _ = t.insert(b"etc/machine-id".to_vec(), Node::bytes(Vec::new(), mode).owned(uid, gid));
            }
        },
    },
    Rule {
        name: "run-leftovers",
        why: "/run is a tmpfs on a running system: what scripts leave there (pid files, sockets) is stale in an image; /run/lock stays (/var/lock points there)",
        apply: |t, _, _| {
            for p in children(t, b"run") {
                if p != b"run/lock" {
                    t.remove(&p);
                }
            }
        },
    },
    Rule {
        name: "pyc-timestamps",
        why: "with SOURCE_DATE_EPOCH set (Debian's image-build policy) py_compile writes hash-checked .pyc files, which re-read and hash their source at every import (pip imports twice as slowly); the rule gives them the timestamp header Python writes otherwise (the code is the same bytes), valid because the image's times are the ones the header names",
        apply: pyc_timestamps,
    },
    Rule {
        name: "git-lfs-config",
        why: "`git lfs install --system` (git-lfs's postinst) sets the filter.lfs keys of /etc/gitconfig in Go map order, different at every run; the rule orders them as git-lfs documents them (clean, smudge, process, required)",
        apply: |t, _, _| {
            let Some(n) = t.get(b"etc/gitconfig").cloned() else { return };
            let Ok(text) = n.read_content() else { return };
            let text = String::from_utf8_lossy(&text);
            let ordered = order_lfs_filter(&text);
            if ordered != text {
                let _ = t.insert(b"etc/gitconfig".to_vec(), Node::bytes(ordered.into_bytes(), n.mode).owned(n.uid, n.gid));
            }
        },
    },
    Rule {
        name: "tmp-leftovers",
        why: "what scripts leave in /tmp is scratch of the run",
        apply: |t, _, _| {
            for p in children(t, b"tmp") {
                t.remove(&p);
            }
        },
    },
];

/// Apply every rule to `tree` (a whole rootfs, or a layer over `below`),
/// `epoch` the build's SOURCE_DATE_EPOCH.
pub fn apply(tree: &mut Tree, below: Option<&Tree>, epoch: u64) -> Result<(), DistroError> {
    for r in &RULES {
        (r.apply)(tree, below, epoch);
    }
    Ok(())
}

/// `[filter "lfs"]`'s lines in git-lfs's documented order, the rest as is.
fn order_lfs_filter(text: &str) -> String {
    const ORDER: [&str; 4] = ["clean", "smudge", "process", "required"];
    let mut out = String::new();
    let mut section: Vec<&str> = Vec::new();
    let mut in_lfs = false;
    let flush = |section: &mut Vec<&str>, out: &mut String| {
        section.sort_by_key(|l| {
            let key = l.trim().split(['=', ' ']).next().unwrap_or("");
            ORDER.iter().position(|k| *k == key).unwrap_or(ORDER.len())
        });
        for l in section.drain(..) {
            out.push_str(l);
            out.push('\n');
        }
    };
    for line in text.lines() {
        if line.trim_start().starts_with('[') {
            flush(&mut section, &mut out);
            in_lfs = line.trim() == "[filter \"lfs\"]";
            out.push_str(line);
            out.push('\n');
        } else if in_lfs {
            section.push(line);
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    flush(&mut section, &mut out);
    out
}

/// The source a cached module compiles: `d/__pycache__/m.cpython-311.pyc`
/// (or `.opt-1.pyc`) -> `d/m.py`.
fn pyc_source(pyc: &[u8]) -> Option<Vec<u8>> {
    let i = pyc.windows(13).rposition(|w| w == b"/__pycache__/")?;
    let name = &pyc[i + 13..];
    let module = name.split(|&b| b == b'.').next()?;
    let mut src = pyc[..i + 1].to_vec();
    src.extend_from_slice(module);
    src.extend_from_slice(b".py");
    Some(src)
}

/// A hash-based `.pyc` rewritten as the timestamp-based one Python would
/// write without SOURCE_DATE_EPOCH: same code, a header of flags 0 and the
/// source's time and size as the image holds them.
fn pyc_as_timestamped(pyc: &[u8], source: &Node, epoch: u64) -> Option<Vec<u8>> {
    let flags = u32::from_le_bytes(pyc.get(4..8)?.try_into().ok()?);
    let Kind::File { size, .. } = &source.kind else { return None };
    if flags & 1 == 0 || pyc.len() < 16 {
        return None;
    }
    let mut out = pyc[..4].to_vec();
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(source.mtime.min(epoch) as u32).to_le_bytes());
    out.extend_from_slice(&(*size as u32).to_le_bytes());
    out.extend_from_slice(&pyc[16..]);
    Some(out)
}

fn pyc_timestamps(t: &mut Tree, below: Option<&Tree>, epoch: u64) {
    let pycs: Vec<Vec<u8>> = t
        .iter()
        .filter(|(p, n)| p.ends_with(b".pyc") && matches!(n.kind, Kind::File { .. }))
        .map(|(p, _)| p.clone())
        .collect();
    for p in pycs {
        let Some(src) = pyc_source(&p) else { continue };
        let Some(source) = t.get(&src).or_else(|| below.and_then(|b| b.get(&src))).cloned() else { continue };
        let node = t.get(&p).expect("listed").clone();
        let Ok(bytes) = node.read_content() else { continue };
        if let Some(new) = pyc_as_timestamped(&bytes, &source, epoch) {
            let _ = t.insert(p, Node::bytes(new, node.mode).owned(node.uid, node.gid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfs_filter_keys_in_documented_order() {
        let shuffled =
            "[user]\n\tname = x\n[filter \"lfs\"]\n\tsmudge = s\n\trequired = true\n\tclean = c\n\tprocess = p\n";
        assert_eq!(
            order_lfs_filter(shuffled),
            "[user]\n\tname = x\n[filter \"lfs\"]\n\tclean = c\n\tsmudge = s\n\tprocess = p\n\trequired = true\n"
        );
    }

    #[test]
    fn hash_checked_pyc_gets_a_timestamp_header() {
        assert_eq!(pyc_source(b"usr/lib/x/__pycache__/m.cpython-311.pyc").unwrap(), b"usr/lib/x/m.py");
        assert_eq!(pyc_source(b"a/__pycache__/m.cpython-311.opt-1.pyc").unwrap(), b"a/m.py");
        let mut pyc = b"\xa7\x0d\x0d\x0a".to_vec();
        pyc.extend_from_slice(&3u32.to_le_bytes());
        pyc.extend_from_slice(&[9; 8]);
        pyc.extend_from_slice(b"code");
        let mut src = Node::bytes(vec![0u8; 300], 0o644);
        src.mtime = 1_700_000_000;
        let out = pyc_as_timestamped(&pyc, &src, 1_600_000_000).unwrap();
        assert_eq!(&out[4..8], &0u32.to_le_bytes());
        assert_eq!(&out[8..12], &1_600_000_000u32.to_le_bytes(), "the time the image holds: clamped");
        assert_eq!(&out[12..16], &300u32.to_le_bytes());
        assert_eq!(&out[16..], b"code");
        let mut ts = pyc.clone();
        ts[4] = 0;
        assert!(pyc_as_timestamped(&ts, &src, 0).is_none(), "timestamp .pyc files are left as they are");
    }
}
