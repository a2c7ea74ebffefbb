//! Carrying out one task: `files`, `dir-meta` and `verify` here; `scan-dir`
//! in `tasks/scan_dir.rs`, big files and their ranges in `tasks/big_file.rs`, hard
//! links in `tasks/hard_links.rs`. Each part of a plan is carried out by the
//! whole-tree mirror's own `exec::run_plan`, so a task writes, checks and
//! commits exactly as `accord mirror` does.

use crate::mirror::error::Failure;
use crate::mirror::exec::{run_plan, Exec};
use crate::tasks::error::{Problem, Problems, TaskError};
use crate::tasks::run::{keys, Ctx, Outcome, TaskResult};
use crate::tasks::Task;
use crate::Replica;
use accord_model::{Entry, Found, Kind, RelPath};
use accord_plan::{DirInput, DirPart, Facts, Item, MirrorPlan, MirrorPlanner, Op};
use std::sync::atomic::Ordering;

pub(crate) fn run_task(ctx: &Ctx, task: &Task) -> TaskResult {
    match task {
        Task::ScanDir { dir } => crate::tasks::scan_dir::scan_dir(ctx, dir),
        Task::ScanDirs { dirs } => crate::tasks::scan_dir::scan_dirs(ctx, dirs),
        Task::Files { dir, items } => files(ctx, dir, items),
        Task::BigFile { item } => crate::tasks::big_file::big_file(ctx, item),
        Task::Range {
            item,
            temp,
            index,
            count,
        } => crate::tasks::big_file::range(ctx, item, temp, *index, *count),
        Task::Hardlink { src, dst } => crate::tasks::hard_links::hardlink(ctx, src, dst.as_deref()),
        Task::DirMeta { dir } => dir_meta(ctx, dir),
        Task::DeleteExtras { dir } => crate::tasks::deferred_deletes::delete_extras(ctx, dir),
        Task::Verify {
            paths,
            by,
            handed_back,
        } => verify(ctx, paths, by, *handed_back),
    }
}

/// What carrying out part of a plan did.
#[derive(Default)]
pub(crate) struct Done {
    pub problems: Problems,
    /// The paths that failed, and whether something failed that no path
    /// names (a fatal error: nothing can be taken as done).
    pub failed: Vec<RelPath>,
    pub fatal: bool,
    pub files: u64,
    pub bytes: u64,
    /// Destination entries deleted (the walk's count of deletions).
    pub deleted: u64,
}

/// Carry out `plan` with the mirror's executor. `flush`: make the written
/// files durable before they are renamed (a file has its old contents or
/// its new ones whatever happens), and, on a remote queue, make the
/// renames durable before the task is acknowledged: a task acknowledged
/// is never done again. A queue in this process dies with it (a crash
/// starts the run again, from a new scan), so there the run's end
/// flushes once for all tasks (`task_local::run_workers`), as the walk
/// does. Directories and deletions need no flush of the whole file system
/// per task.
pub(crate) fn carry_out(ctx: &Ctx, plan: &MirrorPlan, flush: bool) -> Done {
    let mut cfg = ctx.cfg.clone();
    cfg.fsync = flush && ctx.spec.fsync;
    let mut exec = Exec::new(ctx.src(), ctx.dst(), &cfg, ctx.progress);
    exec.final_flush = ctx.queue.call_cost() == accord_queue::CallCost::Remote;
    if let Some(p) = run_plan(&exec, plan) {
        if let Err(e) = p.wait() {
            exec.fatal_error(crate::Fatal::Sync(e));
        }
    }
    let failures = exec.failures.into_inner().unwrap();
    let failed = failures.iter().map(|f| f.path.clone()).collect();
    let mut problems = Problems(failures.into_iter().map(Problem::Path).collect());
    let fatal = exec.fatal.into_inner().unwrap();
    let stopped = fatal.is_some();
    if let Some(f) = fatal {
        problems.push(f);
    }
    Done {
        problems,
        failed,
        fatal: stopped,
        files: exec.counters.files.load(Ordering::Relaxed),
        bytes: exec.counters.written.load(Ordering::Relaxed),
        deleted: exec.counters.deleted.load(Ordering::Relaxed),
    }
}

/// Count what a task wrote, for `status` and for the tests that check
/// that a restarted run recopies nothing.
pub(crate) fn count_written(ctx: &Ctx, files: u64, bytes: u64) -> Result<(), TaskError> {
    if files == 0 {
        return Ok(());
    }
    let q = ctx.queue;
    q.add(keys::WRITTEN, files as i64)?;
    q.add(keys::BYTES, bytes as i64)?;
    q.add(&keys::written_by(ctx.worker), files as i64)?;
    q.add(&keys::bytes_by(ctx.worker), bytes as i64)?;
    Ok(())
}

/// What the destination holds at `path` now.
pub(crate) fn stat(r: &dyn Replica, path: &RelPath) -> Option<Found> {
    let parent = path.parent().unwrap_or_default();
    r.open_dir(&parent).ok()?.stat(path.file_name()).ok()?
}

