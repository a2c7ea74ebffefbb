//! `accord mirror` as a task run: in this process (`--executor tasks`,
//! threads over an in-memory queue) or across machines (`--cluster URL
//! --run NAME`: the run is created in Redis and `accord worker`s do it).
//! Also what `accord worker` and `accord cluster` share: the queue's
//! address and rules.

use crate::exit;
use accord_engine::{MirrorConfig, Progress, RunSpec, WorkerEnd, WorkerOptions};
use accord_queue::{MemoryQueue, Policy, QueueError, RedisQueue, RedisTarget, TaskQueue};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How a local mirror runs (no help per value: clap would then lay out
/// all of `mirror --help` in its long form).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Executor {
    Auto,
    Walk,
    Tasks,
}

/// `accord mirror`'s options of a task run.
#[derive(clap::Args, Clone, Debug)]
pub struct TaskArgs {
    /// How a mirror runs: the parallel walk (auto, the default: every
    /// feature, and the deletion guard refuses before any change), or the
    /// task model of cluster runs on threads of this process (tasks: local
    /// roots only; its guard may pause a run mid-way, see docs/cluster.md).
    #[arg(long, value_enum, default_value = "auto")]
    pub executor: Executor,
    /// Create the run in this Redis (redis://[USER:PASSWORD@]HOST[:PORT][/DB],
    /// rediss:// for TLS) for `accord worker`s to do; needs --run.
    #[arg(long, value_name = "URL", requires = "run")]
    pub cluster: Option<String>,
    /// The run's name in the cluster.
    #[arg(long, value_name = "NAME")]
    pub run: Option<String>,
    /// Return once the run is created (else: show progress until it is done).
    #[arg(long, requires = "cluster")]
    pub detach: bool,
    /// Files above this size are copied in ranges of it by several workers
    /// (bytes; at least 4096).
    #[arg(long, value_name = "BYTES", default_value_t = accord_engine::tasks::DEFAULT_RANGE_SIZE,
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new()
              .range(accord_engine::tasks::MIN_RANGE_SIZE..))]
    pub range_size: u64,
    /// Re-read each written file (by another worker than its writer, when
    /// there is one) and compare BLAKE3.
    #[arg(long)]
    pub verify: bool,
}

impl TaskArgs {
    /// A task run was asked for by name (`--executor tasks`, `--cluster`).
    pub fn asked(&self) -> bool {
        self.cluster.is_some() || self.executor == Executor::Tasks
    }

    /// Whether this mirror runs as tasks: only when asked for. The walk is
    /// the default, so that `-n`, `--itemize` and `--json` show what the
    /// run does, and the deletion guard refuses before any change.
    pub fn chosen(&self) -> bool {
        self.asked()
    }
}

/// The queue's address and rules, shared by `mirror --cluster`, `worker`
/// and `cluster`.
#[derive(clap::Args, Debug, Clone)]
pub struct QueueArgs {
    /// Seconds after which a task leased by a worker that went silent is
    /// handed to another.
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub claim_timeout: u64,
    /// Attempts after which a failing task is set aside with its error.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..))]
    pub max_attempts: u32,
}

impl QueueArgs {
    pub fn policy(&self) -> Policy {
        Policy {
            claim_timeout: Duration::from_secs(self.claim_timeout),
            max_attempts: self.max_attempts,
        }
    }
}

/// Open a run's queue in Redis, with a message a person can act on.
pub fn open_redis(url: &str, run: &str, policy: Policy) -> Result<RedisQueue, String> {
    let target = RedisTarget {
        url: url.to_string(),
        run: run.to_string(),
    };
    RedisQueue::open(&target, policy).map_err(|e| match e {
        QueueError::Refused(m) => format!("cannot use {}: {m}", redact(url)),
        e => format!("{}: {e}", redact(url)),
    })
}

/// A URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    }
}

