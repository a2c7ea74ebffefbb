//! `scan-dir`: one directory pair listed, settled and planned by the
//! whole-tree mirror's own code (`mirror/walk.rs`'s `Walk::visit`, then
//! `MirrorPlanner::finish` on that one directory), its extras deleted and
//! its new subdirectories made here; its files, hard links and
//! subdirectories pushed as tasks, counted for its `dir-meta`.
//! Subdirectories travel in `scan-dirs` tasks of several siblings, and a
//! leaf whose files fit one batch is finished where it is scanned
//! (`tasks/leaves.rs`): a small directory costs no task of its own.

use crate::mirror::error::Failure;
use crate::mirror::walk::Walk;
use crate::tasks::error::TaskError;
use crate::tasks::error::{Problem, Problems};
use crate::tasks::execute::carry_out;
use crate::tasks::guard::Guard;
use crate::tasks::leaves::Group;
use crate::tasks::run::{keys, Ctx, Outcome, TaskResult};
use crate::tasks::{Task, MAX_BATCH, MAX_SCAN_DIRS};
use accord_fsys::{DirVisit, Listing, ScanOptions};
use accord_model::{Entry, Expect, Kind, RelPath};
use accord_plan::{Facts, Item, Method, MirrorPlan, Op};
use accord_queue::CallCost;
use accord_replica::Deleted;

/// Most bytes to write in one `files` task (a task is one worker's work
/// for a while, not a whole directory's).
const BATCH_BYTES: u64 = 64 << 20;
/// Most files in one `files` task, for a queue in this process (the
/// finest spread of work) and for a remote one (a task costs about eight
/// commands, lease and ack, however much it does).
const BATCH_FILES: usize = 256;
const REMOTE_BATCH_FILES: usize = MAX_BATCH;
/// Most sibling directories in one `scan-dirs` task, on any queue: the
/// leaves among them are written together, with one flush of the
/// destination before their renames (one per leaf costs more than the
/// files of a small leaf); `SPREAD` still shares a wide directory out.
const DIRS_PER_TASK: usize = 16;

/// (files per `files` task, directories per `scan-dirs` task) on this
/// run's queue.
fn batching(ctx: &Ctx) -> (usize, usize) {
    match ctx.queue.call_cost() {
        CallCost::InProcess => (BATCH_FILES, DIRS_PER_TASK),
        CallCost::Remote => (REMOTE_BATCH_FILES, DIRS_PER_TASK),
    }
}
/// A bound on one `files` task's encoding, well under the queue's
/// `MAX_TASK` (an entry's extended attributes can be large).
const BATCH_ENCODED: usize = accord_queue::MAX_TASK / 2;

/// More than the bytes an item takes in a task (both sides' entries).
fn encoded_weight(it: &Item) -> usize {
    let entry = |e: Option<&Entry>| {
        e.map_or(0, |e| {
            let xattrs = e.props.xattrs.as_deref().unwrap_or_default();
            let xattr_bytes: usize = xattrs.iter().map(|(n, v)| n.len() + v.len() + 8).sum();
            let target = e.link_target.as_ref().map_or(0, Vec::len);
            e.path.as_bytes().len() + xattr_bytes + target + 128
        })
    };
    entry(it.src.as_deref()) + entry(it.dst.as_deref()) + 8
}

type Listed = (Option<Listing>, accord_fsys::Scan);

/// Both sides' listings of `dir`: as a pair where the local executor keeps
/// the destination's listing memo (a directory unchanged since it held
/// the source's names is not listed again), else one after the other.
fn list_both(ctx: &Ctx, dir: &RelPath) -> (Listed, Listed) {
    let (mut s_opts, mut d_opts) = (options(ctx, true), options(ctx, false));
    s_opts.read_ignore_files = crate::tasks::ignore_files::reads_own(ctx);
    match ctx.memos.and_then(|m| m.listing.as_ref()) {
        Some(memo) => {
            d_opts.listing_memo = Some(memo);
            ctx.src.list_dir_paired_with(
                (&ctx.ignore.rules, &s_opts),
                ctx.dst,
                (&ctx.ignore.rules, &d_opts),
                dir,
            )
        }
        None => (
            ctx.src().list_dir(dir, &ctx.ignore.rules, &s_opts),
            ctx.dst().list_dir(dir, &ctx.ignore.rules, &d_opts),
        ),
    }
}

