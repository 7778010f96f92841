//! How many compile jobs a kernel build runs: `--jobs N`, else one per core
//! of the build container with at most one per ~2 GiB of its memory (a
//! hipcc job for several targets easily takes 1-2 GiB; this is the rule of
//! flash-attention's and the seeds' build scripts). The container is asked
//! by a small probe script; its cgroup memory limit counts when lower.

/// Memory one compile job is allowed.
pub const BYTES_PER_JOB: u64 = 2 << 30;

/// Prints `cores N`, `mem_kib KIB` (MemTotal) and `limit BYTES|max` (the cgroup's) in the container.
pub const PROBE: &str = r#"echo "cores $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
echo "mem_kib $(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)"
echo "limit $(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)""#;

/// Cores and memory (bytes) as the container sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Resources {
    pub cores: u64,
    pub memory: u64,
}

/// Read [`PROBE`]'s output; None when it did not say how many cores.
pub fn parse_probe(text: &str) -> Option<Resources> {
    let mut cores = None;
    let mut memory = None;
    let mut limit = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else { continue };
        let n = v.parse::<u64>().ok();
        match k {
            "cores" => cores = n.filter(|c| *c > 0),
            "mem_kib" => memory = n.map(|kib| kib * 1024),
            "limit" => limit = n,
            _ => {}
        }
    }
    let memory = match (memory, limit) {
        (Some(m), Some(l)) => m.min(l),
        (m, l) => m.or(l).unwrap_or(0),
    };
    Some(Resources { cores: cores?, memory })
}

/// This machine's cores and memory, when the container cannot say.
pub fn host_resources() -> Resources {
    let cores = std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_probe(&format!("cores 1\n{}", meminfo_line(&t)?)))
        .map(|r| r.memory)
        .unwrap_or(0);
    Resources { cores, memory }
}

fn meminfo_line(text: &str) -> Option<String> {
    let kib = text.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim();
    Some(format!("mem_kib {kib}"))
}

/// The default job count: one per core, at most one per [`BYTES_PER_JOB`]
/// of memory (unknown memory does not limit), at least one.
pub fn default_jobs(r: Resources) -> u64 {
    let by_memory = if r.memory == 0 { u64::MAX } else { r.memory / BYTES_PER_JOB };
    r.cores.min(by_memory).max(1)
}

/// `MAX_JOBS` (PyTorch extensions, ninja), `CMAKE_BUILD_PARALLEL_LEVEL`
/// and `MAKEFLAGS=-jN`.
pub fn env(jobs: u64) -> Vec<String> {
    vec![format!("MAX_JOBS={jobs}"), format!("CMAKE_BUILD_PARALLEL_LEVEL={jobs}"), format!("MAKEFLAGS=-j{jobs}")]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn one_job_per_core_and_per_two_gib() {
        assert_eq!(default_jobs(Resources { cores: 64, memory: 32 * GIB }), 16);
        assert_eq!(default_jobs(Resources { cores: 4, memory: 64 * GIB }), 4);
        assert_eq!(default_jobs(Resources { cores: 8, memory: GIB }), 1);
        assert_eq!(default_jobs(Resources { cores: 8, memory: 0 }), 8);
        assert_eq!(default_jobs(Resources { cores: 2, memory: 5 * GIB }), 2);
        assert_eq!(env(3), ["MAX_JOBS=3", "CMAKE_BUILD_PARALLEL_LEVEL=3", "MAKEFLAGS=-j3"]);
    }

    #[test]
    fn the_probe_is_read_with_the_cgroup_limit() {
        let r = parse_probe("cores 16\nmem_kib 32000000\nlimit max\n").unwrap();
        assert_eq!(r, Resources { cores: 16, memory: 32_000_000 * 1024 });
        let limited = parse_probe("cores 16\nmem_kib 32000000\nlimit 4294967296\n").unwrap();
        assert_eq!(limited.memory, 4 * GIB);
        assert_eq!(default_jobs(limited), 2);
        assert_eq!(parse_probe("cores \nmem_kib 1000\n"), None);
        assert!(host_resources().cores >= 1);
    }
}
