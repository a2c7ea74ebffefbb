//! `accord sync --watch`: after a first full sync, keep the pair in
//! agreement until interrupted.
//!
//! Local roots are watched with inotify (through `notify`, recursively).
//! Events only say *that* something changed: every cycle is a full sync
//! run of the pair, never a sync of the paths events named, because
//! inotify can lose events (queue overflow, a directory created just
//! before its watch) and a full run cannot; a no-change run over 20,000
//! files costs about 0.2 s. A burst of events is debounced into one run.
//!
//! A root that cannot be watched (a remote one, or one that hit the
//! kernel's watch limit) is synced every `--watch-interval` instead.
//!
//! Our own writes into the roots raise events too. Temp files and the
//! archives are filtered out; the renames that put new versions in place
//! are not (they carry users' names), so a run that propagated something
//! is followed by exactly one more run, which finds nothing to do and
//! raises no events of its own, and the cycle ends there.

use crate::exit;
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the roots must stay quiet before a run starts: one save is
/// often several events (create, write, close, rename) within milliseconds.
const QUIET: Duration = Duration::from_millis(100);
/// The longest a change waits for the quiet, so a constant stream of
/// writes (a growing log, a long copy) still syncs.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// A test hook (no user feature): with `ACCORD_TEST_WATCH_LIMIT=1`, every
/// attempt to watch a local root fails as if the kernel's inotify watch
/// limit had been reached (ENOSPC), so a test can see the fallback without
/// lowering `/proc/sys/fs/inotify/max_user_watches` for the whole machine.
const TEST_WATCH_LIMIT: &str = "ACCORD_TEST_WATCH_LIMIT";

/// One root as the watch sees it.
pub(crate) enum WatchRoot {
    Local(PathBuf),
    /// A remote root (its address, for messages): no events reach us.
    Remote(String),
}

pub(crate) struct WatchOptions {
    pub roots: [WatchRoot; 2],
    /// Between syncs of a root that cannot be watched.
    pub interval: Duration,
    /// Where the archives are kept: writes there are our own.
    pub state_dir: PathBuf,
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

/// Watch the pair, running `cycle` (one sync run, printed) first and then
/// whenever something changed. Returns the exit status.
pub(crate) fn watch(opts: &WatchOptions, cycle: &mut dyn FnMut() -> Cycle) -> i32 {
    let inbox = Arc::new(Inbox::default());
    if let Err(e) = listen_for_signals(&inbox) {
        eprintln!("accord sync: cannot handle signals for --watch: {e}");
        return exit::FATAL;
    }
    // Watch before the first run, so what changes during it is not missed.
    let own_files = Arc::new(OwnFiles::new(&opts.state_dir));
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
        eprintln!("accord sync: {why}: rescanning both roots in full");
    }
}

/// What the watchers and the signal thread have seen since the last run
/// began. Shared under a mutex: bounded however many events arrive.
#[derive(Default)]
struct Pending {
    /// The first and the last change since the last run began.
    first_change: Option<Instant>,
    last_change: Option<Instant>,
    /// Why the next run is a rescan, for the message before it.
    rescan: Vec<String>,
    /// Roots (by index) whose watch hit the kernel's limit, or was lost.
    limit_hit: [bool; 2],
    lost: [bool; 2],
    /// SIGINT or SIGTERM arrived.
    stop: bool,
    /// A run is going on (a stop waits for its end).
    running: bool,
}

impl Pending {
    fn note_change(&mut self) {
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
        }
    }
}

/// What a run about to start must deal with first.
struct Work {
    rescan: Vec<String>,
    limit_hit: [bool; 2],
    lost: [bool; 2],
}

#[derive(Default)]
struct Inbox {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic elsewhere left plain flags behind: still usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update<T>(&self, change: impl FnOnce(&mut Pending) -> T) -> T {
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

/// Paths whose changes are our own doing: temp, partial and recovery
/// files in the roots, and the archives (when kept inside a root).
struct OwnFiles {
    state_dir: PathBuf,
}

impl OwnFiles {
    fn new(state_dir: &Path) -> OwnFiles {
        OwnFiles {
            state_dir: canonical_prefix(state_dir),
        }
    }

