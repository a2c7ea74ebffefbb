//! The executor of a task run: worker threads over any `&dyn TaskQueue`
//! (a `MemoryQueue` in one process, a `RedisQueue` shared by machines),
//! between two local roots. No worker holds the tree: each task lists one
//! directory, or carries the few entries it works on.
//!
//! Completion is counted, not ordered: a directory's counter holds its
//! children not yet done (files tasks, big files, hard links, and each
//! subdirectory until its own properties are set); whoever brings it to
//! zero pushes the directory's `dir-meta`. Every count goes through
//! `TaskQueue::add_once` with a mark of its own, so a task run twice (its
//! worker lost after the count) counts once.

use crate::mirror::error::Fatal;
use crate::tasks::error::RunFailure;
use crate::tasks::ignore_files::TaskIgnore;
use crate::tasks::leases::Held;
use crate::tasks::memos::TaskMemos;
use crate::tasks::spec::RunSpec;
use crate::tasks::Task;
use crate::{MirrorConfig, Progress};
use accord_model::RelPath;
use accord_queue::{CallCost, Lease, QueueError, RunState, TaskQueue};
use accord_replica::LocalReplica;
use accord_replica::Replica;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Store keys of a run (in the queue's own store, one run per queue).
pub mod keys {
    use accord_model::RelPath;

    pub const SPEC: &[u8] = b"spec";
    pub const STARTED: &[u8] = b"started";
    /// 1 once the root's properties are set: the tree is done.
    pub const FINISHED: &[u8] = b"finished";
    /// Files whose contents were written, and their bytes.
    pub const WRITTEN: &[u8] = b"written";
    pub const BYTES: &[u8] = b"bytes";
    /// Regular files in the source directories the run planned (each
    /// directory once, by its mark), and destination entries deleted:
    /// with WRITTEN and BYTES, the walk's summary figures.
    pub const FILES_TOTAL: &[u8] = b"files-total";
    pub const DELETED: &[u8] = b"deleted";
    /// Extras counted by the streamed deletion guard, and destination
    /// entries seen.
    pub const DELETES: &[u8] = b"deletes";
    pub const DST_ENTRIES: &[u8] = b"dst-entries";
    /// Set by `resume --force`: the deletion guard lets the run go on.
    pub const FORCE: &[u8] = b"force";
    /// Why the run paused itself.
    pub const PAUSED_WHY: &[u8] = b"paused-why";
    /// Set by the starter when the source is another root than the last
    /// run's into this destination: the first deletion pauses the run.
    pub const ROOT_CHANGED: &[u8] = b"root-changed";
    /// Tasks given up for an error another attempt cannot mend: the run
    /// ends in error (as the walk's fatal errors).
    pub const FATAL: &[u8] = b"fatal";
    /// `delete-extras` tasks pushed and not yet done (`tasks/deferred_deletes.rs`).
    pub const DEFERRED_OPEN: &[u8] = b"deferred-open";

    pub fn with(tag: &str, path: &RelPath) -> Vec<u8> {
        let mut k = tag.as_bytes().to_vec();
        k.push(0);
        k.extend_from_slice(path.as_bytes());
        k
    }

    /// The counter of a directory's children not yet done.
    pub fn pending(dir: &RelPath) -> Vec<u8> {
        with("n", dir)
    }

    /// Files written by one worker.
    pub fn written_by(worker: &str) -> Vec<u8> {
        format!("w\0{worker}").into_bytes()
    }

    /// Bytes written by one worker.
    pub fn bytes_by(worker: &str) -> Vec<u8> {
        format!("wb\0{worker}").into_bytes()
    }

    /// How many workers joined the run; the name of the `n`th (from 1);
    /// when a worker first joined (seconds since the epoch).
    pub const WORKERS: &[u8] = b"workers";
    pub fn worker(n: i64) -> Vec<u8> {
        format!("wk\0{n}").into_bytes()
    }
    pub fn joined(worker: &str) -> Vec<u8> {
        format!("wj\0{worker}").into_bytes()
    }
}

/// Most workers `workers` lists (the store is anybody's to write).
const MAX_WORKERS_LISTED: i64 = 10_000;

/// What one worker did in a run (`accord cluster status`).
#[derive(Debug, Clone)]
pub struct WorkerFigures {
    pub name: String,
    pub files: i64,
    pub bytes: i64,
    /// When it first joined the run (seconds since the epoch), if known.
    pub joined: Option<u64>,
}

/// Enter `worker` in the run's list of workers (once, however often it
/// joins).
pub fn join_run(queue: &dyn TaskQueue, worker: &str) -> Result<(), QueueError> {
    let mark = format!("wm\0{worker}").into_bytes();
    let (n, first) = queue.add_once(&mark, keys::WORKERS, 1, &[])?;
    if first {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        queue.put(&keys::joined(worker), now.to_string().as_bytes())?;
        queue.put(&keys::worker(n), worker.as_bytes())?;
    }
    Ok(())
}

/// The run's workers and what each wrote.
pub fn workers(queue: &dyn TaskQueue) -> Result<Vec<WorkerFigures>, QueueError> {
    let n = queue.add(keys::WORKERS, 0)?.clamp(0, MAX_WORKERS_LISTED);
    let mut out = Vec::new();
    for i in 1..=n {
        let Some(name) = queue.get(&keys::worker(i))? else {
            continue;
        };
        let name = String::from_utf8_lossy(&name).into_owned();
        let joined = queue
            .get(&keys::joined(&name))?
            .and_then(|b| std::str::from_utf8(&b).ok()?.parse().ok());
        out.push(WorkerFigures {
            files: queue.add(&keys::written_by(&name), 0)?,
            bytes: queue.add(&keys::bytes_by(&name), 0)?,
            joined,
            name,
        });
    }
    Ok(out)
}

/// How a task ended.
pub(crate) enum Outcome {
    Done,
    /// Not yet possible (the deletion guard's held extras, or a run the
    /// guard paused): push it again and go on.
    Later,
    /// Parked in the queue until another task wakes it (a hard link whose
    /// first copy is not made): done with for now.
    Parked,
}

use crate::tasks::error::{Problems, TaskError};

pub(crate) type TaskResult = Result<Outcome, TaskError>;

/// What every task of one worker thread sees.
pub(crate) struct Ctx<'a> {
    pub queue: &'a dyn TaskQueue,
    pub src: &'a LocalReplica,
    pub dst: &'a LocalReplica,
    pub spec: &'a RunSpec,
    pub cfg: MirrorConfig,
    /// The exclusion rules, `.accordignore` files included.
    pub ignore: &'a TaskIgnore,
    /// The worker (process) that runs this thread: `verify` wants another.
    pub worker: &'a str,
    pub progress: &'a Progress,
    /// The extended-attribute memos (the local executor's only).
    pub memos: Option<&'a TaskMemos>,
    /// The leases this process is at work on (renewed by another thread).
    pub held: &'a Held,
}

