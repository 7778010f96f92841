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
//! The GPUs a scheduler gave are read where every container with GPUs is
//! planned, `engine::allocation`, for every command alike.

use super::cells::Cell;

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

#[cfg(test)]
mod tests {
    use super::*;

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
