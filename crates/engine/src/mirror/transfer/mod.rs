//! Transfer and commit of non-directory entries.
//!
//! Contents are staged in temp files a batch at a time; the batch is made
//! durable (one `sync_all` instead of one `fsync` per file), then each temp
//! is re-checked and renamed over its target. When the disk fills up, what
//! is staged is committed (which frees the old versions) and the rest goes
//! file by file; what still does not fit is reported at the end.

use crate::mirror::exec::{parent_of, Exec};
use crate::End;
use accord_model::{Expect, Found, RelPath};
use accord_plan::{Item, Method, Op};
use accord_replica::{Action, Error};
use accord_replica::{Incoming, Pending, PendingTemp, ReplicaDir, STREAM_DELTA_MAX};
mod write;

use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
pub(crate) use write::clone_io;
use write::*;

/// Files per commit batch.
const BATCH_FILES: usize = 2048;
/// Bytes per commit batch.
const BATCH_BYTES: u64 = 256 << 20;

type DirBox<'r> = Arc<Box<dyn ReplicaDir + 'r>>;
/// A temp name or a signature on its way.
type PendingBytes = Pending<Result<Vec<u8>, Error>>;

/// A temp file (or link, or node) ready to be renamed over its target.
pub(crate) struct Staged<'a, 'r> {
    item: &'a Item,
    dir: DirBox<'r>,
    temp: Vec<u8>,
    xfer: Xfer,
    /// Its commit, already started (see `Started::start_early`).
    early: Option<PendingCommit>,
    /// Made after the batch's flush was started (a delta sent again
    /// whole): it needs a flush of its own before its commit.
    late: bool,
}

/// Bytes moved for one file.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Xfer {
    pub written: u64,
    pub literal: u64,
    pub matched: u64,
    /// A hard link to `--link-dest`'s file was made: counted with the
    /// links, not the files written (as rsync's `--stats`).
    pub linked: bool,
}

/// What staging one batch gave: temps to commit, and items that met a full
/// disk (to be tried again file by file once the batch is committed).
struct StagedBatch<'a, 'r> {
    staged: Vec<Staged<'a, 'r>>,
    no_space: Vec<&'a Item>,
    /// The flush of the batch's temps, started after them.
    flushed: Option<Pending<io::Result<()>>>,
}

impl StagedBatch<'_, '_> {
    /// Whether a temp was made after the batch's flush was started.
    fn has_late(&self) -> bool {
        self.staged.iter().any(|s| s.late)
    }
}

/// Commits started and not yet waited for.
pub(crate) type Commits<'a, 'r> = Vec<(Staged<'a, 'r>, Pending<Result<(), Error>>)>;

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
                .map(|i| i.src.as_deref().map_or(0, |s| s.size))
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
/// Returns the commits of the staged batches, started and not waited for
/// (a replica across a wire carries out what follows after them), and
/// whether `all_sent` was called and still holds.
///
/// `all_sent` is called once every change of this phase has been sent,
/// before the last replies are waited for, when that happens (a replica
/// whose commits travel with their receives): the caller then sends what
/// follows (directory properties, the final flush) in the same round trip.
/// If a file must be tried again after that (a full disk, a delta sent
/// again whole), the second value is false and the caller sends them again.
pub(crate) fn run_files<'a, 'r>(
    x: &'r Exec,
    items: &'a [Item],
    all_sent: &mut dyn FnMut(),
) -> (Commits<'a, 'r>, bool) {
    let (metas, writes): (Vec<&Item>, Vec<&Item>) = items.iter().partition(|i| i.op == Op::Meta);
    let mut deferred: Vec<&Item> = Vec::new();
    // Pipelined: while batch N is flushed and committed, batch N+1 is staged.
    let mut pending: Option<StagedBatch> = None;
    let mut commits: Commits = Vec::new();
    let mut metas_started = None;
    let mut sent_early = false;
    let batches = batches(&writes);
    let count = batches.len();
    for (i, b) in batches.into_iter().enumerate() {
        if x.stopped() || x.short_of_space() {
            deferred.extend(b.iter().flat_map(|(_, its)| its.iter().copied()));
            continue;
        }
        let prev = pending.take();
        let ((), started) = rayon::join(
            || {
                if let Some(p) = prev {
                    let (again, started) = finish_batch(x, p);
                    deferred.extend(again);
                    commits.extend(started);
                }
            },
            || start_batch(x, &b),
        );
        if i + 1 == count {
            metas_started = Some(start_metas(x, &metas));
            if started.all_early() && deferred.is_empty() && !x.stopped() {
                all_sent();
                sent_early = true;
            }
        }
        pending = Some(started.stage(x));
    }
    let metas_started = metas_started.unwrap_or_else(|| {
        let m = start_metas(x, &metas);
        if writes.is_empty() && !x.stopped() {
            all_sent();
            sent_early = true;
        }
        m
    });
    if let Some(p) = pending {
        sent_early &= !p.has_late();
        let (again, started) = finish_batch(x, p);
        deferred.extend(again);
        commits.extend(started);
    }
    sent_early &= deferred.is_empty();
    // A full disk: what was staged is committed (the old versions it
    // replaced are freed); the rest goes one file at a time.
    for it in deferred {
        if x.stopped() {
            break;
        }
        let one = stage_batch(x, &vec![(parent_of(&it.path), vec![it])]);
        let (again, started) = finish_batch(x, one);
        wait_commits(x, started);
        for again in again {
            x.did_not_fit(again);
        }
    }
    wait_metas(x, metas_started);
    (commits, sent_early)
}