/// What the threads of one worker process share.
#[derive(Clone, Copy)]
pub(crate) struct Shared<'a> {
    pub progress: &'a Progress,
    pub memos: Option<&'a TaskMemos>,
    pub ignore: &'a TaskIgnore,
    pub held: &'a Held,
}

impl Ctx<'_> {
    pub fn src(&self) -> &dyn Replica {
        self.src
    }

    pub fn dst(&self) -> &dyn Replica {
        self.dst
    }

    /// One child of `dir` is done (`mark` names it): count it, and push
    /// the directory's `dir-meta` when it was the last.
    pub fn child_done(&self, dir: &RelPath, mark: &[u8]) -> Result<(), QueueError> {
        let (left, _) = self.queue.add_once(mark, &keys::pending(dir), -1, &[])?;
        if left == 0 {
            self.push_dir_meta(dir)?;
        }
        Ok(())
    }

    /// Push `dir`'s `dir-meta` (once, however many ask).
    pub fn push_dir_meta(&self, dir: &RelPath) -> Result<(), QueueError> {
        let task = Task::DirMeta { dir: dir.clone() }.encode();
        let mark = keys::with("m", dir);
        self.queue.add_once(&mark, b"dir-metas", 1, &[task])?;
        Ok(())
    }
}

/// Who runs tasks, and until when.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// This worker's name (unique among the run's workers).
    pub name: String,
    /// Leave when the run is done (else only when it is stopped).
    pub until_done: bool,
    /// Longest back-off between attempts to reach a lost queue.
    pub max_backoff: Duration,
    /// Where this process keeps the roots' extended-attribute memos
    /// (`tasks/memos.rs`; the local executor's state directory), or `None`.
    pub memo_dir: Option<std::path::PathBuf>,
}

