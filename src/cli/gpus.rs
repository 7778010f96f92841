use crate::engine::gpu;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Out {
    gpus: Vec<gpu::GpuInfo>,
    nodes: Vec<gpu::DeviceNode>,
    targets: Vec<String>,
    targets_source: String,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let gpus = gpu::detect()?;
    let targets = gpu::build_targets(&gpus);
    if a.json {
        super::print_json(&Out {
            nodes: gpu::device_nodes(),
            targets: targets.targets.clone(),
            targets_source: targets.source,
            gpus,
        })?;
        return Ok(0);
    }
    if gpus.is_empty() {
        outln!("no AMD GPU in the KFD topology under {}", gpu::sysfs_root().display());
    } else {
        outln!("{:<6} {:<10} {:<14} {:<12} gid", "node", "target", "family", "render");
        for g in &gpus {
            outln!(
                "{:<6} {:<10} {:<14} {:<12} {}",
                g.node,
                g.gfx_target,
                g.family,
                g.render_node.as_deref().unwrap_or("-"),
                g.gid.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
            );
        }
    }
    outln!("build targets ({}): {}", targets.source, targets.joined());
    Ok(0)
}
