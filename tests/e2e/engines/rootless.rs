//! Rootless Podman, as an unprivileged user made by scripts/setup: runs,
//! copies and exit codes work; GPU nodes pass but their host gids mean
//! nothing in the user namespace, and quarry says so.

use super::common::engines::{have_podman, Podman};
use super::common::*;
use super::{fresh_cache, q, simulated_dev_root, Tag, PROBE};
use std::process::Command;

/// The unprivileged user scripts/setup makes for rootless Podman.
const ROOTLESS_USER: &str = "quarry-rootless";

#[test]
fn rootless_podman_runs_and_says_what_differs() {
    if !have_podman() || !have_tool("mmdebstrap") {
        return;
    }
    let known = Command::new("id").arg(ROOTLESS_USER).output().unwrap().status.success();
    if !known {
        assert!(!in_ci(), "CI is set but the user {ROOTLESS_USER} is missing: scripts/setup makes it");
        eprintln!("skipping: no user {ROOTLESS_USER} for rootless Podman");
        return;
    }
    let podman = Podman::rootless(ROOTLESS_USER);
    let ep = &podman.endpoint;
    let doc = stdout_json(&run_expect(q(ep).args(["doctor", "--json"]), 0));
    assert_eq!(doc["engine"]["rootless"], true, "{doc:#}");
    assert!(doc["engine"]["differences"].to_string().contains("rootless: host gids are not mapped"), "{doc:#}");

    let work = tempfile::tempdir().unwrap();
    let def = work.path().join("rootless.toml");
    let tag = Tag(ep, format!("{}:1", unique("rootless")));
    write(
        &def,
        &format!("name = \"{}\"\nbase = {{ rootfs = \"{}\" }}\n", unique("rootless"), debian_rootfs("").display()),
    );
    run_expect(q(ep).arg("load").arg(&def).args(["--tag", &tag.1, "--cache-dir"]).arg(fresh_cache(work.path())), 0);
    let input = work.path().join("in");
    write(&input.join("data.txt"), "payload\n");
    let back = work.path().join("back");
    let out = run_expect(
        q(ep)
            .args(["run", &tag.1, "--gpu", "none"])
            .arg("--copy-in")
            .arg(format!("{}:/in", input.display()))
            .arg("--copy-out")
            .arg(format!("/in:{}", back.display()))
            .args(["--", "sh", "-c", "cat /in/data.txt; echo more > /in/more.txt; exit 4"]),
        4,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "payload\n");
    assert_eq!(std::fs::read_to_string(back.join("more.txt")).unwrap(), "more\n");

    // GPU nodes: passed, but their host gids mean nothing in the user
    // namespace, and quarry says so instead of failing later in silence.
    let dev = simulated_dev_root();
    std::fs::set_permissions(dev.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run_expect(
        q(ep).env("QUARRY_DEV_ROOT", dev.path()).args([
            "run",
            &tag.1,
            "--gpu",
            "amd",
            "--user",
            "1000:1000",
            "--",
            "sh",
            "-c",
            PROBE,
        ]),
        // The probe's last command, reading /dev/kfd, fails: exit status 1.
        1,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("char /dev/kfd 65534") && !text.contains("kfd-readable"), "{text}");
    assert!(err.contains("rootless Podman maps no host gid into its containers"), "{err}");
    assert!(ep.leaked_containers().is_empty());
}
