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
        println!(
            "removed {} container(s) and {} temporary image(s){}",
            r.containers_removed.len(),
            r.images_removed.len(),
            if r.kept_live > 0 {
                format!("; kept {} belonging to running quarry processes (--all removes them)", r.kept_live)
            } else {
                String::new()
            }
        );
    }
    Ok(0)
}
