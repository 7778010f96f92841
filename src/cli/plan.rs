//! `quarry plan`: what a build would do, without building.

use super::build::ImageArgs;
use crate::plan::PinMode;
use crate::progress::Progress;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Print one JSON object on stdout: name, base, layers[], up_to_date, sbom
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let opts = a.image.options(Progress::hidden())?;
    let image = crate::definition::load_image(&a.image.image, &opts.sets)?;
    let cache = &opts.cache;
    let mut plan = crate::plan::make(&image, &opts.plan_options(PinMode::Locked))?;
    let output = opts.output_for(&plan.name);
    let would_write = crate::build::manifest_if_cached(&mut plan, &opts, cache)?;
    let written = crate::oci::layout::open_image(&output, Some(&plan.tag), None).ok().map(|i| i.manifest_digest);
    let up_to_date = would_write.is_some() && would_write == written;
    if a.json {
        let inv = crate::sbom::inventory(&plan, would_write.as_ref(), opts.source_date_epoch)?;
        let sbom: serde_json::Value = serde_json::from_slice(&crate::sbom::spdx_json(&inv)?)?;
        let mut doc = serde_json::to_value(&plan)?;
        let obj = doc.as_object_mut().expect("a plan is an object");
        obj.insert("output".into(), output.display().to_string().into());
        obj.insert("manifest_digest".into(), serde_json::to_value(would_write)?);
        obj.insert("up_to_date".into(), up_to_date.into());
        obj.insert("sbom".into(), sbom);
        super::print_json(&doc)?;
        return Ok(0);
    }
    outln!(
        "{}:{}  base {}{}",
        plan.name,
        plan.tag,
        plan.base.kind,
        plan.base.reference.as_ref().map(|r| format!(" {r}")).unwrap_or_default()
    );
    for n in &plan.layers {
        let key = n.key.map(|k| k.hex()[..12].to_string()).unwrap_or_else(|| "(unknown)".into());
        let state = match n.tier {
            Some(crate::cache::Tier::Local) => "cached",
            Some(crate::cache::Tier::Remote) => "in the cache registry",
            None => "to build",
        };
        // The cache key, labelled: `build` prints the layer's digest, another id.
        outln!("{:<28} {:<9} key {key:<12}  {state}", n.name, serde_json::to_value(n.kind)?.as_str().unwrap_or(""));
        if let Some(note) = &n.note {
            outln!("{:<28} {note}", "");
        }
    }
    let to_build = plan.layers.iter().filter(|n| !n.cached).count();
    if up_to_date {
        outln!("up to date: {} holds this image", output.display());
    } else if to_build == 0 {
        outln!("every layer is cached; a build writes {}", output.display());
    } else {
        outln!("{to_build} layer(s) to build");
    }
    Ok(0)
}
