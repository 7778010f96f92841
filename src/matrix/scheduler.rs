//! What the scheduler running a cell tells it: which cell (an index, or a
//! GitHub matrix value) and, under Slurm, which GPUs.
//!
//! The index: `SLURM_ARRAY_TASK_ID` (a Slurm job array), `JOB_COMPLETION_INDEX`
//! (a Kubernetes Indexed Job); the cell itself: `QUARRY_MATRIX_CELL` (what
//! the emitted GitHub workflow sets from its matrix). An index counts in
//! `QUARRY_MATRIX_CELLS` (the ids an emitted job description lists: the
//! cells not done when it was emitted) when that is set, else in the whole
//! matrix.
//!
//! GPUs: Slurm 22.05, for a job given `gpu` gres whose gres.conf lists
//! device files (`Name=gpu File=/dev/dri/renderD128`), sets
//! `SLURM_JOB_GPUS`, `CUDA_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL` and
//! `ROCR_VISIBLE_DEVICES` to the global indexes of the gres it allocated
//! (with device cgroups, CUDA_VISIBLE_DEVICES is renumbered from 0;
//! SLURM_JOB_GPUS never is). quarry reads `SLURM_JOB_GPUS` and maps each
//! index to the gres.conf `File=` of that index (gres.conf beside
//! `SLURM_CONF`, else /etc/slurm/gres.conf), so only those render nodes go
//! into the container.

use super::cells::Cell;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Id(String),
    Index(usize),
}

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("which cell? give --cell ID or --index N, or run under a scheduler that sets SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or QUARRY_MATRIX_CELL")]
    NoCell,
    #[error("`{var}={value}` is not a cell index (a whole number from 0)")]
    BadIndex { var: String, value: String },
    #[error("cell index {index} is out of range: the list has {count} cells ({source_list})")]
    OutOfRange { index: usize, count: usize, source_list: String },
    #[error("no cell `{id}` in the matrix (its cells: {known})")]
    NoSuchCell { id: String, known: String },
    #[error("SLURM_JOB_GPUS=`{0}` is not a list of gres indexes")]
    BadGpus(String),
    #[error("Slurm gave gpu gres index {index}, but `{gres}` lists {count} gpu device file(s); list one `Name=gpu File=...` per GPU")]
    GresIndex { index: usize, gres: String, count: usize },
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The cell the scheduler names, when one does.
pub fn selector_from_env() -> Result<Option<Selector>, SchedulerError> {
    if let Some(id) = env("QUARRY_MATRIX_CELL") {
        return Ok(Some(Selector::Id(id.trim().to_string())));
    }
    for var in ["SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"] {
        if let Some(v) = env(var) {
            let index = v.trim().parse().map_err(|_| SchedulerError::BadIndex { var: var.into(), value: v.clone() })?;
            return Ok(Some(Selector::Index(index)));
        }
    }
    Ok(None)
}

/// The cell `selector` names among `cells`.
pub fn pick<'a>(cells: &'a [Cell], selector: &Selector) -> Result<&'a Cell, SchedulerError> {
    let by_id = |id: &str| {
        cells.iter().find(|c| c.id == id).ok_or_else(|| SchedulerError::NoSuchCell {
            id: id.to_string(),
            known: cells.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(", "),
        })
    };
    match selector {
        Selector::Id(id) => by_id(id),
        Selector::Index(i) => match env("QUARRY_MATRIX_CELLS") {
            Some(list) => {
                let ids: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
                let id = ids.get(*i).ok_or(SchedulerError::OutOfRange {
                    index: *i,
                    count: ids.len(),
                    source_list: "QUARRY_MATRIX_CELLS".into(),
                })?;
                by_id(id)
            }
            None => cells.get(*i).ok_or(SchedulerError::OutOfRange {
                index: *i,
                count: cells.len(),
                source_list: "the matrix".into(),
            }),
        },
    }
}

