//! Transfer and commit of non-directory entries.
//!
//! Contents are staged in temp files a batch at a time; the batch is made
//! durable (one `sync_all` instead of one `fsync` per file), then each temp
//! is re-checked and renamed over its target. When the disk fills up, what
//! is staged is committed (which frees the old versions) and the rest goes
//! file by file; what still does not fit is reported at the end.

use crate::error::{Action, Error};
use crate::exec::{parent_of, Exec};
use crate::replica::{Incoming, ReplicaDir};
use crate::Side;
use accord_model::RelPath;
use accord_plan::{Item, Method, Op};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Files per commit batch.
const BATCH_FILES: usize = 2048;
/// Bytes per commit batch.
const BATCH_BYTES: u64 = 256 << 20;

type DirBox<'r> = Arc<Box<dyn ReplicaDir + 'r>>;

/// A temp file (or link, or node) ready to be renamed over its target.
struct Staged<'a, 'r> {
    item: &'a Item,
    dir: DirBox<'r>,
    temp: Vec<u8>,
    xfer: Xfer,
}

/// Bytes moved for one file.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Xfer {
    pub written: u64,
    pub literal: u64,
    pub matched: u64,
}

/// What staging one batch gave: temps to commit, and items that met a full
/// disk (to be tried again file by file once the batch is committed).
struct StagedBatch<'a, 'r> {
    staged: Vec<Staged<'a, 'r>>,
    no_space: Vec<&'a Item>,
}

type Batch<'a> = Vec<(RelPath, Vec<&'a Item>)>;

