//! `accord sync --watch`: after a first full sync, keep the roots (a pair,
//! or a set of more) in agreement until interrupted.
//!
//! Local roots are watched with inotify (`accord_fsys::watch`), a remote
//! root by its own host's `accord server` (`sync_watch_remote`).
//! Events only say *that* something changed: every cycle is a full sync
//! run of all the roots, never a sync of the paths events named, because
//! inotify can lose events (queue overflow, a directory created just
//! before its watch) and a full run cannot; a no-change run over 20,000
//! files costs about 0.2 s. A burst of events is debounced into one run.
//!
//! A root that cannot be watched (one that hit the kernel's watch limit,
//! a remote one whose host cannot watch it or whose watch connection
//! failed) is synced every `--watch-interval` instead.
//!
//! Our own writes into the roots raise events too. Temp files and the
//! archives are filtered out; the renames that put new versions in place
//! are not (they carry users' names), so a run that propagated something
//! is followed by exactly one more run, which finds nothing to do and
//! raises no events of its own, and the cycle ends there.

use crate::exit;
use crate::sync_watch_remote::RemoteWatch;
use accord_fsys::watch::WatchRules;
use accord_fsys::watch::{canonical_prefix, watch_tree, OwnFiles, Seen, TreeWatch, WatchFailure};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the roots must stay quiet before a run starts: one save is
/// often several events (create, write, close, rename) within milliseconds.
const QUIET: Duration = Duration::from_millis(100);
/// The longest a change waits for the quiet, so a constant stream of
/// writes (a growing log, a long copy) still syncs.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// One root as the watch sees it.
pub(crate) enum WatchRoot {
    Local(PathBuf),
    /// A remote root, watched on its own host through a connection of
    /// its own (`connect` opens it).
    Remote {
        /// For messages.
        address: String,
        connect: crate::sync_watch_remote::Connect,
    },
}

pub(crate) struct WatchOptions {
    pub roots: Vec<WatchRoot>,
    /// Between syncs of a root that cannot be watched.
    pub interval: Duration,
    /// Where the archives are kept: writes there are our own.
    pub state_dir: PathBuf,
    /// What the sync leaves out: changes there start no run (judged on
    /// each root's host; a remote root's server older than this one
    /// reports every change).
    pub rules: accord_engine::SyncRules,
}

/// What one cycle's run came to, as far as the watch cares.
pub(crate) struct Cycle {
    /// The exit status the run alone would have had.
    pub code: i32,
    /// The deletion guard refused the run: a person must look.
    pub refused: bool,
    /// The run could not be made at all (a root missing, locked, ...).
    pub fatal: bool,
}

/// Watch the roots, running `cycle` (one sync run, printed) first and then
/// whenever something changed. Returns the exit status.
pub(crate) fn watch(opts: &WatchOptions, cycle: &mut dyn FnMut() -> Cycle) -> i32 {
    let inbox = Arc::new(Inbox::default());
    if let Err(e) = listen_for_signals(&inbox) {
        eprintln!("accord sync: cannot handle signals for --watch: {e}");
        return exit::FATAL;
    }
    // Watch before the first run, so what changes during it is not missed.
    let own_files = Arc::new(OwnFiles::new(Some(&opts.state_dir)));
    let mut roots = RootWatches::start(opts, &inbox, &own_files);
    // Stopped before anything was done: nothing failed either.
    let Some(first) = run_cycle(&inbox, cycle) else {
        return exit::OK;
    };
    if first.refused {
        eprintln!("accord sync: the watch does not start: this refusal needs a person");
        return exit::FATAL;
    }
    // A first run that could not be made (a mistyped root, the pair
    // locked by another sync) is not a state to watch from: say so now.
    if first.fatal {
        eprintln!("accord sync: the watch does not start: the first run could not be made");
        return exit::FATAL;
    }
    let mut last_code = first.code;
    let mut last_end = Instant::now();
    loop {
        let poll_at = roots.any_polled().then(|| last_end + opts.interval);
        let Some(work) = wait_for_work(&inbox, poll_at) else {
            return last_code;
        };
        roots.repair(&work, &inbox, &own_files);
        announce(&work);
        let Some(outcome) = run_cycle(&inbox, cycle) else {
            return last_code;
        };
        last_end = Instant::now();
        if outcome.refused {
            eprintln!("accord sync: the watch stops: this refusal needs a person");
            return exit::FATAL;
        }
        last_code = outcome.code;
    }
}