/// The gres.conf Slurm reads.
fn gres_conf() -> PathBuf {
    match env("SLURM_CONF") {
        Some(c) => Path::new(&c).with_file_name("gres.conf"),
        None => PathBuf::from("/etc/slurm/gres.conf"),
    }
}

/// `File=` values of `Name=gpu` lines, ranges expanded
/// (`/dev/dri/renderD[128-129]`), in order: gres index i is the i-th.
pub fn gpu_files(gres_conf: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in gres_conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut name = None;
        let mut file = None;
        for field in line.split_whitespace() {
            if let Some((k, v)) = field.split_once('=') {
                match k.to_ascii_lowercase().as_str() {
                    "name" => name = Some(v.to_string()),
                    "file" => file = Some(v.to_string()),
                    _ => {}
                }
            }
        }
        if let (Some("gpu"), Some(f)) = (name.as_deref(), file) {
            out.extend(expand_range(&f));
        }
    }
    out
}

/// `renderD[128-130]` -> renderD128, renderD129, renderD130 (one range, as gres.conf writes).
fn expand_range(f: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (f.find('['), f.find(']')) else { return vec![f.to_string()] };
    let (head, inner, tail) = (&f[..open], &f[open + 1..close], &f[close + 1..]);
    let mut out = Vec::new();
    for part in inner.split(',') {
        match part.split_once('-').map(|(a, b)| (a.parse::<u32>(), b.parse::<u32>())) {
            Some((Ok(a), Ok(b))) => out.extend((a..=b).map(|n| format!("{head}{n}{tail}"))),
            _ => out.push(format!("{head}{part}{tail}")),
        }
    }
    out
}

/// The GPUs Slurm gave this job, as device names quarry's `--gpu-devices`
/// takes (`renderD129`), or None when not under Slurm with gpu gres.
pub fn slurm_gpus() -> Result<Option<Vec<String>>, SchedulerError> {
    let Some(list) = env("SLURM_JOB_GPUS") else { return Ok(None) };
    let indexes: Vec<usize> = list
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| SchedulerError::BadGpus(list.clone()))?;
    let path = gres_conf();
    let files = std::fs::read_to_string(&path).map(|t| gpu_files(&t)).unwrap_or_default();
    let mut out = Vec::new();
    for i in indexes {
        match files.get(i) {
            Some(f) => out.push(Path::new(f).file_name().unwrap_or_default().to_string_lossy().into_owned()),
            // Without gres.conf (AutoDetect), the i-th render node.
            None if files.is_empty() => out.push(i.to_string()),
            None => {
                return Err(SchedulerError::GresIndex {
                    index: i,
                    gres: path.display().to_string(),
                    count: files.len(),
                })
            }
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_files_in_index_order() {
        let conf = "# two GPUs\nName=gpu File=/dev/dri/renderD128\nName=gpu Type=mi300 File=/dev/dri/renderD[129-130]\nName=mps Count=100\n";
        assert_eq!(gpu_files(conf), ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD130"]);
    }

    #[test]
    fn cells_by_id_or_index() {
        let cell =
            |id: &str, index| Cell { id: id.into(), index, values: Default::default(), needs: Default::default() };
        let cells = vec![cell("a", 0), cell("b", 1)];
        assert_eq!(pick(&cells, &Selector::Id("b".into())).unwrap().index, 1);
        assert!(matches!(pick(&cells, &Selector::Id("c".into())), Err(SchedulerError::NoSuchCell { .. })));
        // Not reading QUARRY_MATRIX_CELLS here: the environment is the process's.
        if std::env::var_os("QUARRY_MATRIX_CELLS").is_none() {
            assert_eq!(pick(&cells, &Selector::Index(0)).unwrap().id, "a");
            assert!(matches!(pick(&cells, &Selector::Index(2)), Err(SchedulerError::OutOfRange { .. })));
        }
    }
}
