//! Which host ids the sandbox's ids stand for. As root, all of them, one to
//! one (files keep the owners the packages give them). As another user, the
//! way mmdebstrap's `unshare` mode and rootless Podman do it: that user is
//! root inside, and ids 1-65536 are a subordinate range from /etc/subuid
//! and /etc/subgid, mapped by the setuid helpers `newuidmap`/`newgidmap`.

use super::SandboxError;
use std::path::Path;
use std::process::Command;

/// Inside ids 1..=65536 (nobody is 65534) need a range this long.
pub const RANGE: u64 = 65536;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdMap {
    /// Running as root: every id maps to itself.
    Identity,
    /// Running as `uid`/`gid`: 0 is the user, 1.. are the ranges' starts.
    Subordinate { uid: u32, gid: u32, uid_start: u64, gid_start: u64 },
}

/// The map for this process, or why there is none.
pub fn for_this_user() -> Result<IdMap, SandboxError> {
    // SAFETY: plain system calls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        return Ok(IdMap::Identity);
    }
    let name = user_name(uid);
    let range = |file: &str, id: u32| -> Result<u64, SandboxError> {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        subordinate_start(&text, name.as_deref(), id).ok_or_else(|| SandboxError::Unavailable {
            reason: format!("{file} gives user `{}` (id {id}) no range of {RANGE} ids", name.as_deref().unwrap_or("?")),
            hint: format!(
                "add one (as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {}), or build as root",
                name.as_deref().unwrap_or("USER")
            ),
        })
    };
    let (uid_start, gid_start) = (range("/etc/subuid", uid)?, range("/etc/subgid", gid)?);
    for tool in ["newuidmap", "newgidmap"] {
        if which(tool).is_none() {
            return Err(SandboxError::Unavailable {
                reason: format!("`{tool}` is not installed"),
                hint: "install it (Debian and Ubuntu: the `uidmap` package), or build as root".into(),
            });
        }
    }
    Ok(IdMap::Subordinate { uid, gid, uid_start, gid_start })
}

/// The start of the first range in a subuid/subgid file for `name` or `id`
/// at least [`RANGE`] long.
pub fn subordinate_start(text: &str, name: Option<&str>, id: u32) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        let (who, start, count) = (f.next()?, f.next()?.parse::<u64>().ok()?, f.next()?.parse::<u64>().ok()?);
        let me = Some(who) == name || who == id.to_string();
        (me && count >= RANGE).then_some(start)
    })
}

fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
    })
}

fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Write the maps of the helper `pid` (in its new user namespace, waiting).
pub fn apply(map: &IdMap, pid: u32) -> Result<(), SandboxError> {
    let fail = |what: &str, e: String| {
        SandboxError::Unavailable {
        reason: format!("mapping the sandbox's {what}: {e}"),
        hint: "check that user namespaces are allowed here (sysctl user.max_user_namespaces; in a container, its seccomp and AppArmor profiles)".into(),
    }
    };
    match map {
        IdMap::Identity => {
            for (file, what) in [("uid_map", "user ids"), ("gid_map", "group ids")] {
                std::fs::write(Path::new("/proc").join(pid.to_string()).join(file), "0 0 4294967295\n")
                    .map_err(|e| fail(what, e.to_string()))?;
            }
        }
        IdMap::Subordinate { uid, gid, uid_start, gid_start } => {
            for (tool, own, start, what) in
                [("newuidmap", uid, uid_start, "user ids"), ("newgidmap", gid, gid_start, "group ids")]
            {
                let out = Command::new(tool)
                    .args([pid.to_string(), "0".into(), own.to_string(), "1".into()])
                    .args(["1".to_string(), start.to_string(), RANGE.to_string()])
                    .output()
                    .map_err(|e| fail(what, format!("running {tool}: {e}")))?;
                if !out.status.success() {
                    return Err(fail(what, format!("{tool}: {}", String::from_utf8_lossy(&out.stderr).trim())));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_long_enough_range_by_name_or_id() {
        let text = "alice:100000:1000\nalice:200000:65536\n1001:300000:65536\n";
        assert_eq!(subordinate_start(text, Some("alice"), 1000), Some(200000));
        assert_eq!(subordinate_start(text, Some("bob"), 1001), Some(300000));
        assert_eq!(subordinate_start(text, Some("carol"), 1002), None);
    }
}
