//! `quarry cache du` and `quarry cache prune`: the local cache's size per
//! bucket, and removing what was used least recently (see `cache::usage`).

use crate::cache::usage::{self, PruneOptions};
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Size of the local cache per bucket (layers, kernel outputs, wheels, compiler objects...)
    Du(DuArgs),
    /// Remove cache entries, least recently used first; never one a running build uses
    Prune(PruneArgs),
}

#[derive(clap::Args)]
pub struct DuArgs {
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Print JSON: buckets[] of {bucket, entries, bytes}, total_bytes
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct PruneArgs {
    /// Remove least recently used entries until the cache holds at most SIZE (10G, 500M, 4096)
    #[arg(long, value_name = "SIZE")]
    keep_bytes: Option<String>,
    /// Remove entries not used for DAYS days (fractions allowed)
    #[arg(long, value_name = "DAYS")]
    older_than: Option<f64>,
    /// Show what would be removed; remove nothing
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Du(a) => du(a),
        Command::Prune(a) => prune(a),
    }
}

fn du(a: DuArgs) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let dir = a.cache.dir();
    let (buckets, scratch) = usage::du(&dir)?;
    let total: u64 = buckets.iter().map(|b| b.bytes).sum::<u64>() + scratch;
    if a.json {
        super::print_json(&serde_json::json!({
            "cache_dir": dir, "buckets": buckets, "scratch_bytes": scratch, "total_bytes": total
        }))?;
        return Ok(0);
    }
    outln!("{:<18} {:>8} {:>12}", "bucket", "entries", "size");
    for b in &buckets {
        outln!("{:<18} {:>8} {:>12}", b.bucket.name(), b.entries, super::human_size(b.bytes));
    }
    outln!("{:<18} {:>8} {:>12}", "tmp (running)", "", super::human_size(scratch));
    outln!("{:<18} {:>8} {:>12}   {}", "total", "", super::human_size(total), dir.display());
    Ok(0)
}

fn prune(a: PruneArgs) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let keep_bytes = a.keep_bytes.as_deref().map(usage::parse_size).transpose()?;
    let older_than = match a.older_than {
        Some(d) if !(d.is_finite() && d >= 0.0) => anyhow::bail!("--older-than {d}: give a number of days, 0 or more"),
        Some(d) => Some(Duration::from_secs_f64(d * 86400.0)),
        None => None,
    };
    if keep_bytes.is_none() && older_than.is_none() {
        anyhow::bail!("say what to remove: --keep-bytes SIZE (e.g. 20G) and/or --older-than DAYS");
    }
    let dir = a.cache.dir();
    let r = usage::prune(&dir, &PruneOptions { keep_bytes, older_than, dry_run: a.dry_run })?;
    if a.json {
        super::print_json(&r)?;
        return Ok(0);
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    outln!(
        "{verb} {} entr{} ({}): {} -> {}",
        r.removed,
        if r.removed == 1 { "y" } else { "ies" },
        super::human_size(r.freed_bytes),
        super::human_size(r.bytes_before),
        super::human_size(r.bytes_after)
    );
    if r.scratch_freed_bytes > 0 {
        outln!("removed {} that killed builds left in tmp/", super::human_size(r.scratch_freed_bytes));
    }
    if r.in_use > 0 {
        outln!("kept {} entr{} a running build uses", r.in_use, if r.in_use == 1 { "y" } else { "ies" });
    }
    Ok(0)
}
