//! `SOURCE_DATE_EPOCH` (reproducible-builds.org): the one place it is read.
//! Layers clamp file times to it, wheels and ROCm packages stamp zip entries
//! with it, image configs carry it as their creation time.

/// `SOURCE_DATE_EPOCH` is set but is not a time quarry can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SOURCE_DATE_EPOCH=`{0}` is not a whole number of seconds since 1970-01-01; unset it or give e.g. 1700000000")]
pub struct BadEpoch(pub String);

/// The value of `SOURCE_DATE_EPOCH`, when set and not empty.
pub fn from_env() -> Result<Option<u64>, BadEpoch> {
    parse(std::env::var("SOURCE_DATE_EPOCH").ok().as_deref())
}

/// `SOURCE_DATE_EPOCH`, else 0 (1970-01-01): quarry's default, so that
/// nothing built depends on when it was built.
pub fn from_env_or_zero() -> Result<u64, BadEpoch> {
    Ok(from_env()?.unwrap_or(0))
}

fn parse(value: Option<&str>) -> Result<Option<u64>, BadEpoch> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => v.parse::<u64>().map(Some).map_err(|_| BadEpoch(v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_whole_seconds_and_refuses_the_rest() {
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(" ")), Ok(None));
        assert_eq!(parse(Some("1700000000\n")), Ok(Some(1_700_000_000)));
        for bad in ["-1", "1.5", "yesterday"] {
            assert!(parse(Some(bad)).unwrap_err().to_string().contains(bad), "{bad}");
        }
    }
}
