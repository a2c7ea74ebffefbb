//! `.accordignore` files in a task run. The walk reads a directory's file
//! while it lists it, and its children inherit the rules because the walk
//! goes down from the root. A task plans one directory, possibly on
//! another machine than its parent's: before it lists a directory, a
//! worker reads the files of that directory and of every ancestor it has
//! not read yet (one `openat` each; most directories have none).
//!
//! A file that cannot be read fails the task of every directory below it
//! (tried again, then set aside): without its rules, excluded destination
//! entries there would look like extras and be deleted.

use crate::task_run::{Ctx, TaskError};
use accord_fsys::IGNORE_FILE;
use accord_model::RelPath;
use std::collections::HashSet;
use std::io::{self, Read};
use std::sync::Mutex;

/// Largest `.accordignore` read (as the walk's scanner).
const MAX_IGNORE_FILE: u64 = 1 << 20;
/// Directories remembered as read: past this the memory starts again
/// (a worker's memory stays flat; a re-read only costs an `openat`).
const MAX_CHECKED: usize = 65_536;

/// The directories whose file this worker thread has read into its rules.
#[derive(Default)]
pub(crate) struct IgnoreFiles {
    checked: Mutex<HashSet<RelPath>>,
}

impl IgnoreFiles {
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

/// Make the rules of `dir` and its ancestors known to `ctx.rules` (a
/// no-op when the run reads no `.accordignore` files).
pub(crate) fn load_rules_for(ctx: &Ctx, dir: &RelPath) -> Result<(), TaskError> {
    if !ctx.spec.ignore_files {
        return Ok(());
    }
    let mut chain = vec![dir.clone()];
    while let Some(p) = chain.last().and_then(RelPath::parent) {
        chain.push(p);
    }
    // From the root down: a deeper file may re-include what a higher one
    // excludes, and a directory excluded above is never planned anyway.
    for d in chain.iter().rev() {
        if ctx.ignore_files.is_checked(d) {
            continue;
        }
        match read_ignore_file(ctx, d) {
            Ok(Some(contents)) => ctx.rules.add_dir_file(d, &contents),
            Ok(None) => {}
            Err(e) => {
                let path = d.join(IGNORE_FILE).map(|p| p.display()).unwrap_or_default();
                return Err(TaskError::Failed(format!(
                    "{path}: cannot be read ({e}); nothing below it is mirrored or deleted"
                )));
            }
        }
        ctx.ignore_files.mark(d);
    }
    Ok(())
}

/// The contents of `dir/.accordignore` in the source, `None` when it has
/// none (or `dir` itself is gone: its task will say so).
fn read_ignore_file(ctx: &Ctx, dir: &RelPath) -> io::Result<Option<Vec<u8>>> {
    let d = match ctx.src.root().open_dir(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let f = match d.open_read(IGNORE_FILE) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut buf = Vec::new();
    f.take(MAX_IGNORE_FILE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_IGNORE_FILE {
        return Err(io::Error::other("larger than 1 MiB"));
    }
    Ok(Some(buf))
}
