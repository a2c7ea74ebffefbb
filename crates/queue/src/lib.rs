//! The task queue of parallel and distributed mirrors: tasks pushed by
//! whoever plans, leased by workers, acknowledged when done, handed out
//! again when their worker fails or disappears, and set aside (with their
//! error) after too many attempts. A run can be paused, resumed and
//! stopped from anywhere. Beside the queue, the small shared store a run
//! needs: claims taken once (the first worker to see an inode copies it)
//! and counters (a directory's properties wait for its subtree).
//!
//! Tasks are opaque bytes here: the queue knows nothing of files, deltas
//! or FUSE. Two implementations: [`MemoryQueue`] (one process: the local
//! executor, and tests of the layers above) and [`RedisQueue`] (Redis
//! Streams with a consumer group, shared by any number of machines).

mod memory;
mod redis_queue;

pub use memory::MemoryQueue;
pub use redis_queue::{list_runs, RedisQueue, RedisTarget};

use std::fmt;
use std::time::Duration;

/// A task's identity within its queue (opaque; Redis stream ids look like
/// `1700000000000-0`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub String);

/// A task handed to a worker, until it is acknowledged or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: TaskId,
    pub task: Vec<u8>,
    /// Attempts before this one that failed or whose worker was lost.
    pub attempts: u32,
    /// The worker it was handed to: a failure reported by a worker whose
    /// lease was since handed to another changes nothing.
    pub worker: String,
}

/// A task set aside after too many attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadTask {
    pub task: Vec<u8>,
    pub attempts: u32,
    pub error: String,
}

/// Whether a run hands out tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Running,
    /// No task is handed out; leased ones may finish. Resumes where it was.
    Paused,
    /// As paused, and workers leave; a restart goes on where it stopped.
    Stopped,
}

impl RunState {
    pub fn name(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Stopped => "stopped",
        }
    }

    pub fn from_name(name: &str) -> Option<RunState> {
        [RunState::Running, RunState::Paused, RunState::Stopped]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// What a queue holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Pushed and not yet handed out, or handed out again.
    pub waiting: u64,
    /// Handed out and not yet acknowledged or failed.
    pub leased: u64,
    pub done: u64,
    pub dead: u64,
}

/// The rules of a queue.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// A lease older than this is taken to belong to a lost worker: its
    /// task is handed to another (counting as an attempt).
    pub claim_timeout: Duration,
    /// Attempts (failures and lost workers) after which a task is dead.
    pub max_attempts: u32,
}

impl Policy {
    /// A claim timeout of zero would hand every lease to the next worker
    /// that asks; a run needs at least one attempt.
    pub fn check(&self) -> Result<(), QueueError> {
        if self.claim_timeout.is_zero() || self.max_attempts == 0 {
            return Err(QueueError::Refused(format!(
                "a claim timeout above zero and at least one attempt (got {:?}, {})",
                self.claim_timeout, self.max_attempts
            )));
        }
        Ok(())
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            claim_timeout: Duration::from_secs(300),
            max_attempts: 5,
        }
    }
}

/// Why a queue call failed.
#[derive(Debug)]
pub enum QueueError {
    /// The store cannot be reached now (a worker waits and tries again).
    Unavailable(String),
    /// The store answered something this queue did not write.
    Corrupt(String),
    /// A call that cannot succeed (a bad address, a refused password).
    Refused(String),
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::Unavailable(m) => write!(f, "the queue cannot be reached: {m}"),
            QueueError::Corrupt(m) => write!(f, "the queue holds something unexpected: {m}"),
            QueueError::Refused(m) => write!(f, "the queue refused: {m}"),
        }
    }
}

impl std::error::Error for QueueError {}

/// Largest task accepted (a task names paths and ranges; contents never
/// travel through the queue).
pub const MAX_TASK: usize = 1 << 20;

/// Most tasks one lease hands out.
pub const MAX_LEASE: usize = 1024;

/// Longest error kept with a dead task.
pub const MAX_ERROR: usize = 4096;

/// What a call of a [`TaskQueue`] costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallCost {
    /// A lock in this process: tasks as small as spreads the work best.
    InProcess,
    /// Round trips to a server shared by every worker: fewer, bigger tasks.
    Remote,
}

/// Most additions in one `add_many`.
pub const MAX_ADDS: usize = 4096;

/// One addition of [`TaskQueue::add_many`]: `delta` to the counter
/// `counter`, unless `mark` is given and set already (then it is set by
/// this call when it was not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Add {
    pub mark: Option<Vec<u8>>,
    pub counter: Vec<u8>,
    pub delta: i64,
}

impl Add {
    /// An addition made at most once, whoever asks again with `mark`.
    pub fn once(mark: Vec<u8>, counter: &[u8], delta: i64) -> Add {
        Add {
            mark: Some(mark),
            counter: counter.to_vec(),
            delta,
        }
    }

    /// An addition made every time (figures such as files written).
    pub fn always(counter: &[u8], delta: i64) -> Add {
        Add {
            mark: None,
            counter: counter.to_vec(),
            delta,
        }
    }
}

