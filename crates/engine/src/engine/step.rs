//! Step layers: a script run in a container of the image built so far.
//! The partial image is loaded (skipping the layers the engine has), the
//! declared inputs are copied in, the script runs (no network unless the
//! definition asks), and on success the container is committed; the saved
//! image's last layer (the container's filesystem diff, whiteouts included)
//! is read back into a layer tree, which the build packs like any layer.
//! The container and both temporary images are removed in every case.
//!
//! The mount points an engine makes in the container's own filesystem are
//! not part of a step's work and are left out of its diff: Podman leaves
//! `/run/.containerenv`, empty `/etc/hosts`, `/etc/hostname`,
//! `/etc/resolv.conf` (their contents are bind mounts, never written to
//! the container) and an `/etc/mtab` link there; Docker keeps them in a
//! layer of its own. So a step gives the same layer on either engine.

use super::copy::{CopyIn, Stamp};
use super::run::{labels, unique_suffix, Memlock, Output, Session};
use super::{Engine, EngineError};
use crate::definition::RunDef;
use crate::layer::archive::{read_into, Placement};
use crate::layer::Tree;
use crate::oci::Digest;
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::CommitContainerOptionsBuilder;
use futures_util::StreamExt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// One step to run.
pub struct StepRequest<'a> {
    /// The layer's name and the file defining it, for messages.
    pub layer: &'a str,
    pub file: &'a Path,
    /// The OCI layout of the image built so far.
    pub layout: &'a Path,
    pub run: &'a RunDef,
    /// Inputs, already checked against their pins.
    pub inputs: Vec<CopyIn>,
    /// Copied-in files get this mtime (the build's SOURCE_DATE_EPOCH).
    pub epoch: u64,
    /// Where the diff is spooled; it must outlive the returned tree.
    pub spool: &'a Path,
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("{file}: layer `{layer}`: the step script failed with exit code {code} (its output is above); no layer was made and its container was removed")]
    Failed { file: String, layer: String, code: i32 },
    #[error("{file}: layer `{layer}`: {err}")]
    Engine { file: String, layer: String, err: EngineError },
}

impl StepError {
    /// 130/143 after a signal, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            StepError::Engine { err, .. } => err.exit_code(),
            StepError::Failed { .. } => 1,
        }
    }
}

impl Engine {
    /// Run a step; returns its diff as a tree whose contents live in `req.spool`.
    pub fn run_step(&self, req: StepRequest) -> Result<Tree, StepError> {
        let wrap = |err| StepError::Engine { file: req.file.display().to_string(), layer: req.layer.to_string(), err };
        let mut code = 0;
        let tar = self.guarded(async |s| step(s, &req, &mut code).await).map_err(wrap)?;
        let Some(tar) = tar else {
            return Err(StepError::Failed { file: req.file.display().to_string(), layer: req.layer.to_string(), code });
        };
        let mut tree = Tree::new();
        let place = Placement { allow_devices: true, ..Default::default() };
        read_into(&tar, &mut tree, &place, req.spool)
            .map_err(|e| wrap(EngineError::Invalid(format!("reading the step's diff: {e}"))))?;
        drop_engine_mount_points(&mut tree);
        Ok(tree)
    }
}

