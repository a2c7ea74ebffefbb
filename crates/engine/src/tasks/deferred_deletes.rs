//! Extras held by the deletion guard until the whole destination is
//! counted. With a percentage `--max-delete`, the walk compares all its
//! deletions with all the destination's entries before it changes
//! anything; a task run sees the destination a directory at a time. A
//! directory whose extras pass the percentage of the entries seen so far
//! does everything else at once and hands its extras to a `delete-extras`
//! task (`task_guard::check_dir`). That task waits until nothing but such
//! tasks is left in the queue (every directory is then planned and
//! counted), then checks the limit against the whole destination, as the
//! walk does: within it, it deletes; past it, the run pauses before
//! deleting (`accord cluster resume --force` goes on).

use crate::tasks::error::Problems;
use crate::tasks::error::TaskError;
use crate::tasks::execute::carry_out;
use crate::tasks::guard::{limit, pause};
use crate::tasks::run::{keys, Ctx, Outcome, TaskResult};
use crate::tasks::scan_dir::{empty_extra_dir, is_dir, options, plan_dir};
use crate::tasks::Task;
use accord_model::RelPath;
use accord_plan::{Item, MirrorPlan};
use accord_queue::{Add, CallCost};
use std::time::Duration;

/// Hold `dir`'s extras: the `delete-extras` task to push with the
/// directory's other children, counted open once however often the
/// directory is scanned.
pub(crate) fn held(ctx: &Ctx, dir: &RelPath) -> Result<Task, TaskError> {
    ctx.queue
        .add_once(&keys::with("h", dir), keys::DEFERRED_OPEN, 1, &[])?;
    Ok(Task::DeleteExtras { dir: dir.clone() })
}

/// The `delete-extras` task of `dir` (see the module).
pub(crate) fn delete_extras(ctx: &Ctx, dir: &RelPath) -> TaskResult {
    let q = ctx.queue;
    if !only_held_left(ctx)? {
        // Back in the queue behind the work still to do; the pause keeps
        // a run of many held directories from spinning on them.
        std::thread::sleep(match q.call_cost() {
            CallCost::InProcess => Duration::from_millis(20),
            CallCost::Remote => Duration::from_millis(500),
        });
        return Ok(Outcome::Later);
    }
    let total = q.add(keys::DELETES, 0)?;
    let entries = q.add(keys::DST_ENTRIES, 0)?;
    let limit = limit(ctx.spec.plan.max_delete, entries);
    if total > limit && q.add(keys::FORCE, 0)? == 0 {
        let why = format!(
            "the mirror would delete {total} of the destination's {entries} entries, more \
             than the limit of {limit} (--max-delete); paused before deleting in {}",
            dir.display()
        );
        pause(ctx, &why)?;
        return Ok(Outcome::Later);
    }
    let mut deleted = 0;
    if let Err(e) = delete_now(ctx, dir, &mut deleted) {
        // What was deleted before the failure is gone from the next
        // attempt's plan: counted now.
        if deleted > 0 {
            q.add(keys::DELETED, deleted as i64)?;
        }
        return Err(e);
    }
    // Closed and counted in one step.
    let mut adds = vec![Add::once(keys::with("hd", dir), keys::DEFERRED_OPEN, -1)];
    if deleted > 0 {
        adds.push(Add::always(keys::DELETED, deleted as i64));
    }
    q.add_many(&adds)?;
    ctx.child_done(dir, &keys::with("x", dir))?;
    Ok(Outcome::Done)
}

/// Is every task left a held one (this one among them)?
fn only_held_left(ctx: &Ctx) -> Result<bool, TaskError> {
    let s = ctx.queue.stats()?;
    let open = ctx.queue.add(keys::DEFERRED_OPEN, 0)?;
    Ok(s.waiting + s.leased <= open.max(0) as u64)
}

/// Delete what is extra in `dir` now (planned again: the destination may
/// have changed since its scan, and each deletion checks what it removes);
/// `deleted` counts the entries deleted, failed or not.
fn delete_now(ctx: &Ctx, dir: &RelPath, deleted: &mut u64) -> Result<(), TaskError> {
    crate::tasks::ignore_files::load_rules_for(ctx, dir)?;
    let (s, s_scan) = ctx
        .src()
        .list_dir(dir, &ctx.ignore.rules, &options(ctx, true));
    let (d, _) = ctx
        .dst()
        .list_dir(dir, &ctx.ignore.rules, &options(ctx, false));
    let Some(d) = d else {
        return Err(TaskError::failed(
            "the destination directory cannot be read".to_string(),
        ));
    };
    if s_scan.incomplete {
        // The plan would delete nothing: say so rather than finish.
        return Err(TaskError::failed(
            "the source directory could not be read whole; its extras are kept".to_string(),
        ));
    }
    let plan = plan_dir(ctx, dir, (s.as_ref(), &d), false, false)?;
    let extras: Vec<Item> = plan
        .deletes
        .into_iter()
        .filter(|i| i.src.is_none())
        .collect();
    let mut problems = Problems::default();
    for it in extras.iter().filter(|i| is_dir(i.dst.as_deref())) {
        *deleted += empty_extra_dir(ctx, &it.path, &mut problems);
    }
    let deletes = MirrorPlan {
        deletes: extras,
        ..MirrorPlan::default()
    };
    let done = carry_out(ctx, &deletes, false);
    *deleted += done.deleted;
    if done.fatal {
        return Err(TaskError::Fatal(done.problems));
    }
    problems.extend(done.problems);
    match problems.is_empty() {
        true => Ok(()),
        false => Err(TaskError::Failed(problems)),
    }
}
