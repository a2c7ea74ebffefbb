//! The steps of a mirror run, each a function that returns a value or stops
//! the run with a typed reason: open the roots, check them, scan, settle
//! what the scans found (half-finished in-place updates, exclusions,
//! checksums), find the facts the plan depends on, plan, carry it out.

use super::{MirrorConfig, Report};
use crate::mirror::dry_run::DryRun;
use crate::mirror::error::{Failure, Fatal};
use crate::mirror::exec::{run_plan, Exec};
use crate::mirror::stream::Streamed;
use crate::mirror::walk::{walk_replicas, Found, Walk, SLICE_NAMES};
use crate::Progress;
use accord_fsys::{DigestMemo, IgnoreRules, Scan, ScanOptions};
use accord_model::{Kind, RelPath};
use accord_plan::{Facts, MirrorPlan, Refusal};
use accord_replica::Error;
use accord_replica::LocalReplica;
use accord_replica::{Pending, Replica};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Names of the replicas' state files.
pub(crate) const XATTR_MEMO: &str = "xattr-memo";
pub(crate) const LISTING_MEMO: &str = "listing-memo";
/// The deletion guard's memory of the source root, kept by the destination.
pub(crate) const GUARD_STATE: &str = "mirror";

/// Why a run stopped before it was done.
enum Stop {
    Fatal(Fatal),
    Refused(Refusal),
}

impl From<Fatal> for Stop {
    fn from(f: Fatal) -> Stop {
        Stop::Fatal(f)
    }
}

/// Make the local directory `dst_path` a copy of `src_path` (in a dry run,
/// say what that would do).
pub fn mirror(src_path: &Path, dst_path: &Path, cfg: &MirrorConfig, progress: &Progress) -> Report {
    in_pool(cfg, |report| {
        let (src, dst) = open_roots(src_path, dst_path, cfg)?;
        if let Some(d) = &dst {
            check_distinct(&src, d, src_path, dst_path)?;
        }
        let existing = dst.as_ref().map(|d| d as &dyn Replica);
        let dry = DryRun::new(existing, dst_path.display().to_string());
        let dst: &dyn Replica = match existing {
            Some(d) if !cfg.dry_run => d,
            _ => &dry,
        };
        run(&src, dst, cfg, progress, report)
    })
}

/// Make the replica `dst` a copy of `src`, whatever kind of replicas they
/// are (the caller has opened them). `dst` is `None` only in a dry run
/// whose destination does not exist yet; `dst_name` names it then.
pub fn mirror_replicas(
    src: &dyn Replica,
    dst: Option<&dyn Replica>,
    dst_name: &str,
    cfg: &MirrorConfig,
    progress: &Progress,
) -> Report {
    in_pool(cfg, |report| {
        if let Some(d) = dst {
            if src.identity() == d.identity()
                && src.local_root().is_some() == d.local_root().is_some()
            {
                return Err(Fatal::SameDirectory.into());
            }
        }
        let dry = DryRun::new(dst, dst_name.to_string());
        let dst: &dyn Replica = match dst {
            Some(d) if !cfg.dry_run => d,
            _ => &dry,
        };
        run(src, dst, cfg, progress, report)
    })
}

/// Open one local root of a run whose other root is elsewhere: the source
/// (`dst` false), or the destination (created if missing; `None` in a dry
/// run when it does not exist yet).
pub fn open_local_root(
    path: &Path,
    dst: bool,
    cfg: &MirrorConfig,
) -> Result<Option<LocalReplica>, Fatal> {
    let state = cfg.state_dir.clone();
    if !dst {
        let src = LocalReplica::open(path).map_err(|source| Fatal::OpenSource {
            path: path.to_path_buf(),
            source,
        })?;
        return Ok(Some(src.with_state_dir(state)));
    }
    let opened = if cfg.dry_run {
        match LocalReplica::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            r => r.map(Some),
        }
    } else {
        LocalReplica::create(path).map(Some)
    };
    let opts = crate::LocalOptions {
        fsync: cfg.fsync,
        ..Default::default()
    };
    opened
        .map(|d| d.map(|d| d.with_state_dir(state).with_options(opts)))
        .map_err(|source| Fatal::OpenDestination {
            path: path.to_path_buf(),
            source,
        })
}

