//! The one sink for what quarry tells its user besides results: warnings,
//! notes and progress bars. Library code reports through the `log` facade
//! (`log::warn!`, `log::info!`) and never prints; the command line installs
//! this sink once, for its output mode:
//! - human: warnings (`quarry: warning: ...`) and notes (`quarry: ...`) go to
//!   stderr as they happen, above any progress bar;
//! - `--json`: warnings are collected and the JSON document carries them as
//!   `warnings: [...]` (see `cli::print_json`); notes are dropped;
//! - `--quiet`: nothing is shown.
//!
//! Without an installed sink (unit tests, library users), `log` drops everything.

use std::sync::{Mutex, OnceLock};

/// How the command line shows diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Human,
    Json,
    Quiet,
}

impl Mode {
    pub fn from_flags(json: bool, quiet: bool) -> Mode {
        if json {
            Mode::Json
        } else if quiet {
            Mode::Quiet
        } else {
            Mode::Human
        }
    }
}

struct Sink {
    mode: Mutex<Mode>,
    warnings: Mutex<Vec<String>>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

impl log::Log for Sink {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        meta.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mode = *self.mode.lock().unwrap_or_else(|e| e.into_inner());
        let text = record.args().to_string();
        let warning = record.level() <= log::Level::Warn;
        if warning {
            self.warnings.lock().unwrap_or_else(|e| e.into_inner()).push(text.clone());
        }
        if mode != Mode::Human {
            return;
        }
        let line = if warning { format!("quarry: warning: {text}") } else { format!("quarry: {text}") };
        // Printed through indicatif so a progress bar on screen is redrawn below it.
        crate::progress::print_above_bars(&line);
    }

    fn flush(&self) {}
}

/// Install the sink (once per process; later calls only change the mode).
pub fn install(mode: Mode) {
    let sink = SINK.get_or_init(|| Sink { mode: Mutex::new(mode), warnings: Mutex::new(Vec::new()) });
    *sink.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    crate::progress::set_human(mode == Mode::Human);
    if log::set_logger(sink).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// The warnings reported so far, oldest first (emptied).
pub fn take_warnings() -> Vec<String> {
    match SINK.get() {
        Some(s) => std::mem::take(&mut *s.warnings.lock().unwrap_or_else(|e| e.into_inner())),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_collected_in_json_mode_and_taken_once() {
        install(Mode::Json);
        log::warn!("first {}", 1);
        log::info!("a note is not a warning");
        log::warn!("second");
        let w = take_warnings();
        assert_eq!(w, ["first 1", "second"]);
        assert!(take_warnings().is_empty());
    }

    #[test]
    fn modes_from_flags() {
        assert_eq!(Mode::from_flags(true, true), Mode::Json);
        assert_eq!(Mode::from_flags(false, true), Mode::Quiet);
        assert_eq!(Mode::from_flags(false, false), Mode::Human);
    }
}