fn check_adds(adds: &[Add]) -> Result<(), QueueError> {
    if adds.len() > MAX_ADDS {
        return Err(QueueError::Refused(format!(
            "{} additions at once (at most {MAX_ADDS})",
            adds.len()
        )));
    }
    if adds
        .iter()
        .any(|a| a.mark.as_ref().is_some_and(Vec::is_empty))
    {
        return Err(QueueError::Refused("an empty mark".into()));
    }
    Ok(())
}

/// A queue of tasks shared by the workers of one run.
pub trait TaskQueue: Send + Sync {
    /// Add tasks (one round trip however many; each at most `MAX_TASK`).
    fn push(&self, tasks: &[Vec<u8>]) -> Result<(), QueueError>;
    /// Up to `max` tasks for `worker`, waiting at most `wait` for one:
    /// waiting tasks first, else tasks whose lease passed the claim
    /// timeout. None while the run is paused or stopped.
    fn lease(&self, worker: &str, max: usize, wait: Duration) -> Result<Vec<Lease>, QueueError>;
    /// The workers of `leases` are alive and at work on them: each one's
    /// claim timeout starts again, so a task that takes longer than the
    /// timeout is not handed to another. A lease handed to another worker
    /// meanwhile stays the other's.
    fn renew(&self, leases: &[Lease]) -> Result<(), QueueError>;
    /// How long a lease lasts unless renewed.
    fn claim_timeout(&self) -> Duration;
    /// Done: never handed out again.
    fn ack(&self, ids: &[TaskId]) -> Result<(), QueueError>;
    /// Failed: waiting again, or dead (with `error`) once it has used all
    /// its attempts. Nothing when the lease is no longer this worker's.
    fn fail(&self, lease: &Lease, error: &str) -> Result<(), QueueError>;
    /// Failed in a way another attempt cannot mend (the destination is
    /// full, the roots are nested): dead at once, with `error`.
    fn give_up(&self, lease: &Lease, error: &str) -> Result<(), QueueError>;
    /// A problem `task` found that no attempt of it can mend (a source
    /// entry that is not copied, a half-updated file moved aside): listed
    /// with the dead tasks, with no attempt counted, while the task goes on.
    fn report(&self, task: &[u8], error: &str) -> Result<(), QueueError>;
    fn set_state(&self, state: RunState) -> Result<(), QueueError>;
    fn state(&self) -> Result<RunState, QueueError>;
    fn stats(&self) -> Result<Stats, QueueError>;
    /// Up to `max` dead tasks, oldest first.
    fn dead(&self, max: usize) -> Result<Vec<DeadTask>, QueueError>;
    /// Claim `key` for `owner`: `None` when this call took it, else the
    /// owner that holds it (the same owner asking again gets itself).
    fn claim(&self, key: &[u8], owner: &str) -> Result<Option<String>, QueueError>;
    /// Add `delta` to the counter `key`; its new value.
    fn add(&self, key: &[u8], delta: i64) -> Result<i64, QueueError>;
    /// In one step that cannot be split: unless `mark` is set already,
    /// set it, add `delta` to the counter `counter` and push `tasks`.
    /// Returns the counter's value and whether this call did it. A task
    /// run twice (its worker lost after this call) counts once, and a task
    /// that plans children pushes them exactly when it counts them.
    fn add_once(
        &self,
        mark: &[u8],
        counter: &[u8],
        delta: i64,
        tasks: &[Vec<u8>],
    ) -> Result<(i64, bool), QueueError>;
    /// Unless `mark` is set (by `add_once`, `add_many` or `wake`), keep
    /// `task` aside, neither waiting nor leased, until `wake(mark)`: true
    /// when it was kept, false when the mark is set already (the caller
    /// may go on now). A task waits so on another's work without a worker
    /// spinning on it. Tasks kept under a mark that is never set never
    /// run: the task that should set it is then set aside, and the run
    /// ends with it.
    fn park(&self, mark: &[u8], task: &[u8]) -> Result<bool, QueueError>;
    /// Set `mark` and push every task parked under it, in one step.
    fn wake(&self, mark: &[u8]) -> Result<(), QueueError>;
    /// Several additions in one step that cannot be split (each as
    /// `add_once` without tasks, or as `add` when it has no mark): one
    /// round trip for the counts of a whole task. Returns each addition's
    /// counter value after all of them, in order.
    fn add_many(&self, adds: &[Add]) -> Result<Vec<i64>, QueueError>;
    /// What each call costs: the layers above put more work in each task
    /// for a queue whose every call is a round trip to a server.
    fn call_cost(&self) -> CallCost {
        CallCost::InProcess
    }
    /// Keep `value` under `key` (a run's settings, read by every worker).
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), QueueError>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, QueueError>;
}

fn check_tasks(tasks: &[Vec<u8>]) -> Result<(), QueueError> {
    match tasks.iter().find(|t| t.len() > MAX_TASK) {
        Some(t) => Err(QueueError::Refused(format!(
            "a task of {} bytes (at most {MAX_TASK})",
            t.len()
        ))),
        None => Ok(()),
    }
}
