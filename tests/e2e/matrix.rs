//! End-to-end: build matrices on a real scheduler. A one-node Slurm from
//! Debian (munged, slurmctld, slurmd; two simulated AMD GPUs as gres) runs
//! the cells of examples/matrix/matrix.toml (msgpack's sdist as PyPI serves
//! it, four wheels on two axes) as a job array that `quarry matrix emit`
//! wrote; each task is a real `quarry matrix run` building a real wheel in
//! hip-builder-debian13 through the Docker Engine, pushing to Debian's
//! docker-registry. `collect` gathers an index pip installs from offline.

use crate::common;

use common::registry::*;
use common::slurm::*;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The example matrix in `dir`, its image and lock beside it (the test
/// writes nothing in the repository).
fn example(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("examples/matrix/matrix.toml")).unwrap();
    let image = repo().join("images/hip-builder-debian13.toml");
    let text =
        text.replace("\"../../images/hip-builder-debian13.toml\"", &format!("{:?}", image.display().to_string()));
    write(&dir.join("matrix.toml"), &text);
    std::fs::copy(repo().join("examples/matrix/msgpack.lock"), dir.join("msgpack.lock")).unwrap();
    dir.join("matrix.toml")
}

fn quarry_matrix(args: &[&str], matrix: &Path, registry: &str, code: i32) -> std::process::Output {
    run_expect(
        quarry()
            .arg("matrix")
            .args(args)
            .arg(matrix)
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--cache-registry", registry]),
        code,
    )
}

