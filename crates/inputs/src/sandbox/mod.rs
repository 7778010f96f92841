//! A sandbox quarry makes itself to run a tree's own programs (Debian's
//! maintainer scripts) without a container engine: a user namespace (root
//! inside, see `ids`) with private mount, network (empty), IPC, UTS and PID
//! namespaces, chrooted into the tree. The parent (this module) writes a
//! [`Job`], starts its own binary as the helper (`helper`: a fresh process,
//! as a user namespace needs one thread), maps its ids when it asks, and
//! reads back a [`Report`] of what the steps changed. The tree lives on a
//! tmpfs of the sandbox's own when memory allows (nothing to clean up, no
//! disk writes), else in the work directory.
//!
//! Depends on nothing in the crate but `layer::path`.

mod error;
mod helper;
pub mod ids;
pub mod job;
mod layout;
mod scan;
mod steps;
mod sys;

pub use error::{HelperError, SandboxError};
pub use helper::{helper_main, ARG};
pub use job::{Backing, Changed, Entry, EntryKind, Failure, Found, Job, Report, Step};

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |err| SandboxError::Io { path: path.to_path_buf(), err }
}

/// The binary that runs the helper: this one, unless a test or a library
/// user names another with `QUARRY_SANDBOX_EXE`.
fn helper_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("QUARRY_SANDBOX_EXE").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let proc_exe = Path::new("/proc/self/exe");
    if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe().unwrap_or_else(|_| PathBuf::from("quarry"))
    }
}

/// Where a tree of `bytes` should live: `QUARRY_SANDBOX_BACKING=tmpfs|disk`
/// decides; else a tmpfs when twice the tree fits in half the available memory.
pub fn backing_for(bytes: u64) -> Backing {
    let want = bytes.saturating_mul(2).saturating_add(512 << 20);
    let tmpfs = Backing::Tmpfs { size_bytes: want };
    match std::env::var("QUARRY_SANDBOX_BACKING").ok().as_deref() {
        Some("tmpfs") => tmpfs,
        Some("disk") => Backing::Disk,
        _ => match mem_available() {
            Some(avail) if want <= avail / 2 => tmpfs,
            _ => Backing::Disk,
        },
    }
}

fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

/// Run `job` (its files under `work`, which must exist).
pub fn run(job: &Job, work: &Path) -> Result<Report, SandboxError> {
    let map = ids::for_this_user()?;
    let job_path = work.join("job.postcard");
    let bytes = postcard::to_stdvec(job).map_err(|e| SandboxError::Helper(e.to_string()))?;
    std::fs::write(&job_path, bytes).map_err(io_err(&job_path))?;
    let exe = helper_exe();
    let mut child = Command::new(&exe)
        .arg(ARG)
        .arg(&job_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_err(&exe))?;
    let mut stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut ready = [0u8; 1];
    let asked = child.stdout.as_mut().expect("piped").read_exact(&mut ready).is_ok() && ready[0] == b'u';
    let mapped = if asked { ids::apply(&map, child.id()) } else { Ok(()) };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(if asked && mapped.is_ok() { b"g" } else { b"n" });
    }
    let status = child.wait().map_err(io_err(&exe))?;
    let errors = errors.join().unwrap_or_default();
    mapped?;
    match status.code() {
        Some(0) => {}
        Some(error::EXIT_UNAVAILABLE) => {
            return Err(SandboxError::Unavailable {
                reason: errors.trim().to_string(),
                hint: "user namespaces are needed (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone; in a container, its seccomp and AppArmor profiles)".into(),
            })
        }
        _ => return Err(SandboxError::Helper(format!("{} ({status})", errors.trim()))),
    }
    let report = std::fs::read(&job.report).map_err(io_err(&job.report))?;
    postcard::from_bytes(&report).map_err(|e| SandboxError::Helper(format!("reading its report: {e}")))
}
