//! The sandbox's inside: `quarry __sandbox JOB`, started by [`super::run`].
//! A fresh process (single-threaded, as `unshare(CLONE_NEWUSER)` requires)
//! that enters a new user namespace, waits while the parent maps its ids,
//! becomes root there and takes private mount, network, IPC, UTS and PID
//! namespaces; then it chroots into the job's root, lays the tree out, runs
//! the steps under a PID 1 of its own (so whatever they leave running dies
//! with it), and reports what changed. This is how mmdebstrap's `unshare`
//! mode runs maintainer scripts, without a daemon.

use super::error::{io, HelperError};
use super::job::{Backing, Failure, Job, Report, Timings};
use super::{layout, scan, steps, sys};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The hidden subcommand.
pub const ARG: &str = "__sandbox";

/// Device nodes the programs get, bound from the host (a user namespace
/// cannot make device nodes).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Entry point: the command line prints the error to stderr (the parent
/// reads it) and exits with [`HelperError::exit_code`].
pub fn helper_main(job_path: &Path) -> Result<(), HelperError> {
    inside(job_path)
}

fn inside(job_path: &Path) -> Result<(), HelperError> {
    let bytes = std::fs::read(job_path).map_err(io(format!("reading `{}`", job_path.display())))?;
    let job: Job = postcard::from_bytes(&bytes).map_err(|e| HelperError::Job(e.to_string()))?;

    // The user namespace first: the parent writes our id maps meanwhile.
    sys::unshare(libc::CLONE_NEWUSER).map_err(|e| {
        HelperError::Unavailable(format!("cannot create a user namespace (unshare(CLONE_NEWUSER): {e})"))
    })?;
    std::io::stdout().write_all(b"u").and_then(|_| std::io::stdout().flush()).map_err(io("signalling the parent"))?;
    let mut go = [0u8; 1];
    std::io::stdin().read_exact(&mut go).map_err(io("waiting for the id maps"))?;
    if go[0] != b'g' {
        return Err(HelperError::Unavailable("the parent could not map our user and group ids".into()));
    }
    sys::become_root().map_err(io("becoming root in the user namespace"))?;
    sys::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWPID)
        .map_err(|e| HelperError::Unavailable(format!("cannot create mount/network/PID namespaces: {e}")))?;
    sys::make_mounts_private().map_err(io("making the mount namespace private"))?;
    sys::set_hostname(&job.hostname).map_err(io("setting the host name"))?;

    // Everything outside the root is opened now, before the chroot.
    let sources: Vec<File> = job
        .sources
        .iter()
        .map(|p| File::open(p).map_err(io(format!("opening `{}`", p.display()))))
        .collect::<Result<_, _>>()?;
    let lower: Vec<File> = job
        .lower
        .iter()
        .map(|p| File::open(p).map_err(io(format!("opening `{}`", p.display()))))
        .collect::<Result<_, _>>()?;
    let create = |p: &Path| File::create(p).map_err(io(format!("creating `{}`", p.display())));
    let (mut report_file, spool, log) = (create(&job.report)?, create(&job.spool)?, create(&job.log)?);

    if let Backing::Tmpfs { size_bytes } = job.backing {
        sys::mount_tmpfs(&job.root, size_bytes, "0755")
            .map_err(io(format!("mounting a tmpfs on `{}`", job.root.display())))?;
    }
    let scaffold = scaffold_dev(&job.root)?;
    sys::chroot(&job.root).map_err(io(format!("chroot into `{}`", job.root.display())))?;

    let mut timings = Timings::default();
    let clock = Clock::start();
    let epoch = job.epoch;
    for (i, f) in lower.into_iter().enumerate() {
        layout::apply_layer(f, epoch)
            .map_err(io(format!("laying out the layer below `{}`", job.lower[i].display())))?;
    }
    layout::write_entries(&job.entries, &sources, epoch)?;
    // Times are coarse (a clock tick): let one pass so that anything the
    // steps change gets a ctime the snapshot cannot have.
    std::thread::sleep(std::time::Duration::from_millis(25));
    let mut scaffold = scaffold;
    if std::fs::symlink_metadata("/proc").is_err() {
        std::fs::create_dir("/proc").map_err(io("making /proc"))?;
        scaffold.push((b"proc".to_vec(), Made::MountOnNew));
    } else {
        scaffold.push((b"proc".to_vec(), Made::Mount));
    }
    let skip: Vec<Vec<u8>> = scaffold.iter().map(|(p, _)| p.clone()).collect();
    let before = scan::snapshot(&skip).map_err(io("recording the tree"))?;
    timings.layout = clock.lap();

    let failed = steps::run_as_init(&job.steps, &log).map_err(io("running the steps"))?;
    timings.steps = clock.lap();

    for (p, made) in scaffold.iter().rev() {
        let abs = Path::new("/").join(std::ffi::OsStr::from_bytes(p));
        if matches!(made, Made::Mount | Made::MountOnNew) {
            sys::unmount_detach(&abs);
        }
        if matches!(made, Made::New | Made::MountOnNew) {
            let _ = std::fs::remove_file(&abs).or_else(|_| std::fs::remove_dir(&abs));
        }
    }
    for p in &job.remove_after {
        let at = Path::new("/").join(std::ffi::OsStr::from_bytes(p));
        let _ = std::fs::remove_file(&at).or_else(|_| std::fs::remove_dir_all(&at));
    }
    let (changed, removed) = scan::compare(&before, &skip, &spool).map_err(io("reading the tree back"))?;
    timings.read_back = clock.lap();
    let report = Report { timings, changed, removed, failed: failed.map(|(step, code)| Failure { step, code }) };
    let bytes = postcard::to_stdvec(&report).map_err(|e| HelperError::Job(e.to_string()))?;
    report_file.write_all(&bytes).map_err(io("writing the report"))?;
    if job.backing == Backing::Disk {
        scan::clear_root().map_err(io("removing the tree"))?;
    }
    Ok(())
}

