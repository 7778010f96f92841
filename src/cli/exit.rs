//! How a command ends, in two ways only. `Ok(status)` is an answer the
//! command printed (0; 1 for "not reproduced", "unhealthy", "problems
//! found"; a container's own status for `run`). `Err` is a failure, and no
//! command prints it: `main` does, once, through [`report`]: the error and
//! its causes on one line, then what to do (the hint), and the exit status
//! read from the error chain by [`code`], the one place that maps errors to
//! statuses.

use crate::engine::EngineError;

/// What went wrong with some of a batch (wheels, files) while the command
/// went on with the rest: one line each, printed by `main` as errors; exit 1.
#[derive(Debug, Default, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub(crate) struct Failures(pub Vec<String>);

impl Failures {
    /// `Err` when anything failed, else `Ok(status)`.
    pub fn or_status(self, status: i32) -> anyhow::Result<i32> {
        if self.0.is_empty() {
            Ok(status)
        } else {
            Err(self.into())
        }
    }
}

/// The exit status of a failed command: the first error in the chain that
/// has a status of its own gives it (a failed container step's, 130 and 143
/// after a signal, 126/127 when the command could not run); else 1.
pub(crate) fn code(e: &anyhow::Error) -> i32 {
    e.chain().find_map(code_of).unwrap_or(1)
}

fn code_of(cause: &(dyn std::error::Error + 'static)) -> Option<i32> {
    // Each type's own mapping delegates to the errors it wraps, so the
    // outermost one found answers (transparent wrappers hide the inner error
    // from the chain).
    if let Some(e) = cause.downcast_ref::<EngineError>() {
        return Some(e.exit_code());
    }
    if let Some(e) = cause.downcast_ref::<crate::engine::step::StepError>() {
        return Some(e.exit_code());
    }
    if let Some(e) = cause.downcast_ref::<crate::kernel::KernelError>() {
        return Some(e.exit_code());
    }
    if let Some(e) = cause.downcast_ref::<crate::wheel::WheelError>() {
        return Some(e.exit_code());
    }
    if let Some(e) = cause.downcast_ref::<crate::wheel::build::WheelBuildError>() {
        return Some(e.exit_code());
    }
    if let Some(e) = cause.downcast_ref::<crate::matrix::MatrixError>() {
        return Some(e.exit_code());
    }
    None
}

/// What the user can do about the error, when an error in the chain says
/// (a hint carried beside its message, printed after it).
pub(crate) fn hint(e: &anyhow::Error) -> Option<String> {
    e.chain().find_map(|cause| {
        // As for the status: each type's `hint` asks the errors it wraps.
        if let Some(e) = cause.downcast_ref::<crate::sandbox::SandboxError>() {
            return e.hint().map(str::to_string);
        }
        if let Some(e) = cause.downcast_ref::<crate::distro::DistroError>() {
            return e.hint();
        }
        if let Some(e) = cause.downcast_ref::<crate::plan::PlanError>() {
            return e.hint();
        }
        if let Some(e) = cause.downcast_ref::<crate::build::BuildError>() {
            return e.hint();
        }
        if let Some(e) = cause.downcast_ref::<crate::matrix::MatrixError>() {
            return e.hint();
        }
        None
    })
}

/// The lines `main` prints for a failure, on stderr: each error line once,
/// then the hint.
pub(crate) fn report(e: &anyhow::Error) -> Vec<String> {
    let mut lines = match e.downcast_ref::<Failures>() {
        Some(f) => f.0.iter().map(|l| format!("quarry: error: {l}")).collect(),
        None => vec![format!("quarry: error: {}", line(e))],
    };
    if let Some(h) = hint(e) {
        lines.push(format!("quarry: hint: {h}"));
    }
    lines
}

/// The error and its causes on one line, each cause once: library errors
/// often write their cause into their own message too (`path: No such file
/// or directory`), and anyhow's chain would then repeat it.
pub(crate) fn line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = crate::wheel::WheelError::Io { path: "/tmp/x.whl".into(), source: io };
        let line = line(&anyhow::Error::new(e).context("checking `/tmp/x.whl`"));
        assert_eq!(line.matches("entity not found").count(), 1, "{line}");
        assert!(line.starts_with("checking `/tmp/x.whl`: `/tmp/x.whl`: "), "{line}");
        let chained = anyhow::anyhow!("inner cause").context("outer");
        assert_eq!(super::line(&chained), "outer: inner cause");
    }

    #[test]
    fn the_status_comes_from_the_chain_under_context() {
        let interrupted = anyhow::Error::new(EngineError::Interrupted("SIGINT")).context("cell a");
        assert_eq!(code(&interrupted), 130);
        let failed = crate::kernel::KernelError::Failed { code: 7 };
        assert_eq!(code(&anyhow::Error::new(failed).context("building")), 7);
        assert_eq!(code(&anyhow::anyhow!("plain")), 1);
        assert_eq!(code(&Failures(vec!["a".into()]).into()), 1);
    }

    #[test]
    fn each_failure_is_its_own_line_and_the_hint_comes_last() {
        let f: anyhow::Error = Failures(vec!["`a.whl`: bad".into(), "`b.whl`: worse".into()]).into();
        assert_eq!(report(&f), ["quarry: error: `a.whl`: bad", "quarry: error: `b.whl`: worse"]);
        let e =
            crate::sandbox::SandboxError::Unavailable { reason: "no newuidmap".into(), hint: "install uidmap".into() };
        let lines = report(&anyhow::Error::new(e).context("building `x.toml`"));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("quarry: error: building `x.toml`: "), "{lines:?}");
        assert!(!lines[0].contains("install uidmap"), "the hint is printed once, after: {lines:?}");
        assert_eq!(lines[1], "quarry: hint: install uidmap");
    }
}
