//! The container lifecycle shared by runs, step layers, wheel and kernel
//! builds: create -> copy in -> attach -> start -> stream output -> wait,
//! inside a guarded session that removes every container and temporary
//! image it made on success, error, SIGINT and SIGTERM.
//!
//! Where engines differ, this is where quarry copes: limits the engine's
//! runtime cannot apply are lowered and retried (see `limits`); CDI device
//! names go to engines that resolve them and become device nodes for those
//! that do not (see `cdi`); Podman takes CDI names only through its own
//! endpoint (see `podman`).

use super::copy::{self, CopyIn, Stamp};
use super::{describe, is_not_found, Engine, EngineError};
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;
use std::cell::RefCell;
use std::io::Write;

/// The memlock limit asked of the engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Memlock {
    Unset,
    Unlimited,
}

/// Where a container's output goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Output {
    /// stdout to stdout, stderr to stderr.
    Passthrough,
    /// Both to stderr (build steps: stdout is for `--json`).
    Stderr,
}

/// Containers and images created while a guarded operation runs; all are
/// removed when it ends, however it ends.
pub struct Session<'e> {
    pub engine: &'e Engine,
    containers: RefCell<Vec<String>>,
    images: RefCell<Vec<String>>,
}

impl Engine {
    /// Run `work` with SIGINT/SIGTERM caught; afterwards (success, error or
    /// signal) remove what it created. `work` fails with the caller's own
    /// error type, which a signal becomes through `From<EngineError>`.
    pub fn guarded<T, E: From<EngineError>>(&self, work: impl AsyncFnOnce(&Session) -> Result<T, E>) -> Result<T, E> {
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
                        signal(SignalKind::interrupt()).map_err(sig_err).map_err(E::from)?,
                        signal(SignalKind::terminate()).map_err(sig_err).map_err(E::from)?,
                    )
                }
            };
            let session =
                Session { engine: self, containers: RefCell::new(Vec::new()), images: RefCell::new(Vec::new()) };
            let r = tokio::select! {
                biased;
                _ = int.recv() => Err(EngineError::Interrupted("SIGINT").into()),
                _ = term.recv() => Err(EngineError::Interrupted("SIGTERM").into()),
                r = work(&session) => r,
            };
            session.cleanup().await;
            self.signals.replace(Some((int, term)));
            r
        })
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

    /// Create, copy in, attach, start, stream the output and wait. Returns
    /// the container id (still present) and its exit code.
    pub async fn launch(
        &self,
        body: &dyn Fn(Memlock) -> ContainerCreateBody,
        memlock: Memlock,
        copy_in: &[CopyIn],
        stamp: Stamp,
        output: Output,
    ) -> Result<(String, i32), EngineError> {
        let id = self.start(body(memlock), copy_in, stamp, Some(output)).await?;
        let code = self.wait(&id).await?;
        Ok((id, code))
    }

    /// Create a container (tracked), copy `copy_in` into it and start it;
    /// with `output`, its output is streamed there until it ends. A limit
    /// the engine's runtime refuses is lowered and the container made again.
    pub async fn start(
        &self,
        body: ContainerCreateBody,
        copy_in: &[CopyIn],
        stamp: Stamp,
        output: Option<Output>,
    ) -> Result<String, EngineError> {
        let d = &self.engine.docker;
        let mut body = body;
        self.engine.adapt_gpu_devices(&mut body).await?;
        loop {
            let mut attempt = body.clone();
            self.engine.limits.apply(&mut attempt);
            let id = match self.create(&attempt).await {
                Ok(id) => id,
                Err(EngineError::Api { detail, .. }) if self.engine.limits.step_down_ipc(&attempt, &detail) => continue,
                Err(e) => return Err(e),
            };
            copy::copy_in(d, &id, copy_in.to_vec(), stamp).await?;
            // Attached before the start, streams only: the engine subscribes
            // to the output before it answers, so nothing is missed. With
            // `logs` it would also replay the log file after answering, and
            // output written between the start and that read would arrive
            // twice (once from the log, once from the stream). Podman
            // prepares the container (and meets refused limits) here.
            let attached = match output {
                None => None,
                Some(_) => {
                    let opts = AttachContainerOptionsBuilder::default()
                        .stream(true)
                        .stdout(true)
                        .stderr(true)
                        .logs(false)
                        .build();
                    match d.attach_container(&id, Some(opts)).await {
                        Ok(a) => Some(a),
                        Err(e) => {
                            self.retry_or_fail(&id, &attempt, e, "attaching to the container").await?;
                            continue;
                        }
                    }
                }
            };
            match d.start_container(&id, None).await {
                Ok(()) => {
                    if let (Some(a), Some(out)) = (attached, output) {
                        forward(a.output, out).await;
                    }
                    return Ok(id);
                }
                Err(e) => self.retry_or_fail(&id, &attempt, e, "starting the container").await?,
            }
        }
    }

    /// After a failed attach or start: when the engine refused a limit and
    /// a lower one is left to try, remove the container and say retry (Ok).
    async fn retry_or_fail(
        &self,
        id: &str,
        body: &ContainerCreateBody,
        err: bollard::errors::Error,
        what: &str,
    ) -> Result<(), EngineError> {
        let msg = describe(&err);
        let limits = &self.engine.limits;
        let retry = match super::limits::refused(&msg) {
            Some(name) => limits.step_down(name, body, &msg),
            None => limits.step_down_ipc(body, &msg),
        };
        if !retry {
            return Err(self.engine.explain_start_error(what, msg));
        }
        self.remove_container(id).await;
        Ok(())
    }

    /// Create a container from `body` (tracked for removal).
    async fn create(&self, body: &ContainerCreateBody) -> Result<String, EngineError> {
        let name = format!("quarry-{}-{}", std::process::id(), unique_suffix());
        let image = body.image.clone().unwrap_or_default();
        let created = if self.engine.creates_through_libpod(body) {
            super::podman::create(&self.engine.docker, &name, body).await
        } else {
            let opts = CreateContainerOptionsBuilder::default().name(&name).build();
            self.engine.docker.create_container(Some(opts), body.clone()).await
        };
        let created = created.map_err(|e| {
            if is_not_found(&e) {
                EngineError::NoSuchImage(image.clone())
            } else {
                self.engine.explain_start_error(&format!("creating a container from `{image}`"), describe(&e))
            }
        })?;
        self.track_container(&created.id);
        Ok(created.id)
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
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{:x}{}", t, N.fetch_add(1, Ordering::Relaxed))
}
