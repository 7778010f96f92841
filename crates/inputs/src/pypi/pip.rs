//! Running the user's pip: `python3 -m pip download --no-deps`, one file.

use super::{python, PypiError};
use crate::definition::{PypiFormat, PypiRequest};
use std::path::Path;
use std::process::Command;

/// `manylinux_2_N_ARCH` and every older manylinux tag it implies (with the
/// legacy aliases 2014, 2010, 1), since pip does not expand a `--platform`
/// itself before version 23.3; other tags as they are.
pub(super) fn expand_platform(tag: &str) -> Vec<String> {
    let parsed = tag.strip_prefix("manylinux_2_").and_then(|rest| {
        let (minor, arch) = rest.split_once('_')?;
        Some((minor.parse::<u32>().ok()?, arch))
    });
    let Some((minor, arch)) = parsed else { return vec![tag.to_string()] };
    let mut tags = Vec::new();
    for m in (5..=minor).rev() {
        tags.push(format!("manylinux_2_{m}_{arch}"));
        let legacy = match m {
            17 => Some("manylinux2014"),
            12 => Some("manylinux2010"),
            5 => Some("manylinux1"),
            _ => None,
        };
        if let Some(l) = legacy {
            tags.push(format!("{l}_{arch}"));
        }
    }
    tags
}

/// The arguments after `python -m pip`.
fn args(req: &PypiRequest, name: &str, pinned: Option<&str>, dest: &Path, reqfile: &Path) -> Vec<String> {
    let mut a: Vec<String> =
        ["download", "--no-deps", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    a.push("--dest".into());
    a.push(dest.display().to_string());
    match req.format {
        PypiFormat::Wheel => {
            a.extend(["--only-binary".into(), ":all:".into()]);
            if let Some(p) = &req.platform {
                for tag in expand_platform(p) {
                    a.extend(["--platform".into(), tag]);
                }
            }
            if let Some(v) = &req.python {
                a.extend(["--python-version".into(), v.clone(), "--implementation".into(), "cp".into()]);
                a.extend(["--abi".into(), format!("cp{}", v.replace('.', ""))]);
            }
        }
        // Only this package from source: its build requirements (needed to
        // read its metadata) may still come as wheels.
        PypiFormat::Sdist => a.extend(["--no-binary".into(), name.to_string()]),
    }
    match pinned {
        // A hash in a requirements file makes pip pick the file with that
        // hash among those the index offers, and check it.
        Some(_) => a.extend(["--requirement".into(), reqfile.display().to_string()]),
        None => a.extend(["--".into(), req.requirement.clone()]),
    }
    a
}

pub(super) fn download(
    req: &PypiRequest,
    name: &str,
    pinned: Option<&str>,
    dest: &Path,
    work: &Path,
) -> Result<(), PypiError> {
    let reqfile = work.join("requirements.txt");
    if let Some(sha) = pinned {
        std::fs::write(&reqfile, format!("{} --hash=sha256:{sha}\n", req.requirement))
            .map_err(|e| PypiError::Other { requirement: req.requirement.clone(), message: e.to_string() })?;
    }
    run(&req.requirement, &args(req, name, pinned, dest, &reqfile), work, pinned)
}

/// Run `python -m pip ARGS` in `work`; pip's failures become errors that
/// name `requirement` (what was asked for, for messages) and say what pip said.
pub(super) fn run(requirement: &str, args: &[String], work: &Path, pinned: Option<&str>) -> Result<(), PypiError> {
    let py = python();
    let out = Command::new(&py)
        .arg("-m")
        .arg("pip")
        .args(args)
        .env("PIP_NO_INPUT", "1")
        .current_dir(work)
        .output()
        .map_err(|err| PypiError::NoPip { requirement: requirement.to_string(), python: py.clone(), err })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{stdout}{stderr}");
    if all.contains("DO NOT MATCH THE HASHES") {
        // pip's report: "Expected sha256 X" / "Got        Y".
        let got = all
            .lines()
            .find_map(|l| l.trim().strip_prefix("Got").map(|h| h.trim().to_string()))
            .unwrap_or_else(|| "(see pip's output)".into());
        // "    ninja==1.13.0 from https://.../ninja-1.13.0-....whl (from -r ...):"
        let file = all
            .lines()
            .find_map(|l| {
                let url = l.split_once(" from ")?.1.split_whitespace().next()?;
                url.contains("://").then(|| url.rsplit('/').next().unwrap_or(url).to_string())
            })
            .unwrap_or_else(|| "?".into());
        return Err(PypiError::Mismatch {
            requirement: requirement.to_string(),
            file: file.split('#').next().unwrap_or("?").to_string(),
            expected: pinned.unwrap_or_default().to_string(),
            actual: got,
        });
    }
    if all.contains("No matching distribution found") || all.contains("Could not find a version that satisfies") {
        let mut detail = all
            .lines()
            .find(|l| l.contains("No matching distribution found"))
            .or_else(|| all.lines().find(|l| l.contains("Could not find a version")))
            .map(|l| l.trim().trim_start_matches("ERROR: ").to_string())
            .unwrap_or_default();
        if unreachable_index(&all) {
            detail.push_str("; pip could not reach the package index (see its configuration: index-url, proxy)");
        }
        return Err(PypiError::NotFound { requirement: requirement.to_string(), detail });
    }
    if out.status.code() == Some(1) && stderr.contains("No module named pip") {
        return Err(PypiError::NoPip {
            requirement: requirement.to_string(),
            python: py,
            err: std::io::Error::other("No module named pip"),
        });
    }
    let tail: Vec<&str> = all.lines().rev().take(15).collect();
    Err(PypiError::Pip {
        requirement: requirement.to_string(),
        command: format!("{py} -m pip {}", args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    })
}

/// pip's output says it could not connect (it then reports "no versions").
fn unreachable_index(output: &str) -> bool {
    ["NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution", "ConnectTimeoutError"]
        .iter()
        .any(|m| output.contains(m))
}

#[cfg(test)]
mod tests {
    #[test]
    fn platforms_expand() {
        let t = super::expand_platform("manylinux_2_28_x86_64");
        assert_eq!(t[0], "manylinux_2_28_x86_64");
        assert!(t.contains(&"manylinux2014_x86_64".to_string()) && t.contains(&"manylinux1_x86_64".to_string()));
        assert_eq!(t.last().unwrap(), "manylinux1_x86_64");
        assert_eq!(super::expand_platform("linux_x86_64"), ["linux_x86_64"]);
    }
}
