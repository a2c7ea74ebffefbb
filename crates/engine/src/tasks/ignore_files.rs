//! `.accordignore` files in a task run. The walk reads a directory's file
//! while it lists it, and its children inherit the rules because the walk
//! goes down from the root. A task plans one directory, possibly on
//! another machine than its parent's: before it lists a directory, a
//! worker reads the files of every ancestor that no thread of its process
//! has read yet (one `openat` each; most directories have none), and the
//! directory's own file while listing it, as the walk does (no `openat`
//! at all when the listing has none).
//!
//! A file that cannot be read fails the task of every directory below it
//! (tried again, then set aside): without its rules, excluded destination
//! entries there would look like extras and be deleted.

use crate::tasks::error::{RunFailure, TaskError};
use crate::tasks::run::Ctx;
use crate::RunSpec;
use accord_fsys::{IgnoreRules, IGNORE_FILE};
use accord_model::RelPath;
use std::collections::HashSet;
use std::io;
use std::sync::Mutex;

/// Directories remembered as read: past this the memory starts again
/// (a worker's memory stays flat; a re-read only costs an `openat`).
const MAX_CHECKED: usize = 65_536;

/// The rules of a worker process's threads, and the directories whose
/// file is in them (shared: a file read by one thread serves all).
pub(crate) struct TaskIgnore {
    pub rules: IgnoreRules,
    checked: Mutex<HashSet<RelPath>>,
}

impl TaskIgnore {
    pub fn new(spec: &RunSpec) -> Result<TaskIgnore, RunFailure> {
        let rules = IgnoreRules::new(&spec.excludes).map_err(|source| RunFailure::Excludes {
            what: "the run's excludes",
            source,
        })?;
        Ok(TaskIgnore {
            rules,
            checked: Mutex::default(),
        })
    }

    fn is_checked(&self, dir: &RelPath) -> bool {
        self.checked.lock().unwrap().contains(dir)
    }

    fn mark(&self, dir: &RelPath) {
        let mut c = self.checked.lock().unwrap();
        if c.len() >= MAX_CHECKED {
            c.clear();
        }
        c.insert(dir.clone());
    }
}

/// Make the rules of `dir` and its ancestors known to `ctx.ignore.rules` (a
/// no-op when the run reads no `.accordignore` files).
pub(crate) fn load_rules_for(ctx: &Ctx, dir: &RelPath) -> Result<(), TaskError> {
    load_chain(ctx, vec![dir.clone()])
}

/// Make the rules of `dir`'s ancestors known to `ctx.ignore.rules`: its own file
/// is read by its listing (`reads_own`), then `listed` says how that went.
pub(crate) fn load_rules_above(ctx: &Ctx, dir: &RelPath) -> Result<(), TaskError> {
    load_chain(ctx, dir.parent().into_iter().collect())
}

/// Whether a source listing reads the directory's own file.
pub(crate) fn reads_own(ctx: &Ctx) -> bool {
    ctx.spec.ignore_files
}

/// After `dir`'s source listing read its own file: a file it could not
/// read fails the task as one read here would; a listing that went well
/// makes the directory known as read.
pub(crate) fn listed(ctx: &Ctx, dir: &RelPath, scan: &accord_fsys::Scan) -> Result<(), TaskError> {
    if !ctx.spec.ignore_files {
        return Ok(());
    }
    let file = dir.join(IGNORE_FILE).ok();
    if let Some(f) = scan.errors.iter().find(|e| Some(&e.path) == file.as_ref()) {
        let path = f.path.display();
        let why = &f.message;
        return Err(TaskError::failed(format!("{path}: {why}; {NOTHING_BELOW}")));
    }
    if !scan.incomplete {
        ctx.ignore.mark(dir);
    }
    Ok(())
}

const NOTHING_BELOW: &str = "nothing below it is mirrored or deleted";

fn unreadable(dir: &RelPath, why: &io::Error) -> TaskError {
    let path = dir
        .join(IGNORE_FILE)
        .map(|p| p.display())
        .unwrap_or_default();
    TaskError::failed(format!("{path}: cannot be read: {why}; {NOTHING_BELOW}"))
}

/// Read the files of `chain`'s last directory's ancestors and of the
/// directories in it that are not read yet.
fn load_chain(ctx: &Ctx, mut chain: Vec<RelPath>) -> Result<(), TaskError> {
    if !ctx.spec.ignore_files {
        return Ok(());
    }
    while let Some(p) = chain.last().and_then(RelPath::parent) {
        chain.push(p);
    }
    // From the root down: a deeper file may re-include what a higher one
    // excludes, and a directory excluded above is never planned anyway.
    for d in chain.iter().rev() {
        if ctx.ignore.is_checked(d) {
            continue;
        }
        // In the source (a directory gone is `None`: its task says so).
        match ctx.src.read_ignore_file(d) {
            Ok(Some(contents)) => ctx.ignore.rules.add_dir_file(d, &contents),
            Ok(None) => {}
            Err(e) => return Err(unreadable(d, &e)),
        }
        ctx.ignore.mark(d);
    }
    Ok(())
}
