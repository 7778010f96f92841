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
    /// Not a terminal, but a person reads the log: one line per bar.
    lines: bool,
}

impl Progress {
    pub fn new(json: bool, quiet: bool) -> Progress {
        let shown = !json && !quiet;
        let terminal = std::io::stdout().is_terminal();
        Progress { enabled: shown && terminal, lines: shown && !terminal }
    }

    pub fn hidden() -> Progress {
        Progress { enabled: false, lines: false }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A byte-counting bar, or a hidden one.
    pub fn bytes(&self, total: u64, msg: impl Into<String>) -> ProgressBar {
        if self.lines {
            print_above_bars(&format!("quarry: {} ({})", msg.into(), human_bytes(total)));
            return ProgressBar::hidden();
        }
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

/// How phases show: not at all (`--json`, `--quiet`, library use), as a
/// bar or spinner (stdout on a terminal), or one line each (stdout piped
/// or redirected: a CI log, `quarry build > log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Show {
    Nothing,
    Bars,
    Lines,
}

static SHOW: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

fn show() -> Show {
    match SHOW.load(std::sync::atomic::Ordering::Relaxed) {
        1 => Show::Bars,
        2 => Show::Lines,
        _ => Show::Nothing,
    }
}

/// Set by the diagnostics sink: `human` output shows phases (as bars on a
/// terminal, else as lines); other modes show none.
pub(crate) fn set_human(human: bool) {
    let v = match (human, std::io::stdout().is_terminal()) {
        (false, _) => 0,
        (true, true) => 1,
        (true, false) => 2,
    };
    SHOW.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// A long phase of work (resolving, downloading, unpacking, running
/// maintainer scripts, pushing, a container step): a spinner or a byte bar
/// with its rate on a terminal, one line when the output is a log, nothing
/// with `--json` or `--quiet`. Library code starts one where it may take
/// long; it ends when dropped.
pub struct Phase {
    bar: ProgressBar,
}

impl Phase {
    /// Count `n` more bytes (or items) done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// A phase without a known amount of work: `what` with the time it takes.
pub fn phase(what: impl Into<String>) -> Phase {
    let what = what.into();
    match show() {
        Show::Nothing => Phase { bar: ProgressBar::hidden() },
        Show::Lines => {
            print_above_bars(&format!("quarry: {what}"));
            Phase { bar: ProgressBar::hidden() }
        }
        Show::Bars => {
            let b = bars().add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_message(what);
            b.enable_steady_tick(std::time::Duration::from_millis(200));
            Phase { bar: b }
        }
    }
}

/// A phase whose own output streams to the terminal (a container's): one
/// line when it starts, never a spinner drawn over that output.
pub fn announce(what: impl Into<String>) {
    if show() != Show::Nothing {
        print_above_bars(&format!("quarry: {}", what.into()));
    }
}

/// A phase of `total` bytes: a bar with bytes done and the rate.
pub fn phase_bytes(what: impl Into<String>, total: u64) -> Phase {
    let what = what.into();
    match show() {
        Show::Nothing => Phase { bar: ProgressBar::hidden() },
        Show::Lines => {
            print_above_bars(&format!("quarry: {what} ({})", human_bytes(total)));
            Phase { bar: ProgressBar::hidden() }
        }
        Show::Bars => {
            let b = bars().add(ProgressBar::new(total));
            b.set_style(
                ProgressStyle::with_template("{msg:24} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b.set_message(what);
            Phase { bar: b }
        }
    }
}

fn human_bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_silent_unless_the_output_is_for_a_person() {
        // Library use (no sink installed): nothing shows, counting is harmless.
        let p = phase_bytes("downloading", 100);
        p.inc(10);
        assert!(p.bar.is_hidden());
        drop(p);
        assert!(phase("resolving").bar.is_hidden());
    }
}
