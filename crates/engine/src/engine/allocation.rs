//! The GPUs a scheduler gave this job: every command that starts
//! containers with GPUs passes those and no others, as `matrix run` does (a
//! container is started by the engine, outside the job's cgroup, so the
//! scheduler's device constraint does not hold there). An explicit
//! `--gpu-devices` wins.
//!
//! Slurm 22.05, for a job given `gpu` gres whose gres.conf lists device
//! files (`Name=gpu File=/dev/dri/renderD128`), sets `SLURM_JOB_GPUS`,
//! `CUDA_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL` and `ROCR_VISIBLE_DEVICES`
//! to the global indexes of the gres it allocated (with device cgroups,
//! CUDA_VISIBLE_DEVICES is renumbered from 0; SLURM_JOB_GPUS never is).
//! quarry reads `SLURM_JOB_GPUS` and maps each index to the gres.conf
//! `File=` of that index (gres.conf beside `SLURM_CONF`, else
//! /etc/slurm/gres.conf), so only those render nodes go into the container.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, thiserror::Error)]
pub enum AllocationError {
    #[error("SLURM_JOB_GPUS=`{0}` is not a list of gres indexes")]
    BadGpus(String),
    #[error("Slurm gave gpu gres index {index}, but `{gres}` lists {count} gpu device file(s); list one `Name=gpu File=...` per GPU")]
    GresIndex { index: usize, gres: String, count: usize },
}

/// GPUs a scheduler gave, and how quarry knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Device names (`renderD129`), or indexes in render-node order.
    pub devices: Vec<String>,
    /// Said in the output beside the GPUs passed.
    pub why: String,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The gres.conf Slurm reads.
fn gres_conf() -> PathBuf {
    match env("SLURM_CONF") {
        Some(c) => Path::new(&c).with_file_name("gres.conf"),
        None => PathBuf::from("/etc/slurm/gres.conf"),
    }
}

/// `File=` values of `Name=gpu` lines, ranges expanded
/// (`/dev/dri/renderD[128-129]`), in order: gres index i is the i-th.
pub fn gpu_files(gres_conf: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in gres_conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut name = None;
        let mut file = None;
        for field in line.split_whitespace() {
            if let Some((k, v)) = field.split_once('=') {
                match k.to_ascii_lowercase().as_str() {
                    "name" => name = Some(v.to_string()),
                    "file" => file = Some(v.to_string()),
                    _ => {}
                }
            }
        }
        if let (Some("gpu"), Some(f)) = (name.as_deref(), file) {
            out.extend(expand_range(&f));
        }
    }
    out
}

/// `renderD[128-130]` -> renderD128, renderD129, renderD130 (one range, as gres.conf writes).
fn expand_range(f: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (f.find('['), f.find(']')) else { return vec![f.to_string()] };
    let (head, inner, tail) = (&f[..open], &f[open + 1..close], &f[close + 1..]);
    let mut out = Vec::new();
    for part in inner.split(',') {
        match part.split_once('-').map(|(a, b)| (a.parse::<u32>(), b.parse::<u32>())) {
            Some((Ok(a), Ok(b))) => out.extend((a..=b).map(|n| format!("{head}{n}{tail}"))),
            _ => out.push(format!("{head}{part}{tail}")),
        }
    }
    out
}

/// The GPUs Slurm gave this job, as device names quarry's `--gpu-devices`
/// takes (`renderD129`), or None when not under Slurm with gpu gres.
pub fn slurm_gpus() -> Result<Option<Allocation>, AllocationError> {
    let Some(list) = env("SLURM_JOB_GPUS") else { return Ok(None) };
    let indexes: Vec<usize> = list
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| AllocationError::BadGpus(list.clone()))?;
    let path = gres_conf();
    let files = std::fs::read_to_string(&path).map(|t| gpu_files(&t)).unwrap_or_default();
    let mut out = Vec::new();
    for i in indexes {
        match files.get(i) {
            Some(f) => out.push(Path::new(f).file_name().unwrap_or_default().to_string_lossy().into_owned()),
            // Without gres.conf (AutoDetect), the i-th render node.
            None if files.is_empty() => out.push(i.to_string()),
            None => {
                return Err(AllocationError::GresIndex {
                    index: i,
                    gres: path.display().to_string(),
                    count: files.len(),
                })
            }
        }
    }
    let why = format!(
        "Slurm gave this job gpu gres {list} (SLURM_JOB_GPUS; device files from {})",
        if files.is_empty() { "render-node order: no gres.conf".to_string() } else { path.display().to_string() }
    );
    Ok(Some(Allocation { devices: out, why }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_files_in_index_order() {
        let conf = "# two GPUs\nName=gpu File=/dev/dri/renderD128\nName=gpu Type=mi300 File=/dev/dri/renderD[129-130]\nName=mps Count=100\n";
        assert_eq!(gpu_files(conf), ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD130"]);
    }
}
