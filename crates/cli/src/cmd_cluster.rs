//! `accord cluster status|pause|resume|stop|restart|errors --cluster URL
//! --run NAME`: look at a cluster run and steer it while it runs.

use crate::cmd_tasks::{open_redis, QueueArgs};
use crate::exit;
use accord_engine::tasks::keys;
use accord_engine::tasks::Task;
use accord_engine::WorkerFigures;
use accord_queue::{QueueError, RunState, Stats, TaskQueue};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[arg(value_enum)]
    action: Action,
    /// The run's Redis (redis://[USER:PASSWORD@]HOST[:PORT][/DB]).
    #[arg(long, value_name = "URL")]
    cluster: String,
    #[arg(long, value_name = "NAME")]
    run: String,
    /// With resume: go on past the deletion guard that paused the run.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    queue: QueueArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Action {
    /// Files, bytes, queue depth, state.
    Status,
    /// Hand out no task (leased ones finish); resume goes on where it was.
    Pause,
    Resume,
    /// As pause, and the workers leave; restart goes on later.
    Stop,
    Restart,
    /// The tasks set aside, with their errors.
    Errors,
}

/// A run's figures.
pub struct Figures {
    pub stats: Stats,
    pub state: RunState,
    pub written: i64,
    pub bytes: i64,
    pub verified: i64,
    pub finished: bool,
    pub paused_why: Option<String>,
    /// How to go on from a pause, for the command the user typed.
    pub advice: Option<String>,
}

impl Figures {
    pub fn read(q: &dyn TaskQueue) -> Result<Figures, QueueError> {
        let why = q.get(keys::PAUSED_WHY)?;
        Ok(Figures {
            stats: q.stats()?,
            state: q.state()?,
            written: q.add(keys::WRITTEN, 0)?,
            bytes: q.add(keys::BYTES, 0)?,
            verified: q.add(b"verified", 0)?,
            finished: q.add(keys::FINISHED, 0)? > 0,
            paused_why: why.map(|w| String::from_utf8_lossy(&w).into_owned()),
            advice: None,
        })
    }

    pub fn line(&self) -> String {
        let s = &self.stats;
        use crate::summary::{bytes, count};
        let mut line = format!(
            "{}, {} files written ({}), {} verified; tasks: {} waiting, {} in progress, {} done, {} failed",
            if self.finished { "done" } else { self.state.name() },
            count(self.written.max(0) as u64),
            bytes(self.bytes.max(0) as u64),
            count(self.verified.max(0) as u64),
            count(s.waiting),
            count(s.leased),
            count(s.done),
            count(s.dead)
        );
        if self.state == RunState::Paused {
            if let Some(why) = &self.paused_why {
                line.push_str(&format!("\n  paused: {why}"));
                if let Some(advice) = &self.advice {
                    line.push_str(&format!("; {advice}"));
                }
            }
        }
        line
    }
}

/// How a paused cluster run goes on.
pub fn resume_advice(url: &str, run: &str) -> String {
    format!(
        "`accord cluster resume --force --cluster {} --run {run}` goes on",
        crate::cmd_tasks::redact(url)
    )
}

pub fn run(args: ClusterArgs) -> i32 {
    let queue = match open_redis(&args.cluster, &args.run, args.queue.policy()) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("accord cluster: {e}");
            return exit::UNAVAILABLE;
        }
    };
    if let Err(e) = accord_engine::read_spec(&queue) {
        eprintln!("accord cluster: run {}: {e}", args.run);
        return exit::USAGE;
    }
    match act(&queue, &args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("accord cluster: {e}");
            exit::UNAVAILABLE
        }
    }
}

fn act(q: &dyn TaskQueue, args: &ClusterArgs) -> Result<i32, QueueError> {
    let set = |state| q.set_state(state);
    match args.action {
        Action::Status => status(q, &args.run, &resume_advice(&args.cluster, &args.run))?,
        Action::Pause => set(RunState::Paused)?,
        Action::Stop => set(RunState::Stopped)?,
        Action::Resume | Action::Restart => {
            if args.force {
                q.add(keys::FORCE, 1)?;
            }
            set(RunState::Running)?;
        }
        Action::Errors => {
            print_errors(q, accord_queue::MAX_LEASE);
        }
    }
    Ok(exit::OK)
}

