//! How the option types of the crates below are spelled on the command
//! line: they know nothing of clap, and `ValueEnum` cannot be implemented
//! here for their types (the orphan rule), so each is a parser of its words.

use crate::engine::compiler_cache::Mode as CompilerCacheMode;
use crate::engine::gpu::GpuMode;
use crate::engine::run::Network;
use crate::layer::compress::Compression;
use clap::builder::{PossibleValuesParser, TypedValueParser};

/// `--compression gzip|zstd|none`.
pub(crate) fn compression() -> impl TypedValueParser<Value = Compression> {
    PossibleValuesParser::new(["gzip", "zstd", "none"]).map(|word| match word.as_str() {
        "zstd" => Compression::Zstd,
        "none" => Compression::None,
        _ => Compression::Gzip,
    })
}

/// `--gpu auto|amd|none`.
pub(crate) fn gpu_mode() -> impl TypedValueParser<Value = GpuMode> {
    PossibleValuesParser::new(["auto", "amd", "none"]).map(|word| match word.as_str() {
        "amd" => GpuMode::Amd,
        "none" => GpuMode::None,
        _ => GpuMode::Auto,
    })
}

/// `--network none|bridge|host`, spelled as the engine's network modes.
pub(crate) fn network() -> impl TypedValueParser<Value = Network> {
    let all = [Network::None, Network::Bridge, Network::Host];
    PossibleValuesParser::new(all.map(|n| n.mode()))
        .map(move |word| all.into_iter().find(|n| n.mode() == word).unwrap_or(Network::None))
}

/// `--compiler-cache auto|on|off`.
pub(crate) fn compiler_cache() -> impl TypedValueParser<Value = CompilerCacheMode> {
    PossibleValuesParser::new(["auto", "on", "off"]).map(|word| match word.as_str() {
        "on" => CompilerCacheMode::On,
        "off" => CompilerCacheMode::Off,
        _ => CompilerCacheMode::Auto,
    })
}