/// Start the metadata-only changes (none once the run has stopped).
fn start_metas<'a>(x: &Exec, metas: &[&'a Item]) -> Vec<(&'a Item, PendingCommit)> {
    if x.stopped() {
        return Vec::new();
    }
    metas
        .par_iter()
        .filter_map(|it| start_meta(x, it).map(|p| (*it, p)))
        .collect()
}

fn wait_metas(x: &Exec, started: Vec<(&Item, PendingCommit)>) {
    for (it, p) in started {
        match p.wait() {
            Ok(()) => {
                x.counters.metadata.fetch_add(1, Ordering::Relaxed);
                x.changed(it)
            }
            Err(e) => x.fail_item(it, e),
        }
    }
}

fn start_meta(x: &Exec, it: &Item) -> Option<Pending<Result<(), Error>>> {
    let s = it.src.as_deref()?;
    if x.stopped() {
        return None;
    }
    Some(match x.dst.open_dir(&parent_of(&it.path)) {
        Ok(dir) => dir.start_set_props(
            it.path.file_name(),
            &it.expect_dst(),
            s.kind,
            &s.props,
            x.mask(),
        ),
        Err(e) => Pending::ready(Err(Error::io(Action::OpenDestination)(e))),
    })
}

fn stage_batch<'a, 'r>(x: &'r Exec, batch: &Batch<'a>) -> StagedBatch<'a, 'r> {
    start_batch(x, batch).stage(x)
}

/// A batch whose files are started (and, where the replica allows, their
/// commits), their replies not yet waited for.
struct StartedBatch<'a, 'r> {
    groups: Vec<GroupStarted<'a, 'r>>,
    flushed: Option<Pending<io::Result<()>>>,
    /// Items not started because the run stopped.
    not_started: Vec<&'a Item>,
}

fn start_batch<'a, 'r>(x: &'r Exec, batch: &Batch<'a>) -> StartedBatch<'a, 'r> {
    if x.stopped() {
        return StartedBatch {
            groups: Vec::new(),
            flushed: None,
            not_started: batch.iter().flat_map(|(_, i)| i.iter().copied()).collect(),
        };
    }
    // Every directory's files are started before any reply is waited for.
    let started: Vec<Option<GroupStarted>> = batch
        .par_iter()
        .map(|(parent, its)| start_group(x, parent, its))
        .collect();
    // Make every temp of the batch durable before any rename: asked for
    // now, after the temps (a replica across a wire does it after them).
    let writes = batch
        .iter()
        .flat_map(|(_, its)| its.iter())
        .any(|i| matches!(i.op, Op::Write(_)));
    let writes = writes || x.backups.is_some();
    let flushed = (x.cfg.fsync && writes).then(|| x.dst.start_sync_all());
    let mut groups: Vec<GroupStarted> = started.into_iter().flatten().collect();
    for g in &mut groups {
        g.start_early_commits(x);
    }
    StartedBatch {
        groups,
        flushed,
        not_started: Vec::new(),
    }
}