    fn contains(&self, path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let reserved = path
            .file_name()
            .is_some_and(|name| accord_fsys::is_reserved_name(name.as_bytes()));
        reserved || path.starts_with(&self.state_dir)
    }
}

/// `path` with its longest existing ancestor resolved (symlinks, `..`),
/// as inotify names paths, even before the directory itself exists.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut ancestor = path;
    loop {
        if let Ok(found) = ancestor.canonicalize() {
            return missing.iter().rev().fold(found, |acc, part| acc.join(part));
        }
        match (ancestor.parent(), ancestor.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                ancestor = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// What one notification from a watcher means for the watch.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Reads, and our own files: nothing to sync.
    Nothing,
    Change,
    /// Events were lost: only a full run can tell what changed.
    Rescan(String),
    /// The root itself was moved or deleted: its watch is gone.
    Lost,
    /// The kernel's limit on inotify watches was reached.
    Limit,
}

fn classify(root: &Path, own: &OwnFiles, event: notify::Result<Event>) -> Seen {
    let event = match event {
        Ok(event) => event,
        Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => return Seen::Limit,
        Err(e) => return Seen::Rescan(format!("watching {} failed: {e}", root.display())),
    };
    if event.need_rescan() {
        return Seen::Rescan("the kernel's event queue overflowed (events were lost)".into());
    }
    match event.kind {
        // Opening or reading (our own scans fingerprint files) changes
        // nothing; a close after writing marks the end of a save.
        EventKind::Access(notify::event::AccessKind::Close(notify::event::AccessMode::Write)) => {}
        EventKind::Access(_) => return Seen::Nothing,
        EventKind::Remove(_) | EventKind::Modify(notify::event::ModifyKind::Name(_))
            if event.paths.iter().any(|path| path == root) =>
        {
            return Seen::Lost
        }
        _ => {}
    }
    if !event.paths.is_empty() && event.paths.iter().all(|path| own.contains(path)) {
        return Seen::Nothing;
    }
    Seen::Change
}

/// How a root is kept track of.
enum RootWatch {
    /// Watched by inotify: held only so that its watches live; dropping
    /// it removes them.
    Watched { _watcher: RecommendedWatcher },
    /// Synced every interval, and why.
    Polled(PollReason),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PollReason {
    Remote,
    /// The kernel's watch limit was reached: watching again waits for a
    /// SIGHUP (after the limit was raised, say).
    Limit,
    /// The watch was lost or could not be made: tried again every cycle.
    Unwatched,
}

struct RootWatches {
    paths: [Option<PathBuf>; 2],
    watches: [RootWatch; 2],
    interval: Duration,
}

impl RootWatches {
    fn start(opts: &WatchOptions, inbox: &Arc<Inbox>, own: &Arc<OwnFiles>) -> RootWatches {
        let paths = opts.roots.each_ref().map(|root| match root {
            WatchRoot::Local(path) => Some(canonical_prefix(path)),
            WatchRoot::Remote(_) => None,
        });
        let mut roots = RootWatches {
            paths,
            // Set below, root by root.
            watches: [
                RootWatch::Polled(PollReason::Unwatched),
                RootWatch::Polled(PollReason::Unwatched),
            ],
            interval: opts.interval,
        };
        for (index, root) in opts.roots.iter().enumerate() {
            match root {
                // A missing root fails the first run, which says so.
                WatchRoot::Local(path) if !path.exists() => {
                    roots.watches[index] = RootWatch::Polled(PollReason::Unwatched)
                }
                WatchRoot::Local(_) => roots.rewatch(index, inbox, own),
                WatchRoot::Remote(address) => {
                    roots.watches[index] = RootWatch::Polled(PollReason::Remote);
                    eprintln!(
                        "accord sync: {address} is remote and cannot be watched from here: \
                         syncing every {}s (changes on this side sync at once)",
                        roots.interval.as_secs_f64()
                    )
                }
            }
        }
        roots
    }

    fn any_polled(&self) -> bool {
        self.watches
            .iter()
            .any(|watch| matches!(watch, RootWatch::Polled(_)))
    }

    /// Before a run: give up watches that hit the limit, and watch again
    /// roots that lost theirs (and, after a SIGHUP, those that had hit
    /// the limit).
    fn repair(&mut self, work: &Work, inbox: &Arc<Inbox>, own: &Arc<OwnFiles>) {
        let hangup = work.rescan.iter().any(|why| why.starts_with("SIGHUP"));
        for index in 0..2 {
            let Some(path) = self.paths[index].clone() else {
                continue;
            };
            if work.limit_hit[index] {
                self.watches[index] = RootWatch::Polled(PollReason::Limit);
                self.say_limit(&path);
                continue;
            }
            if work.lost[index] {
                eprintln!(
                    "accord sync: lost the watch on {} (moved or deleted): \
                     rescanning in full",
                    path.display()
                );
            }
            let retry = match &self.watches[index] {
                RootWatch::Watched { .. } => work.lost[index],
                RootWatch::Polled(PollReason::Unwatched) => true,
                RootWatch::Polled(PollReason::Limit) => hangup,
                RootWatch::Polled(PollReason::Remote) => false,
            };
            if retry {
                self.rewatch(index, inbox, own);
            }
        }
    }

    fn rewatch(&mut self, index: usize, inbox: &Arc<Inbox>, own: &Arc<OwnFiles>) {
        let Some(path) = self.paths[index].clone() else {
            return;
        };
        // Free the old watches first: they count against the same limit.
        self.watches[index] = RootWatch::Polled(PollReason::Unwatched);
        self.watches[index] = match watch_root(index, &path, inbox, own) {
            Ok(watcher) => RootWatch::Watched { _watcher: watcher },
            Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => {
                self.say_limit(&path);
                RootWatch::Polled(PollReason::Limit)
            }
            Err(e) => {
                let why = match e.kind {
                    notify::ErrorKind::PathNotFound => "it is missing".to_string(),
                    notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                        "it is missing".to_string()
                    }
                    _ => e.to_string(),
                };
                eprintln!(
                    "accord sync: cannot watch {} ({why}): syncing every {}s until it can be",
                    path.display(),
                    self.interval.as_secs_f64()
                );
                RootWatch::Polled(PollReason::Unwatched)
            }
        };
    }

    fn say_limit(&self, path: &Path) {
        eprintln!(
            "accord sync: cannot watch all of {}: the kernel's limit on inotify watches \
             (/proc/sys/fs/inotify/max_user_watches) is reached; syncing every {}s instead \
             (raise the limit, e.g. `sysctl fs.inotify.max_user_watches=1048576`, then send \
             SIGHUP to watch again)",
            path.display(),
            self.interval.as_secs_f64()
        );
    }
}

/// Watch one local root recursively (symlinks are synced as links, so
/// they are not followed), reporting into `inbox`.
fn watch_root(
    index: usize,
    root: &Path,
    inbox: &Arc<Inbox>,
    own: &Arc<OwnFiles>,
) -> notify::Result<RecommendedWatcher> {
    if std::env::var_os(TEST_WATCH_LIMIT).is_some_and(|v| v == "1") {
        return Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch));
    }
    let (inbox, own, root_path) = (Arc::clone(inbox), Arc::clone(own), root.to_path_buf());
    let handler = move |event| match classify(&root_path, &own, event) {
        Seen::Nothing => {}
        Seen::Change => inbox.update(Pending::note_change),
        Seen::Rescan(why) => inbox.update(|pending| pending.note_rescan(why)),
        Seen::Lost => inbox.update(|pending| {
            pending.lost[index] = true;
            pending.note_change();
        }),
        Seen::Limit => inbox.update(|pending| {
            pending.limit_hit[index] = true;
            pending.note_change();
        }),
    };
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher = RecommendedWatcher::new(handler, config)?;
    watcher.watch(root, RecursiveMode::Recursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};

