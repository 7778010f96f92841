//! The time stamped on rewritten wheels: SOURCE_DATE_EPOCH when set (a zip
//! time is made from it by `crate::zip::time`).

use super::WheelError;

/// SOURCE_DATE_EPOCH from the environment, when set (see `crate::epoch`).
pub fn source_date_epoch() -> Result<Option<i64>, WheelError> {
    let epoch = crate::epoch::from_env().map_err(|e| WheelError::BadEpoch { value: e.0 })?;
    Ok(epoch.map(|e| e.min(i64::MAX as u64) as i64))
}