impl<'a, 'r> StartedBatch<'a, 'r> {
    /// Whether every file started has its commit on its way already.
    fn all_early(&self) -> bool {
        self.groups.iter().all(|g| {
            g.results
                .iter()
                .all(|(_, r)| !matches!(r, Ok(Some(st)) if st.early.is_none()))
        })
    }

    /// Wait for each file's temp.
    fn stage(self, x: &Exec) -> StagedBatch<'a, 'r> {
        let mut out = StagedBatch {
            staged: Vec::new(),
            no_space: self.not_started,
            flushed: self.flushed,
        };
        for g in self.groups {
            g.finish(x, &mut out);
        }
        out
    }
}

/// The files of one directory, started.
struct GroupStarted<'a, 'r> {
    ddir: DirBox<'r>,
    sdir: Option<DirBox<'r>>,
    results: Vec<(&'a Item, Result<Option<Started>, Error>)>,
}

impl<'a, 'r> GroupStarted<'a, 'r> {
    /// Start the commits that can travel with their receives (after the
    /// batch's flush was started: the replica carries them out after it).
    fn start_early_commits(&mut self, x: &Exec) {
        for (it, r) in &mut self.results {
            if let Ok(Some(st)) = r {
                st.start_early(x, &**self.ddir, it);
            }
        }
    }