pub(crate) fn options<'a>(ctx: &Ctx<'a>, source: bool) -> ScanOptions<'a> {
    ScanOptions {
        xattrs: ctx.cfg.xattrs,
        xattr_memo: ctx.memos.map(|m| m.memo(source)),
        listing_memo: None,
        read_ignore_files: false,
        only_names: None,
        source,
        same_fs: None,
        alone: false,
    }
}

/// Fewest `scan-dirs` tasks a directory's subdirectories are spread
/// over (while it has that many): workers share a wide directory.
const SPREAD: usize = 8;

/// One directory (the root's task, or one from an older run): scanned,
/// its children pushed; never finished in the task.
pub(crate) fn scan_dir(ctx: &Ctx, dir: &RelPath) -> TaskResult {
    scan_group(ctx, std::slice::from_ref(dir), Group::new(false))
}

/// Sibling directories one after the other; leaves finished here.
pub(crate) fn scan_dirs(ctx: &Ctx, dirs: &[RelPath]) -> TaskResult {
    scan_group(ctx, dirs, Group::new(true))
}

/// Scan each directory; what a directory could not do fails the task
/// (tried again whole: each directory's work is done once, by its marks)
/// once the others are done and everything finished is counted.
fn scan_group(ctx: &Ctx, dirs: &[RelPath], mut group: Group) -> TaskResult {
    let mut problems = Problems::default();
    let mut outcome = Outcome::Done;
    for dir in dirs {
        match scan_one(ctx, dir, &mut group) {
            Ok(Some(p)) => problems.extend(p),
            Ok(None) => {
                outcome = Outcome::Later;
                break;
            }
            Err(TaskError::Failed(m)) => problems.extend(m),
            Err(e) => return Err(e),
        }
    }
    match group.flush(ctx) {
        Err(TaskError::Failed(m)) => problems.extend(m),
        r => r?,
    }
    match problems.is_empty() {
        true => Ok(outcome),
        false => Err(TaskError::Failed(problems)),
    }
}

/// Scan one directory: its problems, or `None` when the deletion guard
/// paused the run before it.
fn scan_one(ctx: &Ctx, dir: &RelPath, group: &mut Group) -> Result<Option<Problems>, TaskError> {
    crate::tasks::ignore_files::load_rules_above(ctx, dir)?;
    let ((s, mut s_scan), (d, mut d_scan)) = list_both(ctx, dir);
    crate::tasks::ignore_files::listed(ctx, dir, &s_scan)?;
    if let Some(m) = ctx.memos {
        m.keep(true, &mut s_scan.xattr_free);
        m.keep(false, &mut d_scan.xattr_free);
        m.keep_listings(&mut d_scan.listings);
    }
    let Some(d) = d else {
        let why = d_scan.errors.first().map(|e| e.message.clone());
        return Err(TaskError::failed(format!(
            "the destination directory cannot be read: {}",
            why.unwrap_or_else(|| "it is missing".into())
        )));
    };
    if s.is_none() && dir.is_root() {
        return Err(TaskError::failed(
            "the source root cannot be read".to_string(),
        ));
    }
    let plan = plan_dir(ctx, dir, (s.as_ref(), &d), s_scan.incomplete, true)?;
    // The scanner's own words (what it could not read, and why).
    let mut problems = Problems(
        s_scan
            .errors
            .iter()
            .map(|e| Problem::Said(format!("{}: {}", e.path.display(), e.message)))
            .collect(),
    );
    let deferred = match crate::tasks::guard::check_dir(ctx, dir, &plan, &d, group)? {
        Guard::Go => false,
        Guard::Defer => true,
        Guard::Paused => return Ok(None),
    };
    group.count_files(dir, plan.summary.files_total);
    // Held extras wait for their `delete-extras` task; a name whose kind
    // changes is replaced now.
    let deletes: Vec<Item> = plan
        .deletes
        .iter()
        .filter(|i| !deferred || i.src.is_some())
        .cloned()
        .collect();
    let mut emptied = 0;
    for it in deletes.iter().filter(|i| is_dir(i.dst.as_deref())) {
        emptied += empty_extra_dir(ctx, &it.path, &mut problems);
    }
    let phases = MirrorPlan {
        cleanup: plan.cleanup.clone(),
        deletes,
        mkdirs: plan.mkdirs.clone(),
        ..MirrorPlan::default()
    };
    let done = carry_out(ctx, &phases, false);
    group.count_deleted(emptied + done.deleted);
    if done.fatal {
        return Err(TaskError::Fatal(done.problems));
    }
    problems.extend(done.problems);
    let mut children = children(ctx, dir, plan, s.as_ref(), &d);
    if deferred {
        children.push(crate::tasks::deferred_deletes::held(ctx, dir)?);
    }
    // A leaf is finished here only when all went well so far (else its
    // children go out as tasks, and this task is tried again).
    let Some(s) = s.filter(|_| problems.is_empty()) else {
        push_children(ctx, dir, children)?;
        return Ok(Some(problems));
    };
    let own = untouched(&phases, &children).then(|| (s.entries[0].clone(), d.entries[0].clone()));
    if group.finish_leaf(dir, &children, own) {
        return Ok(Some(problems));
    }
    push_children(ctx, dir, children)?;
    Ok(Some(problems))
}

