//! Carrying out a mirror plan over two replicas, phase by phase; inside a
//! phase every item is an independent task on the rayon pool.

use super::backup::{self, Backups};
use super::MirrorConfig;
use crate::mirror::error::{Failure, Fatal};
use crate::mirror::transfer::{self, Xfer};
use crate::Progress;
use accord_fsys::PropsMask;
use accord_model::{Kind, RelPath};
use accord_plan::{Change, DirMetaList, Item, MirrorPlan, Op};
use accord_replica::{Action, Error};
use accord_replica::{Deleted, Pending, Replica};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// What the execution did, counted as it goes.
#[derive(Default)]
pub(crate) struct Counters {
    /// Regular files whose contents were written.
    pub files: AtomicU64,
    /// Symlinks, fifos, sockets and device nodes made.
    pub others: AtomicU64,
    /// Hard links made.
    pub links: AtomicU64,
    /// Entries whose properties alone were set.
    pub metadata: AtomicU64,
    pub dirs: AtomicU64,
    pub deleted: AtomicU64,
    pub written: AtomicU64,
    pub literal: AtomicU64,
    pub matched: AtomicU64,
}

pub(crate) struct Exec<'a> {
    pub src: &'a dyn Replica,
    pub dst: &'a dyn Replica,
    pub cfg: &'a MirrorConfig,
    pub progress: &'a Progress,
    pub failures: Mutex<Vec<Failure>>,
    pub fatal: Mutex<Option<Fatal>>,
    stop: AtomicBool,
    /// The disk filled up: stage no more batches, go file by file.
    short_of_space: AtomicBool,
    /// Files that did not fit even alone (and whether they had an old version).
    did_not_fit: Mutex<Vec<(RelPath, bool)>>,
    /// Files whose new contents could not be written (hard links to them
    /// are not made).
    not_written: Mutex<HashSet<RelPath>>,
    pub changes: Mutex<Vec<(Change, RelPath)>>,
    pub counters: Counters,
    /// Flush the destination once the plan is carried out (with
    /// `cfg.fsync`): off for a part of a run whose end flushes once for
    /// all its parts (the task runs of one process).
    pub final_flush: bool,
    /// Report the files that did not fit on the disk at the end of this
    /// `run_plan` (off for the parts of an initial copy made as it is
    /// walked: every file is tried first, and the run's last part reports).
    pub space_report: bool,
    /// `--link-dest`'s directory, opened (None: not asked for, or it
    /// cannot be opened: every file is then copied).
    pub link_dest: Option<accord_fsys::Root>,
    /// `-b`: where the old versions go (None: not asked for, or a dry run).
    pub backups: Option<Backups>,
    /// `--bwlimit` with two local roots: the file data written is paced.
    pub pace: Option<accord_fsys::Throttle>,
}