    /// Wait for each file's temp: staged, or failed, or short of space.
    fn finish(self, x: &Exec, out: &mut StagedBatch<'a, 'r>) {
        let GroupStarted {
            ddir,
            sdir,
            results,
        } = self;
        for (it, r) in results {
            let r = r.and_then(|started| match started {
                Some(st) => st.finish(&**ddir).map(|m| Some((m, false))),
                None => Ok(None),
            });
            let r = r.or_else(|e| match (e, sdir.as_deref()) {
                (e @ Error::Delta { .. }, Some(sd)) => match changed_side(&**sd, &**ddir, it) {
                    Some(changed) => Err(changed),
                    None if e.is_false_match() => {
                        redo_whole(x, &**sd, &**ddir, it).map(|m| m.map(|m| (m, true)))
                    }
                    None => Err(e),
                },
                // The receiving server had not the memory to hold the
                // delta: the file goes whole, streamed.
                (e, Some(sd)) if e.is_over_memory() => {
                    redo_whole(x, &**sd, &**ddir, it).map(|m| m.map(|m| (m, true)))
                }
                (e, _) => Err(e),
            });
            match r {
                Ok(Some((made, late))) => out.staged.push(Staged {
                    item: it,
                    dir: ddir.clone(),
                    temp: made.temp,
                    xfer: made.xfer,
                    early: made.early,
                    late,
                }),
                Ok(None) => {}
                Err(e) if e.is_no_space() && !matches!(e, Error::InPlaceFailed { .. }) => {
                    x.note_no_space();
                    out.no_space.push(it);
                }
                Err(e) => x.fail_item(it, e),
            }
        }
    }
}

/// Flush and commit a staged batch; returns the items to try again.
fn finish_batch<'a, 'r>(x: &Exec, batch: StagedBatch<'a, 'r>) -> (Vec<&'a Item>, Commits<'a, 'r>) {
    let StagedBatch {
        staged,
        no_space,
        flushed,
    } = batch;
    let flushed = flushed.map_or(Ok(()), Pending::wait);
    // Commits already on their way are carried out (or refused, after a
    // failed flush) whatever happens here: they are waited for as usual.
    let (early, staged): (Vec<Staged>, Vec<Staged>) =
        staged.into_iter().partition(|s| s.early.is_some());
    let mut commits = start_commits(early);
    if x.stopped() {
        for s in &staged {
            s.dir.discard(&s.temp);
        }
        return (no_space, commits);
    }
    let (late, staged): (Vec<Staged>, Vec<Staged>) = staged.into_iter().partition(|s| s.late);
    let flushed_late = if late.is_empty() || !x.cfg.fsync {
        Ok(())
    } else {
        x.dst.start_sync_all().wait()
    };
    for (group, flushed) in [(staged, flushed.as_ref()), (late, flushed_late.as_ref())] {
        match flushed {
            Ok(()) => commits.extend(start_commits(group)),
            Err(e) => {
                for s in &group {
                    s.dir.discard(&s.temp);
                    x.fail_item(s.item, Error::io(Action::Flush)(clone_io(e)));
                }
            }
        }
    }
    (no_space, commits)
}

/// Rename every staged temp over its target (the calls all started before
/// any result is taken).
fn commit_all(x: &Exec, staged: Vec<Staged>) {
    wait_commits(x, start_commits(staged));
}

fn start_commits<'a, 'r>(staged: Vec<Staged<'a, 'r>>) -> Commits<'a, 'r> {
    staged
        .into_par_iter()
        .map(|mut s| {
            let name = s.item.path.file_name();
            let p = match s.early.take() {
                Some(p) => p,
                None => s.dir.start_commit(&s.temp, name, &s.item.expect_dst()),
            };
            (s, p)
        })
        .collect()
}

pub(crate) fn wait_commits(x: &Exec, started: Commits) {
    for (s, p) in started {
        committed(x, &s, p.wait());
    }
}

fn committed(x: &Exec, s: &Staged, r: Result<(), Error>) {
    match r {
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

/// Start writing the files of one directory (`None`: a side could not be
/// opened, and its files were failed).
fn start_group<'a, 'r>(
    x: &'r Exec,
    parent: &RelPath,
    its: &[&'a Item],
) -> Option<GroupStarted<'a, 'r>> {
    let ddir: DirBox<'r> = match x.dst.open_dir(parent) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            for it in its {
                x.fail_item(it, Error::io(Action::OpenDestination)(clone_io(&e)));
            }
            return None;
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
                return None;
            }
        }
    } else {
        None
    };
    let sdir = sdir.map(Arc::new);
    let sigs = start_signatures(x, sdir.as_deref().map(|d| &**d), &**ddir, its);
    // Directories in parallel, the files of one directory in order (creating
    // names in one directory from several threads contends on its lock);
    // large directories are split into chunks that run in parallel. Every
    // file's call is started before any result is taken.
    let results: Vec<(&Item, Result<Option<Started>, Error>)> = its
        .par_chunks(256)
        .zip(sigs.par_chunks(256))
        .flat_map_iter(|(chunk, sigs)| {
            let ahead = read_ahead(x, sdir.as_deref().map(|d| &**d), &**ddir, chunk);
            chunk.iter().zip(sigs).zip(ahead)
        })
        .filter_map(|((it, sig), ahead)| {
            if x.stopped() {
                return None;
            }
            // `-b`: the old version is kept before the new one is staged
            // (the batch's flush, started after the temps, covers both).
            if let Err(e) = crate::mirror::backup::back_up(x, it) {
                return Some((*it, Err(e)));
            }
            let r = match it.op {
                Op::Write(method) => {
                    let sig = sig.lock().unwrap().take();
                    let pre = (sig, ahead);
                    write(x, &**sdir.as_deref()?, &**ddir, it, method, pre)
                }
                Op::Create => {
                    let s = it.src.as_deref()?;
                    let temp = ddir.start_make_node(it.path.file_name(), s, x.mask());
                    Ok(Some(Started::new(temp, Xfer::default())))
                }
                _ => return None,
            };
            Some((*it, r))
        })
        .collect();
    Some(GroupStarted {
        ddir,
        sdir,
        results,
    })
}

/// The receiver's signatures of the files to be sent as deltas, all asked
/// for at once when the two replicas are not both local (one round trip
/// for the directory, not one per file). Aligned with `its`.
fn start_signatures(
    x: &Exec,
    sdir: Option<&dyn ReplicaDir>,
    ddir: &dyn ReplicaDir,
    its: &[&Item],
) -> Vec<Mutex<Option<PendingBytes>>> {
    let both_local = sdir.is_some_and(|s| s.local().is_some()) && ddir.local().is_some();
    its.iter()
        .map(|it| {
            let wants = matches!(
                it.op,
                Op::Write(Method::Delta | Method::InPlace | Method::Resume)
            ) && !both_local
                && ddir.takes_contents()
                && !x.stopped()
                && it
                    .src
                    .as_deref()
                    .is_some_and(|s| s.size <= STREAM_DELTA_MAX);
            let name = it.path.file_name();
            let in_place = it.op == Op::Write(Method::InPlace);
            Mutex::new(wants.then(|| {
                if it.op == Op::Write(Method::Resume) {
                    partial_signature(ddir, name)
                } else {
                    ddir.start_signature(name, &it.expect_dst(), in_place)
                }
            }))
        })
        .collect()
}

