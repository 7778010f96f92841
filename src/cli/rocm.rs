use crate::rocm::artifacts::{self, Selection};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Overlay artifact directories into the dist tree (the /opt/rocm layout)
    Flatten(FlattenArgs),
}

#[derive(clap::Args)]
struct FlattenArgs {
    /// The build's artifacts directory (one NAME_COMPONENT_TARGET subdirectory per artifact)
    #[arg(long)]
    artifact_dir: PathBuf,
    /// Where to write the dist tree (must be empty or new)
    #[arg(long)]
    output: PathBuf,
    /// Components to take, comma-separated (lib,run,dev,doc,dbg,test) [default: all]
    #[arg(long, value_delimiter = ',')]
    components: Vec<String>,
    /// Targets to take besides `generic`, comma-separated (gfx942,gfx1100 or families) [default: all]
    #[arg(long, value_delimiter = ',')]
    targets: Vec<String>,
    /// Print a JSON report on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    match a.command {
        Command::Flatten(f) => flatten(f),
    }
}

fn flatten(a: FlattenArgs) -> anyhow::Result<i32> {
    for c in &a.components {
        if !artifacts::COMPONENTS.contains(&c.as_str()) {
            anyhow::bail!("--components: `{c}` is not one of {}", artifacts::COMPONENTS.join(", "));
        }
    }
    let arts = artifacts::read(&a.artifact_dir)?;
    let sel = Selection { components: a.components, targets: a.targets };
    let mut tree = crate::tarball::Tree::new();
    let report = crate::rocm::flatten::into_tree(&arts, &sel, b"", None, &mut tree)?;
    crate::tarball::extract::extract_tree(&tree, &a.output)?;
    if a.json {
        super::print_json(&serde_json::json!({
            "output": a.output,
            "artifacts": report.artifacts,
            "entries": tree.len(),
            "split": arts.split_flag(),
            "targets": arts.targets(),
        }))?;
    } else {
        println!("{} artifacts, {} entries -> {}", report.artifacts.len(), tree.len(), a.output.display());
    }
    Ok(0)
}
