//! Progress bars (indicatif) on stderr, shown only when stdout is a terminal
//! and neither `--json` nor `--quiet` is set. Part of the diagnostics sink
//! (see `diagnostics`): every bar hangs off one `MultiProgress`, so notes and
//! warnings print above the bars instead of through them.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::OnceLock;

static BARS: OnceLock<MultiProgress> = OnceLock::new();

fn bars() -> &'static MultiProgress {
    BARS.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// Print one line on stderr, above whatever bars are on screen.
pub(crate) fn print_above_bars(line: &str) {
    match BARS.get() {
        Some(m) => m.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

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
        let b = bars().add(ProgressBar::new(total));
        b.set_style(
            ProgressStyle::with_template("{msg:24} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        b.set_message(msg.into());
        b
    }
}
