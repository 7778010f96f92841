//! `quarry wheel ...`: check and repair wheels (building them in containers
//! is added on top of the engine).

mod check;
mod repair;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {
    /// Verify RECORD and report the manylinux policy, symbol versions and
    /// external libraries of wheels (native: no Python needed)
    Check(check::Args),
    /// Bundle external libraries into <pkg>.libs/, retag and rewrite a wheel
    Repair(repair::Args),
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Check(a) => check::run(a),
        Command::Repair(a) => repair::run(a),
    }
}
