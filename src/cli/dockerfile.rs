use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The image definition (images/NAME.toml)
    image: PathBuf,
    /// Set a parameter: --set NAME=VALUE (repeatable)
    #[arg(long = "set", value_name = "K=V")]
    sets: Vec<String>,
    /// The docker build context the paths are written against [default: the parent of the image's directory]
    #[arg(long)]
    context: Option<PathBuf>,
    /// Write to FILE instead of stdout
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let sets = crate::definition::parse_sets(&a.sets).map_err(|e| anyhow::anyhow!(e))?;
    let image = crate::definition::load_image(&a.image, &sets)?;
    let context = a.context.unwrap_or_else(|| {
        let dir = a.image.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        dir.join("..")
    });
    let text = crate::dockerfile::render(&image, &context)?;
    match a.output {
        Some(path) => {
            std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("cannot write `{}`: {e}", path.display()))?
        }
        None => out!("{text}"),
    }
    Ok(0)
}
