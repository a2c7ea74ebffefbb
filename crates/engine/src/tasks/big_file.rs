//! Big files: a file written whole above the run's range size is split
//! into ranges that several workers copy at once into one temp file
//! beside the target; the worker whose range is counted last gives the
//! temp its properties and renames it over the target (the same re-check
//! as every commit of the mirror).

use crate::mirror::error::Failure;
use crate::tasks::claims::{hex, unhex};
use crate::tasks::error::{Problem, TaskError};
use crate::tasks::execute::{already_done, count_written, push_verify, stat};
use crate::tasks::run::{keys, Ctx, Outcome, TaskResult};
use crate::tasks::{Task, MAX_RANGES};
use accord_fsys::PropsMask;
use accord_model::{Entry, Expect, Kind, RelPath};
use accord_plan::Item;
use accord_replica::Error;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

fn failed<'p>(what: &'p str, path: &'p RelPath) -> impl FnOnce(io::Error) -> TaskError + 'p {
    move |e| TaskError::failed(Problem::io(what, path, e))
}

fn source(item: &Item) -> &Entry {
    item.src
        .as_ref()
        .expect("task items have a source (checked when decoded)")
}

fn parent(path: &RelPath) -> RelPath {
    path.parent().unwrap_or_default()
}

/// The block whose zeros are left as holes.
const BLOCK: usize = 4096;

/// How many ranges a file of `size` bytes is split into.
pub(crate) fn range_count(size: u64, range_size: u64) -> u32 {
    size.div_ceil(range_size.max(1)).clamp(1, MAX_RANGES as u64) as u32
}

/// Bytes `start..end` of range `index` of `count`: ranges start on a
/// block boundary, so that zero blocks can stay holes.
pub(crate) fn range_bounds(size: u64, index: u32, count: u32) -> (u64, u64) {
    let chunk = size
        .div_ceil(count.max(1) as u64)
        .next_multiple_of(BLOCK as u64);
    let start = (index as u64 * chunk).min(size);
    (start, (start + chunk).min(size))
}

/// Make the shared temp file and push the ranges, once however often
/// this task runs: every attempt uses the temp the first one named
/// (`shared_temp`), so that an attempt whose queue call failed midway
/// leaves no temp of its own behind.
pub(crate) fn big_file(ctx: &Ctx, item: &Item) -> TaskResult {
    let s = source(item);
    let path = &item.path;
    if already_done(item, stat(ctx.dst(), path).as_ref(), ctx.cfg.plan.times) {
        ctx.child_done(&parent(path), &keys::with("db", path))?;
        return Ok(Outcome::Done);
    }
    let count = range_count(s.size, ctx.spec.range_size);
    let temp = shared_temp(ctx, path)?;
    let (f, made) = ctx
        .dst
        .open_or_make_temp_beside(path, &temp)
        .map_err(failed("make a temp file for", path))?;
    // Sized whole at once (the ranges leave holes where they skip zeros);
    // the same size again for a temp an earlier attempt made.
    f.set_len(s.size)
        .map_err(failed("size the temp of", path))?;
    let ranges: Vec<Vec<u8>> = (0..count)
        .map(|index| {
            Task::Range {
                item: item.clone(),
                temp: temp.clone(),
                index,
                count,
            }
            .encode()
        })
        .collect();
    let mark = keys::with("b", path);
    let (_, pushed) = ctx
        .queue
        .add_once(&mark, &keys::with("rn", path), count as i64, &ranges)?;
    if !pushed && made {
        // The ranges were pushed before and their temp is gone: renamed
        // over the target already. This call made an empty one again.
        let _ = ctx.dst.remove_temp_beside(path, &temp);
    }
    Ok(Outcome::Done)
}

/// The name of `path`'s shared temp: the one the first attempt claimed in
/// the queue, whichever attempt asks (the store is hostile: checked).
fn shared_temp(ctx: &Ctx, path: &RelPath) -> Result<Vec<u8>, TaskError> {
    let fresh = accord_fsys::Dir::new_temp_name(path.file_name());
    let Some(held) = ctx.queue.claim(&keys::with("bt", path), &hex(&fresh))? else {
        return Ok(fresh);
    };
    unhex(&held, accord_model::MAX_NAME_LEN)
        .filter(|name| {
            name.starts_with(accord_fsys::TEMP_PREFIX) && accord_model::validate_name(name).is_ok()
        })
        .ok_or_else(|| {
            TaskError::failed(format!(
                "{}: a damaged claim of its temp file {held:.80}",
                path.display()
            ))
        })
}

