//! Running containers: the options of `quarry run`, the container they
//! make, their `docker run` equivalent, and the run itself (the lifecycle
//! is `session`'s: create -> copy in -> attach -> start -> stream output ->
//! wait -> copy out -> remove, guarded against errors and signals).

use super::copy::{self, CopyIn, Stamp};
use super::gpu::GpuPlan;
pub use super::session::{unique_suffix, Memlock, Output, Session};
use super::{Engine, EngineError, LABEL_HOST, LABEL_MANAGED, LABEL_PID};
use bollard::models::{ContainerCreateBody, DeviceMapping, DeviceRequest, HostConfig, ResourcesUlimits};
use std::collections::HashMap;
use std::path::PathBuf;

/// `--network none|bridge|host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    #[default]
    None,
    Bridge,
    Host,
}

impl Network {
    pub fn mode(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Host => "host",
        }
    }
}

/// `--mount SRC:DST[:ro]`, a bind mount of a host path.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

/// Parse `SRC:DST[:ro|rw]`; SRC must exist (made absolute), DST absolute.
pub fn parse_mount(s: &str) -> Result<Mount, EngineError> {
    let bad = |m: &str| EngineError::Invalid(format!("--mount `{s}`: {m}; expected SRC:DST or SRC:DST:ro"));
    let parts: Vec<&str> = s.split(':').collect();
    let (src, dst, ro) = match parts.as_slice() {
        [src, dst] => (*src, *dst, false),
        [src, dst, "ro"] => (*src, *dst, true),
        [src, dst, "rw"] => (*src, *dst, false),
        _ => return Err(bad("wrong number of `:`-separated parts")),
    };
    if src.is_empty() || !dst.starts_with('/') {
        return Err(bad("SRC must be given and DST must be an absolute container path"));
    }
    let host = std::fs::canonicalize(src).map_err(|e| bad(&format!("the host path `{src}` cannot be used ({e})")))?;
    Ok(Mount { host, container: dst.to_string(), read_only: ro })
}

/// Parse `--env K=V`; a bare `K` takes quarry's own value (as `docker run -e K`).
pub fn parse_env(s: &str) -> Result<String, EngineError> {
    let key = s.split_once('=').map(|(k, _)| k).unwrap_or(s);
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(EngineError::Invalid(format!("--env `{s}`: expected K=V with a non-empty name")));
    }
    if s.contains('=') {
        return Ok(s.to_string());
    }
    std::env::var(s).map(|v| format!("{s}={v}")).map_err(|_| {
        EngineError::Invalid(format!("--env `{s}`: no value given and `{s}` is not set here; use --env {s}=VALUE"))
    })
}

/// Parse `--copy-in SRC:DST` (SRC on the host, DST absolute in the container).
pub fn parse_copy_in(s: &str) -> Result<CopyIn, EngineError> {
    let (src, dst) = s
        .rsplit_once(':')
        .ok_or_else(|| EngineError::Invalid(format!("--copy-in `{s}`: expected HOST_PATH:CONTAINER_PATH")))?;
    if src.is_empty() || !dst.starts_with('/') {
        return Err(EngineError::Invalid(format!(
            "--copy-in `{s}`: the container path must be absolute, e.g. ./data:/work/data"
        )));
    }
    let host = PathBuf::from(src);
    std::fs::symlink_metadata(&host).map_err(|e| EngineError::io("--copy-in: cannot read", &host, e))?;
    Ok(CopyIn { host, dest: dst.to_string() })
}

/// Parse `--copy-out SRC:DST` (SRC absolute in the container, DST on the host).
pub fn parse_copy_out(s: &str) -> Result<(String, PathBuf), EngineError> {
    let (src, dst) = s
        .split_once(':')
        .ok_or_else(|| EngineError::Invalid(format!("--copy-out `{s}`: expected CONTAINER_PATH:HOST_PATH")))?;
    if !src.starts_with('/') || dst.is_empty() {
        return Err(EngineError::Invalid(format!(
            "--copy-out `{s}`: the container path must be absolute, e.g. /work/out:./out"
        )));
    }
    Ok((src.to_string(), PathBuf::from(dst)))
}

