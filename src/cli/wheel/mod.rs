//! `quarry wheel ...`: build wheels in containers, check and repair them.

mod build;
mod build_provenance;
mod check;
mod merge;
mod repair;
mod split;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {
    /// Build wheels in a container for every Python of an image and every
    /// combination of axes; label, repair and test them
    Build(Box<build::Args>),
    /// Verify RECORD and report the manylinux policy, symbol versions and
    /// external libraries of wheels (native: no Python needed)
    Check(check::Args),
    /// Bundle external libraries into <pkg>.libs/, retag and rewrite a wheel
    Repair(repair::Args),
    /// Split fat ROCm wheels into a host wheel and one device wheel per GPU
    /// target (.kpack archives), as ROCm's framework wheels ship
    Split(split::Args),
    /// Merge wheels built for disjoint GPU targets (one shard per machine)
    /// into the host and device wheels a split of the fat build gives
    Merge(merge::Args),
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Build(a) => build::run(*a),
        Command::Check(a) => check::run(a),
        Command::Repair(a) => repair::run(a),
        Command::Split(a) => split::run(a),
        Command::Merge(a) => merge::run(a),
    }
}