/// Worker threads for `--jobs N` (0: twice the cores, at least 4).
pub fn threads(jobs: usize) -> usize {
    match jobs {
        0 => std::thread::available_parallelism()
            .map(|n| n.get() * 2)
            .unwrap_or(4)
            .max(4),
        n => n,
    }
}

/// A root as every worker names it: absolute (the destination is made
/// first, so that it can be made absolute).
fn absolute(p: &Path, make: bool) -> Result<PathBuf, String> {
    if make {
        std::fs::create_dir_all(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
    }
    std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// `accord mirror SRC DST` as a task run (see the module). `terminal`:
/// stderr is a terminal and not silenced, so a local run draws progress
/// and ends with the walk's summary line.
pub fn mirror(
    src: &Path,
    dst: &Path,
    cfg: &MirrorConfig,
    args: &TaskArgs,
    queue_args: &QueueArgs,
    shown: Shown,
) -> i32 {
    if cfg.dry_run {
        eprintln!("accord mirror: --dry-run is not supported by task runs (use the walk)");
        return exit::USAGE;
    }
    let roots = source_root(src).and_then(|s| Ok((s, destination_root(src, dst)?)));
    let (src, dst) = match roots {
        Ok(r) => r,
        Err(e) => {
            eprintln!("accord mirror: {e}");
            return exit::FATAL;
        }
    };
    let mut spec = RunSpec::new(src, dst, cfg);
    spec.range_size = args.range_size;
    spec.verify = args.verify;
    match (&args.cluster, &args.run) {
        (Some(url), Some(run)) => {
            cluster_mirror(url, run, &spec, args.detach, queue_args, &cfg.state_dir)
        }
        _ => {
            // As the walk: failures always, progress and the summary
            // line on a terminal.
            local_mirror(&spec, threads(cfg.jobs), queue_args, &cfg.state_dir, shown)
        }
    }
}

/// What a local task run shows of itself (as the walk does).
#[derive(Clone, Copy, Debug)]
pub struct Shown {
    /// Progress on the terminal.
    pub terminal: bool,
    /// The summary line at the end (a terminal, or -v).
    pub summary: bool,
    /// `--stats` on stdout.
    pub stats: bool,
}

/// The source root as every worker names it: an absolute directory, or a
/// message that says why not (before the destination is made).
fn source_root(src: &Path) -> Result<PathBuf, String> {
    let abs = absolute(src, false)?;
    if !abs.is_dir() {
        return Err(format!(
            "the source {} is not a directory: accord mirror makes a directory a copy of \
             another; nothing was changed",
            src.display()
        ));
    }
    Ok(abs)
}

/// The destination root, made if missing, once it is known that it can
/// be one (the walk's checks, before anything is made).
fn destination_root(src: &Path, dst: &Path) -> Result<PathBuf, String> {
    if let Some(why) = accord_fsys::nesting(src, dst) {
        return Err(format!(
            "{why}; nothing was changed (choose a destination outside the source)"
        ));
    }
    if dst.exists() && !dst.is_dir() {
        return Err(format!(
            "the destination {} exists and is not a directory; nothing was changed \
             (name a directory, or a path that does not exist yet)",
            dst.display()
        ));
    }
    absolute(dst, true)
}

/// The local executor: threads of this process over an in-memory queue.
/// `memo_dir`: where the roots' memos are kept (the mirror's state
/// directory).
fn local_mirror(
    spec: &RunSpec,
    jobs: usize,
    queue_args: &QueueArgs,
    memo_dir: &Option<PathBuf>,
    shown: Shown,
) -> i32 {
    let show_progress = shown.terminal;
    let started = Instant::now();
    let _lock = match accord_engine::lock_destination(spec) {
        Ok(l) => l,
        Err(f) => {
            eprintln!("accord mirror: {f}");
            return exit::FATAL;
        }
    };
    let queue = MemoryQueue::new(queue_args.policy());
    if let Err(e) = check_and_start(&queue, spec, memo_dir) {
        eprintln!("accord mirror: {e}");
        return exit::FATAL;
    }
    let opts = WorkerOptions {
        name: "local".into(),
        until_done: true,
        max_backoff: Duration::from_secs(1),
        memo_dir: memo_dir.clone(),
    };
    let queues: Vec<&dyn TaskQueue> = vec![&queue; jobs];
    let stop = AtomicBool::new(false);
    let progress = Progress::default();
    let drawn = show_progress.then_some(&progress);
    let ends = crate::progress::while_showing(drawn, || {
        accord_engine::run_workers(&queues, spec, &opts, &progress, &stop)
    });
    if let Some(code) = fatal_end(&ends, "accord mirror") {
        return code;
    }
    let code = local_summary(&queue, started, shown);
    if accord_engine::run_over(&queue).unwrap_or(false) && code != exit::FATAL {
        accord_engine::tasks::remember_source(spec, memo_dir.clone());
    }
    code
}

/// The deletion guard's checks of the whole run, then the run's start.
fn check_and_start(
    queue: &dyn TaskQueue,
    spec: &RunSpec,
    state_dir: &Option<PathBuf>,
) -> Result<bool, String> {
    accord_engine::tasks::check_before_run(queue, spec, state_dir.clone())
        .map_err(|e| e.to_string())?;
    accord_engine::start_run(queue, spec).map_err(|e| e.to_string())
}

/// A worker end that stops the run, as an exit status.
pub fn fatal_end(ends: &[WorkerEnd], who: &str) -> Option<i32> {
    ends.iter().find_map(|e| match e {
        WorkerEnd::Fatal(m) => {
            eprintln!("{who}: {m}");
            Some(exit::FATAL)
        }
        _ => None,
    })
}

/// How a paused local run goes on: its queue ended with the process, so
/// the same command runs again, told to delete.
const LOCAL_ADVICE: &str = "what the run did before the pause stays done; run the same command \
     with --force (or a higher --max-delete) to go on";

/// A local run's figures, with the walk's meaning (`cmd_mirror::output`).
struct LocalFigures {
    /// Regular files in the source directories the run planned.
    files_total: i64,
    /// Files whose contents were written, and their bytes.
    transferred: i64,
    bytes_written: i64,
    /// Destination entries deleted.
    deleted: i64,
    finished: bool,
    fatal: bool,
    /// Why the deletion guard paused the run.
    paused_why: Option<String>,
}

impl LocalFigures {
    fn read(q: &dyn TaskQueue) -> Result<LocalFigures, QueueError> {
        use accord_engine::tasks::keys;
        let why = match q.state()? {
            accord_queue::RunState::Paused => q.get(keys::PAUSED_WHY)?,
            _ => None,
        };
        Ok(LocalFigures {
            files_total: q.add(keys::FILES_TOTAL, 0)?,
            transferred: q.add(keys::WRITTEN, 0)?,
            bytes_written: q.add(keys::BYTES, 0)?,
            deleted: q.add(keys::DELETED, 0)?,
            finished: q.add(keys::FINISHED, 0)? > 0,
            fatal: q.add(keys::FATAL, 0)? > 0,
            paused_why: why.map(|w| String::from_utf8_lossy(&w).into_owned()),
        })
    }
}

/// What a local run did, in the walk's words (`cmd_mirror::output`): each
/// failure as `accord mirror: PATH: ERROR`, why the deletion guard paused
/// the run and how to go on, and, when `summary_line` (stderr is a
/// terminal and not silenced), the walk's summary line; the exit status
/// they make. The tasks the run was cut into are its own business: a
/// cluster run's status line shows them (`summary`).
fn local_summary(queue: &dyn TaskQueue, started: Instant, shown: Shown) -> i32 {
    let who = "accord mirror";
    let f = match LocalFigures::read(queue) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{who}: {e}");
            return exit::FATAL;
        }
    };
    let errors = crate::cmd_cluster::print_failures(queue, accord_queue::MAX_LEASE, who);
    if let Some(why) = &f.paused_why {
        eprintln!("{who}: paused: {why}; {LOCAL_ADVICE}");
    }
    let figures = crate::summary::Figures {
        files_total: f.files_total.max(0) as u64,
        files_written: f.transferred.max(0) as u64,
        bytes_written: f.bytes_written.max(0) as u64,
        deleted: f.deleted.max(0) as u64,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    if shown.stats {
        print!("{}", local_stats(&figures, errors));
    }
    if shown.summary {
        eprintln!("{who}: {}", crate::summary::line(&figures));
    }
    match (errors, f.finished) {
        _ if f.fatal => exit::FATAL,
        (0, true) => exit::OK,
        (0, false) => exit::FATAL,
        _ => exit::PARTIAL,
    }
}

/// `--stats` of a local task run: the figures it counts, with the walk's names.
fn local_stats(f: &crate::summary::Figures, errors: usize) -> String {
    use crate::summary::{duration, stat_bytes, stat_count};
    let mut out = String::new();
    stat_count(&mut out, "Files in the source", f.files_total);
    stat_count(&mut out, "Files written", f.files_written);
    stat_bytes(&mut out, "Bytes written", f.bytes_written);
    stat_count(&mut out, "Entries deleted", f.deleted);
    stat_count(&mut out, "Errors", errors as u64);
    out += &format!("Time: {}\n", duration(f.elapsed_s));
    out
}

/// The run's figures, its failures, and the exit status they make;
/// `advice`: how a paused run goes on.
pub fn summary(queue: &dyn TaskQueue, who: &str, advice: &str) -> i32 {
    match crate::cmd_cluster::Figures::read(queue) {
        Ok(mut f) => {
            f.advice = Some(advice.to_string());
            eprintln!("{who}: {}", f.line());
            let errors = crate::cmd_cluster::print_errors(queue, 20);
            let fatal = queue.add(accord_engine::tasks::keys::FATAL, 0).unwrap_or(0) > 0;
            match (errors, f.finished) {
                _ if fatal => exit::FATAL,
                (0, true) => exit::OK,
                (0, false) => exit::FATAL,
                _ => exit::PARTIAL,
            }
        }
        Err(e) => {
            eprintln!("{who}: {e}");
            exit::FATAL
        }
    }
}

/// Create the run in Redis, then (unless `detach`) show its progress
/// until it is over.
fn cluster_mirror(
    url: &str,
    run: &str,
    spec: &RunSpec,
    detach: bool,
    qa: &QueueArgs,
    state_dir: &Option<PathBuf>,
) -> i32 {
    let queue = match open_redis(url, run, qa.policy()) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("accord mirror: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let started = check_and_start(&queue, spec, state_dir).and_then(|made| {
        queue
            .set_listed(true)
            .map(|_| made)
            .map_err(|e| e.to_string())
    });
    match started {
        Ok(true) => eprintln!("accord mirror: run {run} created; start `accord worker`s on it"),
        Ok(false) => eprintln!("accord mirror: run {run} exists already; following it"),
        Err(e) => {
            eprintln!("accord mirror: {e}");
            return exit::FATAL;
        }
    }
    if detach {
        return exit::OK;
    }
    let code = follow(&queue, run, &crate::cmd_cluster::resume_advice(url, run));
    if accord_engine::run_over(&queue).unwrap_or(false) && code != exit::FATAL {
        accord_engine::tasks::remember_source(spec, state_dir.clone());
    }
    code
}

/// Wait for the run to be over, with a progress line on a terminal.
fn follow(queue: &dyn TaskQueue, run: &str, advice: &str) -> i32 {
    let live = std::io::stderr().is_terminal();
    let start = Instant::now();
    loop {
        match accord_engine::run_over(queue) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => eprintln!("accord mirror: {e} (trying again)"),
        }
        if live {
            if let Ok(f) = crate::cmd_cluster::Figures::read(queue) {
                let secs = start.elapsed().as_secs();
                eprint!("\r\x1b[K{run}: {} ({secs} s)", f.line());
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    if live {
        eprintln!();
    }
    summary(queue, "accord mirror", advice)
}