/// Whether finishing a directory leaves its entries as listed: nothing
/// removed or created in it, only properties set. Its own entries from
/// the listings are then still its own (only a change of its entries
/// moves a directory's times).
fn untouched(phases: &MirrorPlan, children: &[Task]) -> bool {
    let only_meta = match children {
        [] => true,
        [Task::Files { items, .. }] => items.iter().all(|i| i.op == Op::Meta),
        _ => false,
    };
    only_meta && phases.cleanup.is_empty() && phases.deletes.is_empty() && phases.mkdirs.is_empty()
}

/// The mirror's plan of this one directory: the walk's settling (stale
/// in-place updates, exclusions, fingerprints) and the planner's rules.
/// The deletion guard is left to `guard_allows` (counted over the run).
/// What the settling found (a half-updated file moved aside, a source
/// entry that is not copied) is reported, as the walk reports it: another
/// attempt would not find it again, or find it again every time (`report`:
/// this is the directory's scan, not a later look at it).
pub(crate) fn plan_dir(
    ctx: &Ctx,
    dir: &RelPath,
    (s, d): (Option<&Listing>, &Listing),
    src_incomplete: bool,
    report: bool,
) -> Result<MirrorPlan, TaskError> {
    let mut cfg = ctx.cfg.clone();
    cfg.plan.force = true;
    let walk = Walk::new(ctx.src(), ctx.dst(), &cfg, &ctx.ignore.rules);
    walk.visit(DirVisit {
        path: dir,
        src: s,
        dst: Some(d),
        slice: None,
    });
    let found = walk.finish();
    if let Some(f) = found.nested {
        return Err(TaskError::Fatal(Problems(vec![f.into()])));
    }
    let facts = Facts {
        source_incomplete: src_incomplete || found.half_updated,
        source_root_changed: false,
        one_directory: true,
    };
    let plan = found.planner.finish(&facts).map_err(TaskError::failed)?;
    if report && !found.failures.is_empty() {
        let task = Task::ScanDir { dir: dir.clone() }.encode();
        for f in &found.failures {
            ctx.queue.report(&task, &f.to_string())?;
        }
    }
    Ok(plan)
}

pub(crate) fn is_dir(e: Option<&Entry>) -> bool {
    e.is_some_and(|e| e.kind == Kind::Dir)
}

/// Entries under a destination directory (depth first: memory holds one
/// listing per level).
pub(crate) fn entries_under(ctx: &Ctx, dir: &RelPath) -> usize {
    let (l, _) = ctx
        .dst()
        .list_dir(dir, &ctx.ignore.rules, &options(ctx, false));
    let Some(l) = l else { return 0 };
    let subs: usize = l.subdirs.iter().map(|e| entries_under(ctx, &e.path)).sum();
    l.entries.len() - 1 + l.subdirs.len() + subs
}