impl<'a> Exec<'a> {
    pub fn new(
        src: &'a dyn Replica,
        dst: &'a dyn Replica,
        cfg: &'a MirrorConfig,
        progress: &'a Progress,
    ) -> Exec<'a> {
        Exec {
            src,
            dst,
            cfg,
            progress,
            failures: Mutex::new(Vec::new()),
            fatal: Mutex::new(None),
            stop: AtomicBool::new(false),
            short_of_space: AtomicBool::new(false),
            did_not_fit: Mutex::new(Vec::new()),
            not_written: Mutex::new(HashSet::new()),
            changes: Mutex::new(Vec::new()),
            counters: Counters::default(),
            final_flush: true,
            space_report: true,
            link_dest: cfg
                .link_dest
                .as_deref()
                .and_then(|p| accord_fsys::Root::open(p).ok()),
            backups: Backups::new(cfg),
            pace: (cfg.bwlimit > 0 && src.local_root().is_some() && dst.local_root().is_some())
                .then(|| accord_fsys::Throttle::new(cfg.bwlimit)),
        }
    }

    /// `--bwlimit`: a delta rebuild or an in-place update wrote `bytes`
    /// in one go; pay for them now (whole copies pay as they go).
    pub fn pace_after(&self, bytes: u64) {
        if let Some(t) = &self.pace {
            t.pace(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
    }

    /// A failure of `it`: per path, or fatal when the disk is full.
    pub fn fail_item(&self, it: &Item, e: Error) {
        if matches!(it.op, Op::Write(_)) {
            self.not_written.lock().unwrap().insert(it.path.clone());
        }
        if e.is_lost() {
            self.fatal_error(Fatal::ConnectionLost(Box::new(e)));
        } else if e.is_no_space() {
            // An in-place update that failed was moved to a recovery file
            // (its message says where), not left in place.
            let in_place = matches!(e, Error::InPlaceFailed { .. });
            self.fatal_error(Fatal::DiskFull {
                path: it.path.clone(),
                replaced: it.dst.is_some() && !in_place,
                source: Box::new(e),
            });
        } else {
            self.failures.lock().unwrap().push(Failure {
                path: it.path.clone(),
                error: e,
            });
        }
    }

    pub fn fatal_error(&self, f: Fatal) {
        let mut slot = self.fatal.lock().unwrap();
        if slot.is_none() {
            *slot = Some(f);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn note_no_space(&self) {
        self.short_of_space.store(true, Ordering::Relaxed);
    }

    pub fn short_of_space(&self) -> bool {
        self.short_of_space.load(Ordering::Relaxed)
    }

    pub fn did_not_fit(&self, it: &Item) {
        let entry = (it.path.clone(), it.dst.is_some());
        self.did_not_fit.lock().unwrap().push(entry);
        self.not_written.lock().unwrap().insert(it.path.clone());
    }

    /// Was `path` to be written and was not?
    pub fn not_written(&self, path: &RelPath) -> bool {
        self.not_written.lock().unwrap().contains(path)
    }

    pub fn changed(&self, it: &Item) {
        if !self.cfg.list_changes {
            return;
        }
        if let Some(c) = it.change() {
            self.changes.lock().unwrap().push((c, it.path.clone()));
        }
    }

    /// A file's data is written (its commit may wait for a batch of
    /// flushes): the progress display counts it now, with its bytes, so
    /// that it moves with the work rather than in steps at each batch.
    pub fn data_written(&self, size: u64) {
        self.progress.files_done.fetch_add(1, Ordering::Relaxed);
        self.progress.bytes_done.fetch_add(size, Ordering::Relaxed);
    }

    /// Count a committed non-directory item (and its bytes).
    pub fn count_done(&self, it: &Item, xfer: Xfer) {
        let c = &self.counters;
        let counter = match it.op {
            Op::Write(_) if xfer.linked => &c.links,
            Op::Write(_) => &c.files,
            Op::Link { .. } => &c.links,
            _ => &c.others,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        c.written.fetch_add(xfer.written, Ordering::Relaxed);
        c.literal.fetch_add(xfer.literal, Ordering::Relaxed);
        c.matched.fetch_add(xfer.matched, Ordering::Relaxed);
        self.changed(it);
    }

    pub fn mask(&self) -> PropsMask {
        let o = &self.cfg.plan;
        PropsMask {
            perms: o.perms,
            owner: o.owner,
            times: o.times,
            xattrs: if o.xattrs {
                Some(self.cfg.xattrs)
            } else {
                None
            },
        }
    }

    /// The fatal error of a run that went on file by file after the disk
    /// filled up, if some file never fitted.
    pub fn finish_space_report(&self) {
        let files = std::mem::take(&mut *self.did_not_fit.lock().unwrap());
        if files.is_empty() {
            return;
        }
        let no_space = || Error::Io {
            action: Action::WriteTemp,
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        if self.stopped() {
            // Another fatal error is the run's: these are reported per path.
            let mut failures = self.failures.lock().unwrap();
            for (path, _) in files {
                failures.push(Failure {
                    path,
                    error: no_space(),
                });
            }
            return;
        }
        let source = Box::new(no_space());
        self.fatal_error(Fatal::DidNotFit { files, source });
    }
}

pub(crate) fn parent_of(p: &RelPath) -> RelPath {
    p.parent().unwrap_or_default()
}

/// Carry out `plan`: stale temps, deletions (deepest first), new
/// directories (parents first), files, hard links, directory properties
/// (deepest first, after their subtree).
///
/// Returns the final flush of the destination, started right after the
/// directory properties (so a replica across a wire does both in one round
/// trip), when the run writes durably and changed something.
pub(crate) fn run_plan(x: &Exec, plan: &MirrorPlan) -> Option<Pending<std::io::Result<()>>> {
    remove_stale_temps(x, &plan.cleanup);
    delete_all(x, &plan.deletes);
    // New directories and the files' commits are waited for at the end: a
    // replica across a wire carries out the calls in the order they were
    // sent, so what follows them needs no round trip of its own (a file
    // in a directory that could not be made fails on its own).
    let dirs = if x.stopped() {
        Vec::new()
    } else {
        start_dirs(x, &plan.mkdirs)
    };
    // When every file's commit is on its way before its reply is (a
    // replica across a wire), what follows is sent at once too.
    let mut early = None;
    let (mut commits, early_holds) = if x.stopped() {
        (Vec::new(), false)
    } else {
        let mut all_sent = || {
            if plan.links.is_empty() {
                early = Some(start_tail(x, plan));
            }
        };
        transfer::run_files(x, &plan.files, &mut all_sent)
    };
    if !plan.links.is_empty() {
        // A link is made only to a leader whose commit succeeded.
        transfer::wait_commits(x, std::mem::take(&mut commits));
    }
    if !x.stopped() {
        transfer::run_links(x, &plan.links);
    }
    if x.space_report {
        x.finish_space_report();
    }
    let (props, flush) = match early {
        Some(tail) if early_holds => tail,
        sent => {
            // Files were written after the properties were sent: their
            // directories' times must be set again, and flushed again.
            if let Some((props, flush)) = sent {
                for (_, p) in props.started {
                    let _ = p.wait();
                }
                let _ = flush.map(Pending::wait);
            }
            start_tail(x, plan)
        }
    };
    wait_dirs(x, dirs);
    transfer::wait_commits(x, commits);
    wait_dir_props(x, props);
    flush
}

type Tail<'a> = (PropsStarted<'a>, Option<Pending<std::io::Result<()>>>);

/// Directory properties, then the final flush.
fn start_tail<'a>(x: &Exec, plan: &'a MirrorPlan) -> Tail<'a> {
    // Even after a fatal error: a directory made by this run keeps mode 0700
    // until its properties are set, which would lock out other users.
    let props = start_dir_props(x, &plan.dir_meta);
    let flush = (x.cfg.fsync && x.final_flush && !plan.is_empty()).then(|| x.dst.start_sync_all());
    (props, flush)
}

fn remove_stale_temps(x: &Exec, items: &[Item]) {
    for it in items {
        if let Ok(dir) = x.dst.open_dir(&parent_of(&it.path)) {
            dir.remove_stale_temp(it.path.file_name());
        }
    }
}

/// Deletions, one depth level at a time (a directory goes after everything
/// under it), the directories of a level in parallel, each opened once.
/// The calls are started level after level and their results taken at the
/// end: a remote replica carries them out in the order they were sent.
fn delete_all(x: &Exec, deletes: &[Item]) {
    type Groups<'a> = BTreeMap<RelPath, Vec<&'a Item>>;
    let mut levels: BTreeMap<std::cmp::Reverse<usize>, Groups> = BTreeMap::new();
    // `-b`: every old version kept (and flushed) before any deletion.
    let deletes = backup::back_up_all(x, &deletes.iter().collect::<Vec<_>>());
    for it in deletes {
        levels
            .entry(std::cmp::Reverse(it.path.depth()))
            .or_default()
            .entry(parent_of(&it.path))
            .or_default()
            .push(it);
    }
    let mut started: Vec<(&Item, Pending<Result<Deleted, Error>>)> = Vec::new();
    for (_, groups) in levels {
        if x.stopped() {
            break;
        }
        let level: Vec<_> = groups
            .into_par_iter()
            .flat_map_iter(|(parent, items)| start_deletes(x, &parent, items))
            .collect();
        started.extend(level);
    }
    for (it, p) in started {
        deleted(x, it, p.wait());
    }
}

fn start_deletes<'a>(
    x: &Exec,
    parent: &RelPath,
    items: Vec<&'a Item>,
) -> Vec<(&'a Item, Pending<Result<Deleted, Error>>)> {
    let dir = match x.dst.open_dir(parent) {
        Ok(d) => d,
        Err(e) => {
            if e.raw_os_error() != Some(libc::ENOENT) {
                for it in items {
                    x.fail_item(it, Error::io(Action::Delete)(transfer::clone_io(&e)));
                }
            }
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        if x.stopped() {
            break;
        }
        out.push((it, dir.start_delete(it.path.file_name(), &it.expect_dst())));
    }
    out
}

fn deleted(x: &Exec, it: &Item, r: Result<Deleted, Error>) {
    let is_extra = it.src.is_none();
    match r {
        Ok(Deleted::Done) => {
            x.counters.deleted.fetch_add(1, Ordering::Relaxed);
            x.changed(it);
        }
        Ok(Deleted::Gone) => {}
        // An extra directory holding excluded entries: they and it stay.
        Ok(Deleted::NotEmpty) if is_extra => {}
        Ok(Deleted::NotEmpty) => x.fail_item(
            it,
            Error::io(Action::Delete)(std::io::Error::from_raw_os_error(libc::ENOTEMPTY)),
        ),
        Err(e) => x.fail_item(it, e),
    }
}

/// New directories, parents first: one depth level at a time, the
/// directories of a level in parallel (results taken by `wait_dirs`).
fn start_dirs<'a>(x: &Exec, mkdirs: &'a [Item]) -> Started<'a, ()> {
    let mut levels: BTreeMap<usize, Vec<&Item>> = BTreeMap::new();
    for it in mkdirs {
        levels.entry(it.path.depth()).or_default().push(it);
    }
    let mut started = Vec::new();
    for (_, items) in levels {
        if x.stopped() {
            break;
        }
        let level: Vec<_> = items
            .par_iter()
            .map(|it| (*it, start_mkdir(x, it)))
            .collect();
        started.extend(level);
    }
    started
}