/// Run `steps` on a pool of `cfg.jobs` threads and time it.
fn in_pool(
    cfg: &MirrorConfig,
    steps: impl FnOnce(&mut Report) -> Result<(), Stop> + Send,
) -> Report {
    let start = Instant::now();
    // File system calls block on I/O: more threads than cores keep the
    // disks and the cores busy.
    let jobs = if cfg.jobs == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get() * 2)
            .unwrap_or(4)
            .max(4)
    } else {
        cfg.jobs
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("accord-{i}"))
        .build();
    let mut report = Report::default();
    match pool {
        Ok(pool) => {
            let stopped = pool.install(|| steps(&mut report));
            match stopped {
                Ok(()) => {}
                Err(Stop::Fatal(f)) => report.fatal = Some(f),
                Err(Stop::Refused(r)) => report.refusal = Some(r),
            }
        }
        Err(e) => report.fatal = Some(Fatal::ThreadPool(e)),
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// The source, and the destination (created if missing; `None` in a dry run
/// when it does not exist yet).
fn open_roots(
    src_path: &Path,
    dst_path: &Path,
    cfg: &MirrorConfig,
) -> Result<(LocalReplica, Option<LocalReplica>), Fatal> {
    let state = || cfg.state_dir.clone();
    let src = LocalReplica::open(src_path)
        .map_err(|source| Fatal::OpenSource {
            path: src_path.to_path_buf(),
            source,
        })?
        .with_state_dir(state());
    // Before the destination is made: a run that stops here changes nothing.
    if let Some(why) = accord_fsys::nesting(src_path, dst_path) {
        return Err(Fatal::Nested(format!(
            "{why}; nothing was changed (choose a destination outside the source)"
        )));
    }
    let opened = if cfg.dry_run {
        match LocalReplica::open(dst_path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            r => r.map(Some),
        }
    } else {
        LocalReplica::create(dst_path).map(Some)
    };
    let dst = opened.map_err(|source| Fatal::OpenDestination {
        path: dst_path.to_path_buf(),
        source,
    })?;
    let opts = crate::LocalOptions {
        fsync: cfg.fsync,
        // Files are copied from the source, not received.
        receives: false,
        ..Default::default()
    };
    Ok((
        src,
        dst.map(|d| d.with_state_dir(state()).with_options(opts)),
    ))
}

/// Two runs into one destination would delete each other's temp files and
/// move aside files the other is updating in place. The lock lasts as long
/// as the replica.
fn lock(dst: &dyn Replica) -> Result<(), Fatal> {
    match dst.try_lock() {
        Ok(true) => Ok(()),
        Ok(false) => Err(Fatal::Busy(dst.describe().into())),
        Err(source) => Err(Fatal::Lock {
            path: dst.describe().into(),
            source,
        }),
    }
}

/// The roots are not the same directory, nor one inside the other by path
/// (a mirror would delete the source, or copy itself into itself one level
/// deeper on every run). Nesting through bind mounts is found by the scans.
pub(crate) fn check_distinct(
    src: &LocalReplica,
    dst: &LocalReplica,
    src_path: &Path,
    dst_path: &Path,
) -> Result<(), Fatal> {
    if dst.identity() == src.identity() {
        return Err(Fatal::SameDirectory);
    }
    match accord_fsys::nesting(src_path, dst_path) {
        Some(why) => Err(Fatal::Nested(why)),
        None => Ok(()),
    }
}

/// The steps after the roots are open.
fn run(
    src: &dyn Replica,
    dst: &dyn Replica,
    cfg: &MirrorConfig,
    progress: &Progress,
    report: &mut Report,
) -> Result<(), Stop> {
    let t_scan = Instant::now();
    // A backup directory inside the destination is no part of the mirror.
    let mut excludes = cfg.excludes.clone();
    excludes.extend(cfg.backup.as_ref().and_then(super::backup::exclude_rule));
    let rules = IgnoreRules::new(&excludes).map_err(Fatal::BadExclude)?;
    let dst_rules = IgnoreRules::new(&excludes).map_err(Fatal::BadExclude)?;
    // The states are asked for before the lock is waited for (reading needs
    // no lock), so a replica across a wire does all three in one round trip.
    let guard = dst.start_read_state(GUARD_STATE);
    let memos = Memos::start(src, dst, cfg);
    // And the roots' listings (the memos only matter to local listings;
    // a server carries out the lock before it reads the next request, so a
    // destination across a wire is listed after the lock is taken).
    let no_memos = Memos::default();
    let root = RelPath::root();
    src.prefetch_dir(&root, &rules, &no_memos.src_options(cfg));
    dst.prefetch_dir(&root, &dst_rules, &no_memos.dst_options(cfg));
    lock(dst)?;
    let memos = memos.wait();
    let streamed = Streamed::new(src, dst, cfg, progress);
    if streamed.is_some() && cfg.count_first {
        count_first(src, dst, cfg, &excludes, progress)?;
    }
    let walk = Walk::new(src, dst, cfg, &rules).streaming(streamed.as_ref());
    let visit = |v: accord_fsys::DirVisit| walk.visit(v);
    let rules_both = (&rules, &dst_rules);
    let (mut s_scan, mut d_scan) = walk_both(src, dst, cfg, rules_both, &memos, &visit);
    let found = walk.finish();
    let started = streamed.map(Streamed::into_exec);
    let unreadable = check_readable(src, dst, &found, (&s_scan, &d_scan)).err();
    if let Some(f) = found.nested.or(unreadable) {
        // What was carried out as the walk went is finished and reported.
        if let Some((exec, ran)) = started {
            if ran {
                settle_made_dirs(&exec, found.planner, report);
            }
            fill_report(exec, report);
        }
        return Err(f.into());
    }
    report.errors.extend(take_scan_errors(&mut s_scan));
    report.errors.extend(take_scan_errors(&mut d_scan));
    report.errors.extend(found.failures);
    let guard = guard.wait();
    let facts = Facts {
        source_incomplete: s_scan.incomplete || found.half_updated,
        source_root_changed: source_root_changed(src, guard.clone()),
        one_directory: false,
    };
    report.deletions_suspended = facts.source_incomplete && cfg.plan.delete;
    memos.save(src, dst, cfg, &s_scan, &d_scan);
    report.scan_s = t_scan.elapsed().as_secs_f64();

    let t_plan = Instant::now();
    let plan = match found.planner.finish(&facts) {
        Ok(plan) => plan,
        Err(refusal) => {
            // (Never after parts were carried out: into an empty
            // destination nothing is to be deleted.)
            if let Some((exec, _)) = started {
                fill_report(exec, report);
            }
            return Err(Stop::Refused(refusal));
        }
    };
    report.plan_s = t_plan.elapsed().as_secs_f64();
    report.files_total = plan.summary.files_total as u64;
    report.bytes_total = plan.summary.bytes_total;
    let p = progress;
    p.files_total
        .store(plan.summary.files_to_write as u64, Ordering::Relaxed);
    p.bytes_total
        .store(plan.summary.bytes_to_write, Ordering::Relaxed);
    p.planned.store(true, Ordering::Relaxed);

    let (exec, streamed_parts) =
        started.unwrap_or_else(|| (Exec::new(src, dst, cfg, progress), false));
    execute(exec, plan, streamed_parts, report);
    if report.fatal.is_none() {
        let (dev, ino) = src.identity();
        let mirrored_from = format!("{dev} {ino}\n").into_bytes();
        // Durable: the deletion guard's memory must not come back torn.
        // Not written again when it already says so (a round trip saved
        // on a replica across a wire).
        if guard.as_deref() != Some(&mirrored_from[..]) {
            let _ = dst.write_state(GUARD_STATE, &mirrored_from, true);
        }
    }
    Ok(())
}

/// The memos both replicas keep (see `accord_fsys::DigestMemo`).
#[derive(Default)]
struct Memos {
    src_xattr: DigestMemo,
    dst_xattr: DigestMemo,
    /// Only where directory ctimes are kept by the local kernel itself (not
    /// a network or FUSE file system, whose attributes may lag).
    listing: Option<DigestMemo>,
}

fn start_memo(r: &dyn Replica, name: &str, on: bool) -> Option<Pending<Option<Vec<u8>>>> {
    on.then(|| r.start_read_state(name))
}

fn memo_of(p: Option<Pending<Option<Vec<u8>>>>) -> DigestMemo {
    p.and_then(|p| p.wait())
        .and_then(|b| DigestMemo::decode(&b))
        .unwrap_or_default()
}

/// Memos asked for and not yet read.
struct MemosAsked {
    src_xattr: Option<Pending<Option<Vec<u8>>>>,
    dst_xattr: Option<Pending<Option<Vec<u8>>>>,
    listing: Option<Option<Pending<Option<Vec<u8>>>>>,
}

impl MemosAsked {
    fn wait(self) -> Memos {
        Memos {
            src_xattr: memo_of(self.src_xattr),
            dst_xattr: memo_of(self.dst_xattr),
            listing: self.listing.map(memo_of),
        }
    }
}

impl Memos {
    /// Ask for the memos (all before any is waited for).
    fn start(src: &dyn Replica, dst: &dyn Replica, cfg: &MirrorConfig) -> MemosAsked {
        let listing_kept = dst.local_root().is_some_and(|root| root.is_local_disk_fs());
        let on = cfg.xattrs.any();
        MemosAsked {
            src_xattr: start_memo(src, XATTR_MEMO, on),
            dst_xattr: start_memo(dst, XATTR_MEMO, on),
            listing: listing_kept.then(|| start_memo(dst, LISTING_MEMO, true)),
        }
    }

    fn src_options(&self, cfg: &MirrorConfig) -> ScanOptions<'_> {
        ScanOptions {
            xattrs: cfg.xattrs,
            xattr_memo: Some(&self.src_xattr),
            listing_memo: None,
            read_ignore_files: cfg.ignore_files,
            only_names: None,
            source: true,
            same_fs: None,
            alone: false,
        }
    }

    fn dst_options(&self, cfg: &MirrorConfig) -> ScanOptions<'_> {
        ScanOptions {
            xattrs: cfg.xattrs,
            xattr_memo: Some(&self.dst_xattr),
            listing_memo: self.listing.as_ref(),
            read_ignore_files: false,
            only_names: None,
            source: false,
            same_fs: None,
            alone: false,
        }
    }

    /// Save what the scans found for the next run. Only an accelerator: a
    /// memo that cannot be saved costs speed next time.
    fn save(&self, src: &dyn Replica, dst: &dyn Replica, cfg: &MirrorConfig, s: &Scan, d: &Scan) {
        if cfg.xattrs.any() {
            let _ = src.write_state(
                XATTR_MEMO,
                &DigestMemo::from_keys(s.xattr_free.clone()).encode(),
                false,
            );
            let _ = dst.write_state(
                XATTR_MEMO,
                &DigestMemo::from_keys(d.xattr_free.clone()).encode(),
                false,
            );
        }
        if self.listing.is_some() {
            let _ = dst.write_state(
                LISTING_MEMO,
                &DigestMemo::from_keys(d.listings.clone()).encode(),
                false,
            );
        }
    }
}