/// Delete what an extra destination directory holds (the directory itself
/// goes with the plan's deletions): the whole-tree walk visits such a
/// directory as a pair of its own, a task run empties it here. Excluded
/// entries are not listed, so they and their directories stay. How many
/// entries it deleted (each counts as one of the walk's deletions).
pub(crate) fn empty_extra_dir(ctx: &Ctx, dir: &RelPath, problems: &mut Problems) -> u64 {
    let (l, _) = ctx
        .dst()
        .list_dir(dir, &ctx.ignore.rules, &options(ctx, false));
    let Some(l) = l else { return 0 };
    let mut deleted = 0;
    for sub in &l.subdirs {
        deleted += empty_extra_dir(ctx, &sub.path, problems);
    }
    let handle = match ctx.dst().open_dir(dir) {
        Ok(h) => h,
        Err(e) => {
            problems.push(Problem::io("open", dir, e));
            return deleted;
        }
    };
    for t in &l.stale_temps {
        handle.remove_stale_temp(t.file_name());
    }
    for e in l.entries[1..].iter().chain(&l.subdirs) {
        match handle.delete(e.path.file_name(), &Expect::entry(e)) {
            Ok(Deleted::Done) => deleted += 1,
            Ok(_) => {}
            Err(err) => problems.push(Failure {
                path: e.path.clone(),
                error: err,
            }),
        }
    }
    deleted
}

/// The tasks this directory's plan hands out.
fn children(
    ctx: &Ctx,
    dir: &RelPath,
    plan: MirrorPlan,
    s: Option<&Listing>,
    d: &Listing,
) -> Vec<Task> {
    let grouped = |e: &Entry| ctx.spec.plan.hard_links && e.kind == Kind::File && e.nlink > 1;
    let files: Vec<Item> = plan
        .files
        .into_iter()
        .filter(|it| !it.src.as_deref().is_some_and(grouped))
        .collect();
    let (files_per_task, dirs_per) = batching(ctx);
    let mut out = file_tasks(dir, files, ctx.spec.range_size, files_per_task);
    let Some(s) = s else { return out };
    for e in s.entries[1..].iter().filter(|e| grouped(e)) {
        let dst = d.entries[1..]
            .binary_search_by(|x| x.path.cmp(&e.path))
            .ok()
            .map(|i| d.entries[1 + i].clone());
        out.push(Task::Hardlink {
            src: Box::new(e.clone()),
            dst: dst.map(Box::new),
        });
    }
    let mut subdirs: Vec<RelPath> = s.subdirs.iter().map(|e| e.path.clone()).collect();
    subdirs.sort();
    let per = dirs_per_task(subdirs.len(), dirs_per);
    out.extend(
        subdirs
            .chunks(per)
            .map(|c| Task::ScanDirs { dirs: c.to_vec() }),
    );
    out
}

/// Siblings per `scan-dirs` task: at most what the queue wants, and few
/// enough that `n` of them make `SPREAD` tasks.
fn dirs_per_task(n: usize, queue_wants: usize) -> usize {
    n.div_ceil(SPREAD)
        .clamp(1, queue_wants.clamp(1, MAX_SCAN_DIRS))
}

/// Files tasks of at most `max_files` items and `BATCH_BYTES` to write;
/// a file written whole above `range_size` is a `big-file` of its own.
fn file_tasks(dir: &RelPath, items: Vec<Item>, range_size: u64, max_files: usize) -> Vec<Task> {
    let mut out = Vec::new();
    let mut batch: Vec<Item> = Vec::new();
    let (mut bytes, mut encoded) = (0, 0);
    for it in items {
        let size = it.src.as_deref().map_or(0, |s| s.size);
        if it.op == Op::Write(Method::Whole) && size > range_size {
            out.push(Task::BigFile { item: it });
            continue;
        }
        let weight = encoded_weight(&it);
        let full = batch.len() >= max_files.clamp(1, MAX_BATCH)
            || bytes + size > BATCH_BYTES
            || encoded + weight > BATCH_ENCODED;
        if full && !batch.is_empty() {
            out.push(files_task(dir, std::mem::take(&mut batch)));
            (bytes, encoded) = (0, 0);
        }
        bytes += size;
        encoded += weight;
        batch.push(it);
    }
    if !batch.is_empty() {
        out.push(files_task(dir, batch));
    }
    out
}

fn files_task(dir: &RelPath, items: Vec<Item>) -> Task {
    Task::Files {
        dir: dir.clone(),
        items,
    }
}

