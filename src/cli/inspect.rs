use crate::oci::layout::open_image;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// An OCI layout directory or OCI archive
    path: PathBuf,
    /// Which image (tag or sha256 digest) when the layout holds several
    #[arg(long = "ref")]
    reference: Option<String>,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let img = open_image(&a.path, a.reference.as_deref(), None)?;
    let diff_ids = img.config.rootfs().diff_ids().clone();
    let layers: Vec<serde_json::Value> = img
        .manifest
        .layers()
        .iter()
        .enumerate()
        .map(|(i, l)| {
            serde_json::json!({
                "digest": l.digest().to_string(),
                "diff_id": diff_ids.get(i),
                "size": l.size(),
                "media_type": l.media_type().to_string(),
            })
        })
        .collect();
    let total: u64 = img.manifest.layers().iter().map(|l| l.size()).sum();
    let referrers: Vec<serde_json::Value> = crate::oci::referrer::referrers(&a.path, &img.manifest_digest)?
        .iter()
        .map(|r| serde_json::json!({ "artifact_type": r.artifact_type(), "digest": r.descriptor.digest().to_string() }))
        .collect();
    if a.json {
        super::print_json(&serde_json::json!({
            "path": a.path,
            "tag": img.tag,
            "manifest_digest": img.manifest_digest,
            "config_digest": img.config_digest,
            "platform": format!("{}/{}", img.config.os(), img.config.architecture()),
            "layers": layers,
            "size": total,
            "config": img.config.config(),
            "history": img.config.history(),
            "referrers": referrers,
        }))?;
        return Ok(0);
    }
    outln!("image     {}", a.path.display());
    if let Some(t) = &img.tag {
        outln!("tag       {t}");
    }
    outln!("manifest  {}", img.manifest_digest);
    outln!("config    {}", img.config_digest);
    outln!("platform  {}/{}", img.config.os(), img.config.architecture());
    outln!("layers    {} ({})", layers.len(), super::human_size(total));
    for (i, l) in img.manifest.layers().iter().enumerate() {
        outln!(
            "  {:>2}  {}  {:>10}  {}",
            i,
            super::short_digest(l.digest()),
            super::human_size(l.size()),
            l.media_type()
        );
    }
    for r in &referrers {
        outln!("referrer  {} {}", r["artifact_type"].as_str().unwrap_or(""), r["digest"].as_str().unwrap_or(""));
    }
    if let Some(c) = img.config.config() {
        if let Some(e) = c.entrypoint() {
            outln!("entrypoint {e:?}");
        }
        if let Some(c2) = c.cmd() {
            outln!("cmd       {c2:?}");
        }
        if let Some(w) = c.working_dir() {
            outln!("workdir   {w}");
        }
        if let Some(u) = c.user() {
            outln!("user      {u}");
        }
        for e in c.env().clone().unwrap_or_default() {
            outln!("env       {e}");
        }
    }
    Ok(0)
}
