//! One log line per task a worker finishes (`accord worker`'s log, at
//! info; a failure at warn): the task in words, what it held, the outcome
//! and how long it took. Through `tracing`: a process that keeps no log
//! (a local task run at a terminal) sets no subscriber, and the lines cost
//! nothing there.

use crate::tasks::error::TaskError;
use crate::tasks::run::Outcome;
use crate::tasks::Task;
use accord_plan::Op;
use std::time::Duration;

/// Log how `task` ended after `took`.
pub(crate) fn finished(task: &Task, result: &Result<Outcome, TaskError>, took: Duration) {
    // The words are made inside each macro: only when its level is on, so
    // a process that keeps no log pays nothing per task.
    let secs = took.as_secs_f64();
    match result {
        Ok(Outcome::Done) => tracing::info!("{}: done in {secs:.2} s", words(task)),
        Ok(Outcome::Parked) => tracing::info!(
            "{}: waiting for the tasks it depends on ({secs:.2} s)",
            words(task)
        ),
        Ok(Outcome::Later) => {
            tracing::debug!("{}: put back for later ({secs:.2} s)", words(task))
        }
        Err(TaskError::Failed(problems)) => tracing::warn!(
            "{}: failed after {secs:.2} s ({}); it is tried again, or set aside",
            words(task),
            problems.lines().replace('\n', "; ")
        ),
        Err(TaskError::Fatal(problems)) => tracing::error!(
            "{}: the run cannot go on ({})",
            words(task),
            problems.lines().replace('\n', "; ")
        ),
        Err(TaskError::Queue(e)) => tracing::warn!(
            "{}: the queue could not be reached ({e}); the task is handed on",
            words(task)
        ),
    }
}

/// "copying photos/a.jpg (and 119 more), 120 files of 3566912 bytes".
fn words(task: &Task) -> String {
    let mut out = task.in_words();
    if let Task::Files { items, .. } = task {
        let written = items.iter().filter(|i| matches!(i.op, Op::Write(_)));
        let (files, bytes) = written.fold((0u64, 0u64), |(n, b), i| {
            (n + 1, b + i.src.as_deref().map_or(0, |e| e.size))
        });
        out += &format!(", {files} files of {bytes} bytes");
    }
    out
}