/// Count the children and push them in one step (once, however often
/// this directory is scanned); with none, the directory is done already.
/// Each subdirectory of a `scan-dirs` task counts on its own (it is
/// counted done by its `dir-meta`, or by the task that finishes it).
fn push_children(ctx: &Ctx, dir: &RelPath, children: Vec<Task>) -> Result<(), TaskError> {
    let mark = keys::with("s", dir);
    let n: usize = children
        .iter()
        .map(|t| match t {
            Task::ScanDirs { dirs } => dirs.len(),
            _ => 1,
        })
        .sum();
    let n = n as i64;
    let tasks: Vec<Vec<u8>> = children.iter().map(Task::encode).collect();
    ctx.queue.add_once(&mark, &keys::pending(dir), n, &tasks)?;
    if n == 0 {
        ctx.push_dir_meta(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::{Props, Time};

    fn write(name: &str, size: u64, xattr: usize) -> Item {
        let path = RelPath::new(format!("d/{name}").as_bytes()).unwrap();
        let src = Entry {
            path: path.clone(),
            kind: Kind::File,
            size,
            props: Props {
                mode: 0o644,
                uid: 0,
                gid: 0,
                mtime: Time { sec: 1, nsec: 0 },
                xattrs: Some(vec![(b"user.big".to_vec(), vec![7; xattr])]),
            },
            dev: 1,
            ino: 1,
            nlink: 1,
            rdev: 0,
            blocks: 0,
            link_target: None,
            hash: None,
        };
        Item {
            op: Op::Write(Method::Whole),
            path,
            src: Some(Box::new(src)),
            dst: None,
            props_differ: false,
        }
    }

    fn sizes(tasks: &[Task]) -> Vec<(&'static str, usize)> {
        tasks
            .iter()
            .map(|t| match t {
                Task::Files { items, .. } => ("files", items.len()),
                t => (t.kind(), 1),
            })
            .collect()
    }

    #[test]
    fn subdirectories_are_spread_over_tasks_as_the_queue_wants() {
        // One directory per task when the queue wants it so.
        assert_eq!(dirs_per_task(100, 1), 1);
        // At least SPREAD tasks while there are as many directories, at
        // most what the queue wants per task.
        assert_eq!(dirs_per_task(100, 16), 13);
        assert_eq!(dirs_per_task(1000, 16), 16);
        assert_eq!(dirs_per_task(5, 16), 1);
        assert_eq!(dirs_per_task(0, 16), 1);
        assert_eq!(dirs_per_task(10_000, 1000), MAX_SCAN_DIRS);
    }

    #[test]
    fn files_are_batched_by_count_bytes_and_encoding_and_big_ones_split() {
        let dir = RelPath::new(b"d").unwrap();
        let many: Vec<Item> = (0..600)
            .map(|i| write(&format!("f{i:03}"), 10, 0))
            .collect();
        let got = file_tasks(&dir, many.clone(), 1 << 20, BATCH_FILES);
        assert_eq!(sizes(&got), [("files", 256), ("files", 256), ("files", 88)]);
        let got = file_tasks(&dir, many, 1 << 20, REMOTE_BATCH_FILES);
        assert_eq!(sizes(&got), [("files", 600)]);
        let mixed = vec![
            write("a", 40 << 20, 0),
            write("b", 40 << 20, 0),
            write("c", 5 << 20, 0),
        ];
        let got = file_tasks(&dir, mixed, 1 << 30, BATCH_FILES);
        assert_eq!(sizes(&got), [("files", 1), ("files", 2)]);
        let big = vec![
            write("a", 10, 0),
            write("huge", 2 << 20, 0),
            write("z", 10, 0),
        ];
        let got = file_tasks(&dir, big, 1 << 20, BATCH_FILES);
        assert_eq!(sizes(&got), [("copying the big file", 1), ("files", 2)]);
        let fat: Vec<Item> = (0..16)
            .map(|i| write(&format!("x{i}"), 1, 60_000))
            .collect();
        let got = file_tasks(&dir, fat, 1 << 20, REMOTE_BATCH_FILES);
        assert!(got.len() >= 2, "{:?}", sizes(&got));
        for t in &got {
            assert!(t.encode().len() <= accord_queue::MAX_TASK / 2);
            assert_eq!(Task::decode(&t.encode()).as_ref(), Ok(t));
        }
    }
}
