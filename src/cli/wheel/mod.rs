//! `quarry wheel ...`: build wheels in containers, check and repair them.

mod build;
mod check;
mod repair;

use crate::engine::image_arg::{self, ImageArg};
use crate::engine::Engine;
use crate::progress::Progress;
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum Command {
    /// Build wheels in a container for every Python of an image and every
    /// combination of axes; label, repair and test them
    Build(build::Args),
    /// Verify RECORD and report the manylinux policy, symbol versions and
    /// external libraries of wheels (native: no Python needed)
    Check(check::Args),
    /// Bundle external libraries into <pkg>.libs/, retag and rewrite a wheel
    Repair(repair::Args),
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Build(a) => build::run(a),
        Command::Check(a) => check::run(a),
        Command::Repair(a) => repair::run(a),
    }
}

/// The engine reference of an IMAGE argument (as for `quarry run`): an OCI
/// layout or an image definition is built if needed and loaded first.
fn image_in_engine(engine: &Engine, arg: &str, sets: &[String], cache_dir: &Path) -> anyhow::Result<String> {
    Ok(match image_arg::classify(arg)? {
        ImageArg::Layout(d) => {
            let tag = image_arg::layout_tag(&d)?;
            engine.load_layout(&d, &tag, cache_dir)?;
            tag
        }
        ImageArg::Definition(f) => {
            let (dir, tag) = crate::cli::build_definition_for_engine(&f, sets, cache_dir, Progress::new(false, false))?;
            engine.load_layout(&dir, &tag, cache_dir)?;
            tag
        }
        ImageArg::Reference(r) => r,
    })
}
