//! Running containers: the options of `quarry run`, their `docker run`
//! equivalent, and the container lifecycle shared with step layers
//! (create -> copy in -> attach -> start -> stream output -> wait -> copy
//! out -> remove), guarded so that errors, SIGINT and SIGTERM still remove
//! every container and temporary image created on the way.

use super::copy::{self, CopyIn, Stamp};
use super::gpu::GpuPlan;
use super::{describe, is_not_found, Engine, EngineError, LABEL_MANAGED, LABEL_PID};
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, DeviceMapping, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
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

/// The memlock limit asked of the engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Memlock {
    Unset,
    Unlimited,
    Limit(i64, i64),
}

/// The host's own RLIMIT_MEMLOCK (soft, hard), -1 for unlimited.
fn host_memlock() -> Memlock {
    let l = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    let v = |x: Option<u64>| x.map(|n| i64::try_from(n).unwrap_or(-1)).unwrap_or(-1);
    Memlock::Limit(v(l.current), v(l.maximum))
}

/// The labels every quarry container carries.
pub(crate) fn labels() -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_PID.to_string(), std::process::id().to_string()),
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

    pub(crate) fn body(&self, memlock: Memlock) -> ContainerCreateBody {
        let g = &self.gpu;
        let mut env = g.env.clone();
        env.extend(self.env.iter().cloned());
        let ulimits = match memlock {
            Memlock::Unset => None,
            Memlock::Unlimited => {
                Some(vec![ResourcesUlimits { name: Some("memlock".into()), soft: Some(-1), hard: Some(-1) }])
            }
            Memlock::Limit(s, h) => {
                Some(vec![ResourcesUlimits { name: Some("memlock".into()), soft: Some(s), hard: Some(h) }])
            }
        };
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
        for d in &g.devices {
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
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Where a container's output goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Output {
    /// stdout to stdout, stderr to stderr.
    Passthrough,
    /// Both to stderr (build steps: stdout is for `--json`).
    Stderr,
}

/// Containers and images created while a guarded operation runs; all are
/// removed when it ends, however it ends.
pub(crate) struct Session<'e> {
    pub engine: &'e Engine,
    containers: RefCell<Vec<String>>,
    images: RefCell<Vec<String>>,
}

impl Engine {
    /// Run `work` with SIGINT/SIGTERM caught; afterwards (success, error or
    /// signal) remove what it created.
    pub(crate) fn guarded<T>(
        &self,
        work: impl AsyncFnOnce(&Session) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        use tokio::signal::unix::{signal, SignalKind};
        self.rt.block_on(async {
            // The listeners live as long as the engine: once installed, the
            // handlers replace the default action for good, so a signal that
            // arrives between two guarded operations (a build's steps) stays
            // pending here and stops the next one at once.
            let (mut int, mut term) = match self.signals.take() {
                Some(s) => s,
                None => {
                    let sig_err = |e| EngineError::Invalid(format!("cannot watch for signals: {e}"));
                    (
                        signal(SignalKind::interrupt()).map_err(sig_err)?,
                        signal(SignalKind::terminate()).map_err(sig_err)?,
                    )
                }
            };
            let session =
                Session { engine: self, containers: RefCell::new(Vec::new()), images: RefCell::new(Vec::new()) };
            let r = tokio::select! {
                biased;
                _ = int.recv() => Err(EngineError::Interrupted("SIGINT")),
                _ = term.recv() => Err(EngineError::Interrupted("SIGTERM")),
                r = work(&session) => r,
            };
            session.cleanup().await;
            self.signals.replace(Some((int, term)));
            r
        })
    }

    /// Run a container as `quarry run` does; returns its exit code.
    pub fn run(&self, opts: &RunOptions) -> Result<i32, EngineError> {
        self.guarded(async |s| s.run(opts).await)
    }
}