/// `quarry matrix emit --format slurm` of the cells not done, the tasks
/// writing to `out` and their logs to `logs`. The quarry the tasks run is
/// the default one: this test's binary, which is on no PATH (as a
/// newcomer's `target/release/quarry`).
fn emit_slurm(matrix: &Path, registry: &str, out: &Path, logs: &Path) -> String {
    let o = run_expect(
        quarry()
            .args(["matrix", "emit", "--format", "slurm", "--parallel", "2"])
            .arg("--task-output")
            .arg(out)
            .arg("--log-dir")
            .arg(logs)
            .arg(matrix)
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--cache-registry", registry]),
        0,
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn a_wheel_matrix_on_slurm_is_collected_into_an_index_pip_installs_from() {
    if !have_registry() || !have_docker() || !have_tool("gpgv") || !have_slurm() {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let reg = Registry::start("");
    let slurm = Slurm::start();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let matrix = example(&w.join("m"));
    let registry = format!("{}/quarry-matrix", reg.addr());
    let out = w.join("cells");

    // The plan: four cells, keys known (the lock is there), none done.
    let plan = stdout_json(&quarry_matrix(&["plan", "--json"], &matrix, &registry, 0));
    let ids: Vec<&str> = plan["cells"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["debug-0_opt-2", "debug-0_opt-3", "debug-1_opt-2", "debug-1_opt-3"], "{plan:#}");
    assert_eq!(plan["to_run"], 4);

    // Emitted as an array of four, two at a time; the last task is
    // cancelled before it starts: one cell made to fail.
    let script = emit_slurm(&matrix, &registry, &out, w);
    assert!(script.contains("#SBATCH --array=0-3%2") && !script.contains("--gres"), "{script}");
    let me = std::fs::canonicalize(env!("CARGO_BIN_EXE_quarry")).unwrap();
    assert!(script.contains(&format!("exec '{}' matrix run", me.display())), "quarry by its path: {script}");
    write(&w.join("cells.sbatch"), &script);
    let cache = packages_cache();
    let job = slurm.submit(&w.join("cells.sbatch"), &[("QUARRY_CACHE", &cache)]);
    let st = slurm.run("scancel", &[&format!("{job}_3")]);
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    slurm.wait(&job, Duration::from_secs(900));

    // collect names the missing cell, exits non-zero, keeps the other three.
    let house = w.join("wheelhouse");
    let collect = |log_dir: Option<&Path>, code: i32| {
        let mut c = quarry();
        c.args(["matrix", "collect", "--json", "-o"]).arg(&house).arg(&matrix);
        if let Some(d) = log_dir {
            c.arg("--log-dir").arg(d);
        }
        run_expect(c.arg("--cache-dir").arg(packages_cache()).args(["--cache-registry", &registry]), code)
    };
    let c = collect(None, 1);
    let report = stdout_json(&c);
    assert_eq!(report["incomplete"], serde_json::json!(["debug-1_opt-3"]), "{report:#}\n{}", slurm.logs());
    let wheels = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".whl"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(wheels(&house).len(), 3, "{report:#}");
    assert!(String::from_utf8_lossy(&c.stderr).contains("debug-1_opt-3"));

    // A quarry the nodes do not have: emit warns; the task fails in Slurm's
    // output file alone, and collect names that file and shows its error.
    let wrong = run_expect(
        quarry()
            .args(["matrix", "emit", "--format", "slurm", "--quarry", "/nonexistent/quarry", "--task-output"])
            .arg(&out)
            .arg("--log-dir")
            .arg(w)
            .arg(&matrix)
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--cache-registry", &registry]),
        0,
    );
    let warned = String::from_utf8_lossy(&wrong.stderr);
    assert!(warned.contains("/nonexistent/quarry") && warned.contains("--quarry"), "{warned}");
    write(&w.join("wrong.sbatch"), &String::from_utf8_lossy(&wrong.stdout));
    let job = slurm.submit(&w.join("wrong.sbatch"), &[("QUARRY_CACHE", &cache)]);
    slurm.wait(&job, Duration::from_secs(120));
    let c = collect(Some(w), 1);
    let report = stdout_json(&c);
    let cell = report["cells"].as_array().unwrap().iter().find(|c| c["id"] == "debug-1_opt-3").unwrap().clone();
    let log = cell["log"]["path"].as_str().unwrap_or_default();
    assert!(log.starts_with(&w.display().to_string()) && log.ends_with(".out"), "{cell:#}");
    let tail = cell["log"]["tail"].to_string();
    assert!(tail.contains("/nonexistent/quarry"), "the task's error: {cell:#}");

    // Emitted again: only that cell; it completes the matrix.
    let again = emit_slurm(&matrix, &registry, &out, w);
    assert!(again.contains("#SBATCH --array=0-0") && again.contains("debug-1_opt-3"), "{again}");
    write(&w.join("rest.sbatch"), &again);
    let job = slurm.submit(&w.join("rest.sbatch"), &[("QUARRY_CACHE", &cache)]);
    slurm.wait(&job, Duration::from_secs(600));
    let c = collect(None, 0);
    let report = stdout_json(&c);
    let names = wheels(&house);
    assert_eq!(
        names,
        [
            "msgpack-1.1.0+o2g0-cp313-cp313-linux_x86_64.whl",
            "msgpack-1.1.0+o2g1-cp313-cp313-linux_x86_64.whl",
            "msgpack-1.1.0+o3g0-cp313-cp313-linux_x86_64.whl",
            "msgpack-1.1.0+o3g1-cp313-cp313-linux_x86_64.whl",
        ],
        "{report:#}"
    );
    for cell in report["cells"].as_array().unwrap() {
        assert_eq!(cell["status"], "ok", "{cell}");
        assert!(cell["digest"].as_str().unwrap().starts_with("sha256:"), "{cell}");
    }

    // pip installs from the index with the network off (in Debian 13, the wheels' Python).
    let script = "python3 -m pip install --break-system-packages -q --index-url file:///w/simple 'msgpack==1.1.0+o3g1' \
                  && python3 -c 'import msgpack, sys; assert msgpack.unpackb(msgpack.packb([1, 2])) == [1, 2]; print(\"IMPORTED\", msgpack.version)'";
    let o = run_expect(
        quarry()
            .arg("run")
            .arg(&builder)
            .args(["--gpu", "none", "--network", "none", "--user", "root", "--copy-in"])
            .arg(format!("{}:/w", house.display()))
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--", "sh", "-c", script]),
        0,
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("IMPORTED (1, 1, 0)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    // Every cell done: nothing left to emit, and a second submission builds nothing.
    let plan = stdout_json(&quarry_matrix(&["plan", "--json"], &matrix, &registry, 0));
    assert_eq!(plan["to_run"], 0, "{plan:#}");
    assert!(emit_slurm(&matrix, &registry, &out, w).contains("every cell is done"));
    let job = slurm.submit(&w.join("cells.sbatch"), &[("QUARRY_CACHE", &cache)]);
    slurm.wait(&job, Duration::from_secs(600));
    for id in ids {
        let r: Value = serde_json::from_slice(&std::fs::read(out.join(format!("{id}.json"))).unwrap()).unwrap();
        assert_eq!((r["status"].as_str(), r["cached"].as_bool()), (Some("ok"), Some(true)), "{r:#}");
        // quarry's own time around a build it took from the cache.
        assert!(r["seconds"].as_f64().unwrap() < 30.0, "{r:#}");
    }
    assert_eq!(common::leaked_quarry_containers(), Vec::<String>::new());
}

#[test]
fn a_gpu_cell_under_slurm_sees_only_the_gpu_slurm_gave_it() {
    if !have_registry() || !have_docker() || !have_tool("gpgv") || !have_slurm() {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let reg = Registry::start("");
    let slurm = Slurm::start();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // A kernel job whose "build" records the GPU nodes and groups it sees.
    write(
        &w.join("probe/Makefile"),
        "all:\n\tmkdir -p build && ls -ln /dev/dri > build/dri.txt && id -G > build/groups.txt && test -c /dev/kfd\n",
    );
    write(
        &w.join("gpu.toml"),
        &format!(
            "name = \"gpu-probe\"\n[job]\nkind = \"kernel\"\nsource = \"probe\"\nimage = {:?}\ncommand = [\"make\"]\n\
             [axes]\ncell = [\"a\", \"b\"]\n[needs]\ngpus = 1\ncpus = 1\nmemory = \"1G\"\n",
            builder.display().to_string()
        ),
    );
    let matrix = w.join("gpu.toml");
    let registry = format!("{}/quarry-gpu", reg.addr());
    let out = w.join("cells");
    let o = run_expect(
        quarry()
            .args(["matrix", "emit", "--format", "slurm", "--parallel", "2", "--quarry", env!("CARGO_BIN_EXE_quarry")])
            .arg("--task-output")
            .arg(&out)
            .arg("--log-dir")
            .arg(w)
            .arg(&matrix)
            .args(["--cache-registry", &registry]),
        0,
    );
    let script = String::from_utf8(o.stdout).unwrap();
    assert!(script.contains("#SBATCH --gres=gpu:1"), "{script}");
    write(&w.join("gpu.sbatch"), &script);
    let job = slurm.submit(&w.join("gpu.sbatch"), &[("QUARRY_DEV_ROOT", &slurm.dev)]);
    slurm.wait(&job, Duration::from_secs(600));
    let mut seen = Vec::new();
    for id in ["cell-a", "cell-b"] {
        let dri = std::fs::read_to_string(out.join(id).join("dri.txt")).unwrap_or_else(|e| {
            panic!(
                "{id}: {e}\n{}",
                std::fs::read_to_string(w.join(format!("quarry-gpu-probe-{job}_0.out"))).unwrap_or_default()
            )
        });
        let nodes: Vec<&str> =
            dri.lines().filter_map(|l| l.split_whitespace().last()).filter(|n| n.starts_with("renderD")).collect();
        assert_eq!(nodes.len(), 1, "{id}: one render node, the one Slurm gave: {dri}");
        // The node's gid, numeric, as on the host; the container's user has it.
        let gid = if nodes[0] == "renderD128" { "4242" } else { "4243" };
        assert!(dri.contains(&format!(" {gid} ")), "{id}: {dri}");
        let groups = std::fs::read_to_string(out.join(id).join("groups.txt")).unwrap();
        assert!(groups.split_whitespace().any(|g| g == gid), "{id}: groups {groups}");
        seen.push(nodes[0].to_string());
    }
    seen.sort();
    // Run side by side, the two cells were given the two GPUs.
    assert_eq!(seen, ["renderD128", "renderD129"]);

    // Not only matrix cells: `quarry run` and `quarry kernel build` with
    // `--gpu amd` in a job given one GPU pass that GPU alone, and say so.
    let quarry_bin = env!("CARGO_BIN_EXE_quarry");
    let direct = format!(
        "#!/bin/bash\n#SBATCH --array=0-1\n#SBATCH --gres=gpu:1\n#SBATCH --cpus-per-task=1\n#SBATCH --mem=1G\n\
         #SBATCH --output={w}/direct-%a.out\nset -euo pipefail\necho \"gres $SLURM_JOB_GPUS\"\n\
         if [ \"$SLURM_ARRAY_TASK_ID\" = 0 ]; then\n  \
         {quarry_bin} run {builder} --gpu amd -- sh -c 'ls -ln /dev/dri' > {w}/run-dri.txt\nelse\n  \
         {quarry_bin} kernel build {w}/probe --image {builder} --gpu amd -o {w}/kout -- make\nfi\n",
        w = w.display(),
        builder = builder.display(),
    );
    write(&w.join("direct.sbatch"), &direct);
    let cache = packages_cache();
    let job = slurm.submit(&w.join("direct.sbatch"), &[("QUARRY_DEV_ROOT", &slurm.dev), ("QUARRY_CACHE", &cache)]);
    slurm.wait(&job, Duration::from_secs(600));
    let mut seen = Vec::new();
    for (task, dri_file) in [(0, w.join("run-dri.txt")), (1, w.join("kout/dri.txt"))] {
        let log = std::fs::read_to_string(w.join(format!("direct-{task}.out"))).unwrap_or_default();
        let dri = std::fs::read_to_string(&dri_file).unwrap_or_else(|e| panic!("task {task}: {e}\n{log}"));
        let nodes: Vec<&str> =
            dri.lines().filter_map(|l| l.split_whitespace().last()).filter(|n| n.starts_with("renderD")).collect();
        let gres: usize = log.lines().find_map(|l| l.strip_prefix("gres ")).unwrap().trim().parse().unwrap();
        let given = ["renderD128", "renderD129"][gres];
        assert_eq!(nodes, [given], "task {task}: only the GPU Slurm gave (gres {gres}): {dri}\n{log}");
        assert!(log.contains("GPUs passed:") && log.contains(given) && log.contains("SLURM_JOB_GPUS"), "{log}");
        seen.push(given);
    }
    seen.sort();
    assert_eq!(seen, ["renderD128", "renderD129"], "side by side, each task its own GPU");

    // As under Kubernetes: the pod's index in JOB_COMPLETION_INDEX, the
    // device plugin having mounted one GPU (renderD129); quarry passes what
    // it sees. (Another matrix name: its cells' keys differ from the above.)
    let dev = w.join("pod-dev");
    std::fs::create_dir_all(dev.join("dri")).unwrap();
    for (node, gid) in [("kfd", 4242), ("dri/renderD129", 4243)] {
        let st = Command::new("mknod").arg(dev.join(node)).args(["c", "1", "3"]).status().unwrap();
        assert!(st.success(), "mknod (the GPU tests need root)");
        std::os::unix::fs::chown(dev.join(node), None, Some(gid)).unwrap();
    }
    let pod = w.join("pod.toml");
    write(&pod, &std::fs::read_to_string(&matrix).unwrap().replace("gpu-probe", "gpu-pod"));
    run_expect(
        quarry()
            .args(["matrix", "run", "-o"])
            .arg(w.join("pod-out"))
            .arg(&pod)
            .args(["--cache-registry", &registry])
            .env("JOB_COMPLETION_INDEX", "1")
            .env("QUARRY_DEV_ROOT", &dev)
            .env_remove("SLURM_JOB_GPUS")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("QUARRY_MATRIX_CELL")
            .env_remove("QUARRY_MATRIX_CELLS"),
        0,
    );
    let dri = std::fs::read_to_string(w.join("pod-out/cell-b/dri.txt")).unwrap();
    let nodes: Vec<&str> =
        dri.lines().filter_map(|l| l.split_whitespace().last()).filter(|n| n.starts_with("renderD")).collect();
    assert_eq!(nodes, ["renderD129"], "{dri}");
    assert!(dri.contains(" 4243 "), "{dri}");
}

/// A cell whose build fails: `run` exits with the build's status and
/// pushes a failed report; `collect` names the cell, exits non-zero and
/// keeps the other's product. Fixed for that cell alone (a variable only it
/// gets), only it is left to run, and running it completes the matrix.
#[test]
fn a_failed_cell_is_named_and_running_it_again_fixed_completes_the_matrix() {
    if !have_registry() || !have_docker() || !have_tool("gpgv") {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    write(&w.join("proj/README"), "a kernel project that writes one file\n");
    let matrix = w.join("fails.toml");
    let text = format!(
        "name = \"fails\"\n[job]\nkind = \"kernel\"\nsource = \"proj\"\nimage = {:?}\n\
         command = [\"sh\", \"-c\", \"mkdir -p build && echo $CELL > build/cell.txt && if [ $CELL = bad ] && [ -z \\\"$FIX\\\" ]; then exit 7; fi\"]\n\
         [axes]\ncell = [\"good\", \"bad\"]\n[needs]\ncpus = 1\nmemory = \"1G\"\n",
        builder.display().to_string()
    );
    write(&matrix, &text);
    let registry = format!("{}/quarry-fails", reg.addr());
    let out = w.join("cells");
    let run = |id: &str, code: i32| {
        run_expect(
            quarry()
                .args(["matrix", "run", "--json", "--cell", id, "-o"])
                .arg(&out)
                .arg(&matrix)
                .arg("--cache-dir")
                .arg(packages_cache())
                .args(["--cache-registry", &registry]),
            code,
        )
    };
    // As a Kubernetes pod would (its index), and as the GitHub workflow (the id).
    run_expect(
        quarry()
            .args(["matrix", "run", "-o"])
            .arg(&out)
            .arg(&matrix)
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--cache-registry", &registry])
            .env("JOB_COMPLETION_INDEX", "0")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("QUARRY_MATRIX_CELL")
            .env_remove("QUARRY_MATRIX_CELLS"),
        0,
    );
    assert!(out.join("cell-good.json").is_file(), "JOB_COMPLETION_INDEX=0 ran cell-good");
    // The build's exit status, and a report that says so.
    let bad = run("cell-bad", 7);
    let report: Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!((report["status"].as_str(), report["exit_code"].as_i64()), (Some("failed"), Some(7)), "{report:#}");
    let collect = |code: i32| {
        stdout_json(&run_expect(
            quarry()
                .args(["matrix", "collect", "--json", "-o"])
                .arg(w.join("collected"))
                .arg(&matrix)
                .arg("--cache-dir")
                .arg(packages_cache())
                .args(["--cache-registry", &registry]),
            code,
        ))
    };
    let r = collect(1);
    assert_eq!(r["incomplete"], serde_json::json!(["cell-bad"]), "{r:#}");
    let status = |r: &Value, id: &str| {
        r["cells"].as_array().unwrap().iter().find(|c| c["id"] == id).map(|c| c["status"].clone()).unwrap()
    };
    assert_eq!(status(&r, "cell-bad"), "failed", "{r:#}");
    assert_eq!(status(&r, "cell-good"), "ok", "{r:#}");
    // The table: cell, status, time, digest, size; the failed cell's error under it.
    let table = run_expect(
        quarry()
            .args(["matrix", "collect", "-o"])
            .arg(w.join("collected"))
            .arg(&matrix)
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--cache-registry", &registry]),
        1,
    );
    let shown = String::from_utf8_lossy(&table.stdout);
    let header: Vec<&str> = shown.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["cell", "status", "time", "digest", "size"], "{shown}");
    assert!(shown.lines().any(|l| l.starts_with("cell-bad") && l.contains("failed")), "{shown}");
    let good: Vec<&str> =
        shown.lines().find(|l| l.starts_with("cell-good")).unwrap_or_default().split_whitespace().collect();
    assert!(good.len() == 7 && good[1] == "ok" && good[4].len() == 12, "cell, ok, time, digest, size: {shown}");
    let kept = w.join("collected/cell-good/cell.txt");
    assert_eq!(std::fs::read_to_string(&kept).unwrap_or_default().trim(), "good", "{r:#}");

    // Fixed for that cell alone: the other stays done, only it is left.
    write(&matrix, &format!("{text}[job.env_for.cell.bad]\nFIX = \"1\"\n"));
    let plan = stdout_json(&quarry_matrix(&["plan", "--json"], &matrix, &registry, 0));
    let done: Vec<(&str, bool)> =
        plan["cells"].as_array().unwrap().iter().map(|c| (c["id"].as_str().unwrap(), c["done"] == true)).collect();
    assert_eq!(done, [("cell-good", true), ("cell-bad", false)], "{plan:#}");
    run_expect(
        quarry()
            .args(["matrix", "run", "-o"])
            .arg(&out)
            .arg(&matrix)
            .arg("--cache-dir")
            .arg(packages_cache())
            .args(["--cache-registry", &registry])
            .env("QUARRY_MATRIX_CELL", "cell-bad")
            .env_remove("QUARRY_MATRIX_CELLS"),
        0,
    );
    let r = collect(0);
    assert_eq!(r["incomplete"], serde_json::json!([]), "{r:#}");
    assert_eq!(status(&r, "cell-bad"), "ok", "{r:#}");
    assert_eq!(common::leaked_quarry_containers(), Vec::<String>::new());
}

#[test]
fn a_matrix_cell_refuses_a_too_old_patchelf_as_the_cli_does() {
    // A wheel cell and `quarry wheel build` go through one setup: a
    // repairing build with a QUARRY_PATCHELF older than 0.19 is refused by
    // both, with the same words, before any image is loaded or built (the
    // image is an engine reference nobody has: reaching for it would fail
    // differently).
    if !have_registry() {
        return;
    }
    let reg = Registry::start("");
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    write(&w.join("proj/pyproject.toml"), "[project]\nname = \"p\"\nversion = \"1\"\n");
    let fake = w.join("old-patchelf");
    write(&fake, "#!/bin/sh\necho 'patchelf 0.14.5'\n");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let matrix = w.join("old.toml");
    write(
        &matrix,
        "name = \"old\"\n[job]\nkind = \"wheel\"\nsource = \"proj\"\nimage = \"quarry-no-such-image:{v}\"\nrepair = true\n\
         [axes]\nv = [\"1\"]\n",
    );
    let cell = stdout_json(&quarry_matrix(&["plan", "--no-keys", "--json"], &matrix, "", 0))["cells"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let registry = format!("{}/quarry-old", reg.addr());
    let refused = |out: std::process::Output, who: &str| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(err.contains("0.14.5") && err.contains("0.19") && err.contains("QUARRY_PATCHELF"), "{who}: {err}");
        assert!(!err.contains("quarry-no-such-image"), "{who} reached for the image: {err}");
        err.lines().find(|l| l.contains("0.14.5")).map(|l| l[l.find("patchelf").unwrap_or(0)..].to_string()).unwrap()
    };
    let by_cell = refused(
        run_expect(
            quarry()
                .args(["matrix", "run", "--cell", &cell, "-o"])
                .arg(w.join("cells"))
                .arg(&matrix)
                .arg("--cache-dir")
                .arg(packages_cache())
                .args(["--cache-registry", &registry])
                .env("QUARRY_PATCHELF", &fake),
            1,
        ),
        "matrix run",
    );
    let by_cli = refused(
        run_expect(
            quarry()
                .args(["wheel", "build", "--repair", "--image", "quarry-no-such-image:1", "-o"])
                .arg(w.join("wheels"))
                .arg(w.join("proj"))
                .arg("--cache-dir")
                .arg(packages_cache())
                .env("QUARRY_PATCHELF", &fake),
            1,
        ),
        "wheel build",
    );
    assert_eq!(by_cell, by_cli, "the same refusal");
}
