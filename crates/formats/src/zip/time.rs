//! The time stamped on written zips, made from a Unix time (zip's DOS
//! times cover 1980..2107 in two-second steps, with no time zone).

use zip::DateTime;

/// A zip timestamp for a Unix time: UTC, clipped to the zip range
/// (1980-01-01 .. 2107-12-31), seconds rounded down to even.
pub fn zip_time(epoch: i64) -> DateTime {
    use chrono::{Datelike, Timelike};
    let min = 315_532_800; // 1980-01-01T00:00:00Z
    let max = 4_354_819_198; // 2107-12-31T23:59:58Z
    let t = chrono::DateTime::from_timestamp(epoch.clamp(min, max), 0).unwrap_or_default().naive_utc();
    DateTime::from_date_and_time(
        t.year() as u16,
        t.month() as u8,
        t.day() as u8,
        t.hour() as u8,
        t.minute() as u8,
        (t.second() & !1) as u8,
    )
    .unwrap_or_default()
}
