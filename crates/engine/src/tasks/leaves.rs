//! A `scan-dirs` task's own work beyond scanning: the leaves it finishes
//! itself, and the counts of the whole task made in one step at its end.
//!
//! A leaf (no subdirectory, no hard-link group, no file above the range
//! size) whose files fit one `files` batch has its files written and its
//! properties set right where it was scanned: no `files` task, no
//! `dir-meta` task, no counter of its own. It is counted done in its
//! parent with the mark its `dir-meta` would use, so a task run twice, or
//! a leaf that grew a subdirectory before the second run, counts once.
//! What a task may write itself is bounded (`INLINE_FILES`,
//! `INLINE_BYTES`): past that, leaves push their files as tasks.
//!
//! The leaves' files are written together when the task's counts are
//! made (`Group::flush`): one plan for all of them, so one flush of the
//! destination makes all their temps durable before their renames,
//! instead of one flush per leaf. Each leaf's properties are set after
//! its files, and it is counted only once its files and properties are.

use crate::tasks::error::TaskError;
use crate::tasks::execute::{carry_out, push_verify, set_dir_props, Done, OwnEntries};
use crate::tasks::run::{keys, Ctx};
use crate::tasks::Task;
use accord_model::RelPath;
use accord_plan::{Item, MirrorPlan, Op};
use accord_queue::Add;

/// Most files one task writes itself.
const INLINE_FILES: usize = 4096;
/// Most bytes one task writes itself (a task is acknowledged only when
/// done: it must end well within the claim timeout).
const INLINE_BYTES: u64 = 256 << 20;

/// What a task finished and has yet to count.
pub(crate) struct Group {
    /// Whether this task finishes leaves (not the root's own task: the
    /// root has no parent to count it).
    inline: bool,
    adds: Vec<Add>,
    /// Parents whose counters this task's adds move.
    parents: Vec<RelPath>,
    /// Leaves taken and not yet written (with their own entries on both
    /// sides while their listings still hold), and their files.
    leaves: Vec<(RelPath, Option<OwnEntries>)>,
    items: Vec<Item>,
    files_left: usize,
    bytes_left: u64,
    written: u64,
    bytes: u64,
    /// Destination entries this task deleted, not yet counted.
    deleted: u64,
}

impl Group {
    pub fn new(inline: bool) -> Group {
        Group {
            inline,
            adds: Vec::new(),
            parents: Vec::new(),
            leaves: Vec::new(),
            items: Vec::new(),
            files_left: INLINE_FILES,
            bytes_left: INLINE_BYTES,
            written: 0,
            bytes: 0,
            deleted: 0,
        }
    }

    /// The streamed deletion guard's count of `dir`'s destination entries
    /// (once per directory, by its mark).
    pub fn count_seen(&mut self, dir: &RelPath, seen: i64) {
        let mark = keys::with("e", dir);
        self.adds.push(Add::once(mark, keys::DST_ENTRIES, seen));
    }

    /// The source's regular files in `dir`, once the directory is planned
    /// and let through by the deletion guard (once per directory, by its
    /// mark: a task run again counts them once).
    pub fn count_files(&mut self, dir: &RelPath, files: usize) {
        let mark = keys::with("ft", dir);
        self.adds
            .push(Add::once(mark, keys::FILES_TOTAL, files as i64));
    }

    /// Destination entries deleted by this task, counted with its other
    /// counts (a deletion is not made again by the task's next attempt:
    /// what it deleted is gone from its plan).
    pub fn count_deleted(&mut self, deleted: u64) {
        self.deleted += deleted;
    }

    /// Take `dir` to finish in this task when it is a leaf whose
    /// `children` are at most one batch of files that fits what this task
    /// may still write (written, and counted, by `flush`). Whether it did
    /// (else the children are to be pushed).
    pub fn finish_leaf(
        &mut self,
        dir: &RelPath,
        children: &[Task],
        own: Option<OwnEntries>,
    ) -> bool {
        let items: &[Item] = match children {
            [] => &[],
            [Task::Files { items, .. }] => items,
            _ => return false,
        };
        if !self.inline || dir.parent().is_none() {
            return false;
        }
        let bytes: u64 = items
            .iter()
            .filter_map(|i| i.src.as_deref())
            .map(|e| e.size)
            .sum();
        if items.len() > self.files_left || bytes > self.bytes_left {
            return false;
        }
        self.files_left -= items.len();
        self.bytes_left -= bytes;
        self.leaves.push((dir.clone(), own));
        self.items.extend_from_slice(items);
        true
    }

