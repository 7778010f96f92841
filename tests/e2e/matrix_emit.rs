//! `quarry matrix plan|emit` without a scheduler: the flash-attention ROCm
//! matrix example planned cell by cell (nothing contacted), and the
//! Kubernetes and GitHub descriptions checked by their own checkers:
//! `kubernetes-validate` (Kubernetes' published schemas) and `actionlint`.
//! A matrix past GitHub's 256 jobs is split into several jobs. Plans need
//! no registry (the examples', and a keyed one whose cell `matrix run`
//! builds and keeps locally), in a table whose columns fit any cell id.

use crate::common;

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

/// A YAML loader that refuses a key twice in one mapping, as kubectl's
/// strict decoding does (PyYAML, which kubernetes-validate brings, keeps
/// the last one silently).
const STRICT_YAML: &str = r#"
import sys, yaml
class Strict(yaml.SafeLoader):
    pass
def mapping(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = [k for k in keys if keys.count(k) > 1]
    if dup:
        raise yaml.constructor.ConstructorError(None, None, "key %r twice in one mapping" % dup[0], node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)
Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
list(yaml.load_all(open(sys.argv[1]), Loader=Strict))
"#;

/// The Kubernetes Job and the GitHub workflow of `matrix` pass their
/// checkers: Kubernetes' schemas with unexpected properties refused
/// (`--strict`), a strict YAML loader, and actionlint. (kubectl's own
/// client-side validation needs an API server to discover the schemas.)
fn validate(dir: &Path, matrix: &Path) -> (String, String) {
    let k8s = emit_all(matrix, "kubernetes");
    write(&dir.join("job.yaml"), &k8s);
    check(Command::new("kubernetes-validate").arg("--strict").arg(dir.join("job.yaml")), "kubernetes-validate", &k8s);
    check(Command::new("python3").args(["-c", STRICT_YAML]).arg(dir.join("job.yaml")), "strict YAML", &k8s);
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
    // In a checkout, as a repository holds it: the workflow names it by its
    // path there (a runner has its own checkout, not this machine's paths).
    run_expect(Command::new("git").arg("init").arg("-q").arg(w), 0);
    let matrix = big_matrix(&w.join("ci"), 300);
    let (k8s, gh) = validate(w, &matrix);
    assert!(gh.contains("matrix run 'ci/big.toml' -o 'matrix-out'"), "{gh}");
    assert!(!gh.contains(&w.display().to_string()), "no path of this machine: {gh}");
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

    // The checkers can fail: a Job without its template is refused, and so
    // are resources beside `requests:` rather than under it (what emit
    // once wrote: `cpu` twice in one mapping).
    write(&w.join("bad.yaml"), &k8s.replacen("template:", "templat:", 1));
    let o = Command::new("kubernetes-validate").arg("--strict").arg(w.join("bad.yaml")).output().unwrap();
    assert!(!o.status.success(), "kubernetes-validate accepted a broken Job");
    let beside = k8s.replace("              cpu:", "            cpu:");
    write(&w.join("beside.yaml"), &beside);
    let o = Command::new("kubernetes-validate").arg("--strict").arg(w.join("beside.yaml")).output().unwrap();
    assert!(!o.status.success(), "kubernetes-validate --strict accepted resources beside requests:");
    let o = Command::new("python3").args(["-c", STRICT_YAML]).arg(w.join("beside.yaml")).output().unwrap();
    assert!(!o.status.success(), "the strict loader accepted `cpu` twice in one mapping");
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

/// `quarry matrix plan` with no registry named anywhere.
fn plan_here(args: &[&str], matrix: &Path, cache: &Path) -> std::process::Output {
    run_expect(
        quarry()
            .env_remove("QUARRY_CACHE_REGISTRY")
            .args(["matrix", "plan"])
            .args(args)
            .arg(matrix)
            .arg("--cache-dir")
            .arg(cache),
        0,
    )
}

/// A table line's columns, with where each starts: columns are two or more
/// spaces apart (a single space is inside a column: `to run`).
fn columns(line: &str) -> Vec<(usize, &str)> {
    let b = line.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i] == b' ' {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !(b[i] == b' ' && b.get(i + 1).is_none_or(|c| *c == b' ')) {
            i += 1;
        }
        out.push((start, &line[start..i]));
    }
    out
}

/// The plan's table: a header, one row per cell whose columns start where
/// the header's do, and the summary line. Returns the rows' columns.
fn aligned_rows(text: &str, cells: usize) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cells + 2, "{text}");
    let header = columns(lines[0]);
    let names: Vec<&str> = header.iter().map(|(_, n)| *n).collect();
    assert_eq!(names, ["index", "cell", "key", "state", "gpus", "cpus", "memory"], "{text}");
    let starts: Vec<usize> = header.iter().map(|(s, _)| *s).collect();
    let mut rows = Vec::new();
    for line in &lines[1..=cells] {
        let cols = columns(line);
        assert_eq!(cols.len(), header.len(), "a row of as many columns as the header:\n{line}\n{text}");
        assert_eq!(cols.iter().map(|(s, _)| *s).collect::<Vec<_>>(), starts, "columns line up:\n{line}\n{text}");
        rows.push(cols.iter().map(|(_, c)| c.to_string()).collect());
    }
    assert!(lines[cells + 1].starts_with(&format!("{cells} of {cells} cells to run")), "{text}");
    rows
}