/// The step's lifecycle inside a guarded session. `None` when the script failed.
async fn step(s: &Session<'_>, req: &StepRequest<'_>, code: &mut i32) -> Result<Option<PathBuf>, EngineError> {
    let d = &s.engine.docker;
    let tag = format!("quarry-step-{}-{}:partial", std::process::id(), unique_suffix());
    s.track_image(&tag);
    s.engine.load_async(req.layout, None, &tag, req.spool).await?;

    let run = req.run;
    let shell = run.shell.clone().unwrap_or_else(|| vec!["/bin/sh".into(), "-ec".into()]);
    let mut cmd = shell;
    cmd.push(run.script.clone());
    let env: Vec<String> = run.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let body = |_m: Memlock| ContainerCreateBody {
        image: Some(tag.clone()),
        // The shell is the whole command: an image entrypoint must not wrap it.
        entrypoint: Some(vec![]),
        cmd: Some(cmd.clone()),
        env: (!env.is_empty()).then(|| env.clone()),
        user: run.user.clone(),
        working_dir: run.workdir.clone(),
        labels: Some(labels()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        host_config: Some(HostConfig {
            network_mode: Some(if run.network { "bridge" } else { "none" }.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let stamp = Stamp { owner: (0, 0), mtime: Some(req.epoch) };
    let (id, exit) = s.launch(&body, Memlock::Unset, &req.inputs, stamp, Output::Stderr).await?;
    if exit != 0 {
        *code = exit;
        return Ok(None);
    }
    let committed = d
        .commit_container(
            CommitContainerOptionsBuilder::default().container(&id).pause(false).build(),
            ContainerConfig::default(),
        )
        .await
        .map_err(|e| EngineError::api("committing the step's container", e))?;
    let image_id = committed.id;
    s.track_image(&image_id);
    s.remove_container(&id).await;
    let inspect =
        d.inspect_image(&image_id).await.map_err(|e| EngineError::api("inspecting the committed step image", e))?;
    let target = inspect
        .root_fs
        .and_then(|r| r.layers)
        .and_then(|l| l.last().cloned())
        .ok_or_else(|| EngineError::Invalid("the committed step image has no layers".into()))?;

    // The saved image holds every layer; keep the one whose digest is the
    // commit's diff_id (works for the legacy `ID/layer.tar` save format and
    // the OCI `blobs/sha256/` one alike).
    let stream = d.export_image(&image_id).map(|r| r.map_err(|e| io::Error::other(super::describe(&e))));
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(Box::pin(stream)));
    let spool = req.spool.to_path_buf();
    let found = tokio::task::spawn_blocking(move || find_layer(reader, &target, &spool))
        .await
        .map_err(|e| EngineError::Invalid(format!("reading the saved step image: {e}")))??;
    Ok(Some(found))
}

/// Whether `path` in a step's diff is a mount point the engine made.
fn is_engine_mount_point(path: &[u8], node: &crate::layer::Node) -> bool {
    use crate::layer::Kind;
    match (path, &node.kind) {
        (b"run/.containerenv", _) => true,
        (b"etc/hosts" | b"etc/hostname" | b"etc/resolv.conf", Kind::File { size: 0, .. }) => true,
        (b"etc/mtab", Kind::Symlink(target)) => target == b"/proc/mounts",
        _ => false,
    }
}

/// Remove the engine's mount points from a step's diff (see the module
/// docs), and the directories that held nothing else.
fn drop_engine_mount_points(tree: &mut Tree) {
    let found: Vec<Vec<u8>> =
        tree.iter().filter(|(p, n)| is_engine_mount_point(p, n)).map(|(p, _)| p.clone()).collect();
    for path in &found {
        tree.remove(path);
    }
    for path in &found {
        let Some(slash) = path.iter().rposition(|&b| b == b'/') else { continue };
        let dir = &path[..slash];
        let mut below = dir.to_vec();
        below.push(b'/');
        if tree.get(dir).is_some_and(|n| n.kind.is_dir()) && !tree.iter().any(|(p, _)| p.starts_with(&below)) {
            tree.remove(dir);
        }
    }
}

/// Read a saved image (tar) and keep the member whose sha256 is `diff_id`,
/// as a file in `dir`. An empty diff may be stored only as a link to another
/// empty layer, so it is recognised by its digest.
fn find_layer(r: impl Read, diff_id: &str, dir: &Path) -> Result<PathBuf, EngineError> {
    let bad = |e: io::Error| EngineError::Invalid(format!("reading the saved step image: {e}"));
    let want = Digest::parse(diff_id).map_err(|e| EngineError::Invalid(format!("the step image's diff_id: {e}")))?;
    let out = dir.join(format!("step-{}.tar", want.hex()));
    let mut archive = tar::Archive::new(r);
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        if !entry.header().entry_type().is_file() || entry.size() < 1024 {
            continue;
        }
        let mut tmp =
            tempfile::NamedTempFile::new_in(dir).map_err(|e| EngineError::io("cannot create a file in", dir, e))?;
        let mut w = crate::oci::digest::HashingWriter::new(io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut()));
        io::copy(&mut entry, &mut w).map_err(bad)?;
        let (mut f, digest, _) = w.finish();
        f.flush().map_err(bad)?;
        drop(f);
        if digest == want {
            tmp.persist(&out).map_err(|e| EngineError::io("cannot keep", &out, e.error))?;
            return Ok(out);
        }
    }
    let empty = vec![0u8; 1024];
    if Digest::of_bytes(&empty) == want {
        std::fs::write(&out, &empty).map_err(|e| EngineError::io("cannot write", &out, e))?;
        return Ok(out);
    }
    Err(EngineError::Invalid(format!("the saved step image has no layer with diff_id {diff_id}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::Node;

    #[test]
    fn podman_mount_points_leave_the_diff() {
        let mut t = Tree::new();
        t.insert(b"etc".to_vec(), Node::dir(0o755)).unwrap();
        t.insert(b"etc/hosts".to_vec(), Node::bytes(Vec::new(), 0o644)).unwrap();
        t.insert(b"etc/stepped".to_vec(), Node::bytes(b"built\n".to_vec(), 0o644)).unwrap();
        t.insert(b"run".to_vec(), Node::dir(0o755)).unwrap();
        t.insert(b"run/.containerenv".to_vec(), Node::bytes(Vec::new(), 0o644)).unwrap();
        t.insert(b"etc/resolv.conf".to_vec(), Node::bytes(b"nameserver 1.1.1.1\n".to_vec(), 0o644)).unwrap();
        drop_engine_mount_points(&mut t);
        let left: Vec<String> = t.iter().map(|(p, _)| String::from_utf8_lossy(p).into_owned()).collect();
        // A resolv.conf with content was written by the step: it stays.
        assert_eq!(left, ["etc", "etc/resolv.conf", "etc/stepped"]);
    }
}