    /// Write the leaves taken so far (one plan, one flush before the
    /// renames), then set the properties of each one whose files were all
    /// written and count it done in its parent; a leaf with a failed file
    /// is left to the task's next attempt (which finds the others written).
    fn finish_leaves(&mut self, ctx: &Ctx) -> Result<(), TaskError> {
        let leaves = std::mem::take(&mut self.leaves);
        let items = std::mem::take(&mut self.items);
        let written = self.write(ctx, items)?;
        let mut problems = written.problems;
        if written.fatal {
            // The directories get their properties all the same (as the
            // walk's do), but none counts as done.
            for (dir, own) in &leaves {
                let _ = set_dir_props(ctx, dir, own.as_ref());
            }
            return Err(TaskError::Fatal(problems));
        }
        let failed_in: Vec<RelPath> = written.failed.iter().filter_map(|p| p.parent()).collect();
        for (dir, own) in leaves.into_iter().filter(|(d, _)| !failed_in.contains(d)) {
            match set_dir_props(ctx, &dir, own.as_ref()) {
                Ok(()) => self.count_done(&dir),
                Err(TaskError::Failed(m)) => problems.extend(m),
                Err(e) => return Err(e),
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(TaskError::Failed(problems)),
        }
    }

    /// A leaf finished here counts done in its parent, with the mark its
    /// `dir-meta` would use.
    fn count_done(&mut self, dir: &RelPath) {
        let parent = dir.parent().unwrap_or_default();
        let mark = keys::with("dm", dir);
        self.adds.push(Add::once(mark, &keys::pending(&parent), -1));
        if !self.parents.contains(&parent) {
            self.parents.push(parent);
        }
    }

    /// Write leaves' files as a `files` task would (temps, one flush,
    /// re-checked renames), counting what was written; the files written
    /// are handed to `verify`.
    fn write(&mut self, ctx: &Ctx, items: Vec<Item>) -> Result<Done, TaskError> {
        if items.is_empty() {
            return Ok(Done::default());
        }
        let mut written: Vec<RelPath> = items
            .iter()
            .filter(|i| matches!(i.op, Op::Write(_)))
            .map(|i| i.path.clone())
            .collect();
        let plan = MirrorPlan {
            files: items,
            ..MirrorPlan::default()
        };
        let done = carry_out(ctx, &plan, true);
        self.written += done.files;
        self.bytes += done.bytes;
        written.retain(|p| !done.failed.contains(p));
        push_verify(ctx, written)?;
        Ok(done)
    }

    /// Finish the leaves taken, then make the counts gathered so far in
    /// one step (what was written is counted even when a leaf failed); a
    /// parent whose last child this was gets its `dir-meta`.
    pub fn flush(&mut self, ctx: &Ctx) -> Result<(), TaskError> {
        let finished = self.finish_leaves(ctx);
        if let Err(TaskError::Queue(e)) = finished {
            return Err(TaskError::Queue(e));
        }
        self.count(ctx)?;
        finished
    }

    fn count(&mut self, ctx: &Ctx) -> Result<(), TaskError> {
        if self.written > 0 {
            self.adds
                .push(Add::always(keys::WRITTEN, self.written as i64));
            self.adds.push(Add::always(keys::BYTES, self.bytes as i64));
            let by = keys::written_by(ctx.worker);
            self.adds.push(Add::always(&by, self.written as i64));
            let by = keys::bytes_by(ctx.worker);
            self.adds.push(Add::always(&by, self.bytes as i64));
            (self.written, self.bytes) = (0, 0);
        }
        if self.deleted > 0 {
            self.adds
                .push(Add::always(keys::DELETED, self.deleted as i64));
            self.deleted = 0;
        }
        if self.adds.is_empty() {
            return Ok(());
        }
        let values = ctx.queue.add_many(&self.adds)?;
        for parent in std::mem::take(&mut self.parents) {
            let counter = keys::pending(&parent);
            let left = self
                .adds
                .iter()
                .zip(&values)
                .find(|(a, _)| a.counter == counter);
            if left.is_some_and(|(_, v)| *v == 0) {
                ctx.push_dir_meta(&parent)?;
            }
        }
        self.adds.clear();
        Ok(())
    }
}