/// Copy one range into the shared temp; the last one counted commits.
pub(crate) fn range(ctx: &Ctx, item: &Item, temp: &[u8], index: u32, count: u32) -> TaskResult {
    let path = &item.path;
    let s = source(item);
    match open_temp(ctx, path, temp)? {
        Some(to) => copy_range(ctx, s, &to, range_bounds(s.size, index, count))?,
        // Renamed over the target already: this range was counted before.
        None if already_done(item, stat(ctx.dst(), path).as_ref(), ctx.cfg.plan.times) => {}
        None => {
            return Err(TaskError::failed(format!(
                "{}: its temp file is gone",
                path.display()
            )))
        }
    }
    let mark = keys::with(&format!("r{index}"), path);
    let (left, _) = ctx
        .queue
        .add_once(&mark, &keys::with("rn", path), -1, &[])?;
    if left == 0 {
        commit(ctx, item, temp)?;
        ctx.child_done(&parent(path), &keys::with("db", path))?;
    }
    Ok(Outcome::Done)
}

/// The shared temp, opened to write (`None`: it is not there).
fn open_temp(ctx: &Ctx, path: &RelPath, temp: &[u8]) -> Result<Option<File>, TaskError> {
    ctx.dst
        .open_temp_rw(path, temp)
        .map_err(failed("open the temp of", path))
}

/// Copy `start..end` of the source file, which must still be the one
/// planned on (size and mtime, checked on the open file).
fn copy_range(ctx: &Ctx, s: &Entry, to: &File, (start, end): (u64, u64)) -> Result<(), TaskError> {
    let path = &s.path;
    let Some(from) = ctx.src.open_file_checked(s).map_err(failed("open", path))? else {
        return Err(TaskError::failed(Failure {
            path: path.clone(),
            error: Error::Changed(crate::End::Read),
        }));
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut at = start;
    while at < end {
        let want = ((end - at) as usize).min(buf.len());
        let n = from
            .read_at(&mut buf[..want], at)
            .map_err(failed("read", path))?;
        if n == 0 {
            return Err(TaskError::failed(format!("{}: cut short", path.display())));
        }
        write_blocks(to, &buf[..n], at).map_err(failed("write the temp of", path))?;
        at += n as u64;
    }
    if ctx.spec.fsync {
        to.sync_data().map_err(failed("flush the temp of", path))?;
    }
    Ok(())
}

/// Write `data` at `at` (a block boundary) but for its whole zero blocks:
/// the temp was sized with holes, so zeros stay holes, as the mirror's own
/// copies keep sparse files sparse.
fn write_blocks(to: &File, data: &[u8], at: u64) -> io::Result<()> {
    for (i, block) in data.chunks(BLOCK).enumerate() {
        if block.iter().any(|b| *b != 0) {
            to.write_all_at(block, at + (i * BLOCK) as u64)?;
        }
    }
    Ok(())
}

/// Give the temp the source's properties and rename it over the target
/// if the target is still what the plan saw (or done already).
fn commit(ctx: &Ctx, item: &Item, temp: &[u8]) -> Result<(), TaskError> {
    let path = &item.path;
    let s = source(item);
    let dir = ctx
        .dst()
        .open_dir(&parent(path))
        .map_err(failed("open the directory of", path))?;
    let gone = |e: &Error| matches!(e, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound);
    let o = &ctx.cfg.plan;
    let mask = PropsMask {
        perms: o.perms,
        owner: o.owner,
        times: o.times,
        xattrs: o.xattrs.then_some(ctx.cfg.xattrs),
    };
    let made = Expect::Made(Kind::File);
    let done = dir
        .set_props(temp, &made, Kind::File, &s.props, mask)
        .and_then(|()| dir.commit(temp, path.file_name(), &item.expect_dst()));
    match done {
        Ok(()) => {
            count_written(ctx, 1, s.size)?;
            push_verify(ctx, vec![path.clone()])
        }
        Err(e)
            if (gone(&e) || matches!(e, Error::Changed(_)))
                && already_done(item, stat(ctx.dst(), path).as_ref(), ctx.cfg.plan.times) =>
        {
            Ok(())
        }
        Err(error) => Err(TaskError::failed(Failure {
            path: path.clone(),
            error,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_tile_the_file_exactly() {
        for (size, range) in [
            (10_000u64, 4096u64),
            (8192, 4096),
            (1 << 20, 4096),
            (4097, 4096),
        ] {
            let n = range_count(size, range);
            assert!(n >= 2);
            let mut at = 0;
            for i in 0..n {
                let (a, b) = range_bounds(size, i, n);
                assert_eq!(a, at);
                assert_eq!(a % BLOCK as u64, 0);
                assert!(b >= a);
                at = b;
            }
            assert_eq!(at, size);
        }
    }
}
