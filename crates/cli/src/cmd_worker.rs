//! `accord worker --cluster URL [--run NAME] [--jobs N] [--map SRC=LOCAL]`:
//! run a cluster run's tasks on this machine, which mounts its roots.
//! Without `--run`, serve every run created in that Redis, one after the
//! other, and wait for new ones until stopped (SIGINT, SIGTERM). What it
//! does goes to its log (`crate::logging`): a line per run it works on.

use crate::cmd_tasks::{open_redis, redact, threads, QueueArgs};
use crate::exit;
use accord_engine::{Progress, RunSpec, WorkerEnd, WorkerOptions};
use accord_queue::TaskQueue;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, error, info, warn};

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// The run's Redis (redis://[USER:PASSWORD@]HOST[:PORT][/DB], rediss:// for TLS);
    /// taken from ACCORD_CLUSTER when not given, which keeps a password out of the
    /// process list.
    #[arg(
        long,
        value_name = "URL",
        env = "ACCORD_CLUSTER",
        hide_env_values = true
    )]
    cluster: String,
    /// The run to work on, then leave (default: every run of the Redis, as
    /// they are created, until stopped).
    #[arg(long, value_name = "NAME")]
    run: Option<String>,
    /// Worker threads (0: twice the cores, at least 4).
    #[arg(short = 'j', long, default_value_t = 0, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=crate::cmd_mirror::MAX_JOBS))]
    jobs: usize,
    /// Where this machine mounts a root the run names otherwise
    /// (SRC_PREFIX=LOCAL_PREFIX; repeatable).
    #[arg(long, value_name = "SRC_PREFIX=LOCAL_PREFIX")]
    map: Vec<String>,
    /// This worker's name (default: host name and process id).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    log: crate::logging::LogArgs,
}

pub fn run(args: WorkerArgs) -> i32 {
    let maps = match args
        .map
        .iter()
        .map(|m| parse_map(m))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(m) => m,
        Err(e) => return usage(&e),
    };
    let name = args.name.clone().unwrap_or_else(default_name);
    if let Err(e) = accord_engine::tasks::check_worker_name(&name) {
        return usage(&format!("--name: {e}"));
    }
    if let Err(e) = crate::logging::init(&args.log) {
        return usage(&e);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    let worker = Worker {
        args: &args,
        maps: &maps,
        name,
        stop: &stop,
    };
    match &args.run {
        Some(run) => worker.serve(run),
        None => worker.serve_all(),
    }
}

/// One `accord worker` process.
struct Worker<'a> {
    args: &'a WorkerArgs,
    maps: &'a [(PathBuf, PathBuf)],
    name: String,
    stop: &'a AtomicBool,
}

/// How long a worker without `--run` waits before it looks for runs again.
const LOOK_AGAIN: Duration = Duration::from_secs(2);

