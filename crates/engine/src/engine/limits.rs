//! Resource limits (ulimits) and the shared IPC namespace of containers,
//! and what quarry does when the engine's runtime cannot apply them.
//!
//! Where the engine runs without CAP_SYS_RESOURCE (rootless engines, some
//! sandboxes), runc cannot raise a limit above the engine's own hard limit
//! and the container does not start: "error setting rlimit type 7:
//! operation not permitted" (crun: "setrlimit `RLIMIT_NOFILE`"). Podman asks
//! for nofile and nproc of 1048576 by default, and quarry's GPU profile for
//! unlimited memlock. quarry then retries with limits the engine can apply:
//! this process's own limit (soft:hard), then soft:soft, then 1024:1024 for
//! nofile and nproc; it remembers what worked for the rest of the command
//! and says so once per limit.
//!
//! The GPU profile shares the host's IPC namespace (`--ipc host`, for RCCL
//! and PyTorch's shared memory). A rootless engine on a host without
//! `/dev/mqueue` cannot: the container then gets its own namespace with an
//! 8 GiB `/dev/shm`, and quarry says so.

use bollard::models::{ContainerCreateBody, ResourcesUlimits};
use rustix::process::Resource;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

/// rlimit numbers as runc reports them (Linux, all architectures quarry
/// runs on), with the names engines take.
const RLIMITS: [(u32, &str, Resource); 5] = [
    (3, "stack", Resource::Stack),
    (4, "core", Resource::Core),
    (6, "nproc", Resource::Nproc),
    (7, "nofile", Resource::Nofile),
    (8, "memlock", Resource::Memlock),
];

/// The ulimit an engine error says could not be applied (`nofile`, ...).
pub fn refused(message: &str) -> Option<&'static str> {
    if let Some(at) = message.find("rlimit type ") {
        let digits: String = message[at + 12..].chars().take_while(char::is_ascii_digit).collect();
        let n: u32 = digits.parse().ok()?;
        return RLIMITS.iter().find(|(k, ..)| *k == n).map(|(_, name, _)| *name);
    }
    let at = message.find("RLIMIT_")?;
    let word: String = message[at + 7..].chars().take_while(char::is_ascii_alphabetic).collect();
    let name = word.to_ascii_lowercase();
    RLIMITS.iter().find(|(_, n, _)| *n == name).map(|(_, n, _)| *n)
}

/// This process's limit (soft, hard); -1 for unlimited.
fn own_limit(name: &str) -> Option<(i64, i64)> {
    let (_, _, resource) = RLIMITS.iter().find(|(_, n, _)| *n == name)?;
    let l = rustix::process::getrlimit(*resource);
    let v = |x: Option<u64>| x.map(|n| i64::try_from(n).unwrap_or(-1)).unwrap_or(-1);
    Some((v(l.current), v(l.maximum)))
}

/// The limits to try for `name`, most generous first: a local engine's
/// own hard limit when known, this process's, then 1024 for nofile/nproc.
fn ladder(name: &str, engine_hard: Option<i64>) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    if let Some(h) = engine_hard {
        out.push((h, h));
    }
    if let Some((soft, hard)) = own_limit(name) {
        out.push((soft, hard));
        out.push((soft, soft));
    }
    if name == "nofile" || name == "nproc" {
        out.push((1024, 1024));
    }
    out.dedup();
    out
}

fn describe(name: &str, (soft, hard): (i64, i64)) -> String {
    let v = |x: i64| if x < 0 { "unlimited".to_string() } else { x.to_string() };
    format!("{name}={}:{}", v(soft), v(hard))
}

/// Limits learned during one command: once a limit is refused, later
/// containers ask for what worked.
#[derive(Debug, Default)]
pub struct LimitFallbacks {
    chosen: RefCell<BTreeMap<&'static str, (i64, i64)>>,
    /// A local engine process's hard limits, the best first guess.
    engine_hard: BTreeMap<String, i64>,
    /// The host's IPC namespace was refused: containers get their own.
    private_ipc: Cell<bool>,
}

/// /dev/shm of a container that cannot share the host's IPC namespace.
const SHM_SIZE: i64 = 8 << 30;

impl LimitFallbacks {
    pub fn new(engine: Option<&EngineProcessLimits>) -> LimitFallbacks {
        LimitFallbacks {
            chosen: Default::default(),
            engine_hard: engine.map(|e| e.hard.clone()).unwrap_or_default(),
            private_ipc: Cell::new(false),
        }
    }

    /// Put the learned limits into a container's definition.
    pub fn apply(&self, body: &mut ContainerCreateBody) {
        if self.private_ipc.get() {
            let host = body.host_config.get_or_insert_with(Default::default);
            if host.ipc_mode.as_deref() == Some("host") {
                host.ipc_mode = None;
                host.shm_size = Some(SHM_SIZE);
            }
        }
        let chosen = self.chosen.borrow();
        if chosen.is_empty() {
            return;
        }
        let host = body.host_config.get_or_insert_with(Default::default);
        let ulimits = host.ulimits.get_or_insert_with(Vec::new);
        for (name, (soft, hard)) in chosen.iter() {
            ulimits.retain(|u| u.name.as_deref() != Some(*name));
            ulimits.push(ResourcesUlimits { name: Some(name.to_string()), soft: Some(*soft), hard: Some(*hard) });
        }
    }

