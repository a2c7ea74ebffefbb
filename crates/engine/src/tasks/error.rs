//! Why a task did not end: its problems, each with its typed cause, kept
//! until the queue takes them as text (a set-aside task's error is read by
//! `accord cluster errors` from any machine).

use crate::mirror::error::{Failure, Fatal};
use accord_model::RelPath;
use accord_plan::Refusal;
use accord_queue::QueueError;
use std::fmt;
use std::io;

/// Why a task run cannot start, or a worker cannot go on with it: the
/// whole run's failures (a task's own are [`TaskError`]).
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    /// A root cannot be opened, or the roots are one or nested.
    #[error(transparent)]
    Roots(#[from] Fatal),
    /// The run's queue failed a call.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The queue holds no run of that name.
    #[error("the run does not exist (no settings in the queue)")]
    NoSuchRun,
    /// The run's settings in the queue do not decode.
    #[error("the run's settings are damaged: {0}")]
    DamagedSpec(#[source] accord_proto::ProtoError),
    /// The run's exclude patterns do not compile (`what`: how the user
    /// gave them).
    #[error("{what}: {source}")]
    Excludes {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// A root's own directory cannot be listed (the scanner's message, if
    /// it gave one).
    #[error("{root}: cannot be read{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    RootUnreadable {
        root: String,
        detail: Option<String>,
    },
    #[error("cannot start a thread pool: {0}")]
    ThreadPool(#[source] rayon::ThreadPoolBuildError),
    #[error("a worker thread panicked")]
    Panicked,
    /// The end-of-run flush of the destination failed: what the run wrote
    /// may not survive a crash.
    #[error("flushing the destination: {0}")]
    Flush(#[source] io::Error),
}

/// Why a task did not end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    /// Per path: the task is tried again, then set aside with this.
    #[error("{0}")]
    Failed(Problems),
    /// Another attempt cannot mend it (the destination is full, the roots
    /// are nested): set aside at once, and the run ends in error.
    #[error("{0}")]
    Fatal(Problems),
    /// The queue could not be reached: nothing is acknowledged.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl TaskError {
    /// A task that failed for one reason.
    pub(crate) fn failed(problem: impl Into<Problem>) -> TaskError {
        TaskError::Failed(Problems(vec![problem.into()]))
    }
}

/// One thing that went wrong in a task.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Problem {
    /// A path the mirror's own code failed (its error keeps the cause).
    #[error(transparent)]
    Path(Failure),
    /// What stopped the mirror's code (a full disk, a failed flush).
    #[error(transparent)]
    Stopped(Fatal),
    /// The planner refused the directory (the deletion guard, nested roots).
    #[error(transparent)]
    Refused(Refusal),
    /// An operation on a path failed (`what`: the operation and the path).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The task's own account: a check that found a copy wrong, a claim
    /// in the queue's store that does not decode.
    #[error("{0}")]
    Said(String),
}

impl From<Failure> for Problem {
    fn from(f: Failure) -> Problem {
        Problem::Path(f)
    }
}

impl From<Fatal> for Problem {
    fn from(f: Fatal) -> Problem {
        Problem::Stopped(f)
    }
}

impl From<Refusal> for Problem {
    fn from(r: Refusal) -> Problem {
        Problem::Refused(r)
    }
}

impl From<String> for Problem {
    fn from(s: String) -> Problem {
        Problem::Said(s)
    }
}

impl Problem {
    /// `source` while doing `what` to `path`.
    pub(crate) fn io(what: &str, path: &RelPath, source: io::Error) -> Problem {
        Problem::Io {
            what: format!("{what} {}", path.display()),
            source,
        }
    }
}

/// A task's problems, shown as one text: the first 20, then how many more.
#[derive(Debug, Default)]
pub(crate) struct Problems(pub Vec<Problem>);

/// Problems shown in one error text at most.
const SHOWN: usize = 20;

impl Problems {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn push(&mut self, problem: impl Into<Problem>) {
        self.0.push(problem.into());
    }

    pub(crate) fn extend(&mut self, more: Problems) {
        self.0.extend(more.0);
    }

    /// The problems shown one per line (the same first 20 as one text):
    /// a local run prints each as the walk prints a failure. A line break
    /// inside a problem's own text is shown as a space, so that each line
    /// is one problem.
    pub(crate) fn lines(&self) -> String {
        let mut lines: Vec<String> = self
            .0
            .iter()
            .take(SHOWN)
            .map(|p| p.to_string().replace('\n', " "))
            .collect();
        if self.0.len() > SHOWN {
            lines.push(format!("and {} more", self.0.len() - SHOWN));
        }
        lines.join("\n")
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        if self.0.len() > SHOWN {
            write!(f, "; and {} more", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}
