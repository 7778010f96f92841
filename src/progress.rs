//! Progress bars (indicatif) on stderr, shown only when stdout is a terminal
//! and neither `--json` nor `--quiet` is set.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

#[derive(Debug, Clone, Copy)]
pub struct Progress {
    enabled: bool,
}

impl Progress {
    pub fn new(json: bool, quiet: bool) -> Progress {
        Progress { enabled: !json && !quiet && std::io::stdout().is_terminal() }
    }

    pub fn hidden() -> Progress {
        Progress { enabled: false }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A byte-counting bar, or a hidden one.
    pub fn bytes(&self, total: u64, msg: impl Into<String>) -> ProgressBar {
        if !self.enabled {
            return ProgressBar::hidden();
        }
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{msg:24} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        b.set_message(msg.into());
        b
    }
}
