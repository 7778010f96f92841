//! cosign and skopeo (Debian 13's), in an engine image quarry builds from
//! `tests/fixtures/sigstore-tools-debian13.toml`: the signature checkers
//! quarry's signatures are judged by.

use super::*;
use std::path::Path;
use std::process::{Command, Output};

/// The engine's image holding cosign and skopeo, built and loaded once per
/// definition.
pub fn tools_image() -> String {
    let def = repo().join("tests/fixtures/sigstore-tools-debian13.toml");
    let tag = quarry::oci::digest::sha256_hex(&std::fs::read(&def).unwrap())[..12].to_string();
    let name = format!("quarry-sigstore-tools:{tag}");
    with_lock("sigstore-tools", || {
        let present = Command::new("docker").args(["image", "inspect", &name]).output().unwrap();
        if !present.status.success() {
            let out = fixtures_dir().join(format!("sigstore-tools-{tag}"));
            let mut b = quarry();
            b.arg("build").arg(&def).arg("--cache-dir").arg(packages_cache()).arg("-o").arg(&out).arg("--quiet");
            run_expect(&mut b, 0);
            run_expect(quarry().arg("load").arg(&out).arg("--tag").arg(&name), 0);
        }
    });
    name
}

/// `args` run in the tools image with `dir` at /w, on the host's network.
pub fn tool(image: &str, dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("docker");
    c.args(["run", "--rm", "--network", "host", "-e", "COSIGN_PASSWORD=test-password", "-w", "/w", "-v"]);
    c.arg(format!("{}:/w", dir.display())).arg(image).args(args);
    c.output().unwrap()
}
