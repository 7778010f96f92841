//! `quarry matrix plan|emit` without a scheduler: the flash-attention ROCm
//! matrix example planned cell by cell (nothing contacted), and the
//! Kubernetes and GitHub descriptions checked by their own checkers:
//! `kubernetes-validate` (Kubernetes' published schemas) and `actionlint`.
//! A matrix past GitHub's 256 jobs is split into several jobs.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const REGISTRY: &str = "127.0.0.1:5000/quarry-cache";

/// A matrix of `n` cells and one GPU cell (a wheel job whose image is an
/// engine reference: emitting with --all contacts nothing).
fn big_matrix(dir: &Path, n: usize) -> PathBuf {
    let values: Vec<String> = (0..n).map(|i| format!("\"{i}\"")).collect();
    write(
        &dir.join("big.toml"),
        &format!(
            "name = \"big\"\n[job]\nkind = \"wheel\"\nsource = {{ pypi = \"msgpack==1.1.0\", sha256 = \"{}\" }}\nimage = \"builder:1\"\n\
             [axes]\nn = [{}]\n[[include]]\nn = \"gpu\"\nneeds = {{ gpus = 2, cpus = 8, memory = \"32G\" }}\n",
            "0".repeat(64),
            values.join(", ")
        ),
    );
    dir.join("big.toml")
}

fn emit_all(matrix: &Path, format: &str) -> String {
    let o = run_expect(
        quarry()
            .args(["matrix", "emit", "--all", "--format", format, "--parallel", "8"])
            .arg(matrix)
            .args(["--cache-registry", REGISTRY]),
        0,
    );
    String::from_utf8(o.stdout).unwrap()
}

fn check(cmd: &mut Command, what: &str, text: &str) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{what}:\n{}{}\n{text}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The Kubernetes Job and the GitHub workflow of `matrix` pass their checkers.
fn validate(dir: &Path, matrix: &Path) -> (String, String) {
    let k8s = emit_all(matrix, "kubernetes");
    write(&dir.join("job.yaml"), &k8s);
    check(Command::new("kubernetes-validate").arg(dir.join("job.yaml")), "kubernetes-validate", &k8s);
    let gh = emit_all(matrix, "github");
    let workflow = dir.join(".github/workflows/matrix.yml");
    write(&workflow, &gh);
    check(Command::new("actionlint").arg(&workflow).current_dir(dir), "actionlint", &gh);
    (k8s, gh)
}

#[test]
fn kubernetes_and_github_descriptions_pass_their_own_checkers() {
    if !have_tool("kubernetes-validate") || !have_tool("actionlint") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let matrix = big_matrix(w, 300);
    let (k8s, gh) = validate(w, &matrix);
    assert!(
        k8s.contains("completionMode: Indexed") && k8s.contains("completions: 300") && k8s.contains("parallelism: 8")
    );
    assert!(k8s.contains("amd.com/gpu: \"2\"") && k8s.contains("secretName: \"quarry-registry\""), "{k8s}");

    // 300 CPU cells: two jobs of at most 256; the GPU cell a third, on GPU runners.
    let per_job: Vec<usize> = gh
        .split("\n  cells-")
        .skip(1)
        .map(|j| j.split("\n    env:").next().unwrap().matches("- cell: ").count())
        .collect();
    assert_eq!(per_job.iter().sum::<usize>(), 301, "{per_job:?}");
    assert!(per_job.iter().all(|n| *n <= 256), "{per_job:?}");
    assert_eq!(per_job.len(), 3, "{per_job:?}");
    assert!(gh.contains("needs: [\"cells-1\", \"cells-2\", \"cells-3\"]"), "collect waits for every job: {gh}");

    let slurm = emit_all(&matrix, "slurm");
    assert!(
        slurm.contains("--array=0-299%8") && slurm.contains("--gres=gpu:2") && slurm.contains("--mem=32G"),
        "{slurm}"
    );
    assert!(slurm.contains("--cpus-per-task=8") && slurm.contains("--array=0-0%8"), "the GPU cell apart: {slurm}");

    // The checkers can fail: a Job without its template is refused.
    write(&w.join("bad.yaml"), &k8s.replacen("template:", "templat:", 1));
    let o = Command::new("kubernetes-validate").arg(w.join("bad.yaml")).output().unwrap();
    assert!(!o.status.success(), "kubernetes-validate accepted a broken Job");
    write(&w.join(".github/workflows/matrix.yml"), &gh.replacen("runs-on:", "run-on:", 1));
    let o = Command::new("actionlint").arg(w.join(".github/workflows/matrix.yml")).current_dir(w).output().unwrap();
    assert!(!o.status.success(), "actionlint accepted a broken workflow");
}