/// The run's figures and each worker's, once; on a terminal, again every
/// second (with each worker's rate over that second) until the run is
/// over or the user interrupts.
fn status(q: &dyn TaskQueue, run: &str, advice: &str) -> Result<(), QueueError> {
    use std::io::IsTerminal;
    let live = std::io::stdout().is_terminal();
    let mut last: Option<(std::time::Instant, Vec<WorkerFigures>)> = None;
    loop {
        let mut f = Figures::read(q)?;
        f.advice = Some(advice.to_string());
        let workers = accord_engine::tasks::workers(q)?;
        let now = std::time::Instant::now();
        if live {
            print!("\x1b[H\x1b[2J");
        }
        println!("{run}: {}", f.line());
        for w in &workers {
            let before = last.as_ref().and_then(|(t, ws)| {
                let prev = ws.iter().find(|p| p.name == w.name)?;
                Some((now.duration_since(*t).as_secs_f64(), prev.files, prev.bytes))
            });
            println!("  {}", worker_line(w, before));
        }
        let over = accord_engine::run_over(q)?;
        if !live || over {
            return Ok(());
        }
        last = Some((now, workers));
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// One worker's figures: its files and bytes, and its rate (over the last
/// `(seconds, files, bytes)` when given, else since it joined).
fn worker_line(w: &WorkerFigures, since_last: Option<(f64, i64, i64)>) -> String {
    let (secs, files, bytes) = match (since_last, w.joined) {
        (Some((s, f, b)), _) => (s, w.files - f, w.bytes - b),
        (None, Some(joined)) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            (now.saturating_sub(joined).max(1) as f64, w.files, w.bytes)
        }
        (None, None) => (0.0, 0, 0),
    };
    let rate = |n: i64| match secs > 0.0 {
        true => format!("{:.0}", n.max(0) as f64 / secs),
        false => "?".into(),
    };
    format!(
        "worker {}: {} files written ({} bytes); {} files/s, {} bytes/s",
        escape_controls(&w.name),
        w.files,
        w.bytes,
        rate(files),
        rate(bytes)
    )
}

/// Print up to `max` tasks set aside (on stderr), each with its task and
/// attempts, as the cluster's view shows them; how many there were.
pub fn print_errors(q: &dyn TaskQueue, max: usize) -> usize {
    let Some(dead) = read_dead(q, max) else {
        return 1;
    };
    for d in &dead {
        // The stored error's first line says what the task was doing and
        // on which paths ("copying big0 (and 5 more)").
        let error = escape_controls(&accord_engine::tasks::error_on_one_line(&d.error));
        if let Err(e) = Task::decode(&d.task) {
            eprintln!("a task that cannot be read ({e}): {error}");
            continue;
        }
        match d.attempts {
            // Found by a task that went on (`TaskQueue::report`).
            0 => eprintln!("{error}"),
            1 => eprintln!("{error} (set aside after one try)"),
            n => eprintln!("{error} (set aside after {n} tries)"),
        }
    }
    dead.len()
}

/// Print the failures of up to `max` tasks set aside as the walk prints
/// its failures (`WHO: PATH: ERROR`, one a line, on stderr): what a local
/// run of `accord mirror` shows, where the tasks are its own business.
/// How many tasks failed.
pub fn print_failures(q: &dyn TaskQueue, max: usize, who: &str) -> usize {
    let Some(dead) = read_dead(q, max) else {
        return 1;
    };
    for d in &dead {
        for problem in accord_engine::tasks::error_problems(&d.error) {
            eprintln!("{who}: {}", escape_controls(problem));
        }
    }
    dead.len()
}

/// Up to `max` tasks set aside (`None`, said on stderr, when the store
/// cannot be read).
fn read_dead(q: &dyn TaskQueue, max: usize) -> Option<Vec<accord_queue::DeadTask>> {
    match q.dead(max) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("cannot read the failed tasks: {e}");
            None
        }
    }
}

/// An error text from the store, with control characters escaped.
fn escape_controls(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_default().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect()
}
