//! Running the steps under an init of the sandbox's own PID namespace: the
//! first child forked after `unshare(CLONE_NEWPID)` is PID 1 there; it
//! mounts `/proc`, runs each step in turn (stdin empty, output to the log,
//! umask 022, only the step's environment), reaps what the steps orphan,
//! and when it exits the kernel ends whatever they left running (a daemon a
//! script started despite `policy-rc.d`).

use super::job::Step;
use super::sys;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Run `steps`; the failed step's index and exit code, if one failed.
pub fn run_as_init(steps: &[Step], log: &File) -> io::Result<Option<(usize, i32)>> {
    let (mut rx, tx) = pipe()?;
    match sys::fork()? {
        None => {
            drop(rx);
            let code = match init(steps, log, tx) {
                Ok(()) => 0,
                Err(e) => {
                    let _ = writeln!(&*log, "quarry sandbox: {e}");
                    1
                }
            };
            // SAFETY: leaving the forked child without unwinding into the
            // parent's state.
            unsafe { libc::_exit(code) }
        }
        Some(pid) => {
            drop(tx);
            let code = sys::wait(pid)?;
            let mut outcome = String::new();
            rx.read_to_string(&mut outcome)?;
            match outcome.trim().split_once(' ') {
                Some((step, code)) => Ok(Some((step.parse().unwrap_or(0), code.parse().unwrap_or(1)))),
                None if code == 0 => Ok(None),
                None => Err(io::Error::other(format!("the sandbox's init ended with status {code}; see the log"))),
            }
        }
    }
}

fn pipe() -> io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    use std::os::fd::FromRawFd;
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

fn init(steps: &[Step], log: &File, mut outcome: File) -> io::Result<()> {
    // SAFETY: plain system call.
    unsafe { libc::umask(0o022) };
    if let Err(e) = sys::mount_proc(Path::new("/proc")) {
        // Some hosts forbid a new /proc in a user namespace; most scripts
        // do without it, and a failing one says so in the log.
        writeln!(&*log, "quarry sandbox: no /proc for the steps: {e}")?;
    }
    for (i, step) in steps.iter().enumerate() {
        writeln!(&*log, "==> {}", step.label)?;
        let path = step.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or("/usr/bin:/bin");
        let program = resolve(&step.argv[0], path);
        let status = Command::new(&program)
            .args(&step.argv[1..])
            .arg0(&step.argv[0])
            .env_clear()
            .envs(step.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log.try_clone()?)
            .status();
        sys::reap_zombies();
        let code = match status {
            Ok(s) => s.code().unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)),
            Err(e) => {
                writeln!(&*log, "quarry sandbox: cannot run `{}`: {e}", step.argv[0])?;
                127
            }
        };
        if code != 0 {
            write!(outcome, "{i} {code}")?;
            return Ok(());
        }
    }
    Ok(())
}

/// `argv[0]` looked up in the step's PATH inside the tree.
fn resolve(program: &str, path: &str) -> String {
    if program.contains('/') {
        return program.to_string();
    }
    for dir in path.split(':') {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p.display().to_string();
        }
    }
    program.to_string()
}