    /// After the engine refused `name` (as `body` asked or by its own
    /// default), choose the next limit to try; false when none is left.
    pub fn step_down(&self, name: &'static str, body: &ContainerCreateBody, engine_error: &str) -> bool {
        let asked = body
            .host_config
            .as_ref()
            .and_then(|h| h.ulimits.as_ref())
            .and_then(|u| u.iter().find(|u| u.name.as_deref() == Some(name)))
            .map(|u| (u.soft.unwrap_or(-1), u.hard.unwrap_or(-1)));
        let steps = ladder(name, self.engine_hard.get(name).copied());
        let next = match asked.and_then(|a| steps.iter().position(|s| *s == a)) {
            Some(i) => steps.get(i + 1).copied(),
            None => steps.first().copied(),
        };
        let Some(next) = next else {
            return false;
        };
        // runc's own words, without the layers of context around them.
        let why = engine_error
            .find("error setting rlimit type")
            .or_else(|| engine_error.find("setrlimit"))
            .map(|i| &engine_error[i..]);
        let why = why.unwrap_or(engine_error).lines().next().unwrap_or_default().trim();
        let what = match asked {
            Some(a) => describe(name, a),
            None => format!("its default {name} limit"),
        };
        let own = if self.engine_hard.get(name).is_some_and(|h| (*h, *h) == next) {
            " (the engine process's own limit)"
        } else if own_limit(name) == Some(next) {
            " (this process's own limit)"
        } else {
            ""
        };
        log::warn!("the engine cannot apply {what} ({why}); containers get {}{own} instead", describe(name, next));
        self.chosen.borrow_mut().insert(name, next);
        true
    }
}

impl LimitFallbacks {
    /// After the engine refused the host's IPC namespace for `body`: use a
    /// private one from now on (true), unless that was already so.
    pub fn step_down_ipc(&self, body: &ContainerCreateBody, engine_error: &str) -> bool {
        let wants_host = body.host_config.as_ref().and_then(|h| h.ipc_mode.as_deref()) == Some("host");
        if !wants_host || !engine_error.contains("mqueue") || self.private_ipc.get() {
            return false;
        }
        log::warn!(
            "the engine cannot share the host's IPC namespace ({}); containers get their own with a {} GiB /dev/shm instead",
            engine_error.trim(),
            SHM_SIZE >> 30
        );
        self.private_ipc.set(true);
        true
    }
}

/// The limits of a local engine's own process: runc, started below it,
/// cannot give a container more than these unless the engine may raise
/// them (CAP_SYS_RESOURCE).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineProcessLimits {
    pub pid: i32,
    /// The engine's user: not 0 means a rootless engine.
    pub uid: u32,
    /// CAP_SYS_RESOURCE: limits above the hard ones can be given.
    pub can_raise: bool,
    /// Hard limits by ulimit name (`nofile`, `nproc`, `memlock`); -1 is unlimited.
    pub hard: BTreeMap<String, i64>,
}

/// Ask the kernel who serves the unix socket `socket`, then read that
/// process's limits and capabilities from /proc. None when any of it is
/// unavailable (another user's process, no /proc).
pub fn engine_process(socket: &std::path::Path) -> Option<EngineProcessLimits> {
    let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let peer = rustix::net::sockopt::socket_peercred(&stream).ok()?;
    let (pid, uid) = (peer.pid.as_raw_nonzero().get(), peer.uid.as_raw());
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim)?;
    const CAP_SYS_RESOURCE: u32 = 24;
    let can_raise = u64::from_str_radix(cap_eff, 16).ok()? & (1 << CAP_SYS_RESOURCE) != 0;
    let mut hard = BTreeMap::new();
    for (label, name) in [("Max open files", "nofile"), ("Max processes", "nproc"), ("Max locked memory", "memlock")] {
        let line = limits.lines().find(|l| l.starts_with(label))?;
        let fields: Vec<&str> = line[label.len()..].split_whitespace().collect();
        let value = fields.get(1).map(|v| if *v == "unlimited" { -1 } else { v.parse().unwrap_or(-1) })?;
        hard.insert(name.to_string(), value);
    }
    Some(EngineProcessLimits { pid, uid, can_raise, hard })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::HostConfig;

    #[test]
    fn refused_limits_from_runc_and_crun_messages() {
        let runc = "runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied";
        assert_eq!(refused(runc), Some("nofile"));
        assert_eq!(refused("error setting rlimit type 6: operation not permitted"), Some("nproc"));
        assert_eq!(refused("error setting rlimit type 8: operation not permitted"), Some("memlock"));
        assert_eq!(refused("setrlimit `RLIMIT_NOFILE`: Operation not permitted"), Some("nofile"));
        assert_eq!(refused("no such image"), None);
    }

    #[test]
    fn steps_down_and_remembers() {
        let f = LimitFallbacks::default();
        let mut body = ContainerCreateBody {
            host_config: Some(HostConfig {
                ulimits: Some(vec![ResourcesUlimits { name: Some("memlock".into()), soft: Some(-1), hard: Some(-1) }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(f.step_down("nofile", &body, "error setting rlimit type 7"));
        f.apply(&mut body);
        let own = own_limit("nofile").unwrap();
        let u = body.host_config.as_ref().unwrap().ulimits.as_ref().unwrap();
        assert!(u
            .iter()
            .any(|u| u.name.as_deref() == Some("nofile") && (u.soft, u.hard) == (Some(own.0), Some(own.1))));
        assert!(u.iter().any(|u| u.name.as_deref() == Some("memlock")));
        // Refused again: lower, down to 1024:1024, then nothing is left.
        let mut tries = 0;
        while f.step_down("nofile", &body, "again") {
            f.apply(&mut body);
            tries += 1;
            assert!(tries < 4);
        }
        assert_eq!(f.chosen.borrow().get("nofile"), Some(&(1024, 1024)));
    }
}