/// How a worker thread ended.
#[derive(Debug)]
pub enum WorkerEnd {
    /// The run is done (its tree, or all that could be done of it).
    Done,
    Stopped,
    /// The run's settings cannot be read or used.
    Fatal(RunFailure),
}

/// Open the roots of `spec` (the destination created when missing).
pub fn open_task_roots(spec: &RunSpec) -> Result<(LocalReplica, LocalReplica), Fatal> {
    let src = LocalReplica::open(&spec.src).map_err(|source| Fatal::OpenSource {
        path: spec.src.clone(),
        source,
    })?;
    let dst = LocalReplica::create(&spec.dst).map_err(|source| Fatal::OpenDestination {
        path: spec.dst.clone(),
        source,
    })?;
    let opts = crate::LocalOptions {
        fsync: spec.fsync,
        ..Default::default()
    };
    Ok((src, dst.with_options(opts)))
}

/// Take the destination's lock for a run of this process (as the walk
/// does: two runs into one destination would remove each other's temps);
/// the lock lasts as long as the returned replica.
pub fn lock_destination(spec: &RunSpec) -> Result<LocalReplica, Fatal> {
    let (_, dst) = open_task_roots(spec)?;
    match dst.try_lock() {
        Ok(true) => Ok(dst),
        Ok(false) => Err(Fatal::Busy(spec.dst.clone())),
        Err(source) => Err(Fatal::Lock {
            path: spec.dst.clone(),
            source,
        }),
    }
}

/// Write the run's settings and push its root (once: starting a run that
/// exists already changes nothing).
pub fn start_run(queue: &dyn TaskQueue, spec: &RunSpec) -> Result<bool, QueueError> {
    if queue.get(keys::SPEC)?.is_none() {
        queue.put(keys::SPEC, &spec.encode())?;
    }
    let root = Task::ScanDir {
        dir: RelPath::root(),
    };
    let (_, started) = queue.add_once(keys::STARTED, keys::STARTED, 1, &[root.encode()])?;
    Ok(started)
}

/// The run's settings as its starter wrote them.
pub fn read_spec(queue: &dyn TaskQueue) -> Result<RunSpec, RunFailure> {
    let bytes = queue.get(keys::SPEC)?.ok_or(RunFailure::NoSuchRun)?;
    RunSpec::decode(&bytes).map_err(RunFailure::DamagedSpec)
}

/// Is the run over: nothing waiting or leased, and the root done or some
/// task set aside (which can never finish its part of the tree)?
pub fn run_over(queue: &dyn TaskQueue) -> Result<bool, QueueError> {
    let s = queue.stats()?;
    if s.waiting > 0 || s.leased > 0 {
        return Ok(false);
    }
    Ok(queue.add(keys::FINISHED, 0)? > 0 || s.dead > 0)
}

/// Run tasks on this thread until the run is done or stopped. `stop`
/// ends it early (a signal).
pub(crate) fn work(
    queue: &dyn TaskQueue,
    (src, dst): (&LocalReplica, &LocalReplica),
    spec: &RunSpec,
    opts: &WorkerOptions,
    thread: &str,
    shared: Shared,
    stop: &AtomicBool,
) -> WorkerEnd {
    let ctx = Ctx {
        queue,
        src,
        dst,
        spec,
        cfg: spec.config(),
        ignore: shared.ignore,
        worker: &opts.name,
        progress: shared.progress,
        memos: shared.memos,
        held: shared.held,
    };
    let mut backoff = Backoff::new(opts.max_backoff);
    while !stop.load(Ordering::Relaxed) {
        match step(&ctx, thread, opts.until_done) {
            Ok(Some(end)) => return end,
            Ok(None) => backoff.reset(),
            Err(_) => backoff.wait(),
        }
    }
    WorkerEnd::Stopped
}

/// How long a thread waits for a task before it checks whether the run
/// is over: in this process a wait costs nothing; on a remote queue each
/// check costs commands that every idle thread of every worker makes.
fn idle_wait(queue: &dyn TaskQueue) -> Duration {
    match queue.call_cost() {
        CallCost::InProcess => Duration::from_millis(200),
        CallCost::Remote => Duration::from_secs(1),
    }
}

