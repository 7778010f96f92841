//! quarry's ground floor: what every other crate may use and which uses
//! nothing of quarry's. The one sink for warnings and notes
//! ([`diagnostics`], with its [`progress`] bars), per-stage timers
//! ([`trace`]), `SOURCE_DATE_EPOCH` ([`epoch`]), package URLs ([`purl`]),
//! files described as byte parts ([`splice`]) and bytes read once without
//! filling the page cache ([`read_once`]).

pub mod diagnostics;
pub mod epoch;
pub mod progress;
pub mod purl;
pub mod read_once;
pub mod splice;
pub mod trace;