/// examples/matrix/flash-attn.toml: the shape of flash-attention's ROCm
/// wheels, planned without contacting anything.
#[test]
fn the_flash_attention_example_plans_its_cells_and_labels() {
    let example = repo().join("examples/matrix/flash-attn.toml");
    let plan = stdout_json(&run_expect(quarry().args(["matrix", "plan", "--no-keys", "--json"]).arg(&example), 0));
    let cells = plan["cells"].as_array().unwrap();
    // 2 versions x 3 Pythons x 2 torch x 2 ROCm x 2 backends = 48, less
    // torch 2.5 on ROCm 6.3 (12) and 2.7.4.post1 with Triton (9), plus one.
    assert_eq!(cells.len(), 28, "{plan:#}");
    assert_eq!(plan["to_run"], 28);
    let cell = |id: &str| cells.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no {id}: {plan:#}"));
    let first = &cells[0];
    assert_eq!(first["id"], "backend-ck_flash_attn-2.8.3_python-cp310_rocm-62_torch-2.5");
    assert_eq!(first["local_version"], "rocm62torch2.5ck");
    assert_eq!(first["needs"], serde_json::json!({"gpus": 0, "cpus": 16, "memory": "64G"}));
    let triton = cell("backend-triton_flash_attn-2.8.3_python-cp311_rocm-63_torch-2.6");
    assert_eq!(triton["local_version"], "rocm63torch2.6triton");
    // Excluded: torch 2.5 on ROCm 6.3; the older release with Triton.
    for c in cells {
        let v = &c["values"];
        assert!(!(v["torch"] == "2.5" && v["rocm"] == "63"), "{c}");
        assert!(!(v["flash_attn"] == "2.7.4.post1" && v["backend"] == "triton"), "{c}");
        let label = format!(
            "rocm{}torch{}{}",
            v["rocm"].as_str().unwrap(),
            v["torch"].as_str().unwrap(),
            v["backend"].as_str().unwrap()
        );
        assert_eq!(c["local_version"], label.as_str(), "{c}");
    }
    // Included, last, with its own needs.
    let last = cells.last().unwrap();
    assert_eq!(last["id"], "backend-triton_flash_attn-2.8.3_python-cp312_rocm-64_torch-2.7");
    assert_eq!(last["index"], 27);
    assert_eq!(last["needs"]["gpus"], 1);
    // The same file, the same cells in the same order.
    let again = stdout_json(&run_expect(quarry().args(["matrix", "plan", "--no-keys", "--json"]).arg(&example), 0));
    assert_eq!(again["cells"], plan["cells"]);

    // Its descriptions pass the checkers too: two groups of needs, the GPU cell apart.
    if !have_tool("kubernetes-validate") || !have_tool("actionlint") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (k8s, gh) = validate(work.path(), &example);
    assert!(
        k8s.contains("completions: 27") && k8s.contains("completions: 1") && k8s.contains("amd.com/gpu: \"1\""),
        "{k8s}"
    );
    assert!(gh.contains("runs-on: \"self-hosted\""), "{gh}");
}

/// A requirement naming a version axis needs one hash per version: a
/// missing one is named before anything runs.
#[test]
fn a_version_axis_without_its_hash_is_refused_by_name() {
    let work = tempfile::tempdir().unwrap();
    let m = work.path().join("m.toml");
    write(
        &m,
        &format!(
            "[job]\nkind = \"wheel\"\nimage = \"builder:1\"\n\
             source = {{ pypi = \"flash-attn=={{flash_attn}}\", sha256 = {{ \"flash-attn==2.8.3\" = \"{}\" }} }}\n\
             [axes]\nflash_attn = [\"2.8.3\", \"2.7.4.post1\"]\n",
            "a".repeat(64)
        ),
    );
    let o = run_expect(quarry().args(["matrix", "plan", "--no-keys"]).arg(&m), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("job.source.sha256") && err.contains("flash-attn==2.7.4.post1"), "{err}");
}
