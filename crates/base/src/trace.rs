//! Per-stage timers for profiling, on when `QUARRY_TRACE=1`. Library code
//! wraps a stage in `trace::span("name")`; the command line prints
//! `trace::summary()` at the end of a build (and of `matrix run`). Each
//! stage gets its wall time, the CPU time of the thread that ran the span
//! and the CPU time of the whole process meanwhile (which, unlike wall
//! time, a busy shared machine does not inflate). Spans of a stage that
//! runs many times or on several threads add up, so their wall total may
//! exceed the build's. When tracing is off a span costs one load of a
//! `OnceLock`.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A stage's totals.
#[derive(Clone, Copy, Default)]
struct Totals {
    wall: Duration,
    thread_cpu: Duration,
    process_cpu: Duration,
    spans: u64,
}

/// Per stage, in first-seen order.
static TOTALS: Mutex<Vec<(&'static str, Totals)>> = Mutex::new(Vec::new());

/// Is `QUARRY_TRACE=1` set? Read once.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("QUARRY_TRACE").is_ok_and(|v| v == "1"))
}

fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(clock, &mut t) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn record(stage: &'static str, add: Totals) {
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let entry = match totals.iter().position(|(name, _)| *name == stage) {
        Some(i) => &mut totals[i].1,
        None => {
            totals.push((stage, Totals::default()));
            &mut totals.last_mut().expect("just pushed").1
        }
    };
    entry.wall += add.wall;
    entry.thread_cpu += add.thread_cpu;
    entry.process_cpu += add.process_cpu;
    entry.spans += add.spans;
}

/// A running timer: its times are added to its stage when dropped.
pub struct Span {
    stage: &'static str,
    start: Option<(Instant, Duration, Duration)>,
}

/// Time a stage until the returned span is dropped.
pub fn span(stage: &'static str) -> Span {
    let start = enabled()
        .then(|| (Instant::now(), cpu_time(libc::CLOCK_THREAD_CPUTIME_ID), cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID)));
    Span { stage, start }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((wall, thread, process)) = self.start {
            let took = Totals {
                wall: wall.elapsed(),
                thread_cpu: cpu_time(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(thread),
                process_cpu: cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID).saturating_sub(process),
                spans: 1,
            };
            record(self.stage, took);
        }
    }
}

/// Add a stage timed elsewhere (another process: the sandbox's inside),
/// its CPU counted as the process's.
pub fn add(stage: &'static str, wall: Duration, cpu: Duration) {
    if enabled() {
        record(stage, Totals { wall, thread_cpu: cpu, process_cpu: cpu, spans: 1 });
    }
}

/// Time `f` as `stage`.
pub fn time<T>(stage: &'static str, f: impl FnOnce() -> T) -> T {
    let _span = span(stage);
    f()
}

/// One line per stage (wall, thread CPU, process CPU in seconds, and the
/// number of spans), in first-seen order; empty when tracing is off.
pub fn summary() -> Vec<String> {
    let totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let mut lines = vec![format!("{:<34} {:>8} {:>10} {:>11}  spans", "stage", "wall s", "thread cpu", "process cpu")];
    lines.extend(totals.iter().map(|(stage, t)| {
        format!(
            "{stage:<34} {:>8.3} {:>10.3} {:>11.3}  {}",
            t.wall.as_secs_f64(),
            t.thread_cpu.as_secs_f64(),
            t.process_cpu.as_secs_f64(),
            t.spans
        )
    }));
    if totals.is_empty() {
        lines.clear();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_add_up_per_stage() {
        record("test-stage", Totals { wall: Duration::from_millis(5), spans: 1, ..Totals::default() });
        record("test-stage", Totals { wall: Duration::from_millis(7), spans: 1, ..Totals::default() });
        let line = summary().into_iter().find(|l| l.starts_with("test-stage")).expect("the stage is listed");
        assert!(line.contains(" 0.012 ") && line.ends_with("  2"), "{line}");
        assert!(cpu_time(libc::CLOCK_THREAD_CPUTIME_ID) > Duration::ZERO);
    }
}
