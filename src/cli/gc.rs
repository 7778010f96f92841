use crate::engine::Engine;

#[derive(clap::Args)]
pub struct Args {
    /// Also remove objects of quarry processes that are still running
    #[arg(long)]
    all: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let engine = Engine::connect()?;
    let r = engine.gc(a.all)?;
    if a.json {
        super::print_json(&r)?;
    } else {
        let mut kept = Vec::new();
        if r.kept_live > 0 {
            kept.push(format!("{} belonging to running quarry processes", r.kept_live));
        }
        if r.kept_other_hosts > 0 {
            kept.push(format!("{} made by quarry on other machines", r.kept_other_hosts));
        }
        outln!(
            "removed {} container(s) and {} temporary image(s){}",
            r.containers_removed.len(),
            r.images_removed.len(),
            if kept.is_empty() { String::new() } else { format!("; kept {} (--all removes them)", kept.join(" and ")) }
        );
    }
    Ok(0)
}
