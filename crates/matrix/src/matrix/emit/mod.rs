//! `quarry matrix emit`: the scheduler's own job description for the cells
//! not done yet, ready to submit. quarry schedules nothing: each task runs
//! `quarry matrix run` for the cell its scheduler's index or matrix value
//! names (`QUARRY_MATRIX_CELLS` lists the emitted cells' ids in index
//! order, so an index means the same cell whatever is done meanwhile).
//! Cells with different needs (GPUs, CPUs, memory) go to separate arrays,
//! Jobs or workflow jobs.

mod github;
mod kubernetes;
mod slurm;

use super::definition::{Matrix, Needs};
use super::plan::MatrixPlan;
use std::collections::BTreeMap;

/// The schedulers quarry writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Slurm,
    Kubernetes,
    Github,
}

/// How the emitted description runs quarry.
#[derive(Debug, Clone)]
pub struct EmitOptions {
    /// The quarry command on the scheduler's machines.
    pub quarry: String,
    /// How many cells run at once (None: as many as the scheduler likes).
    pub parallel: Option<usize>,
    /// The matrix file as the tasks see it.
    pub matrix_path: String,
    /// Where each task puts its products and report.
    pub out: String,
    /// Slurm: where task logs go.
    pub log_dir: String,
    /// Kubernetes: the image with quarry in it, and the secret with the
    /// registry's credentials (a `kubernetes.io/dockerconfigjson` secret).
    pub runner_image: String,
    pub registry_secret: String,
    /// GitHub: the runners for cells without and with GPUs.
    pub runs_on: String,
    pub gpu_runs_on: String,
}

/// The emitted cells, grouped by what they need (ids in index order).
pub(crate) fn groups(plan: &MatrixPlan) -> Vec<(Needs, Vec<String>)> {
    let mut g: BTreeMap<Needs, Vec<String>> = BTreeMap::new();
    for c in plan.cells.iter().filter(|c| !c.done) {
        g.entry(c.needs.clone()).or_default().push(c.id.clone());
    }
    g.into_iter().collect()
}

/// The quarry a Slurm task runs when `--quarry` is not given: `quarry` when
/// that is this very binary on PATH, else this binary's absolute path (a
/// cluster's nodes share the file systems the login node has; a quarry built
/// in a checkout, `target/release/quarry`, is on no PATH).
pub fn slurm_quarry() -> String {
    let Ok(me) = std::env::current_exe().and_then(std::fs::canonicalize) else { return "quarry".into() };
    match on_path("quarry").and_then(|p| std::fs::canonicalize(p).ok()) {
        Some(found) if found == me => "quarry".into(),
        _ => me.display().to_string(),
    }
}

/// Where a command would be found here: itself when it names a path, else
/// the first executable of that name on PATH.
pub fn on_path(command: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if command.contains('/') {
        let p = std::path::PathBuf::from(command);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(command)).find(|p| runnable(p))
}

/// The matrix file's path relative to the root of the git checkout that
/// holds it: what a GitHub runner, which starts in its own checkout of the
/// repository, can open.
pub fn path_in_checkout(file: &std::path::Path) -> Result<String, EmitError> {
    let abs = std::path::absolute(file)
        .map_err(|e| EmitError::Path { file: file.display().to_string(), message: e.to_string() })?;
    let root = abs.ancestors().skip(1).find(|d| d.join(".git").exists()).ok_or_else(|| EmitError::Path {
        file: file.display().to_string(),
        message: "is not in a git checkout, and a GitHub runner sees only its checkout of the repository: commit the matrix file to the repository, or give --matrix-path".into(),
    })?;
    Ok(abs.strip_prefix(root).expect("an ancestor").display().to_string())
}

/// Why a description cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("matrix file `{file}` {message}")]
    Path { file: String, message: String },
}

/// A string as a single-quoted shell word.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A string as a double-quoted YAML scalar (JSON's escaping is YAML's).
pub(crate) fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// The description for `format`.
pub fn emit(m: &Matrix, plan: &MatrixPlan, format: Format, o: &EmitOptions) -> String {
    match format {
        Format::Slurm => slurm::script(m, plan, o),
        Format::Kubernetes => kubernetes::manifest(m, plan, o),
        Format::Github => github::workflow(m, plan, o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a'b c"), "'a'\\''b c'");
        assert_eq!(yaml_str("x: \"y\""), "\"x: \\\"y\\\"\"");
    }
}