/// Everything `quarry run` needs once the image is in the engine.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// An engine image reference.
    pub image: String,
    /// The command; empty means the image's own.
    pub cmd: Vec<String>,
    /// `K=V` pairs.
    pub env: Vec<String>,
    pub mounts: Vec<Mount>,
    pub copy_in: Vec<CopyIn>,
    pub copy_out: Vec<(String, PathBuf)>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub network: Network,
    pub gpu: GpuPlan,
}

/// The labels every quarry container carries.
pub fn labels() -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_PID.to_string(), std::process::id().to_string()),
        (LABEL_HOST.to_string(), super::host_name()),
    ])
}

impl RunOptions {
    /// Numeric owner for copied-in files: the `--user` when it is numeric, else root.
    fn copy_stamp(&self) -> Stamp {
        let owner = self
            .user
            .as_deref()
            .and_then(|u| {
                let (a, b) = u.split_once(':').unwrap_or((u, u));
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .unwrap_or((0, 0));
        Stamp { owner, mtime: None }
    }

    pub fn body(&self, memlock: Memlock) -> ContainerCreateBody {
        let g = &self.gpu;
        let mut env = g.env.clone();
        env.extend(self.env.iter().cloned());
        let ulimits = (memlock == Memlock::Unlimited)
            .then(|| vec![ResourcesUlimits { name: Some("memlock".into()), soft: Some(-1), hard: Some(-1) }]);
        let host = HostConfig {
            devices: (!g.devices.is_empty()).then(|| {
                g.devices
                    .iter()
                    .map(|d| DeviceMapping {
                        path_on_host: Some(d.host_path.display().to_string()),
                        path_in_container: Some(d.container_path.clone()),
                        cgroup_permissions: Some("rwm".into()),
                    })
                    .collect()
            }),
            // CDI names for engines that resolve them (the device nodes
            // above are their fallback: see `Engine::adapt_gpu_devices`).
            device_requests: (!g.cdi.is_empty()).then(|| {
                vec![DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(g.cdi.clone()),
                    ..Default::default()
                }]
            }),
            group_add: (!g.group_add.is_empty()).then(|| g.group_add.iter().map(|x| x.to_string()).collect()),
            ipc_mode: g.ipc_host.then(|| "host".to_string()),
            security_opt: g.seccomp_unconfined.then(|| vec!["seccomp=unconfined".to_string()]),
            cap_add: (!g.cap_add.is_empty()).then(|| g.cap_add.clone()),
            ulimits,
            network_mode: Some(self.network.mode().into()),
            binds: (!self.mounts.is_empty()).then(|| self.mounts.iter().map(bind_spec).collect()),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            cmd: (!self.cmd.is_empty()).then(|| self.cmd.clone()),
            env: (!env.is_empty()).then_some(env),
            working_dir: self.workdir.clone(),
            user: self.user.clone(),
            labels: Some(labels()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            host_config: Some(host),
            ..Default::default()
        }
    }

    /// The same container as a `docker` command line, without quarry's own
    /// labels. With copies, the create / cp / start / cp / rm sequence they need.
    pub fn docker_command(&self) -> String {
        let g = &self.gpu;
        let mut flags: Vec<String> = Vec::new();
        let mut push = |a: &str, b: String| {
            flags.push(a.to_string());
            flags.push(b);
        };
        // No quarry labels: a container a user starts from this line is
        // theirs, and `quarry gc` must never take it for a leftover of a
        // quarry process (whose pid, here, would be one that has exited).
        push("--network", self.network.mode().into());
        for name in &g.cdi {
            push("--device", name.clone());
        }
        for d in g.devices.iter().filter(|_| g.cdi.is_empty()) {
            let host = d.host_path.display().to_string();
            push("--device", if host == d.container_path { host } else { format!("{host}:{}", d.container_path) });
        }
        for gid in &g.group_add {
            push("--group-add", gid.to_string());
        }
        if g.ipc_host {
            push("--ipc", "host".into());
        }
        if g.seccomp_unconfined {
            push("--security-opt", "seccomp=unconfined".into());
        }
        for c in &g.cap_add {
            push("--cap-add", c.clone());
        }
        if g.memlock_unlimited {
            push("--ulimit", "memlock=-1:-1".into());
        }
        for e in g.env.iter().chain(&self.env) {
            push("--env", e.clone());
        }
        for m in &self.mounts {
            push("--volume", bind_spec(m));
        }
        if let Some(w) = &self.workdir {
            push("--workdir", w.clone());
        }
        if let Some(u) = &self.user {
            push("--user", u.clone());
        }
        let mut tail = vec![self.image.clone()];
        tail.extend(self.cmd.iter().cloned());
        let q = |v: &[String]| v.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
        if self.copy_in.is_empty() && self.copy_out.is_empty() {
            return format!("docker run --rm {} {}", q(&flags), q(&tail));
        }
        let mut lines = vec![format!("id=$(docker create {} {})", q(&flags), q(&tail))];
        for c in &self.copy_in {
            lines.push(format!(
                "docker cp {} \"$id\":{}",
                shell_quote(&c.host.display().to_string()),
                shell_quote(&c.dest)
            ));
        }
        lines.push("docker start --attach \"$id\"; status=$?".into());
        for (src, dst) in &self.copy_out {
            lines.push(format!("docker cp \"$id\":{} {}", shell_quote(src), shell_quote(&dst.display().to_string())));
        }
        lines.push("docker rm --force \"$id\" >/dev/null; exit $status".into());
        lines.join("\n")
    }
}

fn bind_spec(m: &Mount) -> String {
    format!("{}:{}{}", m.host.display(), m.container, if m.read_only { ":ro" } else { "" })
}

/// POSIX shell quoting for display (a dozen lines; not worth a dependency):
/// plain words stay as they are, anything else is single-quoted.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl Engine {
    /// Run a container as `quarry run` does; returns its exit code.
    pub fn run(&self, opts: &RunOptions) -> Result<i32, EngineError> {
        if !opts.mounts.is_empty() {
            self.check_host_paths("--mount")?;
        }
        self.guarded(async |s| run_in(s, opts).await)
    }
}

async fn run_in(s: &Session<'_>, opts: &RunOptions) -> Result<i32, EngineError> {
    s.require_image(&opts.image).await?;
    let memlock = if opts.gpu.memlock_unlimited { Memlock::Unlimited } else { Memlock::Unset };
    let (id, code) =
        s.launch(&|m| opts.body(m), memlock, &opts.copy_in, opts.copy_stamp(), Output::Passthrough).await?;
    for (src, dst) in &opts.copy_out {
        copy::copy_out(&s.engine.docker, &id, src, dst).await?;
    }
    s.remove_container(&id).await;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_parsing() {
        assert_eq!(shell_quote("echo"), "echo");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert!(parse_mount("relative-missing:/x").is_err());
        assert!(parse_mount("/tmp:rel").is_err());
        let m = parse_mount("/tmp:/data:ro").unwrap();
        assert!(m.read_only);
        assert!(parse_copy_out("rel:/x").is_err());
        assert_eq!(parse_copy_out("/out/a:./a").unwrap().0, "/out/a");
    }

    #[test]
    fn the_printed_line_carries_no_quarry_label() {
        // A container started from it must not look like a leftover to `quarry gc`.
        let opts =
            RunOptions { image: "debian:12".into(), cmd: vec!["sleep".into(), "60".into()], ..Default::default() };
        let line = opts.docker_command();
        assert!(line.starts_with("docker run --rm "), "{line}");
        assert!(!line.contains("io.quarry") && !line.contains("--label"), "{line}");
        let body = opts.body(Memlock::Unset);
        assert!(body.labels.unwrap().contains_key(LABEL_MANAGED), "quarry's own containers keep their labels");
    }
}
