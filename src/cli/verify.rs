use crate::progress::Progress;
use crate::verify::{default_source, verify, Verification, VerifyOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(mut_arg("cache_dir", |a| a.help(
    "The rebuild's cache [default: a fresh one, removed afterwards]; a cache given here is trusted for what it \
     holds (for files: where quarry's pinned patchelf comes from [default: $QUARRY_CACHE, else ~/.cache/quarry])"
)))]
pub struct Args {
    /// An OCI layout directory, a registry reference HOST[:PORT]/REPO[:TAG][@sha256:...],
    /// a wheel written by `wheel split` or `wheel merge` or a package of `rocm package`
    /// (its NAME.intoto.json beside it), or a directory of such files (a `dist/`)
    target: String,
    /// Where a file's inputs are looked for (repeatable): wheels by sha256, ROCm
    /// artifacts as the subdirectories of an artifact directory [default: the
    /// file's directory and the working directory]
    #[arg(long = "inputs", value_name = "DIR")]
    inputs: Vec<PathBuf>,
    /// The checkout holding the definitions the provenance names [default: the working directory's git checkout]
    #[arg(long, value_name = "DIR")]
    source: Option<PathBuf>,
    // `--cache-dir`: its help says what it means here (see `Args`' attribute).
    #[command(flatten)]
    cache: crate::cli::cache_args::CacheDir,
    /// Check the registry's cosign signature and attestation (for a wheel: its
    /// signed NAME.intoto.jsonl) with this public key (PEM)
    #[arg(long, value_name = "PUB")]
    key: Option<PathBuf>,
    /// Speak plain HTTP to the registry (default for 127.0.0.1 and localhost)
    #[arg(long)]
    plain_http: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// Print nothing but errors and the verdict
    #[arg(long, short)]
    quiet: bool,
}

/// Exit 0 when the rebuild reproduces the image, 1 when it differs or on an error.
pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, a.quiet);
    let key = a.key.as_deref().map(crate::signing::PublicKey::from_file).transpose()?;
    let as_path = std::path::Path::new(&a.target);
    if as_path.is_file() {
        let opts = crate::verify::files::FileOptions { inputs: a.inputs.clone(), key, cache: a.cache.lazy() };
        let v = crate::verify::files::verify_file(as_path, &opts)?;
        if a.json {
            super::print_json(&v)?;
        } else {
            out!("{}", file_text(&v));
        }
        return Ok(if v.reproduced { 0 } else { 1 });
    }
    if as_path.is_dir() && !as_path.join("index.json").exists() {
        let opts = crate::verify::files::FileOptions { inputs: a.inputs.clone(), key, cache: a.cache.lazy() };
        let v = crate::verify::files::verify_set(as_path, &opts)?;
        if a.json {
            super::print_json(&v)?;
        } else {
            let lines: String = v.files.iter().map(file_text).collect();
            let verdict = if v.reproduced { "reproduced" } else { "differs   " };
            out!("{lines}{verdict} {} ({} files)\n", v.target, v.files.len());
        }
        return Ok(if v.reproduced { 0 } else { 1 });
    }
    let opts = VerifyOptions {
        source: a.source.clone().unwrap_or_else(default_source),
        cache: a.cache.path.as_ref().map(|_| a.cache.lazy()),
        key,
        plain_http: a.plain_http.then_some(true),
        progress: Progress::new(a.json, a.quiet),
    };
    let v = verify(&a.target, &opts)?;
    if a.json {
        super::print_json(&v)?;
    } else {
        out!("{}", text(&v));
    }
    Ok(if v.reproduced { 0 } else { 1 })
}

fn text(v: &Verification) -> String {
    let mut s = String::new();
    if let Some(sig) = &v.signatures {
        s += &format!("signed     {} and {} verify with {}\n", sig.signature, sig.attestation, sig.key);
    }
    if v.reproduced {
        s += &format!("reproduced {} {} from {}\n", v.image, v.given, v.definition);
        return s;
    }
    s += &format!("differs    {}: given {}, rebuilt from {} {}\n", v.image, v.given, v.definition, v.rebuilt);
    for c in &v.config {
        s += &format!("  config {}: {} (given) vs {} (rebuilt)\n", c.field, c.from, c.to);
    }
    if let Some(l) = &v.layer {
        s += &format!(
            "  first differing layer {}: {} (given) vs {} (rebuilt)\n",
            l.index,
            l.given.as_deref().unwrap_or("none"),
            l.rebuilt.as_deref().unwrap_or("none")
        );
        for f in &l.files {
            let what = match f.change {
                "added" => "only in the rebuild".to_string(),
                "removed" => "only in the given image".to_string(),
                _ => f.what.join(", "),
            };
            s += &format!("    {}: {what}", f.path);
            if let Some(d) = &f.detail {
                s += &format!("; {d}");
            }
            s.push('\n');
        }
    }
    for i in &v.inputs {
        let show = |d: &Option<std::collections::BTreeMap<String, String>>| match d {
            Some(m) => m.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(" "),
            None => "absent".into(),
        };
        s += &format!("  input {}: {} (given) vs {} (rebuilt)\n", i.name, show(&i.given), show(&i.rebuilt));
    }
    if v.builder != crate::provenance::statement::quarry_builder().id {
        s += &format!(
            "  the given image was built by {}; this is {}\n",
            v.builder,
            crate::provenance::statement::quarry_builder().id
        );
    }
    s
}

fn file_text(v: &crate::verify::files::FileVerification) -> String {
    let mut s = String::new();
    if let Some(k) = &v.signed_by {
        s += &format!("signed     the provenance verifies with {k}\n");
    }
    for i in &v.inputs {
        s += &format!("input      {} {} at {}\n", i.name, i.digest, i.path.display());
    }
    if v.reproduced {
        s += &format!("reproduced {} {}\n", v.target, v.given);
    } else {
        s += &format!("differs    {}: given {}, rebuilt {}\n", v.target, v.given, v.rebuilt);
        if let Some(d) = &v.difference {
            s += &format!("  {d}\n");
        }
    }
    s
}