/// Run one cycle, unless a stop was asked (`None`): checked under the
/// same lock that marks the run as going on, so a signal either stops
/// the watch before the run or is told that the run finishes first.
fn run_cycle(inbox: &Inbox, cycle: &mut dyn FnMut() -> Cycle) -> Option<Cycle> {
    let stopped = inbox.update(|pending| {
        pending.running = !pending.stop;
        pending.stop
    });
    if stopped {
        return None;
    }
    let outcome = cycle();
    inbox.update(|pending| pending.running = false);
    Some(outcome)
}

/// Say why a run that is more than "something changed" happens.
fn announce(work: &Work) {
    for why in &work.rescan {
        eprintln!("accord sync: {why}: rescanning every root in full");
    }
}

/// What the watchers and the signal thread have seen since the last run
/// began. Shared under a mutex: bounded however many events arrive.
#[derive(Default)]
pub(crate) struct Pending {
    /// The first and the last change since the last run began.
    first_change: Option<Instant>,
    last_change: Option<Instant>,
    /// Why the next run is a rescan, for the message before it.
    rescan: Vec<String>,
    /// Roots (by index) whose watch hit the kernel's limit, or was lost.
    limit_hit: BTreeSet<usize>,
    lost: BTreeSet<usize>,
    /// Remote roots (by index) whose watch ended, and why.
    pub(crate) remote_down: BTreeMap<usize, WatchDown>,
    /// SIGINT or SIGTERM arrived.
    stop: bool,
    /// A run is going on (a stop waits for its end).
    running: bool,
}

impl Pending {
    pub(crate) fn note_change(&mut self) {
        let now = Instant::now();
        self.first_change.get_or_insert(now);
        self.last_change = Some(now);
    }

    fn note_rescan(&mut self, why: String) {
        if !self.rescan.contains(&why) {
            self.rescan.push(why);
        }
        self.note_change();
    }

    /// When the debounced run is due, if a change is pending.
    fn run_due_at(&self) -> Option<Instant> {
        let quiet_end = self.last_change? + QUIET;
        let latest = self.first_change? + MAX_DELAY;
        Some(quiet_end.min(latest))
    }

    /// Hand what is pending to the run about to start; what arrives from
    /// now on is for the run after it.
    fn take(&mut self) -> Work {
        self.first_change = None;
        self.last_change = None;
        Work {
            rescan: std::mem::take(&mut self.rescan),
            limit_hit: std::mem::take(&mut self.limit_hit),
            lost: std::mem::take(&mut self.lost),
            remote_down: std::mem::take(&mut self.remote_down),
        }
    }
}

/// What a run about to start must deal with first.
struct Work {
    rescan: Vec<String>,
    limit_hit: BTreeSet<usize>,
    lost: BTreeSet<usize>,
    remote_down: BTreeMap<usize, WatchDown>,
}

/// Why a root is no longer watched, and how it is polled instead.
pub(crate) struct WatchDown {
    reason: PollReason,
    why: String,
}

impl WatchDown {
    pub(crate) fn limit() -> WatchDown {
        WatchDown {
            reason: PollReason::Limit,
            why: "the inotify watch limit".into(),
        }
    }

    /// Tried again every cycle (a connection that failed, say).
    pub(crate) fn unwatched(why: String) -> WatchDown {
        WatchDown {
            reason: PollReason::Unwatched,
            why,
        }
    }

    /// Tried again after a SIGHUP.
    pub(crate) fn unwatchable(why: String) -> WatchDown {
        WatchDown {
            reason: PollReason::Unwatchable,
            why,
        }
    }
}

#[derive(Default)]
pub(crate) struct Inbox {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic elsewhere left plain flags behind: still usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn update<T>(&self, change: impl FnOnce(&mut Pending) -> T) -> T {
        let result = change(&mut self.lock());
        self.wake.notify_all();
        result
    }
}

/// Block until a run is due (`Some`) or a stop was asked (`None`):
/// debounced changes, or `poll_at` for roots that cannot be watched.
fn wait_for_work(inbox: &Inbox, poll_at: Option<Instant>) -> Option<Work> {
    let mut pending = inbox.lock();
    loop {
        if pending.stop {
            return None;
        }
        let now = Instant::now();
        let due = pending.run_due_at();
        if due.is_some_and(|at| at <= now) || poll_at.is_some_and(|at| at <= now) {
            let work = pending.take();
            return Some(work);
        }
        pending = match due.into_iter().chain(poll_at).min() {
            Some(at) => {
                let timeout = at.saturating_duration_since(now);
                inbox
                    .wake
                    .wait_timeout(pending, timeout)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => inbox.wake.wait(pending).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// SIGHUP asks for a full rescan; SIGINT and SIGTERM end the watch once
/// the run in progress is done (a second one ends it at once: the
/// engine's crash invariant makes that safe, only slower to recover).
fn listen_for_signals(inbox: &Arc<Inbox>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM])?;
    let inbox = Arc::clone(inbox);
    std::thread::Builder::new()
        .name("accord-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                on_signal(&inbox, signal);
            }
        })?;
    Ok(())
}