/// One lease and its tasks; `Some` when the worker should leave.
fn step(ctx: &Ctx, thread: &str, until_done: bool) -> Result<Option<WorkerEnd>, QueueError> {
    let leases = ctx.queue.lease(thread, 1, idle_wait(ctx.queue))?;
    if leases.is_empty() {
        return idle(ctx, until_done);
    }
    for l in leases {
        ctx.held.hold(&l);
        let ran = run_lease(ctx, &l);
        ctx.held.release(&l.id);
        ran?;
    }
    // In this process a look at the queue costs nothing: when this was the
    // last task, see at once whether the run is over, rather than after a
    // wait for a task that cannot come.
    if ctx.queue.call_cost() == CallCost::InProcess {
        let s = ctx.queue.stats()?;
        if s.waiting == 0 && s.leased == 0 {
            return idle(ctx, until_done);
        }
    }
    Ok(None)
}

/// Nothing was handed out: is it time to leave?
fn idle(ctx: &Ctx, until_done: bool) -> Result<Option<WorkerEnd>, QueueError> {
    let state = ctx.queue.state()?;
    if state == RunState::Stopped {
        return Ok(Some(WorkerEnd::Stopped));
    }
    // Nothing can resume a paused run of a queue in this process (`accord
    // cluster resume` reaches runs in Redis): the deletion guard's pause
    // ends it, and the summary says why.
    if state == RunState::Paused && ctx.queue.call_cost() == CallCost::InProcess {
        return Ok(Some(WorkerEnd::Stopped));
    }
    if until_done && run_over(ctx.queue)? {
        return Ok(Some(WorkerEnd::Done));
    }
    Ok(None)
}

/// Run one leased task and tell the queue how it ended (a queue error
/// leaves it leased: it comes back after the claim timeout).
fn run_lease(ctx: &Ctx, lease: &Lease) -> Result<(), QueueError> {
    let task = match Task::decode(&lease.task) {
        Ok(t) => t,
        Err(e) => return ctx.queue.fail(lease, &format!("a corrupt task: {e}")),
    };
    let started = std::time::Instant::now();
    let result = crate::tasks::execute::run_task(ctx, &task);
    crate::tasks::task_log::finished(&task, &result, started.elapsed());
    match result {
        Ok(Outcome::Done | Outcome::Parked) => ctx.queue.ack(std::slice::from_ref(&lease.id)),
        Ok(Outcome::Later) => {
            ctx.queue.push(std::slice::from_ref(&lease.task))?;
            ctx.queue.ack(std::slice::from_ref(&lease.id))
        }
        Err(TaskError::Failed(m)) => ctx.queue.fail(lease, &describe(&task, &m)),
        Err(TaskError::Fatal(m)) => {
            ctx.queue.add(keys::FATAL, 1)?;
            ctx.queue.give_up(lease, &describe(&task, &m))
        }
        Err(TaskError::Queue(e)) => Err(e),
    }
}

/// A failed task's error as the store keeps it: a line naming the task,
/// then one line per problem. `accord cluster errors` shows it on one
/// line (`error_on_one_line`); a local run shows the problems alone, as
/// the walk shows its failures (`error_problems`).
fn describe(task: &Task, problems: &Problems) -> String {
    let mut m = format!("{}:\n{}", task.in_words(), problems.lines());
    m.truncate(accord_queue::MAX_ERROR);
    m
}

/// A stored error on one line, as `accord cluster errors` shows it: the
/// task, then its problems (`describe`'s lines joined).
pub fn error_on_one_line(stored: &str) -> String {
    match stored.split_once('\n') {
        Some((task, problems)) => {
            let problems: Vec<&str> = problems.lines().collect();
            format!("{task} {}", problems.join("; "))
        }
        None => stored.to_string(),
    }
}

/// The problems a stored error names, one per line, without the line
/// naming the task (a problem found by a task that went on, stored with
/// `TaskQueue::report`, is one line of its own).
pub fn error_problems(stored: &str) -> Vec<&str> {
    match stored.split_once('\n') {
        Some((_, problems)) => problems.lines().collect(),
        None => vec![stored],
    }
}

/// Waits that grow while the queue cannot be reached.
struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_millis(50),
            max,
        }
    }

    fn reset(&mut self) {
        self.next = Duration::from_millis(50);
    }

    fn wait(&mut self) {
        std::thread::sleep(self.next);
        self.next = (self.next * 2).min(self.max);
    }
}
