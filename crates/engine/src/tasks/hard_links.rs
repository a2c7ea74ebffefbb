//! Hard links without a serial queue: each name of a source hard-link
//! group is a task; the first to claim the group's inode in the queue's
//! store leads it (its name gets the contents, planned as a lone file by
//! the mirror's rules, and the group's mark is set in the store), and the
//! others link to the leader's name once the mark is set (until then they
//! are parked in the queue, and the leader wakes them). The mark, not the
//! copy's look, is what they wait for: an old copy can look finished
//! (`--no-times`, or `--checksum`) and be replaced after a name was linked
//! to it. A leader whose worker is lost is led again by the worker its
//! task is handed to (the claim names the path, not the worker).

use crate::tasks::claims::{hex, unhex};
use crate::tasks::error::TaskError;
use crate::tasks::execute::{already_done, carry_out, count_written, stat};
use crate::tasks::run::{keys, Ctx, Outcome, TaskResult};
use crate::tasks::Task;
use accord_model::{Entry, Found, Kind, RelPath};
use accord_plan::{DirInput, DirPart, Facts, Item, MirrorPlan, MirrorPlanner, Op};

pub(crate) fn hardlink(ctx: &Ctx, src: &Entry, dst: Option<&Entry>) -> TaskResult {
    let group = format!("{}:{}", src.dev, src.ino);
    let me = hex(src.path.as_bytes());
    let led = format!("id\0{group}").into_bytes();
    let outcome = match ctx.queue.claim(format!("i\0{group}").as_bytes(), &me)? {
        None => {
            let outcome = lead(ctx, src, dst)?;
            ctx.queue.wake(&led)?;
            outcome
        }
        Some(owner) => {
            let leader = leader_path(&owner)?;
            let again = Task::Hardlink {
                src: Box::new(src.clone()),
                dst: dst.map(|d| Box::new(d.clone())),
            };
            match ctx.queue.park(&led, &again.encode())? {
                true => Outcome::Parked,
                false => follow(ctx, src, dst, &leader)?,
            }
        }
    };
    if let Outcome::Done = outcome {
        let parent = src.path.parent().unwrap_or_default();
        ctx.child_done(&parent, &keys::with("dh", &src.path))?;
    }
    Ok(outcome)
}

/// The group's first name: its contents, as a file of its own.
fn lead(ctx: &Ctx, src: &Entry, dst: Option<&Entry>) -> TaskResult {
    let mut opts = ctx.cfg.plan.clone();
    opts.hard_links = false;
    opts.force = true;
    let planner = MirrorPlanner::new(&opts);
    let dst: Vec<&Entry> = dst.filter(|d| d.kind != Kind::Dir).into_iter().collect();
    planner.plan_dir(&DirInput {
        path: &src.path.parent().unwrap_or_default(),
        src_me: None,
        dst_me: None,
        src: &[src],
        dst: &dst,
        stale_temps: &[],
        part: DirPart::Whole,
    });
    let plan = planner
        .finish(&Facts::default())
        .map_err(TaskError::failed)?;
    let now = stat(ctx.dst(), &src.path);
    let files: Vec<Item> = plan
        .files
        .into_iter()
        .filter(|it| !already_done(it, now.as_ref(), ctx.cfg.plan.times))
        .collect();
    let done = carry_out(
        ctx,
        &MirrorPlan {
            files,
            ..MirrorPlan::default()
        },
        true,
    );
    count_written(ctx, done.files, done.bytes)?;
    match done.problems.is_empty() {
        true => Ok(Outcome::Done),
        false => Err(TaskError::Failed(done.problems)),
    }
}

/// Another name of the group, once its leader is done: a link to the
/// leader's copy (nothing when it is one already).
fn follow(ctx: &Ctx, src: &Entry, dst: Option<&Entry>, leader: &RelPath) -> TaskResult {
    let copy = stat(ctx.dst(), leader).filter(|f| is_copy_of(f, src, ctx.cfg.plan.times));
    let Some(copy) = copy else {
        return Err(TaskError::failed(format!(
            "the first name of its hard-link group, {}, is not its copy",
            leader.display()
        )));
    };
    let here = stat(ctx.dst(), &src.path);
    if here.is_some_and(|h| (h.dev, h.ino) == (copy.dev, copy.ino)) {
        return Ok(Outcome::Done);
    }
    let item = Item {
        op: Op::Link {
            leader: leader.clone(),
        },
        path: src.path.clone(),
        src: Some(Box::new(src.clone())),
        dst: dst
            .filter(|d| d.kind != Kind::Dir)
            .map(|d| Box::new(d.clone())),
        props_differ: false,
    };
    let plan = MirrorPlan {
        links: vec![item],
        ..MirrorPlan::default()
    };
    let done = carry_out(ctx, &plan, false);
    match done.problems.is_empty() {
        true => Ok(Outcome::Done),
        false => Err(TaskError::Failed(done.problems)),
    }
}

/// Is the destination's `f` a finished copy of the group's inode `src`?
/// (Without `times` the copy keeps its own mtime.)
fn is_copy_of(f: &Found, src: &Entry, times: bool) -> bool {
    f.kind == Kind::File && f.size == src.size && (!times || f.mtime == src.props.mtime)
}

/// The leader's path from its claim (the store is hostile: checked).
fn leader_path(owner: &str) -> Result<RelPath, TaskError> {
    let bad = || TaskError::failed(format!("a damaged hard-link claim {owner:.80}"));
    let bytes = unhex(owner, accord_model::MAX_PATH_LEN).ok_or_else(bad)?;
    match RelPath::new(&bytes) {
        Ok(p) if !p.is_root() => Ok(p),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_names_its_leader_and_a_damaged_one_is_refused() {
        let p = RelPath::new(b"a/b c/\xffd").unwrap();
        assert_eq!(leader_path(&hex(p.as_bytes())).unwrap(), p);
        for bad in ["", "2", "zz", "2e2e", "2f61", "61002f"] {
            assert!(leader_path(bad).is_err(), "{bad}");
        }
    }
}