fn on_signal(inbox: &Inbox, signal: i32) {
    if signal == SIGHUP {
        inbox.update(|pending| pending.note_rescan("SIGHUP received".into()));
        return;
    }
    let (again, running) = inbox.update(|pending| {
        let again = pending.stop;
        pending.stop = true;
        (again, pending.running)
    });
    if again {
        eprintln!("accord sync: stopped at once; the next sync completes what this one began");
        std::process::exit(128 + signal);
    }
    if running {
        eprintln!("accord sync: stopping after this run (signal again to stop at once)");
    }
}

/// How a root is kept track of.
enum RootWatch {
    /// Watched by inotify here: held only so that its watches live;
    /// dropping it removes them.
    Watched { _watch: TreeWatch },
    /// A remote root watched on its own host (`sync_watch_remote`).
    Remote { _watch: RemoteWatch },
    /// Synced every interval, and why.
    Polled(PollReason),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PollReason {
    /// The kernel's watch limit was reached (here, or on a remote root's
    /// host): watching again waits for a SIGHUP (after the limit was
    /// raised, say).
    Limit,
    /// The watch was lost or could not be made, or a remote root's watch
    /// connection failed: tried again every cycle.
    Unwatched,
    /// A remote root's host cannot watch it (an older accord, a file
    /// system inotify does not cover): tried again after a SIGHUP.
    Unwatchable,
}

struct RootWatches<'o> {
    opts: &'o WatchOptions,
    /// Local roots, canonical (as inotify names their paths).
    paths: Vec<Option<PathBuf>>,
    watches: Vec<RootWatch>,
}

