//! What the parent hands the sandbox helper and what it hands back: plain
//! data, written as postcard files in the run's work directory (the helper
//! is the same binary, so both sides agree on the format by construction).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the tree lives while its programs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backing {
    /// A tmpfs mounted in the sandbox's own mount namespace: no disk
    /// writes, nothing to clean up (it goes when the sandbox ends).
    Tmpfs { size_bytes: u64 },
    /// The work directory's file system (for trees larger than memory allows).
    Disk,
}

/// One entry of the tree written before the programs run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Normalized, relative (`usr/bin/env`).
    pub path: Vec<u8>,
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    /// `security.capability`, when the file carries it.
    pub capability: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum EntryKind {
    Dir,
    /// `size` bytes at `offset` of `Job::sources[source]`.
    File {
        source: u32,
        offset: u64,
        size: u64,
    },
    /// Small generated files.
    Bytes(Vec<u8>),
    Symlink(Vec<u8>),
    /// Another entry (a normalized path), written before this one.
    Hardlink(Vec<u8>),
    Fifo,
}

/// One program run in the tree, as root in it, in order; the first that
/// fails ends the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    /// What the step is, for messages (`preinst of base-passwd`).
    pub label: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// A sandboxed run: lay out `lower` then `entries` under `root`, run
/// `steps` chrooted there, and report what they changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// An empty directory the parent made.
    pub root: PathBuf,
    pub backing: Backing,
    /// OCI layer blobs (tar, gzip, zstd; lowest first) applied before `entries`.
    pub lower: Vec<PathBuf>,
    /// Files `EntryKind::File` reads from.
    pub sources: Vec<PathBuf>,
    pub entries: Vec<Entry>,
    pub steps: Vec<Step>,
    /// Paths (files or whole directories) removed after the steps: the
    /// run's own scaffolding, e.g. `usr/sbin/policy-rc.d`.
    pub remove_after: Vec<Vec<u8>>,
    /// The host name inside (a fixed one: scripts write it into files).
    pub hostname: String,
    /// Times in the tree are clamped to this (`SOURCE_DATE_EPOCH`), as the
    /// layer will hold them.
    pub epoch: u64,
    /// The report (postcard), the changed files' contents, the steps' output.
    pub report: PathBuf,
    pub spool: PathBuf,
    pub log: PathBuf,
}

/// What an entry became after the steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Found {
    Dir,
    /// `size` bytes at `offset` of the report's spool.
    File {
        offset: u64,
        size: u64,
    },
    Symlink(Vec<u8>),
    /// The same inode as this other reported path (sorted first).
    Hardlink(Vec<u8>),
    Fifo,
    /// A device node (bind mounts aside, only a tree from below can hold one).
    Device {
        block: bool,
        major: u32,
        minor: u32,
    },
}

/// A path the steps made or changed (content, kind, owner, mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Changed {
    pub path: Vec<u8>,
    pub found: Found,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub capability: Option<Vec<u8>>,
}

/// The step that failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub step: usize,
    /// Exit status, or 128 + signal.
    pub code: i32,
}

/// How long a part of the run took inside (wall, and CPU of the helper
/// and of the programs it ran).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    pub layout: (f64, f64),
    pub steps: (f64, f64),
    pub read_back: (f64, f64),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub timings: Timings,
    /// Made or changed, in path order.
    pub changed: Vec<Changed>,
    /// Gone after the steps (whole subtrees are listed by their top).
    pub removed: Vec<Vec<u8>>,
    pub failed: Option<Failure>,
}
