//! The system calls the sandbox needs, each wrapped once. Written against
//! `libc` directly: rustix leaves out `unshare` of a user namespace (it
//! changes process-wide state) and the mount calls with data strings.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: plain system call; the process is single-threaded when it
    // asks for a user namespace (see helper).
    check(unsafe { libc::unshare(flags) })
}

/// uid and gid 0 in the namespace just made (mapped by the parent), with
/// no supplementary groups.
pub fn become_root() -> io::Result<()> {
    // SAFETY: plain system calls.
    unsafe {
        check(libc::setresgid(0, 0, 0))?;
        check(libc::setresuid(0, 0, 0))?;
        // Refused where the parent's map denies setgroups; nothing then to drop.
        let _ = libc::setgroups(0, std::ptr::null());
    }
    Ok(())
}

pub fn make_mounts_private() -> io::Result<()> {
    let root = CString::new("/").expect("no NUL");
    // SAFETY: valid C strings; null file system type and data are allowed here.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

pub fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: pointer and length of a live buffer.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
}

pub fn mount_tmpfs(at: &Path, size: u64, mode: &str) -> io::Result<()> {
    let (src, fstype) = (CString::new("tmpfs").expect("no NUL"), CString::new("tmpfs").expect("no NUL"));
    let data = CString::new(format!("size={size},mode={mode}")).expect("no NUL");
    let at = cstr(at)?;
    // SAFETY: valid C strings.
    check(unsafe { libc::mount(src.as_ptr(), at.as_ptr(), fstype.as_ptr(), libc::MS_NOSUID, data.as_ptr().cast()) })
}

pub fn mount_proc(at: &Path) -> io::Result<()> {
    let src = CString::new("proc").expect("no NUL");
    let at = cstr(at)?;
    // SAFETY: valid C strings.
    check(unsafe {
        libc::mount(
            src.as_ptr(),
            at.as_ptr(),
            src.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    })
}

pub fn bind(from: &Path, to: &Path) -> io::Result<()> {
    let (from, to) = (cstr(from)?, cstr(to)?);
    // SAFETY: valid C strings.
    check(unsafe { libc::mount(from.as_ptr(), to.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) })
}

/// Best effort: a mount that is not there is fine.
pub fn unmount_detach(at: &Path) {
    if let Ok(at) = cstr(at) {
        // SAFETY: valid C string.
        unsafe { libc::umount2(at.as_ptr(), libc::MNT_DETACH) };
    }
}

pub fn chroot(root: &Path) -> io::Result<()> {
    let c = cstr(root)?;
    // SAFETY: valid C string.
    check(unsafe { libc::chroot(c.as_ptr()) })?;
    std::env::set_current_dir("/")
}

/// `fork()`; the child gets `Ok(None)`. Only called while the process is
/// single-threaded.
pub fn fork() -> io::Result<Option<libc::pid_t>> {
    // SAFETY: the helper never starts threads, so the child inherits a
    // consistent process.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Some(pid)),
    }
}

/// Wait for `pid`; its exit code, or 128 + the signal that ended it.
pub fn wait(pid: libc::pid_t) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: a valid out pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) })
}

/// Collect exited children without blocking (as an init must).
pub fn reap_zombies() {
    let mut status = 0;
    // SAFETY: a valid out pointer.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}

pub fn lchown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: valid C string.
    check(unsafe { libc::lchown(c.as_ptr(), uid, gid) })
}

/// Set a path's modification (and access) time without following a symlink.
pub fn set_mtime(path: &Path, mtime: i64) -> io::Result<()> {
    let c = cstr(path)?;
    let t = libc::timespec { tv_sec: mtime as libc::time_t, tv_nsec: 0 };
    let times = [t, t];
    // SAFETY: valid C string and a two-element array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
}

pub fn mkfifo(path: &Path, mode: u32) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: valid C string.
    check(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) })
}

const CAPABILITY: &std::ffi::CStr = c"security.capability";

pub fn set_capability(path: &Path, value: &[u8]) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: valid C strings and buffer.
    check(unsafe { libc::lsetxattr(c.as_ptr(), CAPABILITY.as_ptr(), value.as_ptr().cast(), value.len(), 0) })
}

pub fn capability(path: &Path) -> Option<Vec<u8>> {
    let c = cstr(path).ok()?;
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and buffer.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), CAPABILITY.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (n > 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

/// Copy `len` bytes at `offset` of `from` to the end of `to`, in the kernel
/// where it can.
pub fn copy_range(from: &std::fs::File, offset: u64, len: u64, to: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut off = offset as libc::loff_t;
    let mut left = len;
    while left > 0 {
        let chunk = left.min(1 << 30) as usize;
        // SAFETY: valid descriptors and offset pointer; the output offset
        // is the file's own.
        let n = unsafe {
            libc::copy_file_range(from.as_raw_fd(), &mut off, to.as_raw_fd(), std::ptr::null_mut(), chunk, 0)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) {
                return copy_by_read(from, off as u64, left, to);
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the source is shorter than recorded"));
        }
        left -= n as u64;
    }
    Ok(())
}

fn copy_by_read(from: &std::fs::File, offset: u64, len: u64, mut to: &std::fs::File) -> io::Result<()> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    struct At<'a>(&'a std::fs::File, u64);
    impl Read for At<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read_at(buf, self.1)?;
            self.1 += n as u64;
            Ok(n)
        }
    }
    let n = io::copy(&mut At(from, offset).take(len), &mut to)?;
    if n != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the source is shorter than recorded"));
    }
    Ok(())
}