/// What the run added under `dev/` and how.
#[derive(Debug, Clone, Copy)]
enum Made {
    /// Made here (a directory or symlink), removed afterwards.
    New,
    /// Was there; only mounted over.
    Mount,
    /// Made here as a mount point.
    MountOnNew,
}

/// `/dev` for the steps: the host's null, zero, full, random, urandom and
/// tty bound in, a tmpfs on `/dev/shm`, the `fd` and std* links. Made
/// before the chroot (the host's nodes are out of reach after it).
fn scaffold_dev(root: &Path) -> Result<Vec<(Vec<u8>, Made)>, HelperError> {
    let mut made = Vec::new();
    let dev = root.join("dev");
    if !dev.exists() {
        std::fs::create_dir(&dev).map_err(io("making /dev"))?;
        made.push((b"dev".to_vec(), Made::New));
    }
    for name in DEVICES {
        let at = dev.join(name);
        let new = !at.exists();
        if new {
            File::create(&at).map_err(io(format!("making /dev/{name}")))?;
        }
        sys::bind(&Path::new("/dev").join(name), &at).map_err(io(format!("binding /dev/{name}")))?;
        made.push((format!("dev/{name}").into_bytes(), if new { Made::MountOnNew } else { Made::Mount }));
    }
    let shm = dev.join("shm");
    let new = !shm.exists();
    if new {
        std::fs::create_dir(&shm).map_err(io("making /dev/shm"))?;
    }
    sys::mount_tmpfs(&shm, 64 << 20, "1777").map_err(io("mounting /dev/shm"))?;
    made.push((b"dev/shm".to_vec(), if new { Made::MountOnNew } else { Made::Mount }));
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let at = dev.join(name);
        if std::fs::symlink_metadata(&at).is_err() {
            std::os::unix::fs::symlink(target, &at).map_err(io(format!("making /dev/{name}")))?;
            made.push((format!("dev/{name}").into_bytes(), Made::New));
        }
    }
    Ok(made)
}

/// Wall and CPU (this process and its waited-for children) since the last lap.
struct Clock(std::cell::Cell<(std::time::Instant, f64)>);

impl Clock {
    fn cpu() -> f64 {
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let mut total = 0.0;
        for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
            // SAFETY: a zeroed rusage is a valid out value.
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: a valid out pointer.
            if unsafe { libc::getrusage(who, &mut u) } == 0 {
                total += secs(u.ru_utime) + secs(u.ru_stime);
            }
        }
        total
    }
    fn start() -> Clock {
        Clock(std::cell::Cell::new((std::time::Instant::now(), Self::cpu())))
    }
    fn lap(&self) -> (f64, f64) {
        let (t, c) = self.0.get();
        let (now, cpu) = (std::time::Instant::now(), Self::cpu());
        self.0.set((now, cpu));
        ((now - t).as_secs_f64(), cpu - c)
    }
}