/// The signature of `name`'s partial file, empty when there is none (a
/// signature's encoding never is).
fn partial_signature(ddir: &dyn ReplicaDir, name: &[u8]) -> PendingBytes {
    let p = ddir.start_partial_signature(name);
    Pending::later(move || p.wait().map(Option::unwrap_or_default))
}

/// Most bytes of source files asked for ahead of their turn, per chunk of
/// a directory's files.
const READ_AHEAD_BYTES: u64 = 16 << 20;

/// A source file opened ahead of its turn (its contents on their way).
type Ahead<'s> = Option<Result<Box<dyn Read + Send + 's>, Error>>;

/// When the source is across a wire, open the whole files of `chunk`
/// before reading any (one round trip for the chunk, not one per file),
/// up to `READ_AHEAD_BYTES`; the rest open when their turn comes. Aligned
/// with `chunk`.
fn read_ahead<'s>(
    x: &Exec,
    sdir: Option<&'s dyn ReplicaDir>,
    ddir: &dyn ReplicaDir,
    chunk: &[&Item],
) -> Vec<Ahead<'s>> {
    let mut budget = READ_AHEAD_BYTES;
    chunk
        .iter()
        .map(|it| {
            let sd = sdir?;
            let s = it.src.as_deref()?;
            let whole = it.op == Op::Write(Method::Whole) || s.size > STREAM_DELTA_MAX;
            if sd.local().is_some() || !whole || !ddir.takes_contents() || x.stopped() {
                return None;
            }
            if s.size > budget {
                return None;
            }
            budget -= s.size;
            Some(sd.open_read(it.path.file_name(), &it.expect_src()))
        })
        .collect()
}

/// Phase 5: hard links to their group's first path (every link started,
/// then every commit).
pub(crate) fn run_links(x: &Exec, items: &[Item]) {
    // `-b`: links replacing an entry keep it first (flushed before any link).
    let replacing: Vec<&Item> = items.iter().filter(|i| i.dst.is_some()).collect();
    let kept: std::collections::HashSet<&RelPath> =
        crate::mirror::backup::back_up_all(x, &replacing)
            .into_iter()
            .map(|i| &i.path)
            .collect();
    let started: Vec<_> = items
        .iter()
        .filter(|i| i.dst.is_none() || kept.contains(&i.path))
        .collect::<Vec<_>>()
        .into_par_iter()
        .filter_map(|it| {
            if x.stopped() {
                return None;
            }
            let Op::Link { leader } = &it.op else {
                return None;
            };
            if x.not_written(leader) {
                x.fail_item(it, Error::LeaderNotWritten(leader.clone()));
                return None;
            }
            match x.dst.open_dir(&parent_of(&it.path)) {
                Ok(dir) => {
                    let name = it.path.file_name();
                    let temp = dir.start_link_temp(name, leader);
                    // A link has no contents to flush: its commit can
                    // travel with it when the replica names it at once.
                    let early = temp
                        .handle()
                        .map(|h| dir.start_commit(h, name, &it.expect_dst()));
                    Some((it, Arc::new(dir), temp, early))
                }
                Err(e) => {
                    x.fail_item(it, Error::io(Action::OpenDestination)(e));
                    None
                }
            }
        })
        .collect();
    let mut staged = Vec::with_capacity(started.len());
    for (it, dir, temp, early) in started {
        match temp.wait() {
            Ok(temp) => staged.push(Staged {
                item: it,
                dir,
                temp,
                xfer: Xfer::default(),
                early,
                late: false,
            }),
            Err(e) => {
                if let Some(c) = early {
                    // Refused by the replica: no temp was made.
                    let _ = c.wait();
                }
                x.fail_item(it, e)
            }
        }
    }
    commit_all(x, staged);
}
