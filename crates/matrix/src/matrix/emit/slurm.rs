//! A Slurm job array per group of cells: `sbatch --array=0-N%P` with
//! `--cpus-per-task`, `--mem` and `--gres=gpu:K` for GPU cells; each task
//! runs `quarry matrix run`, which reads `SLURM_ARRAY_TASK_ID` and the GPUs
//! Slurm gave it. One group is one sbatch script; several are a shell
//! script submitting each with `sbatch <<EOF`.

use super::{groups, sh_quote, EmitOptions};
use crate::matrix::definition::{Matrix, Needs};
use crate::matrix::plan::MatrixPlan;

fn one(m: &Matrix, plan: &MatrixPlan, needs: &Needs, ids: &[String], o: &EmitOptions) -> String {
    let n = ids.len();
    let throttle = o.parallel.map(|p| format!("%{p}")).unwrap_or_default();
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!("#SBATCH --job-name=quarry-{}\n", m.name));
    s.push_str(&format!("#SBATCH --array=0-{}{throttle}\n", n.saturating_sub(1)));
    s.push_str(&format!("#SBATCH --cpus-per-task={}\n", needs.cpus));
    s.push_str(&format!("#SBATCH --mem={}\n", needs.memory));
    if needs.gpus > 0 {
        s.push_str(&format!("#SBATCH --gres=gpu:{}\n", needs.gpus));
    }
    s.push_str(&format!("#SBATCH --output={}/quarry-{}-%A_%a.out\n", o.log_dir, m.name));
    s.push_str(&format!(
        "# quarry matrix emit --format slurm: {n} of {} cells of `{}` ({} done)\n",
        plan.cells.len(),
        m.name,
        plan.cells.iter().filter(|c| c.done).count()
    ));
    s.push_str("set -euo pipefail\n");
    s.push_str(&format!("export QUARRY_MATRIX_CELLS={}\n", sh_quote(&ids.join(","))));
    s.push_str(&format!("export QUARRY_CACHE_REGISTRY={}\n", sh_quote(&plan.registry)));
    // The cell's id first, before anything can fail: `matrix collect` finds a
    // missing cell's output file by it (see `task_logs`).
    s.push_str("IFS=, read -r -a cells <<< \"$QUARRY_MATRIX_CELLS\"\n");
    s.push_str(&format!("echo \"{} ${{cells[$SLURM_ARRAY_TASK_ID]}}\"\n", crate::matrix::task_logs::MARKER));
    s.push_str(&format!(
        "exec {} matrix run {} -o {}\n",
        sh_quote(&o.quarry),
        sh_quote(&o.matrix_path),
        sh_quote(&o.out)
    ));
    s
}

pub(super) fn script(m: &Matrix, plan: &MatrixPlan, o: &EmitOptions) -> String {
    let g = groups(plan);
    match g.as_slice() {
        [] => "#!/bin/sh\n# quarry matrix emit --format slurm: every cell is done; nothing to submit\n".into(),
        [(needs, ids)] => one(m, plan, needs, ids, o),
        many => {
            let mut s =
                String::from("#!/bin/bash\n# Cells with different needs: one job array each.\nset -euo pipefail\n");
            for (needs, ids) in many {
                s.push_str(&format!("sbatch <<'QUARRY_EOF'\n{}QUARRY_EOF\n", one(m, plan, needs, ids, o)));
            }
            s
        }
    }
}