/// Both example matrices plan without a registry (the cells and their
/// needs; keys need the examples' build images and sources: below, a
/// matrix that has them here), in columns that fit the longest cell id.
#[test]
fn the_examples_plan_without_a_registry_in_aligned_columns() {
    let cache = tempfile::tempdir().unwrap();
    for (file, n) in [("matrix.toml", 4), ("flash-attn.toml", 28)] {
        let example = repo().join("examples/matrix").join(file);
        let text = String::from_utf8(plan_here(&["--no-keys"], &example, cache.path()).stdout).unwrap();
        let rows = aligned_rows(&text, n);
        assert!(rows.iter().all(|r| r[2] == "-" && r[3] == "to run"), "{text}");
        assert!(text.lines().last().unwrap().contains("done cells are not looked up"), "{text}");
        let plan = stdout_json(&plan_here(&["--no-keys", "--json"], &example, cache.path()));
        assert_eq!(plan["registry"], "", "{plan:#}");
        assert_eq!(plan["done_in"], "not_looked_up", "{plan:#}");
        assert_eq!(plan["to_run"], n);
        let ids: Vec<&str> = plan["cells"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, rows.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(), "the table's cells are the JSON's");
    }
}

/// Keys without a registry: an image matrix (its build needs no engine)
/// is planned with keys, every cell to run; `matrix run --cell` builds one
/// and keeps it in its output directory (nothing pushed, no registry
/// asked); the next plan finds that cell done in the local cache.
#[test]
fn a_plan_and_a_run_need_no_registry() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let cache = w.join("cache");
    write(&w.join("motd.txt"), "hello\n");
    write(
        &w.join("img.toml"),
        "name = \"tiny\"\nbase = \"scratch\"\n[params]\nGREETING = \"hello\"\n\
         [[layer]]\nname = \"motd\"\n[[layer.source]]\nfile = \"motd.txt\"\ndest = \"/etc/motd-${GREETING}\"\n",
    );
    let long = "a-greeting-much-longer-than-the-forty-four-characters-the-table-once-fit";
    write(
        &w.join("m.toml"),
        &format!(
            "name = \"tiny\"\n[job]\nkind = \"image\"\nimage = \"img.toml\"\n[job.set]\nGREETING = \"{{greeting}}\"\n\
             [axes]\ngreeting = [\"hi\", \"{long}\"]\n"
        ),
    );
    let matrix = w.join("m.toml");
    let text = String::from_utf8(plan_here(&[], &matrix, &cache).stdout).unwrap();
    let rows = aligned_rows(&text, 2);
    assert!(rows.iter().all(|r| r[2].len() == 12 && r[3] == "to run"), "keys, nothing done: {text}");
    assert!(text.contains("no registry named"), "{text}");
    let plan = stdout_json(&plan_here(&["--json"], &matrix, &cache));
    assert_eq!(plan["done_in"], "local_cache", "{plan:#}");
    assert_eq!(plan["cache_dir"], cache.display().to_string());
    let id = format!("greeting-{long}");
    let cell = plan["cells"].as_array().unwrap().iter().find(|c| c["id"] == id.as_str()).unwrap().clone();
    assert_eq!(cell["key"].as_str().unwrap().len(), 64, "{cell}");

    let out = w.join("out");
    let o = run_expect(
        quarry()
            .env_remove("QUARRY_CACHE_REGISTRY")
            .args(["matrix", "run", "--cell", &id, "-o"])
            .arg(&out)
            .arg(&matrix)
            .arg("--cache-dir")
            .arg(&cache),
        0,
    );
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("no registry named") && said.contains(&out.join(&id).display().to_string()), "{said}");
    assert!(out.join(&id).join("index.json").is_file(), "the image's layout stays in the output");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("{id}.json"))).unwrap()).unwrap();
    assert_eq!(report["status"], "ok", "{report:#}");
    assert_eq!(report["key"], cell["key"], "the key planned is the key run");
    assert!(report.get("artifact").is_none() && report.get("image").is_none(), "nothing pushed: {report:#}");

    let plan = stdout_json(&plan_here(&["--json"], &matrix, &cache));
    let done: Vec<(&str, bool)> = plan["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap(), c["done"].as_bool().unwrap()))
        .collect();
    assert_eq!(done, [("greeting-hi", false), (id.as_str(), true)], "{plan:#}");
    assert_eq!(plan["to_run"], 1);
    let text = String::from_utf8(plan_here(&[], &matrix, &cache).stdout).unwrap();
    assert!(text.lines().last().unwrap().starts_with("1 of 2 cells to run"), "{text}");
}