/// Make new directories one after the other on this thread, parents
/// first (`items` in path order), each done when this returns.
pub(crate) fn make_dirs_now(x: &Exec, items: &[Item]) {
    for it in items {
        if x.stopped() {
            return;
        }
        wait_dirs(x, vec![(it, start_mkdir(x, it))]);
    }
}

/// Start making the directory of a `Mkdir` item.
fn start_mkdir(x: &Exec, it: &Item) -> Pending<Result<(), Error>> {
    match x.dst.open_dir(&parent_of(&it.path)) {
        Ok(d) => d.start_mkdir(it.path.file_name()),
        Err(e) => Pending::ready(Err(Error::io(Action::MakeDir)(e))),
    }
}

fn wait_dirs(x: &Exec, started: Started<'_, ()>) {
    for (it, p) in started {
        match p.wait() {
            Ok(()) => {
                x.counters.dirs.fetch_add(1, Ordering::Relaxed);
                x.changed(it)
            }
            Err(e) => x.fail_item(it, e),
        }
    }
}

type Started<'a, T> = Vec<(&'a Item, Pending<Result<T, Error>>)>;

/// Directory properties started, by their place in the plan's list (each
/// unpacked again only to be reported).
struct PropsStarted<'a> {
    list: &'a DirMetaList,
    started: Vec<(usize, Pending<Result<(), Error>>)>,
}