impl<'o> RootWatches<'o> {
    fn start(opts: &'o WatchOptions, inbox: &Arc<Inbox>, own: &Arc<OwnFiles>) -> RootWatches<'o> {
        let paths = opts
            .roots
            .iter()
            .map(|root| match root {
                WatchRoot::Local(path) => Some(canonical_prefix(path)),
                WatchRoot::Remote { .. } => None,
            })
            .collect();
        let mut roots = RootWatches {
            opts,
            paths,
            // Set below, root by root.
            watches: opts
                .roots
                .iter()
                .map(|_| RootWatch::Polled(PollReason::Unwatched))
                .collect(),
        };
        for (index, root) in opts.roots.iter().enumerate() {
            match root {
                // A missing root fails the first run, which says so.
                WatchRoot::Local(path) if !path.exists() => {}
                WatchRoot::Local(_) | WatchRoot::Remote { .. } => roots.rewatch(index, inbox, own),
            }
        }
        roots
    }

    fn any_polled(&self) -> bool {
        self.watches
            .iter()
            .any(|watch| matches!(watch, RootWatch::Polled(_)))
    }

    /// Before a run: give up watches that hit the limit or failed, and
    /// watch again roots that lost theirs (and, after a SIGHUP, those that
    /// had hit the limit or could not be watched).
    fn repair(&mut self, work: &Work, inbox: &Arc<Inbox>, own: &Arc<OwnFiles>) {
        let hangup = work.rescan.iter().any(|why| why.starts_with("SIGHUP"));
        for index in 0..self.watches.len() {
            let lost = work.lost.contains(&index);
            if work.limit_hit.contains(&index) {
                self.watches[index] = RootWatch::Polled(PollReason::Limit);
                self.say_limit(index);
                continue;
            }
            if let Some(down) = work.remote_down.get(&index) {
                self.watches[index] = RootWatch::Polled(down.reason);
                self.say_unwatched(index, down);
                continue;
            }
            if lost {
                eprintln!(
                    "accord sync: lost the watch on {} (moved or deleted): \
                     rescanning in full",
                    self.name(index)
                );
            }
            let retry = match &self.watches[index] {
                RootWatch::Watched { .. } => lost,
                RootWatch::Remote { .. } => false,
                RootWatch::Polled(PollReason::Unwatched) => true,
                RootWatch::Polled(PollReason::Limit | PollReason::Unwatchable) => hangup,
            };
            if retry {
                self.rewatch(index, inbox, own);
            }
        }
    }

    fn rewatch(&mut self, index: usize, inbox: &Arc<Inbox>, own: &Arc<OwnFiles>) {
        // Free the old watches first: they count against the same limit.
        self.watches[index] = RootWatch::Polled(PollReason::Unwatched);
        let watched = match (&self.opts.roots[index], &self.paths[index]) {
            (WatchRoot::Remote { connect, .. }, _) => {
                crate::sync_watch_remote::start(connect, index, inbox, &self.opts.rules)
                    .map(|w| RootWatch::Remote { _watch: w })
            }
            (WatchRoot::Local(_), Some(path)) => {
                watch_root(index, path, inbox, own, &self.opts.rules)
                    .map(|w| RootWatch::Watched { _watch: w })
                    .map_err(|failure| match failure {
                        WatchFailure::Limit => WatchDown::limit(),
                        WatchFailure::Other(why) => WatchDown::unwatched(why),
                    })
            }
            (WatchRoot::Local(_), None) => return,
        };
        self.watches[index] = match watched {
            Ok(watch) => watch,
            Err(down) if down.reason == PollReason::Limit => {
                self.say_limit(index);
                RootWatch::Polled(PollReason::Limit)
            }
            Err(down) => {
                self.say_unwatched(index, &down);
                RootWatch::Polled(down.reason)
            }
        };
    }

    /// The root as messages name it.
    fn name(&self, index: usize) -> String {
        match (&self.opts.roots[index], &self.paths[index]) {
            (WatchRoot::Remote { address, .. }, _) => address.clone(),
            (_, Some(path)) => path.display().to_string(),
            (WatchRoot::Local(path), None) => path.display().to_string(),
        }
    }

    fn say_unwatched(&self, index: usize, down: &WatchDown) {
        let (why, until) = match down.reason {
            PollReason::Unwatchable => (&down.why, " (SIGHUP tries again)"),
            _ => (&down.why, " until it can be"),
        };
        eprintln!(
            "accord sync: cannot watch {} ({why}): syncing every {}s{until}",
            self.name(index),
            self.opts.interval.as_secs_f64()
        );
    }

    fn say_limit(&self, index: usize) {
        let host = match self.opts.roots[index] {
            WatchRoot::Remote { .. } => " on its host",
            WatchRoot::Local(_) => "",
        };
        eprintln!(
            "accord sync: cannot watch all of {}: the kernel's limit on inotify watches{host} \
             (/proc/sys/fs/inotify/max_user_watches) is reached; syncing every {}s instead \
             (raise the limit, e.g. `sysctl fs.inotify.max_user_watches=1048576`, then send \
             SIGHUP to watch again)",
            self.name(index),
            self.opts.interval.as_secs_f64()
        );
    }
}

/// Watch one local root, reporting into `inbox`; changes of paths that
/// `rules` exclude there are none.
fn watch_root(
    index: usize,
    root: &Path,
    inbox: &Arc<Inbox>,
    own: &OwnFiles,
    rules: &accord_engine::SyncRules,
) -> Result<TreeWatch, WatchFailure> {
    let inbox = Arc::clone(inbox);
    // The sync never takes its backup directory as part of the tree.
    let mut patterns = vec!["/.accord-backup".to_string()];
    patterns.extend(rules.excludes.iter().cloned());
    let own = match WatchRules::new(root, &patterns, rules.ignore_files) {
        Ok(excluded) => own.clone().excluding(excluded),
        // Checked before the first run: cannot happen; every change counts.
        Err(_) => own.clone(),
    };
    watch_tree(root, own, move |seen| note_seen(&inbox, index, seen))
}

/// Count what a watcher of root `index` saw (local or remote alike).
pub(crate) fn note_seen(inbox: &Inbox, index: usize, seen: Seen) {
    match seen {
        Seen::Nothing => {}
        Seen::Change => inbox.update(Pending::note_change),
        Seen::Rescan(why) => inbox.update(|pending| pending.note_rescan(why)),
        Seen::Lost => inbox.update(|pending| {
            pending.lost.insert(index);
            pending.note_change();
        }),
        Seen::Limit => inbox.update(|pending| {
            pending.limit_hit.insert(index);
            pending.note_change();
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_debounced_but_bounded() {
        let mut pending = Pending::default();
        assert_eq!(pending.run_due_at(), None);
        pending.note_change();
        let first = pending.first_change.unwrap();
        assert_eq!(pending.run_due_at(), Some(first + QUIET));
        // A change 950 ms later cannot push the run past MAX_DELAY.
        pending.last_change = Some(first + Duration::from_millis(950));
        assert_eq!(pending.run_due_at(), Some(first + MAX_DELAY));
        pending.take();
        assert_eq!(pending.run_due_at(), None);
    }
}