/// An `[[include]]` equal to a cell the axes make was dropped with its GPU
/// needs; it now gives that cell its needs (GitHub's include semantics).
/// Memory that is no amount (`"lots"`) went into `#SBATCH --mem=` and the
/// Kubernetes resources unchecked; it is refused, naming the field.
#[test]
fn an_include_of_an_existing_cell_gives_it_its_needs_and_bad_needs_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let m = work.path().join("m.toml");
    let text = |extra: &str| {
        format!(
            "name = \"inc\"\n[job]\nkind = \"wheel\"\nsource = {{ pypi = \"msgpack==1.1.0\", sha256 = \"{}\" }}\nimage = \"builder:1\"\n[axes]\npy = [\"cp311\", \"cp312\"]\n{extra}",
            "0".repeat(64)
        )
    };
    write(&m, &text("[[include]]\npy = \"cp312\"\nneeds = { gpus = 1, memory = \"16G\" }\n"));
    let slurm = emit_all(&m, "slurm");
    assert_eq!(slurm.matches("sbatch <<").count(), 2, "the GPU cell is its own array: {slurm}");
    assert!(slurm.contains("--gres=gpu:1") && slurm.contains("--mem=16G"), "{slurm}");
    for (extra, field, says) in [
        ("[needs]\nmemory = \"lots\"\n", "needs.memory", "not an amount"),
        ("[[include]]\npy = \"cp312\"\nneeds = { memory = \"4GB\" }\n", "include[0].needs.memory", "not an amount"),
        ("[needs]\ncpus = 0\n", "needs.cpus", "at least one"),
        ("[[include]]\npy = \"cp312\"\n[[include]]\npy = \"cp312\"\n", "include[1]", "same cell as include[0]"),
    ] {
        write(&m, &text(extra));
        let o = run_expect(quarry().args(["matrix", "emit", "--all", "--format", "kubernetes"]).arg(&m), 1);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(field) && e.contains(says), "{extra}: {e}");
    }
}

/// `matrix plan` of examples/matrix/matrix.toml built its 2.7 GB job image
/// for minutes without a word. A plan builds nothing unasked: it says the
/// image is not built, which layers it lacks and how to build it, and gives
/// the cells without keys (with --build-image it builds, and says so first).
#[test]
fn a_plan_does_not_build_the_job_image_unasked() {
    let cache = tempfile::tempdir().unwrap();
    let example = repo().join("examples/matrix/matrix.toml");
    let t = std::time::Instant::now();
    let o = plan_here(&["--json"], &example, cache.path());
    let plan = stdout_json(&o);
    let warnings = plan["warnings"].to_string();
    assert!(
        warnings.contains("hip-builder-debian13.toml")
            && warnings.contains("is not built")
            && warnings.contains("--build-image"),
        "{plan:#}"
    );
    assert_eq!(plan["done_in"], "not_looked_up", "{plan:#}");
    assert!(plan["cells"].as_array().unwrap().iter().all(|c| c["key"].is_null()), "{plan:#}");
    let built: Vec<_> =
        std::fs::read_dir(cache.path().join("layers")).map(|r| r.flatten().collect()).unwrap_or_default();
    assert!(built.is_empty(), "nothing built: {built:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(120), "it planned, it did not build");
}