/// Walk both sides, each directory pair handed to `walk` as it is read:
/// two local replicas directory by directory together (`walk_pair`; the
/// source's listing spares the destination's where the listing memo
/// allows), others through `Replica::list_dir`. Returns what the walk
/// found besides the entries, per side.
fn walk_both(
    src: &dyn Replica,
    dst: &dyn Replica,
    cfg: &MirrorConfig,
    (s_rules, d_rules): (&IgnoreRules, &IgnoreRules),
    memos: &Memos,
    visit: &(dyn Fn(accord_fsys::DirVisit) + Sync),
) -> (Scan, Scan) {
    let (mut s_opts, mut d_opts) = (memos.src_options(cfg), memos.dst_options(cfg));
    s_opts.same_fs = cfg.same_fs(src.identity().0);
    d_opts.same_fs = cfg.same_fs(dst.identity().0);
    if let (Some(s), Some(d)) = (src.local_root(), dst.local_root()) {
        let (s, d) = ((s, s_rules, &s_opts), (d, d_rules, &d_opts));
        return accord_fsys::walk_pair(s, d, Some(SLICE_NAMES), visit);
    }
    walk_replicas((src, s_rules, &s_opts), (dst, d_rules, &d_opts), visit)
}

/// The progress display's totals for an initial copy made as it is walked
/// (`stream.rs`), which has no plan to take them from until its end: a
/// walk of the source first that only counts the regular files the copy
/// will write, and their bytes (the same rules, no extended attributes
/// read; the destination's root is empty, so it is listed alone). What
/// only the real walk learns (a file that changed meanwhile, one
/// half-updated in place) is in the plan's own figures, which replace
/// these at the end.
fn count_first(
    src: &dyn Replica,
    dst: &dyn Replica,
    cfg: &MirrorConfig,
    excludes: &[String],
    progress: &Progress,
) -> Result<(), Fatal> {
    let rules = IgnoreRules::new(excludes).map_err(Fatal::BadExclude)?;
    let d_rules = IgnoreRules::new(excludes).map_err(Fatal::BadExclude)?;
    let counting = MirrorConfig {
        xattrs: crate::XattrFilter {
            xattrs: false,
            acls: false,
            user_only: false,
        },
        ..cfg.clone()
    };
    let o = &cfg.plan;
    let visit = |v: accord_fsys::DirVisit| {
        let Some(l) = v.src else { return };
        // (The directory's own entry leads its listing.)
        for e in l.entries.iter().skip(1) {
            if e.kind == Kind::File && o.kinds.allows(e.kind) && !o.select.size_skipped(e.size) {
                progress.files_total.fetch_add(1, Ordering::Relaxed);
                progress.bytes_total.fetch_add(e.size, Ordering::Relaxed);
            }
        }
    };
    let memos = Memos::default();
    walk_both(src, dst, &counting, (&rules, &d_rules), &memos, &visit);
    progress.planned.store(true, Ordering::Relaxed);
    Ok(())
}