/// Directory properties, deepest first, one depth level at a time
/// (results taken by `wait_dir_props`), in the list's order within a
/// level. Each level is unpacked, started in parallel and dropped before
/// the next.
fn start_dir_props<'a>(x: &Exec, list: &'a DirMetaList) -> PropsStarted<'a> {
    let mut order: Vec<_> = (0..list.len())
        .map(|i| (std::cmp::Reverse(list.depth(i)), i))
        .collect();
    // Stable: a plan's list is sorted already, and stays as it is.
    order.sort_by_key(|&(depth, _)| depth);
    let mut started = Vec::with_capacity(list.len());
    for level in order.chunk_by(|a, b| a.0 == b.0) {
        let items: Vec<(usize, Item)> = level.iter().map(|&(_, i)| (i, list.get(i))).collect();
        let level: Vec<_> = items
            .par_iter()
            .filter_map(|(i, it)| {
                let s = it.src.as_deref()?;
                debug_assert_eq!(s.kind, Kind::Dir);
                let p = match x.dst.open_dir(&it.path) {
                    Ok(d) => d.start_set_own_props(&it.expect_dst(), &s.props, x.mask()),
                    Err(e) => Pending::ready(Err(Error::io(Action::SetProps)(e))),
                };
                Some((*i, p))
            })
            .collect();
        started.extend(level);
    }
    PropsStarted { list, started }
}

fn wait_dir_props(x: &Exec, props: PropsStarted<'_>) {
    for (i, p) in props.started {
        match p.wait() {
            Ok(()) => {
                // Unpacked only for the list of changes (`changed` keeps
                // nothing without it).
                if x.cfg.list_changes {
                    x.changed(&props.list.get(i));
                }
            }
            Err(e) => {
                let it = props.list.get(i);
                // A directory this run could not make was reported already.
                let unmade = it.dst.is_none()
                    && matches!(&e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOENT));
                if !unmade {
                    x.fail_item(&it, e);
                }
            }
        }
    }
}