/// Items grouped per directory, in batches of bounded files and bytes.
fn batches<'a>(items: &[&'a Item]) -> Vec<Batch<'a>> {
    let mut groups: BTreeMap<RelPath, Vec<&Item>> = BTreeMap::new();
    for it in items {
        groups.entry(parent_of(&it.path)).or_default().push(it);
    }
    let mut out: Vec<Batch> = Vec::new();
    let mut batch: Batch = Vec::new();
    let (mut n, mut bytes) = (0usize, 0u64);
    for (parent, its) in groups {
        for chunk in its.chunks(BATCH_FILES) {
            n += chunk.len();
            bytes += chunk
                .iter()
                .map(|i| i.src.as_ref().map_or(0, |s| s.size))
                .sum::<u64>();
            batch.push((parent.clone(), chunk.to_vec()));
            if n >= BATCH_FILES || bytes >= BATCH_BYTES {
                out.push(std::mem::take(&mut batch));
                n = 0;
                bytes = 0;
            }
        }
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// Phase 4: regular files, symlinks, special files, and metadata-only items.
pub(crate) fn run_files(x: &Exec, items: &[Item]) {
    let (metas, writes): (Vec<&Item>, Vec<&Item>) = items.iter().partition(|i| i.op == Op::Meta);
    let mut deferred: Vec<&Item> = Vec::new();
    // Pipelined: while batch N is flushed and committed, batch N+1 is staged.
    let mut pending: Option<StagedBatch> = None;
    for b in batches(&writes) {
        if x.stopped() || x.short_of_space() {
            deferred.extend(b.iter().flat_map(|(_, its)| its.iter().copied()));
            continue;
        }
        let prev = pending.take();
        let ((), staged) = rayon::join(
            || {
                if let Some(p) = prev {
                    deferred.extend(finish_batch(x, p));
                }
            },
            || stage_batch(x, &b),
        );
        pending = Some(staged);
    }
    if let Some(p) = pending {
        deferred.extend(finish_batch(x, p));
    }
    // A full disk: what was staged is committed (the old versions it
    // replaced are freed); the rest goes one file at a time.
    for it in deferred {
        if x.stopped() {
            break;
        }
        let one = stage_batch(x, &vec![(parent_of(&it.path), vec![it])]);
        for again in finish_batch(x, one) {
            x.did_not_fit(again);
        }
    }
    if x.stopped() {
        return;
    }
    metas.par_iter().for_each(|it| {
        if !x.stopped() {
            set_meta(x, it)
        }
    });
}

fn set_meta(x: &Exec, it: &Item) {
    let Some(s) = &it.src else { return };
    let r = x
        .dst
        .open_dir(&parent_of(&it.path))
        .map_err(Error::io(Action::OpenDestination))
        .and_then(|dir| {
            dir.set_props(
                it.path.file_name(),
                &it.expect_dst(),
                s.kind,
                &s.props,
                x.mask(),
            )
        });
    match r {
        Ok(()) => {
            x.counters.metadata.fetch_add(1, Ordering::Relaxed);
            x.changed(it)
        }
        Err(e) => x.fail_item(it, e),
    }
}

fn stage_batch<'a, 'r>(x: &'r Exec, batch: &Batch<'a>) -> StagedBatch<'a, 'r> {
    let mut out = StagedBatch {
        staged: Vec::new(),
        no_space: Vec::new(),
    };
    if x.stopped() {
        out.no_space = batch.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        return out;
    }
    let results: Vec<(Vec<Staged>, Vec<&Item>)> = batch
        .par_iter()
        .map(|(parent, its)| stage_group(x, parent, its))
        .collect();
    for (staged, no_space) in results {
        out.staged.extend(staged);
        out.no_space.extend(no_space);
    }
    out
}

/// Flush and commit a staged batch; returns the items to try again.
fn finish_batch<'a>(x: &Exec, batch: StagedBatch<'a, '_>) -> Vec<&'a Item> {
    let StagedBatch { staged, no_space } = batch;
    if x.stopped() {
        for s in &staged {
            s.dir.discard(&s.temp);
        }
        return no_space;
    }
    // Make every temp file of the batch durable before any rename.
    if x.cfg.fsync && staged.iter().any(|s| matches!(s.item.op, Op::Write(_))) {
        if let Err(e) = x.dst.sync_all() {
            for s in &staged {
                s.dir.discard(&s.temp);
            }
            for s in &staged {
                x.fail_item(s.item, Error::io(Action::Flush)(clone_io(&e)));
            }
            return no_space;
        }
    }
    staged.par_iter().for_each(|s| commit(x, s));
    no_space
}

fn commit(x: &Exec, s: &Staged) {
    let name = s.item.path.file_name();
    match s.dir.commit(&s.temp, name, &s.item.expect_dst()) {
        Ok(()) => {
            if matches!(s.item.op, Op::Link { .. }) {
                // Renaming a link over a name of the same inode does nothing.
                s.dir.discard(&s.temp);
            }
            x.count_done(s.item, s.xfer);
        }
        Err(e) => {
            s.dir.discard(&s.temp);
            x.fail_item(s.item, e);
        }
    }
}

fn stage_group<'a, 'r>(
    x: &'r Exec,
    parent: &RelPath,
    its: &[&'a Item],
) -> (Vec<Staged<'a, 'r>>, Vec<&'a Item>) {
    let ddir: DirBox<'r> = match x.dst.open_dir(parent) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            for it in its {
                x.fail_item(it, Error::io(Action::OpenDestination)(clone_io(&e)));
            }
            return (Vec::new(), Vec::new());
        }
    };
    let need_src = its.iter().any(|i| matches!(i.op, Op::Write(_)));
    let sdir = if need_src {
        match x.src.open_dir(parent) {
            Ok(d) => Some(d),
            Err(e) => {
                for it in its {
                    x.fail_item(it, Error::io(Action::OpenSource)(clone_io(&e)));
                }
                return (Vec::new(), Vec::new());
            }
        }
    } else {
        None
    };
    // Directories in parallel, the files of one directory in order (creating
    // names in one directory from several threads contends on its lock);
    // large directories are split into chunks that run in parallel.
    let results: Vec<Result<Option<Staged>, &Item>> = its
        .par_chunks(256)
        .flat_map_iter(|chunk| chunk.iter())
        .filter_map(|it| {
            if x.stopped() {
                return None;
            }
            let r = match it.op {
                Op::Write(method) => write(x, sdir.as_deref()?, &**ddir, it, method),
                Op::Create => {
                    let s = it.src.as_ref()?;
                    ddir.make_node(it.path.file_name(), s, x.mask())
                        .map(|t| Some((t, Xfer::default())))
                }
                _ => return None,
            };
            Some(match r {
                Ok(Some((temp, xfer))) => Ok(Some(Staged {
                    item: it,
                    dir: ddir.clone(),
                    temp,
                    xfer,
                })),
                Ok(None) => Ok(None),
                Err(e) if e.is_no_space() && !matches!(e, Error::InPlaceFailed { .. }) => {
                    x.note_no_space();
                    Err(*it)
                }
                Err(e) => {
                    x.fail_item(it, e);
                    Ok(None)
                }
            })
        })
        .collect();
    let mut staged = Vec::new();
    let mut no_space = Vec::new();
    for r in results {
        match r {
            Ok(Some(s)) => staged.push(s),
            Ok(None) => {}
            Err(it) => no_space.push(it),
        }
    }
    (staged, no_space)
}

