use crate::diff::{diff, markdown, text};
use std::path::PathBuf;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
}

#[derive(clap::Args)]
pub struct Args {
    /// An OCI layout directory or an IMAGE.lock
    a: PathBuf,
    /// The same kind as A
    b: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    json: bool,
    /// text for a terminal, markdown for a pull request comment
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Exit 0 whatever differs (the report says); 1 on an error.
pub fn run(a: Args) -> anyhow::Result<i32> {
    super::set_output_mode(a.json, false);
    let r = diff(&a.a, &a.b)?;
    if a.json {
        super::print_json(&r)?;
    } else {
        match a.format {
            Format::Text => out!("{}", text(&r)),
            Format::Markdown => out!("{}", markdown(&r)),
        }
    }
    Ok(0)
}
