//! The deletion guard's checks of a whole task run, made by whoever starts
//! it before any task runs, as the walk makes them before any change: the
//! roots are two distinct directories, not one inside the other by path;
//! an empty source does not empty a destination that has entries; and a
//! source that is another root than the last run's into this destination
//! (its state kept in the starter's state directory) deletes nothing
//! unless forced. The last is known only as directories are planned: the
//! starter records it in the queue and `check_dir` pauses the run before
//! the first deletion.
//!
//! Then the guard of each directory as it is planned (`check_dir`).

use crate::mirror::run::{check_distinct, source_root_changed, GUARD_STATE};
use crate::tasks::error::{RunFailure, TaskError};
use crate::tasks::leaves::Group;
use crate::tasks::run::{keys, open_task_roots, Ctx};
use crate::tasks::scan_dir::{entries_under, is_dir};
use crate::tasks::spec::RunSpec;
use accord_fsys::{IgnoreRules, Listing, ScanOptions};
use accord_model::RelPath;
use accord_plan::{Item, MaxDelete, MirrorPlan, Refusal};
use accord_queue::TaskQueue;
use accord_replica::LocalReplica;
use accord_replica::Replica;
use std::path::PathBuf;

/// Why a task run is not started.
#[derive(Debug)]
pub enum NotStarted {
    /// The deletion guard refused it.
    Refused(Refusal),
    /// The roots cannot be used, or the queue cannot be reached.
    Fatal(RunFailure),
}

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotStarted::Refused(r) => r.fmt(f),
            NotStarted::Fatal(e) => e.fmt(f),
        }
    }
}

/// Check the run's roots before it starts (see the module); records in
/// `queue` what the planning of directories must know.
pub fn check_before_run(
    queue: &dyn TaskQueue,
    spec: &RunSpec,
    state_dir: Option<PathBuf>,
) -> Result<(), NotStarted> {
    let fatal = |e: RunFailure| NotStarted::Fatal(e);
    let (src, dst) = open_task_roots(spec).map_err(|f| fatal(f.into()))?;
    let dst = dst.with_state_dir(state_dir);
    check_distinct(&src, &dst, &spec.src, &spec.dst).map_err(|f| fatal(f.into()))?;
    let o = &spec.plan;
    if !o.delete || o.force {
        return Ok(());
    }
    let rules = IgnoreRules::new(&spec.excludes).map_err(|source| {
        fatal(RunFailure::Excludes {
            what: "--exclude",
            source,
        })
    })?;
    let src_entries = root_entries(&src, &rules, spec, true)?;
    let dst_entries = root_entries(&dst, &rules, spec, false)?;
    if src_entries == 0 && dst_entries > 0 {
        return Err(NotStarted::Refused(Refusal::SourceEmpty { dst_entries }));
    }
    if source_root_changed(&src, dst.read_state(GUARD_STATE)) {
        queue
            .put(keys::ROOT_CHANGED, b"1")
            .map_err(|e| fatal(e.into()))?;
    }
    Ok(())
}

/// Entries directly in a root, as the run's rules show them (the source's
/// `.accordignore` at its top included).
fn root_entries(
    r: &LocalReplica,
    rules: &IgnoreRules,
    spec: &RunSpec,
    source: bool,
) -> Result<usize, NotStarted> {
    let opts = ScanOptions {
        read_ignore_files: source && spec.ignore_files,
        ..ScanOptions::plain(accord_fsys::XattrFilter::NONE, source)
    };
    match r.list_dir(&RelPath::root(), rules, &opts) {
        (Some(l), _) => Ok(l.entries.len().saturating_sub(1) + l.subdirs.len()),
        (None, scan) => Err(NotStarted::Fatal(RunFailure::RootUnreadable {
            root: r.describe(),
            detail: scan.errors.first().map(|e| e.message.clone()),
        })),
    }
}

