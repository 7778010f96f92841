//! Engines behind `ssh://`: the docker CLI's way. Each connection is an
//! `ssh` process running `docker system dial-stdio` on the remote host,
//! which joins its stdin/stdout to the engine's socket; HTTP goes over that
//! pipe. The user's `ssh` runs, so their ssh config, keys, agent, known
//! hosts and jump hosts apply exactly as for `docker -H ssh://...`.
//!
//! bollard's own `ssh` feature starts a multiplexing master through the
//! `openssh` crate and takes no options beyond a key file; running the
//! user's `ssh` as the docker CLI does keeps behaviour identical and keeps
//! ssh's own message (host unreachable, key refused) for the error. What
//! ssh prints on stderr is kept for that message, never shown as it comes.

use super::endpoint::SshTarget;
use bollard::{BollardRequest, Docker};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncBufReadExt, Join};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The `ssh` command line for one connection (program first).
pub fn command_line(t: &SshTarget) -> Vec<String> {
    let mut cmd: Vec<String> = vec!["ssh".into(), "-o".into(), "ConnectTimeout=30".into(), "-T".into()];
    if let Some(u) = &t.user {
        cmd.extend(["-l".into(), u.clone()]);
    }
    if let Some(p) = t.port {
        cmd.extend(["-p".into(), p.to_string()]);
    }
    cmd.extend(["--".into(), t.host.clone(), "docker".into()]);
    if let Some(sock) = &t.socket {
        cmd.extend(["--host".into(), format!("unix://{sock}")]);
    }
    cmd.extend(["system".into(), "dial-stdio".into()]);
    cmd
}

/// What the ssh processes said on stderr, last lines kept.
#[derive(Clone, Default)]
pub struct SshStderr(Arc<Mutex<Vec<String>>>);

impl SshStderr {
    fn push(&self, line: String) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.push(line);
        let excess = l.len().saturating_sub(4);
        l.drain(..excess);
    }

    /// The last lines, joined; empty when ssh said nothing.
    pub fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).join("; ")
    }
}

#[derive(Clone)]
struct SshConnector {
    argv: Arc<Vec<String>>,
    stderr: SshStderr,
}

/// One connection: the ssh child and its stdout/stdin as one duplex stream.
struct SshStream {
    io: TokioIo<Join<ChildStdout, ChildStdin>>,
    _child: Child,
}

impl tower_service::Service<hyper::Uri> for SshConnector {
    type Response = SshStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<SshStream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Self::Future {
        let argv = self.argv.clone();
        let stderr = self.stderr.clone();
        Box::pin(async move {
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| io::Error::new(e.kind(), format!("cannot run `{}`: {e}", argv[0])))?;
            let (Some(out), Some(inp), Some(err)) = (child.stdout.take(), child.stdin.take(), child.stderr.take())
            else {
                return Err(io::Error::other("ssh started without its pipes"));
            };
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if !line.trim().is_empty() {
                        stderr.push(line.trim().to_string());
                    }
                }
            });
            Ok(SshStream { io: TokioIo::new(tokio::io::join(out, inp)), _child: child })
        })
    }
}

impl hyper::rt::Read for SshStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SshStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connection for SshStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// A bollard client whose connections are `ssh ... docker system dial-stdio`.
/// Idle connections are kept (a new one costs an ssh handshake).
pub fn connect(target: &SshTarget, timeout_secs: u64) -> Result<(Docker, SshStderr), bollard::errors::Error> {
    let stderr = SshStderr::default();
    let connector = SshConnector { argv: Arc::new(command_line(target)), stderr: stderr.clone() };
    // The body type is bollard's own (not nameable here): inferred from the request.
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let transport = move |req: BollardRequest| {
        let client = client.clone();
        async move { client.request(req).await.map_err(bollard::errors::Error::from) }
    };
    let authority = match target.port {
        Some(p) => format!("{}:{p}", target.host),
        None => target.host.clone(),
    };
    let docker = Docker::connect_with_custom_transport(
        transport,
        Some(format!("ssh://{authority}")),
        timeout_secs,
        bollard::API_DEFAULT_VERSION,
    )?;
    Ok((docker, stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docker_cli_command_line() {
        let t = SshTarget { user: Some("ci".into()), host: "gpu1".into(), port: Some(2222), socket: None };
        assert_eq!(
            command_line(&t).join(" "),
            "ssh -o ConnectTimeout=30 -T -l ci -p 2222 -- gpu1 docker system dial-stdio"
        );
        let t =
            SshTarget { user: None, host: "gpu1".into(), port: None, socket: Some("/run/podman/podman.sock".into()) };
        assert_eq!(
            command_line(&t).join(" "),
            "ssh -o ConnectTimeout=30 -T -- gpu1 docker --host unix:///run/podman/podman.sock system dial-stdio"
        );
    }
}
