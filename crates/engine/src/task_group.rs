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

use crate::task::Task;
use crate::task_do::{carry_out, failures_text, push_verify, set_dir_props};
use crate::task_run::{keys, Ctx, TaskError};
use accord_model::RelPath;
use accord_plan::{Item, MirrorPlan, Op};
use accord_queue::{Add, QueueError};

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
    files_left: usize,
    bytes_left: u64,
    written: u64,
    bytes: u64,
}

impl Group {
    pub fn new(inline: bool) -> Group {
        Group {
            inline,
            adds: Vec::new(),
            parents: Vec::new(),
            files_left: INLINE_FILES,
            bytes_left: INLINE_BYTES,
            written: 0,
            bytes: 0,
        }
    }

    /// The streamed deletion guard's count of `dir`'s destination entries
    /// (once per directory, by its mark).
    pub fn count_seen(&mut self, dir: &RelPath, seen: i64) {
        let mark = keys::with("e", dir);
        self.adds.push(Add::once(mark, keys::DST_ENTRIES, seen));
    }

    /// Finish `dir` here when it is a leaf whose `children` are at most
    /// one batch of files that fits what this task may still write.
    /// Whether it did (else the children are to be pushed).
    pub fn finish_leaf(
        &mut self,
        ctx: &Ctx,
        dir: &RelPath,
        children: &[Task],
    ) -> Result<bool, TaskError> {
        let items: &[Item] = match children {
            [] => &[],
            [Task::Files { items, .. }] => items,
            _ => return Ok(false),
        };
        let Some(parent) = dir.parent().filter(|_| self.inline) else {
            return Ok(false);
        };
        let bytes: u64 = items
            .iter()
            .filter_map(|i| i.src.as_ref())
            .map(|e| e.size)
            .sum();
        if items.len() > self.files_left || bytes > self.bytes_left {
            return Ok(false);
        }
        self.files_left -= items.len();
        self.bytes_left -= bytes;
        self.write(ctx, items)?;
        set_dir_props(ctx, dir)?;
        let mark = keys::with("dm", dir);
        self.adds.push(Add::once(mark, &keys::pending(&parent), -1));
        if !self.parents.contains(&parent) {
            self.parents.push(parent);
        }
        Ok(true)
    }

    /// Write a leaf's files as a `files` task would (temps, one flush,
    /// re-checked renames), counting what was written.
    fn write(&mut self, ctx: &Ctx, items: &[Item]) -> Result<(), TaskError> {
        if items.is_empty() {
            return Ok(());
        }
        let plan = MirrorPlan {
            files: items.to_vec(),
            ..MirrorPlan::default()
        };
        let done = carry_out(ctx, &plan, true);
        self.written += done.files;
        self.bytes += done.bytes;
        if !done.problems.is_empty() {
            return Err(TaskError::Failed(failures_text(&done.problems)));
        }
        let written = items
            .iter()
            .filter(|i| matches!(i.op, Op::Write(_)))
            .map(|i| i.path.clone())
            .collect();
        push_verify(ctx, written)
    }

    /// Make the counts gathered so far in one step; a parent whose last
    /// child this was gets its `dir-meta`.
    pub fn flush(&mut self, ctx: &Ctx) -> Result<(), QueueError> {
        if self.written > 0 {
            self.adds
                .push(Add::always(keys::WRITTEN, self.written as i64));
            self.adds.push(Add::always(keys::BYTES, self.bytes as i64));
            let by = keys::written_by(ctx.worker);
            self.adds.push(Add::always(&by, self.written as i64));
            (self.written, self.bytes) = (0, 0);
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