pub(crate) fn clone_io(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Write one file's new contents: into a temp file (returned, to be
/// committed), or in place (`None`: already done and counted).
fn write(
    x: &Exec,
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    it: &Item,
    method: Method,
) -> Result<Option<(Vec<u8>, Xfer)>, Error> {
    if !ddir.takes_contents() {
        let s = it.src.as_ref().expect("a write has a source");
        let nothing = Incoming::Whole(&mut io::empty());
        let temp = ddir.receive(it.path.file_name(), nothing, &s.props, x.mask())?;
        return Ok(Some((temp, Xfer::default())));
    }
    let r = match (sdir.local(), ddir.local()) {
        (Some(s), Some(d)) => crate::transfer_local::write(x, s, d, it, method),
        _ => write_generic(x, sdir, ddir, it, method),
    };
    match r {
        Ok(Some((temp, xfer))) => {
            x.progress
                .bytes_done
                .fetch_add(it.src.as_ref().map_or(0, |s| s.size), Ordering::Relaxed);
            Ok(Some((temp, xfer)))
        }
        Ok(None) => Ok(None),
        // A delta that does not check out while a side changed meanwhile
        // is that change, not a damaged delta.
        Err(e @ Error::Delta { .. }) => Err(changed_side(sdir, ddir, it).unwrap_or(e)),
        Err(e) => Err(e),
    }
}

/// `Some(Changed(side))` when one side no longer holds what was planned.
fn changed_side(sdir: &dyn ReplicaDir, ddir: &dyn ReplicaDir, it: &Item) -> Option<Error> {
    let name = it.path.file_name();
    let (src, dst) = (it.expect_src(), it.expect_dst());
    crate::replica::recheck(sdir, name, &src, Side::Source)
        .and_then(|()| crate::replica::recheck(ddir, name, &dst, Side::Destination))
        .err()
}

/// Counts the bytes read through it.
struct Counting<'a> {
    inner: &'a mut dyn Read,
    n: u64,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

/// The transfer between replicas that are not both on this host: the whole
/// file as a stream, or a delta made here from the receiver's signature.
fn write_generic(
    x: &Exec,
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    it: &Item,
    method: Method,
) -> Result<Option<(Vec<u8>, Xfer)>, Error> {
    let s = it.src.as_ref().expect("a write has a source");
    let name = it.path.file_name();
    let expect_src = it.expect_src();
    let expect_dst = it.expect_dst();
    let method = if method != Method::Whole && s.size > crate::replica::STREAM_DELTA_MAX {
        Method::Whole
    } else {
        method
    };
    let (temp, xfer) = match method {
        Method::Whole => {
            let mut reader = sdir.open_read(name, &expect_src)?;
            let mut counting = Counting {
                inner: &mut *reader,
                n: 0,
            };
            let temp = ddir.receive(name, Incoming::Whole(&mut counting), &s.props, x.mask())?;
            let n = counting.n;
            (
                temp,
                Xfer {
                    written: n,
                    literal: n,
                    matched: 0,
                },
            )
        }
        Method::Delta | Method::InPlace => {
            let sig = ddir.signature(name, &expect_dst)?;
            let in_place = method == Method::InPlace;
            let (delta, stats) = sdir.make_delta(name, &expect_src, &sig, in_place)?;
            let xfer = Xfer {
                written: stats.literal_bytes,
                literal: stats.literal_bytes,
                matched: stats.matched_bytes,
            };
            if method == Method::InPlace {
                ddir.patch_in_place(name, &expect_dst, &delta, &s.props, x.mask())?;
                crate::replica::recheck(sdir, name, &expect_src, Side::Source)?;
                x.count_done(it, xfer);
                x.progress.bytes_done.fetch_add(s.size, Ordering::Relaxed);
                return Ok(None);
            }
            let incoming = Incoming::Delta {
                basis: expect_dst,
                delta: &delta,
            };
            let temp = ddir.receive(name, incoming, &s.props, x.mask())?;
            (temp, xfer)
        }
    };
    // The source must not have changed while it was read.
    if let Err(e) = crate::replica::recheck(sdir, name, &expect_src, Side::Source) {
        ddir.discard(&temp);
        return Err(e);
    }
    Ok(Some((temp, xfer)))
}

/// Phase 5: hard links to their group's first path.
pub(crate) fn run_links(x: &Exec, items: &[Item]) {
    items.par_iter().for_each(|it| {
        if x.stopped() {
            return;
        }
        let Op::Link { leader } = &it.op else { return };
        if x.not_written(leader) {
            return x.fail_item(it, Error::LeaderNotWritten(leader.clone()));
        }
        let r = x
            .dst
            .open_dir(&parent_of(&it.path))
            .map_err(Error::io(Action::OpenDestination))
            .and_then(|dir| {
                let temp = dir.link_temp(it.path.file_name(), leader)?;
                Ok((Arc::new(dir), temp))
            });
        match r {
            Ok((dir, temp)) => commit(
                x,
                &Staged {
                    item: it,
                    dir,
                    temp,
                    xfer: Xfer::default(),
                },
            ),
            Err(e) => x.fail_item(it, e),
        }
    });
}