/// Did an earlier run of this task write the item already? The
/// destination then holds the source's version and not the one planned
/// on (a redelivered task must not fail on its own work). Without
/// `times` (`--no-times`) a copy keeps its own mtime: a new inode of the
/// source's kind and size is taken as the copy.
pub(crate) fn already_done(it: &Item, now: Option<&Found>, times: bool) -> bool {
    let (Some(s), Some(now)) = (it.src.as_deref(), now) else {
        return false;
    };
    // A property change moves the mtime to the source's; a write or a
    // creation also gives the name a new inode.
    let moved = |d: &Entry| (d.dev, d.ino, d.props.mtime) != (now.dev, now.ino, now.mtime);
    let same_size = s.kind != Kind::File || now.size == s.size;
    let same_time = !times || now.mtime == s.props.mtime;
    now.kind == s.kind && same_size && same_time && it.dst.as_deref().is_none_or(moved)
}

/// A batch of one directory's files.
fn files(ctx: &Ctx, dir: &RelPath, items: &[Item]) -> TaskResult {
    let todo: Vec<Item> = items
        .iter()
        .filter(|it| !already_done(it, stat(ctx.dst(), &it.path).as_ref(), ctx.cfg.plan.times))
        .cloned()
        .collect();
    let written: Vec<RelPath> = todo
        .iter()
        .filter(|i| matches!(i.op, Op::Write(_)))
        .map(|i| i.path.clone())
        .collect();
    let plan = MirrorPlan {
        files: todo,
        ..MirrorPlan::default()
    };
    let done = carry_out(ctx, &plan, true);
    count_written(ctx, done.files, done.bytes)?;
    if done.fatal {
        return Err(TaskError::Fatal(done.problems));
    }
    if !done.problems.is_empty() {
        return Err(TaskError::Failed(done.problems));
    }
    push_verify(ctx, written)?;
    let first = &items[0].path;
    ctx.child_done(dir, &keys::with("df", first))?;
    Ok(Outcome::Done)
}

/// Ask another worker to check what this one wrote (`--verify`).
pub(crate) fn push_verify(ctx: &Ctx, paths: Vec<RelPath>) -> Result<(), TaskError> {
    if !ctx.spec.verify || paths.is_empty() {
        return Ok(());
    }
    let task = Task::Verify {
        paths,
        by: ctx.worker.to_string(),
        handed_back: false,
    };
    ctx.queue.push(&[task.encode()])?;
    Ok(())
}

/// A directory's own properties, once its whole subtree is done; then its
/// parent counts it (the root's ends the run).
fn dir_meta(ctx: &Ctx, dir: &RelPath) -> TaskResult {
    set_dir_props(ctx, dir, None)?;
    match dir.parent() {
        None => {
            ctx.queue
                .add_once(&keys::with("dm", dir), keys::FINISHED, 1, &[])?;
        }
        Some(parent) => ctx.child_done(&parent, &keys::with("dm", dir))?,
    }
    Ok(Outcome::Done)
}

/// A directory's own entries in the source and the destination.
pub(crate) type OwnEntries = (Entry, Entry);

/// Set `dir`'s own properties to the source's (its subtree is done),
/// from `known` when its listings' own entries still hold.
pub(crate) fn set_dir_props(
    ctx: &Ctx,
    dir: &RelPath,
    known: Option<&OwnEntries>,
) -> Result<(), TaskError> {
    // Else the directory's own entry on each side, read now (its files
    // were written since it was listed, which moved its times), without
    // listing it again: that would stat every entry for nothing.
    let own = |r: &crate::LocalReplica, source| {
        let opts = crate::tasks::scan_dir::options(ctx, source);
        r.own_entry(dir, &ctx.ignore.rules, &opts)
    };
    let (s_me, d_me) = match known {
        Some((s, d)) => (Some(s.clone()), Some(d.clone())),
        None => (own(ctx.src, true), own(ctx.dst, false)),
    };
    let planner = MirrorPlanner::new(&ctx.cfg.plan);
    planner.plan_dir(&DirInput {
        path: dir,
        src_me: s_me.as_ref(),
        dst_me: d_me.as_ref(),
        src: &[],
        dst: &[],
        stale_temps: &[],
        part: DirPart::Whole,
    });
    let mut plan = planner
        .finish(&Facts::default())
        .map_err(TaskError::failed)?;
    let plan = MirrorPlan {
        dir_meta: std::mem::take(&mut plan.dir_meta),
        ..MirrorPlan::default()
    };
    let done = carry_out(ctx, &plan, false);
    match done.problems.is_empty() {
        true => Ok(()),
        false => Err(TaskError::Failed(done.problems)),
    }
}

/// Compare the BLAKE3 of each file on both sides. Another worker than the
/// one that wrote them checks them when there is one: the writer hands
/// the task back once.
fn verify(ctx: &Ctx, paths: &[RelPath], by: &str, handed_back: bool) -> TaskResult {
    if by == ctx.worker && !handed_back {
        let again = Task::Verify {
            paths: paths.to_vec(),
            by: by.to_string(),
            handed_back: true,
        };
        ctx.queue.push(&[again.encode()])?;
        return Ok(Outcome::Done);
    }
    let mut bad = Problems::default();
    for p in paths {
        let (s, d) = (ctx.src().fingerprint(p), ctx.dst().fingerprint(p));
        match (s, d) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(_), Ok(_)) => bad.push(format!("{}: the copy's BLAKE3 differs", p.display())),
            (Err(error), _) | (_, Err(error)) => bad.push(Failure {
                path: p.clone(),
                error,
            }),
        }
    }
    ctx.queue
        .add(b"verified", (paths.len() - bad.0.len()) as i64)?;
    match bad.is_empty() {
        true => Ok(Outcome::Done),
        false => Err(TaskError::Failed(bad)),
    }
}