/// After a run that finished: remember its source root for the next run
/// into this destination (as the walk does).
pub fn remember_source(spec: &RunSpec, state_dir: Option<PathBuf>) {
    let Ok((src, dst)) = open_task_roots(spec) else {
        return;
    };
    let dst = dst.with_state_dir(state_dir);
    let (dev, ino) = src.identity();
    let mirrored_from = format!("{dev} {ino}\n").into_bytes();
    if dst.read_state(GUARD_STATE).as_deref() != Some(&mirrored_from[..]) {
        // Durable: the deletion guard's memory must not come back torn.
        let _ = dst.write_state(GUARD_STATE, &mirrored_from, true);
    }
}

/// What the deletion guard says of one directory's extras.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Delete them now.
    Go,
    /// Hold them until the whole destination is counted (`tasks/deferred_deletes.rs`).
    Defer,
    /// The run paused itself before deleting them.
    Paused,
}

/// The deletion guard over a streamed run: extras (with the entries under
/// extra directories) and destination entries are counted as directories
/// are planned; a run that would pass `--max-delete` pauses itself and
/// says why (the cli says how to go on: it knows the command typed).
///
/// A limit in entries is passed for good once the extras counted pass it.
/// A percentage is of the whole destination, as the walk's is: extras
/// past the percentage of the entries seen so far are held (the rest of
/// the directory goes on) and decided once every directory is counted.
///
/// A directory without extras deletes nothing: its entries are counted
/// with the task's other counts at its end.
pub(crate) fn check_dir(
    ctx: &Ctx,
    dir: &RelPath,
    plan: &MirrorPlan,
    d: &Listing,
    group: &mut Group,
) -> Result<Guard, TaskError> {
    let o = &ctx.spec.plan;
    if !o.delete || o.force {
        return Ok(Guard::Go);
    }
    let q = ctx.queue;
    let seen = (d.entries.len() - 1 + d.subdirs.len()) as i64;
    let extras: Vec<&Item> = plan.deletes.iter().filter(|i| i.src.is_none()).collect();
    if extras.is_empty() {
        group.count_seen(dir, seen);
        return Ok(Guard::Go);
    }
    group.flush(ctx)?;
    // Entries under an extra directory are the destination's too (the
    // walk counts them as it visits the directory).
    let under: usize = extras
        .iter()
        .filter(|i| is_dir(i.dst.as_deref()))
        .map(|i| entries_under(ctx, &i.path))
        .sum();
    let (seen_total, _) = q.add_once(
        &keys::with("e", dir),
        keys::DST_ENTRIES,
        seen + under as i64,
        &[],
    )?;
    let n = (extras.len() + under) as i64;
    let (total, _) = q.add_once(&keys::with("g", dir), keys::DELETES, n, &[])?;
    let root_changed = q.get(keys::ROOT_CHANGED)?.is_some();
    let limit = limit(o.max_delete, seen_total);
    if (total <= limit && !root_changed) || q.add(keys::FORCE, 0)? > 0 {
        return Ok(Guard::Go);
    }
    if matches!(o.max_delete, MaxDelete::Fraction(_)) && !root_changed {
        return Ok(Guard::Defer);
    }
    let why = match root_changed {
        true => format!(
            "the source is a different file system root than last time and the mirror would \
             delete {total} entries; paused before deleting in {}",
            dir.display()
        ),
        false => format!(
            "the mirror would delete {total} destination entries, more than the limit of \
             {limit} (--max-delete); paused before deleting in {}",
            dir.display()
        ),
    };
    pause(ctx, &why)?;
    Ok(Guard::Paused)
}

/// Deletions allowed out of `dst_entries` destination entries.
pub(crate) fn limit(max: MaxDelete, dst_entries: i64) -> i64 {
    match max {
        MaxDelete::Count(c) => c as i64,
        MaxDelete::Fraction(f) => (dst_entries.max(0) as f64 * f).floor() as i64,
    }
}

/// Pause the run, saying why.
pub(crate) fn pause(ctx: &Ctx, why: &str) -> Result<(), TaskError> {
    ctx.queue.put(keys::PAUSED_WHY, why.as_bytes())?;
    ctx.queue.set_state(accord_queue::RunState::Paused)?;
    Ok(())
}
