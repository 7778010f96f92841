use crate::cli::image_arg::{self, ImageArg};
use crate::engine::Engine;
use crate::progress::Progress;
use anyhow::bail;

#[derive(clap::Args)]
pub struct Args {
    /// An OCI layout directory, or an image definition (.toml) to build first
    image: String,
    /// Name in the engine (NAME:TAG) [default: the layout's directory name and tag, or the definition's name:tag]
    #[arg(long)]
    tag: Option<String>,
    #[command(flatten)]
    def: super::DefinitionArgs,
    /// Print one JSON object on stdout: image_id, tag, layers_sent, layers_skipped
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let cache = a.def.cache.open()?;
    let (dir, default_tag) = match image_arg::classify(&a.image)? {
        ImageArg::Layout(d) => {
            let t = image_arg::layout_tag(&d)?;
            (d, t)
        }
        ImageArg::Definition(f) => {
            image_arg::build_for_engine(&f, &a.def.sets, &cache, Progress::new(a.json, false))?
        }
        ImageArg::Reference(r) => bail!("`{r}` is neither an OCI layout directory nor an image definition (.toml); `quarry load` loads those into the engine"),
    };
    let tag = a.tag.unwrap_or(default_tag);
    let engine = Engine::connect()?;
    let r = engine.load_layout(&dir, &tag, &cache.tmp_dir())?;
    if a.json {
        super::print_json(&r)?;
    } else {
        outln!(
            "loaded {} as {} ({} layer(s) sent, {} already in the engine{})",
            super::short_digest(&r.image_id),
            r.tag,
            r.layers_sent,
            r.layers_skipped,
            if r.layers_recompressed > 0 {
                format!(", {} recompressed zstd -> gzip", r.layers_recompressed)
            } else {
                String::new()
            }
        );
    }
    Ok(0)
}
