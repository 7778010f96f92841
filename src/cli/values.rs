//! How the engine's option types are spelled on the command line: the
//! engine knows nothing of clap, the command line maps words to them here.

use crate::engine::gpu::GpuMode;
use crate::engine::run::Network;
use clap::builder::PossibleValue;
use clap::ValueEnum;

impl ValueEnum for GpuMode {
    fn value_variants<'a>() -> &'a [Self] {
        &[GpuMode::Auto, GpuMode::Amd, GpuMode::None]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            GpuMode::Auto => "auto",
            GpuMode::Amd => "amd",
            GpuMode::None => "none",
        }))
    }
}

impl ValueEnum for Network {
    fn value_variants<'a>() -> &'a [Self] {
        &[Network::None, Network::Bridge, Network::Host]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.mode()))
    }
}

/// `--compression gzip|zstd|none`: a parser rather than `ValueEnum`, which
/// cannot be implemented here for a type of `quarry-formats`.
pub(crate) fn compression() -> impl clap::builder::TypedValueParser<Value = crate::layer::compress::Compression> {
    use crate::layer::compress::Compression;
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["gzip", "zstd", "none"]).map(|word| match word.as_str() {
        "zstd" => Compression::Zstd,
        "none" => Compression::None,
        _ => Compression::Gzip,
    })
}

impl ValueEnum for crate::engine::compiler_cache::Mode {
    fn value_variants<'a>() -> &'a [Self] {
        use crate::engine::compiler_cache::Mode;
        &[Mode::Auto, Mode::On, Mode::Off]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        use crate::engine::compiler_cache::Mode;
        Some(PossibleValue::new(match self {
            Mode::Auto => "auto",
            Mode::On => "on",
            Mode::Off => "off",
        }))
    }
}
