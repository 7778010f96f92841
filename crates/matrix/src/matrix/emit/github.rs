//! A GitHub Actions workflow: one job per group of cells with a matrix
//! `include` of their ids (each job at most 256 cells, GitHub's limit per
//! matrix; more become more jobs), `fail-fast: false` so one failing cell
//! stops no other, and a `collect` job that gathers every product into a
//! wheelhouse artifact whatever failed. Each cell's step sets
//! `QUARRY_MATRIX_CELL` from the matrix and runs `quarry matrix run`.

use super::{groups, sh_quote, yaml_str, EmitOptions};
use crate::matrix::definition::Matrix;
use crate::matrix::plan::MatrixPlan;

/// GitHub's limit of jobs in one matrix.
pub const MAX_MATRIX: usize = 256;

pub(super) fn workflow(m: &Matrix, plan: &MatrixPlan, o: &EmitOptions) -> String {
    let mut s = format!(
        "# quarry matrix emit --format github: {} of {} cells of `{}`\nname: {}\non:\n  workflow_dispatch:\npermissions:\n  contents: read\njobs:\n",
        plan.to_run,
        plan.cells.len(),
        m.name,
        yaml_str(&format!("quarry matrix {}", m.name))
    );
    let mut jobs = Vec::new();
    for (needs, ids) in groups(plan) {
        let runs_on = if needs.gpus > 0 { &o.gpu_runs_on } else { &o.runs_on };
        for chunk in ids.chunks(MAX_MATRIX) {
            let job = format!("cells-{}", jobs.len() + 1);
            s.push_str(&format!("  {job}:\n    runs-on: {}\n    timeout-minutes: 360\n", yaml_str(runs_on)));
            s.push_str("    strategy:\n      fail-fast: false\n");
            if let Some(p) = o.parallel {
                s.push_str(&format!("      max-parallel: {p}\n"));
            }
            s.push_str("      matrix:\n        include:\n");
            for id in chunk {
                s.push_str(&format!("          - cell: {}\n", yaml_str(id)));
            }
            s.push_str(&format!(
                "    env:\n      QUARRY_CACHE_REGISTRY: {}\n    steps:\n      - uses: actions/checkout@v5\n      - name: quarry matrix run\n        env:\n          QUARRY_MATRIX_CELL: ${{{{ matrix.cell }}}}\n        run: {}\n",
                yaml_str(&plan.registry),
                yaml_str(&format!("{} matrix run {} -o {}", sh_quote(&o.quarry), sh_quote(&o.matrix_path), sh_quote(&o.out))),
            ));
            jobs.push(job);
        }
    }
    let needs: Vec<String> = jobs.iter().map(|j| yaml_str(j)).collect();
    s.push_str(&format!("  collect:\n    runs-on: {}\n    if: ${{{{ always() }}}}\n", yaml_str(&o.runs_on)));
    if !needs.is_empty() {
        s.push_str(&format!("    needs: [{}]\n", needs.join(", ")));
    }
    s.push_str(&format!(
        "    env:\n      QUARRY_CACHE_REGISTRY: {}\n    steps:\n      - uses: actions/checkout@v5\n      - name: quarry matrix collect\n        run: {}\n      - uses: actions/upload-artifact@v6\n        if: ${{{{ always() }}}}\n        with:\n          name: wheelhouse\n          path: wheelhouse\n",
        yaml_str(&plan.registry),
        yaml_str(&format!("{} matrix collect {} -o wheelhouse", sh_quote(&o.quarry), sh_quote(&o.matrix_path))),
    ));
    s
}