impl Session<'_> {
    /// Remove this container when the session ends.
    pub fn track_container(&self, id: &str) {
        self.containers.borrow_mut().push(id.to_string());
    }

    pub fn track_image(&self, id: &str) {
        self.images.borrow_mut().push(id.to_string());
    }

    /// Remove a container now (and stop tracking it).
    pub async fn remove_container(&self, id: &str) {
        let d = &self.engine.docker;
        let opts = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match d.remove_container(id, Some(opts)).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                log::warn!("could not remove container {}: {}", &id[..id.len().min(12)], describe(&e))
            }
        }
        self.containers.borrow_mut().retain(|c| c != id);
    }

    async fn cleanup(&self) {
        let containers: Vec<String> = self.containers.borrow().clone();
        for id in containers {
            self.remove_container(&id).await;
        }
        let images: Vec<String> = std::mem::take(&mut *self.images.borrow_mut());
        for id in images.into_iter().rev() {
            let opts = RemoveImageOptionsBuilder::default().force(false).noprune(false).build();
            match self.engine.docker.remove_image(&id, Some(opts), None).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => log::warn!("could not remove temporary image {id}: {}", describe(&e)),
            }
        }
    }

    pub async fn require_image(&self, image: &str) -> Result<(), EngineError> {
        match self.engine.docker.inspect_image(image).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Err(EngineError::NoSuchImage(image.to_string())),
            Err(e) => Err(EngineError::api(format!("inspecting image `{image}`"), e)),
        }
    }

    /// Create, copy in, attach, start (retrying once without unlimited
    /// memlock when the engine cannot raise it), stream the output and wait.
    /// Returns the container id (still present) and its exit code.
    pub async fn launch(
        &self,
        body: &dyn Fn(Memlock) -> ContainerCreateBody,
        mut memlock: Memlock,
        copy_in: &[CopyIn],
        stamp: Stamp,
        output: Output,
    ) -> Result<(String, i32), EngineError> {
        let d = &self.engine.docker;
        let id = loop {
            let name = format!("quarry-{}-{}", std::process::id(), unique_suffix());
            let created = d
                .create_container(Some(CreateContainerOptionsBuilder::default().name(&name).build()), body(memlock))
                .await
                .map_err(|e| {
                    let image = body(memlock).image.unwrap_or_default();
                    if is_not_found(&e) {
                        EngineError::NoSuchImage(image)
                    } else {
                        EngineError::api(format!("creating a container from `{image}`"), e)
                    }
                })?;
            let id = created.id;
            self.containers.borrow_mut().push(id.clone());
            copy::copy_in(d, &id, copy_in.to_vec(), stamp).await?;
            // Attached before the start, streams only: the engine subscribes
            // to the output before it answers, so nothing is missed. With
            // `logs` it would also replay the log file after answering, and
            // output written between the start and that read would arrive
            // twice (once from the log, once from the stream).
            let attach = d
                .attach_container(
                    &id,
                    Some(
                        AttachContainerOptionsBuilder::default()
                            .stream(true)
                            .stdout(true)
                            .stderr(true)
                            .logs(false)
                            .build(),
                    ),
                )
                .await
                .map_err(|e| EngineError::api("attaching to the container", e))?;
            match d.start_container(&id, None).await {
                Ok(()) => {
                    forward(attach.output, output).await;
                    break id;
                }
                Err(e) if memlock == Memlock::Unlimited && describe(&e).contains("rlimit") => {
                    let host = host_memlock();
                    let Memlock::Limit(s, h) = host else { unreachable!() };
                    log::warn!(
                        "the engine cannot raise RLIMIT_MEMLOCK (memlock=-1:-1 refused); using the host's limit {} instead",
                        if s < 0 { "unlimited".to_string() } else { format!("{s}:{h} bytes") }
                    );
                    self.remove_container(&id).await;
                    memlock = host;
                }
                Err(e) => return Err(EngineError::api("starting the container", e)),
            }
        };
        let code = self.wait(&id).await?;
        Ok((id, code))
    }

    async fn wait(&self, id: &str) -> Result<i32, EngineError> {
        let mut w = self
            .engine
            .docker
            .wait_container(id, Some(WaitContainerOptionsBuilder::default().condition("not-running").build()));
        match w.next().await {
            Some(Ok(r)) => Ok(r.status_code as i32),
            // bollard reports a non-zero exit as an error carrying the code.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code as i32),
            Some(Err(e)) => Err(EngineError::api("waiting for the container", e)),
            None => Err(EngineError::Invalid("the engine closed the wait request without an exit code".into())),
        }
    }

    async fn run(&self, opts: &RunOptions) -> Result<i32, EngineError> {
        self.require_image(&opts.image).await?;
        let memlock = if opts.gpu.memlock_unlimited { Memlock::Unlimited } else { Memlock::Unset };
        let (id, code) =
            self.launch(&|m| opts.body(m), memlock, &opts.copy_in, opts.copy_stamp(), Output::Passthrough).await?;
        for (src, dst) in &opts.copy_out {
            copy::copy_out(&self.engine.docker, &id, src, dst).await?;
        }
        self.remove_container(&id).await;
        Ok(code)
    }
}

/// Write the container's output as it arrives.
async fn forward(
    mut stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
    output: Output,
) {
    while let Some(item) = stream.next().await {
        let item = match item {
            Ok(item) => item,
            // Say so rather than cut the output short in silence.
            Err(e) => {
                log::warn!("the container's output stream broke: {}", super::describe(&e));
                break;
            }
        };
        let (to_err, bytes) = match item {
            LogOutput::StdErr { message } => (true, message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => (output == Output::Stderr, message),
            LogOutput::StdIn { .. } => continue,
        };
        if to_err {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(&bytes);
            let _ = e.flush();
        } else {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(&bytes);
            let _ = o.flush();
        }
    }
}

/// A short suffix unique within this process.
pub(crate) fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{:x}{}", t, N.fetch_add(1, Ordering::Relaxed))
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