fn take_scan_errors(scan: &mut Scan) -> Vec<Failure> {
    scan.errors
        .drain(..)
        .map(|e| Failure {
            path: e.path,
            error: Error::Scan(e.message),
        })
        .collect()
}

/// An unreadable destination directory could hide entries: we could still
/// copy, but we would not know what to delete or replace.
fn check_readable(
    src: &dyn Replica,
    dst: &dyn Replica,
    found: &Found,
    (s_scan, d_scan): (&Scan, &Scan),
) -> Result<(), Fatal> {
    if !found.src_root_read {
        return Err(Fatal::SourceUnreadable {
            path: src.describe().into(),
            detail: first_error(s_scan),
        });
    }
    if !found.dst_root_read || d_scan.incomplete {
        return Err(Fatal::DestinationUnreadable {
            path: dst.describe().into(),
            detail: first_error(d_scan),
        });
    }
    Ok(())
}

/// The first problem a scan met, for a message (the root's own path is
/// left out: the message names the root).
fn first_error(scan: &Scan) -> String {
    scan.errors
        .first()
        .map(|e| match e.path.as_bytes() {
            [] => e.message.clone(),
            _ => format!("{}: {}", e.path.display(), e.message),
        })
        .unwrap_or_default()
}

/// The deletion guard's memory: is the source root another one than the
/// last run's into this destination?
pub(crate) fn source_root_changed(src: &dyn Replica, guard: Option<Vec<u8>>) -> bool {
    let Some(bytes) = guard else {
        return false;
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut fields = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    match (fields.next(), fields.next()) {
        (Some(Some(dev)), Some(Some(ino))) => (dev, ino) != src.identity(),
        _ => false,
    }
}

/// Carry out the plan (the rest of it, when `streamed` parts were carried
/// out as the walk went), make it durable, and fill in the report.
fn execute(exec: Exec, plan: MirrorPlan, streamed: bool, report: &mut Report) {
    let t_exec = Instant::now();
    let mut flush = run_plan(&exec, &plan);
    if flush.is_none() && streamed && exec.cfg.fsync {
        // The parts' renames and new directories, when nothing was left.
        flush = Some(exec.dst.start_sync_all());
    }
    if let Some(Err(e)) = flush.map(Pending::wait) {
        if !exec.stopped() {
            exec.fatal_error(Fatal::Sync(e));
        }
    }
    report.execute_s = t_exec.elapsed().as_secs_f64();
    fill_report(exec, report);
    report.plan = Some(plan);
}

/// A run stopped after parts of it were carried out as it walked: the
/// directories it made get their properties (none stays at the mode it
/// was made with) and all is flushed, as at the end of a whole run.
fn settle_made_dirs(exec: &Exec, planner: accord_plan::MirrorPlanner, report: &mut Report) {
    let (mut dir_meta, summary) = planner.into_dir_meta();
    dir_meta.retain(|it| exec.dst.open_dir(&it.path).is_ok());
    let made = MirrorPlan {
        dir_meta,
        ..MirrorPlan::default()
    };
    let flush = run_plan(exec, &made).or_else(|| exec.cfg.fsync.then(|| exec.dst.start_sync_all()));
    if let Some(Err(e)) = flush.map(Pending::wait) {
        if !exec.stopped() {
            exec.fatal_error(Fatal::Sync(e));
        }
    }
    report.files_total = summary.files_total as u64;
    report.bytes_total = summary.bytes_total;
}

/// What the executor did, into the report.
fn fill_report(exec: Exec, report: &mut Report) {
    report.errors.extend(exec.failures.into_inner().unwrap());
    report.fatal = exec.fatal.into_inner().unwrap();
    report.changes = exec.changes.into_inner().unwrap();
    // The phases run in parallel, so changes are recorded in no fixed
    // order: list them by path (a stable sort keeps a path's own changes,
    // say deleted then created, in the order they were made).
    report.changes.sort_by(|a, b| a.1.cmp(&b.1));
    report.errors.sort_by(|a, b| a.path.cmp(&b.path));
    let c = &exec.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    report.files_transferred = get(&c.files);
    report.others_created = get(&c.others);
    report.links_created = get(&c.links);
    report.dirs_created = get(&c.dirs);
    report.metadata_updated = get(&c.metadata);
    report.files_deleted = get(&c.deleted);
    report.bytes_written = get(&c.written);
    report.literal_bytes = get(&c.literal);
    report.matched_bytes = get(&c.matched);
}