    fn own() -> OwnFiles {
        OwnFiles {
            state_dir: PathBuf::from("/r/a/.state"),
        }
    }

    fn seen(kind: EventKind, path: &str) -> Seen {
        let event = Event::new(kind).add_path(PathBuf::from(path));
        classify(Path::new("/r/a"), &own(), Ok(event))
    }

    #[test]
    fn reads_and_our_own_files_are_no_change() {
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert_eq!(seen(open, "/r/a/f"), Seen::Nothing);
        let create = EventKind::Create(CreateKind::File);
        assert_eq!(seen(create, "/r/a/d/.accord-tmp-x1"), Seen::Nothing);
        assert_eq!(seen(create, "/r/a/.state/archive.db"), Seen::Nothing);
        assert_eq!(seen(create, "/r/a/d/f"), Seen::Change);
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(seen(closed, "/r/a/f"), Seen::Change);
    }

    #[test]
    fn the_root_moved_or_removed_loses_the_watch() {
        let moved = EventKind::Modify(ModifyKind::Name(RenameMode::From));
        assert_eq!(seen(moved, "/r/a"), Seen::Lost);
        assert_eq!(
            seen(EventKind::Remove(RemoveKind::Folder), "/r/a"),
            Seen::Lost
        );
        assert_eq!(
            seen(EventKind::Remove(RemoveKind::Folder), "/r/a/d"),
            Seen::Change
        );
    }

    #[test]
    fn overflow_and_the_watch_limit() {
        let overflow = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        let root = Path::new("/r/a");
        assert!(matches!(
            classify(root, &own(), Ok(overflow)),
            Seen::Rescan(_)
        ));
        let limit = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        assert_eq!(classify(root, &own(), Err(limit)), Seen::Limit);
    }

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

    #[test]
    fn canonical_prefix_keeps_what_does_not_exist_yet() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().canonicalize().unwrap();
        let missing = tmp.path().join("y/z");
        assert_eq!(canonical_prefix(&missing), real.join("y/z"));
    }
}
