//! Long-lived containers for multi-command jobs (wheel builds): started
//! idle (`sleep infinity`), commands run in them with the exec API, files
//! copied in and out through the archive API. They belong to a
//! [`Session`], so they are removed however the job ends.

use super::copy::{self, CopyIn, Stamp};
use super::run::{Memlock, RunOptions, Session};
use super::EngineError;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use std::io::Write;
use std::path::Path;

/// Where an exec'd command's output goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExecOutput {
    /// stdout and stderr both to quarry's stderr, as they arrive.
    Stderr,
    /// stdout captured (returned), stderr to quarry's stderr.
    Capture,
}

impl Session<'_> {
    /// Create and start a container that idles until removed; `opts.cmd` is
    /// replaced by `sleep infinity`. Returns its id.
    pub async fn start_idle(&self, opts: &RunOptions, copy_in: Vec<CopyIn>) -> Result<String, EngineError> {
        self.require_image(&opts.image).await?;
        let mut opts = opts.clone();
        opts.cmd = vec!["sleep".into(), "infinity".into()];
        self.start(opts.body(Memlock::Unset), &copy_in, Stamp::default(), None).await
    }

    /// Run `cmd` in the running container `id`; returns its exit code and,
    /// with [`ExecOutput::Capture`], its stdout.
    pub async fn exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        env: Vec<String>,
        workdir: Option<&str>,
        output: ExecOutput,
    ) -> Result<(i64, Vec<u8>), EngineError> {
        self.exec_as(id, None, cmd, env, workdir, output).await
    }

    /// [`Session::exec`] as `user` (NAME, UID or UID:GID) instead of the container's.
    pub async fn exec_as(
        &self,
        id: &str,
        user: Option<&str>,
        cmd: Vec<String>,
        env: Vec<String>,
        workdir: Option<&str>,
        output: ExecOutput,
    ) -> Result<(i64, Vec<u8>), EngineError> {
        let d = &self.engine.docker;
        let what = cmd.join(" ");
        let created = d
            .create_exec(
                id,
                CreateExecOptions {
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    env: Some(env),
                    cmd: Some(cmd),
                    working_dir: workdir.map(str::to_string),
                    user: user.map(str::to_string),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| EngineError::api(format!("running `{what}` in the container"), e))?;
        let mut captured = Vec::new();
        match d
            .start_exec(&created.id, None)
            .await
            .map_err(|e| EngineError::api(format!("running `{what}` in the container"), e))?
        {
            StartExecResults::Attached { output: mut out, .. } => {
                while let Some(item) = out.next().await {
                    let item = match item {
                        Ok(item) => item,
                        // Say so rather than cut the output short in silence.
                        Err(e) => {
                            log::warn!("the container's output stream broke: {}", super::describe(&e));
                            break;
                        }
                    };
                    match item {
                        LogOutput::StdOut { message } | LogOutput::Console { message }
                            if output == ExecOutput::Capture =>
                        {
                            captured.extend_from_slice(&message)
                        }
                        LogOutput::StdOut { message }
                        | LogOutput::Console { message }
                        | LogOutput::StdErr { message } => {
                            let mut e = std::io::stderr().lock();
                            let _ = e.write_all(&message);
                            let _ = e.flush();
                        }
                        LogOutput::StdIn { .. } => {}
                    }
                }
            }
            StartExecResults::Detached => {}
        }
        let inspect = d
            .inspect_exec(&created.id)
            .await
            .map_err(|e| EngineError::api(format!("reading the exit code of `{what}`"), e))?;
        let code = inspect
            .exit_code
            .ok_or_else(|| EngineError::Invalid(format!("the engine gave no exit code for `{what}`")))?;
        Ok((code, captured))
    }

    /// Copy host files into the running container `id` (see [`copy::copy_in`]).
    pub async fn copy_in(&self, id: &str, items: Vec<CopyIn>) -> Result<(), EngineError> {
        copy::copy_in(&self.engine.docker, id, items, Stamp::default()).await
    }

    /// Copy a container path out to the host (see [`copy::copy_out`]).
    pub async fn copy_out(&self, id: &str, src: &str, dest: &Path) -> Result<(), EngineError> {
        copy::copy_out(&self.engine.docker, id, src, dest).await
    }
}