impl Worker<'_> {
    /// Work on `run` until it is over or stopped.
    fn serve(&self, run: &str) -> i32 {
        let args = self.args;
        let n = threads(args.jobs);
        let mut queues = Vec::with_capacity(n);
        for _ in 0..n {
            match open_redis(&args.cluster, run, args.queue.policy()) {
                Ok(q) => queues.push(q),
                Err(e) => {
                    error!("accord worker: {e}");
                    return exit::UNAVAILABLE;
                }
            }
        }
        let mut spec = match accord_engine::read_spec(&queues[0]) {
            Ok(s) => s,
            Err(e) => {
                error!("accord worker: run {run}: {e}");
                return exit::UNAVAILABLE;
            }
        };
        apply_maps(&mut spec, self.maps);
        info!(
            "accord worker {}: run {run}: {} to {}, {n} threads",
            self.name,
            spec.src.display(),
            spec.dst.display()
        );
        let opts = WorkerOptions {
            name: self.name.clone(),
            until_done: true,
            max_backoff: Duration::from_secs(10),
            memo_dir: None,
        };
        let refs: Vec<&dyn TaskQueue> = queues.iter().map(|q| q as &dyn TaskQueue).collect();
        let progress = Progress::default();
        let started = std::time::Instant::now();
        let ends = accord_engine::run_workers(&refs, &spec, &opts, &progress, self.stop);
        if let Some(why) = ends.iter().find_map(|e| match e {
            WorkerEnd::Fatal(why) => Some(why),
            _ => None,
        }) {
            error!("accord worker: run {run}: {why}");
            return exit::FATAL;
        }
        let done = ends.iter().all(|e| matches!(e, WorkerEnd::Done));
        if done {
            // Workers looking for runs need not look at this one again.
            let _ = queues[0].set_listed(false);
        }
        let files = progress.files_done.load(Ordering::Relaxed);
        info!(
            "accord worker {}: run {run}: {}; this worker copied {files} {} ({}) in {:.1} s",
            opts.name,
            if done { "the run is over" } else { "stopped" },
            if files == 1 { "file" } else { "files" },
            crate::summary::bytes(progress.bytes_done.load(Ordering::Relaxed)),
            started.elapsed().as_secs_f64(),
        );
        exit::OK
    }

    /// Serve the runs of the Redis as they come, until stopped. A run this
    /// machine could not serve (its roots are not mounted here, say) is
    /// passed over while others are there.
    fn serve_all(&self) -> i32 {
        let url = &self.args.cluster;
        info!(
            target: crate::logging::START,
            "accord worker {}: serving the runs of {} as they come",
            self.name,
            redact(url)
        );
        let mut passed_over = std::collections::HashSet::new();
        while !self.stop.load(Ordering::Relaxed) {
            let runs = match accord_queue::list_runs(url) {
                Ok(r) => r,
                Err(e) => {
                    warn!("accord worker: {}: {e} (trying again)", redact(url));
                    self.wait(LOOK_AGAIN);
                    continue;
                }
            };
            let next = runs
                .into_iter()
                .filter(|r| !passed_over.contains(r))
                .find(|r| self.runnable(r));
            match next {
                Some(run) => {
                    if self.serve(&run) != exit::OK {
                        debug!("accord worker: run {run}: passed over while there are others");
                        passed_over.insert(run);
                    }
                }
                None => {
                    passed_over.clear();
                    self.wait(LOOK_AGAIN);
                }
            }
        }
        exit::OK
    }

    /// A run that hands out tasks now (running, not over); one that is
    /// over is taken off the list.
    fn runnable(&self, run: &str) -> bool {
        let Ok(q) = open_redis(&self.args.cluster, run, self.args.queue.policy()) else {
            return false;
        };
        if accord_engine::run_over(&q).unwrap_or(false) {
            debug!("accord worker: run {run} is over; taken off the list");
            let _ = q.set_listed(false);
            return false;
        }
        match q.state() {
            Ok(accord_queue::RunState::Running) => true,
            Ok(state) => {
                debug!("accord worker: run {run} is {}: no task now", state.name());
                false
            }
            Err(e) => {
                debug!("accord worker: run {run}: {e}");
                false
            }
        }
    }

    /// Sleep `d`, or less when stopped meanwhile.
    fn wait(&self, d: Duration) {
        let until = std::time::Instant::now() + d;
        while !self.stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn usage(msg: &str) -> i32 {
    eprintln!("accord worker: {msg}");
    exit::USAGE
}

fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

/// `SRC_PREFIX=LOCAL_PREFIX`: two absolute paths.
fn parse_map(m: &str) -> Result<(PathBuf, PathBuf), String> {
    let (from, to) = m
        .split_once('=')
        .ok_or_else(|| format!("--map {m:?}: use SRC_PREFIX=LOCAL_PREFIX"))?;
    let (from, to) = (PathBuf::from(from), PathBuf::from(to));
    if !from.is_absolute() || !to.is_absolute() {
        return Err(format!("--map {m:?}: both prefixes must be absolute paths"));
    }
    Ok((from, to))
}

/// The run's roots as this machine mounts them: the first map whose
/// prefix (whole components) starts a root replaces it.
fn apply_maps(spec: &mut RunSpec, maps: &[(PathBuf, PathBuf)]) {
    for root in [&mut spec.src, &mut spec.dst] {
        if let Some(mapped) = maps.iter().find_map(|(from, to)| map_one(root, from, to)) {
            *root = mapped;
        }
    }
}

fn map_one(root: &Path, from: &Path, to: &Path) -> Option<PathBuf> {
    let rest = root.strip_prefix(from).ok()?;
    let mut out = to.to_path_buf();
    if !rest.as_os_str().is_empty() {
        out.push(OsStr::from_bytes(rest.as_os_str().as_bytes()));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_replace_whole_leading_components() {
        let m = parse_map("/mnt/src=/data/src").unwrap();
        let got = map_one(Path::new("/mnt/src/a/b"), &m.0, &m.1);
        assert_eq!(got, Some(PathBuf::from("/data/src/a/b")));
        assert_eq!(map_one(Path::new("/mnt/srcx"), &m.0, &m.1), None);
        assert_eq!(
            map_one(Path::new("/mnt/src"), &m.0, &m.1),
            Some(PathBuf::from("/data/src"))
        );
        assert!(parse_map("relative=/x").is_err());
        assert!(parse_map("/x").is_err());
    }
}
