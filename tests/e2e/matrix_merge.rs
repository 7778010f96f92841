//! A wheel build sharded by GPU target, end to end on the one-node Slurm of
//! the matrix tests: tests/fixtures/hip/pyext (a HIP extension built with
//! hipcc in hip-builder-debian13) as a matrix of three target shards with
//! `merge = true`; Slurm runs the cells (real `quarry matrix run`s through
//! the Docker Engine, products pushed to Debian's docker-registry), and
//! `matrix collect` merges them. The host and device wheels must be byte
//! for byte what `wheel build --split` makes of the fat build for the three
//! targets; pip installs the host wheel with one device extra from the
//! collected index in a clean environment, and `wheel check --targets`
//! passes for each target.

use crate::common;

use common::registry::*;
use common::slurm::*;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TARGETS: [&str; 3] = ["gfx90a", "gfx942", "gfx1100"];

fn matrix_file(dir: &Path) -> PathBuf {
    let text = format!(
        "name = \"hipext-shards\"\n[job]\nkind = \"wheel\"\nsource = {:?}\nimage = {:?}\nisolation = false\nmerge = true\n\
         [axes]\ntargets = [{}]\n[needs]\ncpus = 1\nmemory = \"2G\"\n",
        repo().join("tests/fixtures/hip/pyext").display().to_string(),
        repo().join("images/hip-builder-debian13.toml").display().to_string(),
        TARGETS.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", "),
    );
    write(&dir.join("shards.toml"), &text);
    dir.join("shards.toml")
}

#[test]
fn target_shards_on_slurm_merge_into_the_split_of_the_fat_build() {
    if !have_registry() || !have_docker() || !have_tool("gpgv") || !have_slurm() {
        return;
    }
    let (_, builder) = debian13_rocm_images();
    let reg = Registry::start("");
    let slurm = Slurm::start();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let matrix = matrix_file(&w.join("m"));
    let registry = format!("{}/quarry-shards", reg.addr());
    let common_args = |c: &mut std::process::Command| {
        c.arg(&matrix).arg("--cache-dir").arg(packages_cache()).args(["--cache-registry", &registry]);
    };

    // The plan: three shards of one merge, each key its own (the targets are in it).
    let mut c = quarry();
    c.args(["matrix", "plan", "--json"]);
    common_args(&mut c);
    let plan = stdout_json(&run_expect(&mut c, 0));
    let cells = plan["cells"].as_array().unwrap();
    assert_eq!(plan["merges"]["all"].as_array().map(Vec::len), Some(3), "{plan:#}");
    assert!(cells.iter().all(|c| c["merge_group"] == "all"), "{plan:#}");
    let keys: std::collections::BTreeSet<&str> = cells.iter().map(|c| c["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 3, "{plan:#}");

    let mut c = quarry();
    c.args(["matrix", "emit", "--format", "slurm", "--parallel", "2", "--task-output"]).arg(w.join("cells"));
    c.arg("--log-dir").arg(w);
    common_args(&mut c);
    write(&w.join("cells.sbatch"), &String::from_utf8(run_expect(&mut c, 0).stdout).unwrap());
    let job = slurm.submit(&w.join("cells.sbatch"), &[("QUARRY_CACHE", &packages_cache())]);
    slurm.wait(&job, Duration::from_secs(1200));

    let house = w.join("house");
    let mut c = quarry();
    c.args(["matrix", "collect", "--json", "-o"]).arg(&house);
    common_args(&mut c);
    let collected = stdout_json(&run_expect(&mut c, 0));
    let merged = &collected["merges"][0];
    assert_eq!(merged["device"].as_array().map(Vec::len), Some(3), "{collected:#}\n{}", slurm.logs());
    let got = wheels_in(&house);
    assert_eq!(got.len(), 4, "the host and three device wheels, no shard: {collected:#}");

    // The fat build, split: the same wheels, byte for byte.
    let fat = w.join("fat");
    let mut c = quarry();
    c.args(["wheel", "build"]).arg(repo().join("tests/fixtures/hip/pyext")).arg("--image").arg(&builder);
    c.arg("-o").arg(&fat).args(["--axis", &format!("PYTORCH_ROCM_ARCH={}", TARGETS.join(";"))]);
    c.args(["--gpu", "none", "--no-build-isolation", "--split", "--json", "--cache-dir"]).arg(packages_cache());
    run_expect(&mut c, 0);
    let expected = wheels_in(&fat);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&got), names(&expected));
    for ((name, a), (_, b)) in got.iter().zip(&expected) {
        assert!(a == b, "{name}: the merged wheel differs from the split of the fat build");
    }

    // An install set per target passes `wheel check --targets`.
    let set: Vec<PathBuf> = got.iter().map(|(n, _)| house.join(n)).collect();
    for t in TARGETS {
        run_expect(quarry().args(["wheel", "check", "--targets", t]).args(&set), 0);
    }

    // pip installs the host wheel with one device extra from the collected
    // index (and rocm-bootstrap, which the host wheel requires), offline,
    // in a fresh environment; the extension imports.
    let boot = rocm_bootstrap_wheel();
    let script = "set -e\npython3 -m venv /v\n/v/bin/pip install -q --index-url file:///house/simple \
                  --find-links /boot 'hipext[device-gfx942]'\n/v/bin/pip list --format freeze\n\
                  cd /tmp && /v/bin/python -c 'import hipext; print(\"imported\")'";
    let o = run_expect(
        in_image(&builder, &[(&house, "/house"), (boot.parent().unwrap(), "/boot")]).args(["--", "sh", "-c", script]),
        0,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("hipext-device-gfx942==1.0") && out.contains("imported"), "{out}");
    assert!(!out.contains("gfx90a") && !out.contains("gfx1100"), "only the extra asked for: {out}");
}
