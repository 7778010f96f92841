//! The scheduler's own output file of a cell, for `matrix collect` to name
//! when the cell left no product and no report (its task could not start
//! quarry, or died before quarry could report). The Slurm script `emit`
//! writes prints [`MARKER`] and the cell's id before it starts quarry, so
//! the output file of a cell is found by its content, whatever job and task
//! ids Slurm put in its name.

use std::path::{Path, PathBuf};

/// The line a task prints first: this, then the cell's id.
pub const MARKER: &str = "quarry matrix cell:";

/// Lines of a log shown for a missing cell.
const TAIL_LINES: usize = 5;

/// A cell's task log: where it is and how it ends.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskLog {
    pub path: PathBuf,
    pub tail: Vec<String>,
}

/// The newest log in `dir` named like the matrix's tasks (`quarry-NAME-*.out`)
/// that says it ran `cell`.
pub fn find(dir: &Path, matrix: &str, cell: &str) -> Option<TaskLog> {
    let prefix = format!("quarry-{matrix}-");
    let wanted = format!("{MARKER} {cell}");
    let mut found: Option<(std::time::SystemTime, PathBuf, String)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) || !name.ends_with(".out") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        if !text.lines().any(|l| l.trim_end() == wanted) {
            continue;
        }
        let modified = entry.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
        if found.as_ref().is_none_or(|(t, p, _)| (modified, entry.path()) > (*t, p.clone())) {
            found = Some((modified, entry.path(), text));
        }
    }
    let (_, path, text) = found?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].iter().map(|l| l.to_string()).collect();
    Some(TaskLog { path, tail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_log_that_names_the_cell_is_found() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(d.path().join(name), text).unwrap();
        write("quarry-m-7_0.out", &format!("{MARKER} a\n/x/quarry: No such file or directory\n"));
        write("quarry-m-7_1.out", &format!("{MARKER} b\nok\n"));
        write("other-7_0.out", &format!("{MARKER} a\nnot this matrix\n"));
        let log = find(d.path(), "m", "a").unwrap();
        assert_eq!(log.path, d.path().join("quarry-m-7_0.out"));
        assert_eq!(log.tail.last().unwrap(), "/x/quarry: No such file or directory");
        assert!(find(d.path(), "m", "c").is_none());
        assert!(find(&d.path().join("gone"), "m", "a").is_none());
    }
}
