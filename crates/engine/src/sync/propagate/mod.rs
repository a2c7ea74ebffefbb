//! Propagation of a sync plan, keeping the crash invariant: every file has
//! its original or its final contents at every moment. New contents go to
//! a temp file in the target directory through the seam
//! (`ReplicaDir::receive`), fingerprinted as they pass and compared with
//! what update detection saw (`transfer.rs`: a chunk's files at once,
//! its sources read ahead), made durable, and renamed over the target by
//! `ReplicaDir::commit`, which re-checks first that the target is still
//! what detection saw (else the path fails with "changed during sync" and
//! nothing is replaced). Only then, and only when the path succeeded on
//! both sides, do both archives record it.
//!
//! Phases: deletions deepest first, but those of the directories above a
//! rename's source; then, in path order, new directories, renames, files
//! and other entries (in chunks of up to 8,192 entries or 256 MiB:
//! received, flushed, committed, flushed, recorded), property changes; then
//! directories' properties deepest first (a directory made read-only after
//! its contents arrived); last the directories the renames emptied. A
//! rename comes after the new directories above its target (path order)
//! and before its source's directories are deleted; the replica re-checks
//! its source and never replaces anything at its target.
//! Copies made as hard links to another name of their group
//! (`links.rs`) come after all files, before the directories'
//! properties. A file the receiver holds an old version of may travel as
//! a delta against it (`transfer.rs`).

use crate::sync::propagate::transfer::{receive_all, FileCopy};
use crate::sync::scan::Scanned;
use crate::sync::{Propagated, SyncConfig, SyncError, SyncFailure, SyncReport};
use accord_fsys::PropsMask;
use accord_model::{Entry, Expect, Found, Kind, Observed, Props, RelPath};
use accord_plan::detect::SYNCED_MODE_BITS;
use accord_plan::{Action, Side, SyncItem, UNKNOWN_OWNER};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::{ArchiveRecord as Record, SideSession};
use accord_replica::{Deleted, Pending, Replica, ReplicaDir, SiblingRoot};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

mod backup;
mod commit;
pub(crate) mod keep;
pub(crate) mod keep_name;
mod links;
mod merge;
mod premerge;
mod renames;
pub(crate) mod transfer;

pub(crate) use backup::in_backup_dir;
pub(crate) use merge::{merged_version, props_agree, run_fold, MergeInput, Merged, NotMerged};
pub use premerge::MergeNow;
pub(crate) use premerge::Premerger;

/// Files (and other entries) received before the chunk is flushed and
/// committed, and their bytes at most: one flush of each replica per chunk.
/// A chunk's end costs a remote side a round trip or two (its first
/// receives wait for the last chunk's commits), so chunks of small files
/// are bigger than the mirror's batches: a crash leaves at most a chunk's
/// records unwritten (those files are fingerprinted again next run), and
/// what a chunk holds in memory is a few hundred bytes a file.
const CHUNK_FILES: usize = 8192;
const CHUNK_BYTES: u64 = 256 << 20;

/// The slot of `side` in `[A, B]` arrays.
pub(crate) fn index(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

/// A path propagated on both sides, waiting to be recorded.
struct Done {
    path: RelPath,
    action: Action,
    records: [Record; 2],
    /// A rename's source, the leader a copy was linked to
    /// (`links.rs`), or for `KeepBoth` where the loser was kept.
    from: Option<RelPath>,
}

/// A file (or other entry) received under a temp name, to be committed.
struct Staged<'i> {
    item: &'i SyncItem,
    to: Side,
    temp: Vec<u8>,
    /// The entry `to` takes (kind, contents, the properties written).
    taken: Entry,
    /// For `CopyContentsAndPropsBack`: the properties the source side
    /// takes back once the contents are in place.
    props_back: Option<Props>,
}

struct Propagation<'a> {
    replicas: [&'a dyn Replica; 2],
    cfg: &'a SyncConfig,
    scanned: &'a Scanned,
    done: Vec<Done>,
    failures: Vec<SyncFailure>,
    /// Paths that failed (a directory that could not be made gets no
    /// properties set afterwards).
    failed_paths: HashSet<RelPath>,
    /// Directories made and properties set in this chunk, started and not
    /// yet waited for (a remote side answers them together).
    in_flight: Vec<InFlight<'a>>,
    /// Renames started in this chunk, with the items moved along.
    renames: Vec<StartedRename<'a>>,
    /// Directories deleted only after the renames out of them
    /// (`rename_source_directories`).
    late: HashSet<(Side, RelPath)>,
    /// The sources of renames that failed: their directories stay.
    unmoved: Vec<(Side, RelPath)>,
    /// Hard links' leaders copied by this run, and what their copies put
    /// there (`links.rs`).
    leaders: links::Leaders,
    progress: Option<&'a crate::Progress>,
    /// The source's root on the receiver's host, where the receiver copies
    /// files from (`Plan::sibling`).
    sibling: Option<&'a SiblingRoot>,
}

/// A rename on its way: the item, the items moved with it, its reply.
type StartedRename<'a> = (
    &'a SyncItem,
    &'a [SyncItem],
    Pending<Result<(), crate::Error>>,
);

/// Calls started for one item.
struct InFlight<'i> {
    item: &'i SyncItem,
    waits: Vec<Pending<Result<(), crate::Error>>>,
    /// A property change, recorded once done: `(from, to, the entry `to`
    /// now holds)`.
    record: Option<(Side, Side, Entry)>,
}

/// What a run carries out: the plan's items, and the names `--keep-both`
/// chose for the versions it keeps aside.
pub(crate) struct Plan<'p> {
    pub items: &'p [SyncItem],
    pub kept: &'p crate::sync::propagate::keep_name::KeptCopies,
    /// Merges made while the plan was edited (`--merge`, the key 'm').
    pub premerged: &'p Premerger<'p>,
    /// Where the receiver may copy files from on its own host: the
    /// source's root there (a sync of several roots, two of them on one
    /// remote host). `None`: they are carried through this host.
    pub sibling: Option<&'p SiblingRoot>,
}

/// Carry out the plan and record what succeeded in both archives.
pub(crate) fn propagate(
    replicas: [&dyn Replica; 2],
    archives: &mut [Box<dyn SideSession + '_>; 2],
    scanned: &Scanned,
    plan: Plan,
    cfg: &SyncConfig,
    hooks: &crate::sync::SyncHooks,
    report: &mut SyncReport,
) {
    let Plan {
        items,
        kept,
        premerged,
        sibling,
    } = plan;
    let mut run = Propagation {
        replicas,
        cfg,
        scanned,
        done: Vec::new(),
        failures: Vec::new(),
        failed_paths: Default::default(),
        in_flight: Vec::new(),
        renames: Vec::new(),
        late: rename_source_directories(items),
        unmoved: Vec::new(),
        leaders: links::Leaders::of(items),
        progress: hooks.progress,
        sibling,
    };
    if let Some(progress) = hooks.progress {
        count_copies(items, progress);
    }
    run.deletions(items, false);
    run.flush(archives, report);
    run.entries_in_order(items, archives, report);
    run.links(items, archives, hooks.before_links, report);
    run.keep_both(items, kept);
    if let Some(program) = &cfg.merge {
        let chosen = hooks.merge_chosen.unwrap_or(&|_| true);
        report.not_merged = run.merge_conflicts(items, program, chosen, premerged);
    }
    run.flush(archives, report);
    run.directory_props(items);
    run.deletions(items, true);
    run.flush(archives, report);
    report.errors.append(&mut run.failures);
    report.errors.sort_by(|x, y| x.path.cmp(&y.path));
    let merged: HashSet<&RelPath> = report
        .propagated
        .iter()
        .filter_map(|change| change.merged.then_some(&change.path))
        .collect();
    if !merged.is_empty() {
        report.conflicts.retain(|(path, _)| !merged.contains(path));
    }
    report.propagated.sort_by(|x, y| x.path.cmp(&y.path));
}

/// The files the plan copies (not those made as links) and their bytes, for
/// a progress display.
fn count_copies(items: &[SyncItem], progress: &crate::Progress) {
    let copied = items.iter().filter(|item| links::linked(item).is_none());
    let sources = copied.filter_map(|item| match item.action {
        Action::Copy { from, .. } | Action::CopyContentsAndPropsBack { from, .. } => {
            item.entry(from).filter(|e| e.kind == Kind::File)
        }
        _ => None,
    });
    let (files, bytes) = sources.fold((0, 0), |(n, b), e| (n + 1, b + e.size));
    progress.files_total.store(files, Ordering::Relaxed);
    progress.bytes_total.store(bytes, Ordering::Relaxed);
    progress.planned.store(true, Ordering::Relaxed);
}

/// A path's parent directory and its name there.
pub(crate) fn split(path: &RelPath) -> (RelPath, &[u8]) {
    (path.parent().unwrap_or_default(), path.file_name())
}

/// The properties a sync writes: permissions without setuid and setgid,
/// the user.* extended attributes and ACLs the scan read (which replace
/// the target's of those kinds, and only those), and the mtime under
/// `--times` (regular files only).
fn synced_props(entry: &Entry, cfg: &SyncConfig) -> (Props, PropsMask) {
    let has_mode = entry.kind != Kind::Symlink;
    let filter = accord_replica::side::xattr_filter(&cfg.synced_props());
    let xattrs = entry
        .props
        .xattrs
        .clone()
        .filter(|_| has_mode && filter.any());
    let mask = PropsMask {
        perms: has_mode,
        owner: cfg.owner,
        times: cfg.times && entry.kind == Kind::File,
        xattrs: xattrs.is_some().then_some(filter),
    };
    let props = Props {
        mode: entry.props.mode & SYNCED_MODE_BITS,
        xattrs,
        ..entry.props.clone()
    };
    (props, mask)
}

/// What an archive records of an entry this run changed: the entry it was
/// made to hold, at the identity found there now. Its ctime is unknown (it
/// just moved), so the next run fingerprints it once. Without `--owner`
/// its owner is whoever made it, not the source's: recorded as unknown, so
/// that a later run with `--owner` takes it as no change of this side's
/// rather than as a change to carry back.
pub(crate) fn changed_entry(taken: &Entry, found: Option<Found>, cfg: &SyncConfig) -> Observed {
    let mut entry = taken.clone();
    if !cfg.owner {
        entry.props.uid = UNKNOWN_OWNER;
        entry.props.gid = UNKNOWN_OWNER;
    }
    if let Some(found) = found {
        entry.dev = found.dev;
        entry.ino = found.ino;
        entry.size = found.size;
        entry.props.mtime = found.mtime;
    }
    entry.props.mode &= SYNCED_MODE_BITS;
    Observed {
        entry,
        ctime: UNKNOWN_CTIME,
    }
}

impl<'a> Propagation<'a> {
    fn fail(&mut self, path: &RelPath, error: SyncError) {
        self.failed_paths.insert(path.clone());
        self.failures.push(SyncFailure {
            path: path.clone(),
            error,
        });
    }

    /// What the archive of `side` records for an entry this run left as
    /// the scan found it.
    fn as_scanned(&self, item: &SyncItem, side: Side) -> Record {
        match item.entry(side) {
            Some(entry) => Record::Put(Observed {
                entry: entry.clone(),
                ctime: self.scanned.ctimes_of(&item.path)[index(side)],
            }),
            None => Record::Remove(item.path.clone()),
        }
    }

    /// `dir` of `side`, opened for `action` (which a failure names).
    fn dir(
        &self,
        side: Side,
        dir: &RelPath,
        action: accord_replica::Action,
    ) -> Result<Box<dyn ReplicaDir + 'a>, SyncError> {
        let opened = self.replicas[index(side)].open_dir(dir);
        Ok(opened.map_err(crate::Error::io(action))?)
    }

    fn stat(&self, side: Side, path: &RelPath) -> Option<Found> {
        self.start_stat_at(side, path).wait().ok().flatten()
    }

    /// Start a stat of `path` on `side` (the root's: none, as before).
    fn start_stat_at(&self, side: Side, path: &RelPath) -> Pending<std::io::Result<Option<Found>>> {
        if path.is_root() {
            return Pending::ready(Ok(None));
        }
        let (parent, name) = split(path);
        match self.replicas[index(side)].open_dir(&parent) {
            Ok(dir) => dir.start_stat(name),
            Err(e) => Pending::ready(Err(e)),
        }
    }

    // ---- deletions ----

    /// Deepest first, all started before any is waited for (a replica
    /// carries out its writes in the order they were sent). `late`: the
    /// directories that waited for the renames out of them.
    fn deletions(&mut self, items: &[SyncItem], late: bool) {
        let chosen: Vec<_> = items
            .iter()
            .rev()
            .filter_map(|item| match item.action {
                Action::Delete { on } if self.deleted_now(item, on, late) => Some((item, on)),
                _ => None,
            })
            .collect();
        let chosen = self.back_up_deleted(chosen);
        let started: Vec<_> = chosen
            .into_iter()
            .map(|(item, on)| (item, self.start_delete(item, on)))
            .collect();
        for (item, pending) in started {
            let deleted = pending.and_then(|p| Ok(p.wait()?));
            match deleted {
                Ok(Deleted::Done | Deleted::Gone) => self.done.push(Done {
                    path: item.path.clone(),
                    action: item.action,
                    records: [
                        Record::Remove(item.path.clone()),
                        Record::Remove(item.path.clone()),
                    ],
                    from: None,
                }),
                Ok(Deleted::NotEmpty) => self.fail(&item.path, SyncError::DirectoryNotEmpty),
                Err(error) => self.fail(&item.path, error),
            }
        }
    }

    /// Is `item`'s deletion one of this pass? A directory a rename failed
    /// to empty is left for the next run.
    fn deleted_now(&self, item: &SyncItem, on: Side, late: bool) -> bool {
        if !self.late.contains(&(on, item.path.clone())) {
            return !late;
        }
        let unmoved = |(side, from): &(Side, RelPath)| *side == on && from.starts_with(&item.path);
        late && !self.unmoved.iter().any(unmoved)
    }

    fn start_delete(
        &self,
        item: &SyncItem,
        on: Side,
    ) -> Result<Pending<Result<Deleted, crate::Error>>, SyncError> {
        let (parent, name) = split(&item.path);
        let dir = self.dir(on, &parent, accord_replica::Action::Delete)?;
        Ok(dir.start_delete(name, &Expect::of(item.entry(on))))
    }

    // ---- entries, in path order ----

    fn entries_in_order(
        &mut self,
        items: &'a [SyncItem],
        archives: &mut [Box<dyn SideSession + '_>; 2],
        report: &mut SyncReport,
    ) {
        let mut staged: Vec<Staged<'a>> = Vec::new();
        let mut copies: Vec<FileCopy<'a>> = Vec::new();
        let mut bytes = 0;
        for (at, item) in items.iter().enumerate() {
            if links::linked(item).is_some() {
                // Made once its leader is in place (`links`).
                continue;
            }
            if let Action::Rename { on } = item.action {
                let beneath = moved_beneath(&items[at + 1..], &item.path);
                self.start_rename(item, on, beneath);
            } else if let Some(copy) = self.file_copy(item) {
                bytes += copy.item.entry(copy.from).map_or(0, |e| e.size);
                copies.push(copy);
            } else {
                match self.start(item) {
                    Ok(Some(one)) => staged.push(one),
                    Ok(None) => {}
                    Err(error) => self.fail(&item.path, error),
                }
            }
            // Agreements count too: a sync after a first one may agree on
            // every path (fingerprinted, unchanged), and their records
            // would otherwise all wait in memory for the end.
            let started = staged.len()
                + copies.len()
                + self.in_flight.len()
                + self.renames.len()
                + self.done.len();
            if started >= CHUNK_FILES || bytes >= CHUNK_BYTES {
                self.end_chunk(std::mem::take(&mut copies), &mut staged);
                bytes = 0;
                self.commit_and_flush(std::mem::take(&mut staged), archives, report);
            }
        }
        self.end_chunk(copies, &mut staged);
        self.commit_and_flush(staged, archives, report);
    }

    /// Receive the chunk's files, then wait for its directories, property
    /// changes and renames. The receives go first: a replica carries out
    /// its writes in the order they were sent, so a file received into a
    /// directory this chunk made finds it there (or fails, as the directory
    /// did), and a remote side answers both in the same round trip.
    fn end_chunk(&mut self, copies: Vec<FileCopy<'a>>, staged: &mut Vec<Staged<'a>>) {
        self.receive_copies(copies, staged);
        self.settle_in_flight();
    }

    /// Wait for the chunk's directories and property changes; record the
    /// property changes that succeeded (their stats started together).
    fn settle_in_flight(&mut self) {
        let mut done = Vec::new();
        for flight in std::mem::take(&mut self.in_flight) {
            let failed = flight.waits.into_iter().find_map(|p| p.wait().err());
            match (failed, flight.record) {
                (Some(error), _) => self.fail(&flight.item.path, error.into()),
                (None, Some(record)) => done.push((flight.item, record)),
                (None, None) => {}
            }
        }
        let stats: Vec<_> = done
            .iter()
            .map(|(item, (_, to, _))| self.start_stat_at(*to, &item.path))
            .collect();
        for ((item, (from, to, taken)), found) in done.into_iter().zip(stats) {
            let recorded = changed_entry(&taken, found.wait().ok().flatten(), self.cfg);
            self.done_with(item, from, to, recorded);
        }
        self.settle_renames();
    }

    // ---- renames ----

    /// A regular file whose contents go to the other side: received with
    /// its chunk (`transfer.rs`). Its temp takes the source's synced
    /// properties, or for `CopyContentsAndPropsBack` the target's own mode.
    fn file_copy(&self, item: &'a SyncItem) -> Option<FileCopy<'a>> {
        let (from, to, keep_mode) = match item.action {
            Action::Copy { from, to } => (from, to, false),
            Action::CopyContentsAndPropsBack { from, to } => (from, to, true),
            _ => return None,
        };
        let source = item.entry(from).filter(|e| e.kind == Kind::File)?;
        let (mut props, mut mask) = synced_props(source, self.cfg);
        if keep_mode {
            // `to` keeps its own permissions and attributes.
            let keep = item.entry(to).expect("a props change needs an entry");
            let (kept, kept_mask) = synced_props(keep, self.cfg);
            props.mode = kept.mode;
            (props.uid, props.gid) = (kept.uid, kept.gid);
            props.xattrs = kept.xattrs;
            mask.xattrs = kept_mask.xattrs;
        }
        Some(FileCopy {
            item,
            from,
            to,
            props,
            mask,
        })
    }

    /// Receive a chunk's files; those that arrived intact are staged.
    fn receive_copies(&mut self, copies: Vec<FileCopy<'a>>, staged: &mut Vec<Staged<'a>>) {
        if copies.is_empty() {
            return;
        }
        let arrived = |copy: &FileCopy| {
            if let Some(progress) = self.progress {
                let size = copy.item.entry(copy.from).map_or(0, |e| e.size);
                progress.files_done.fetch_add(1, Ordering::Relaxed);
                progress.bytes_done.fetch_add(size, Ordering::Relaxed);
            }
        };
        for (copy, received) in receive_all(self.replicas, copies, self.sibling, &arrived) {
            match received {
                Ok(temp) => staged.push(self.staged_copy(copy, temp)),
                Err(error) => self.fail(&copy.item.path, error),
            }
        }
    }

    fn staged_copy(&self, copy: FileCopy<'a>, temp: Vec<u8>) -> Staged<'a> {
        let source = copy.item.entry(copy.from).expect("a copy has a source");
        let mut taken = source.clone();
        let props_back = match copy.item.action {
            Action::CopyContentsAndPropsBack { .. } => {
                taken.props.mode = copy.props.mode;
                (taken.props.uid, taken.props.gid) = (copy.props.uid, copy.props.gid);
                taken.props.xattrs = copy.props.xattrs.clone();
                let keep = copy
                    .item
                    .entry(copy.to)
                    .expect("a props change needs an entry");
                Some(synced_props(keep, self.cfg).0)
            }
            _ => None,
        };
        Staged {
            item: copy.item,
            to: copy.to,
            temp,
            taken,
            props_back,
        }
    }

    /// Do what can be done at once for `item`; a file or other entry is
    /// received and returned to be committed with its chunk.
    fn start(&mut self, item: &'a SyncItem) -> Result<Option<Staged<'a>>, SyncError> {
        match item.action {
            Action::Copy { from, to } => self.start_copy(item, from, to),
            // A device node's number from one side, its permissions from
            // the other (files go with their chunk, `file_copy`).
            Action::CopyContentsAndPropsBack { from, to } => {
                let source = item.entry(from).expect("contents come from an entry");
                let keep = item.entry(to).expect("a props change needs an entry");
                let (kept_props, _) = synced_props(keep, self.cfg);
                let mut staged = self.make_node(item, source, to, Some(kept_props.mode))?;
                staged.props_back = Some(kept_props);
                Ok(Some(staged))
            }
            Action::CopyProps { from, to } if !is_dir(item.entry(to)) => {
                let flight = self.copy_props(item, from, to)?;
                self.in_flight.push(flight);
                Ok(None)
            }
            Action::Agree => {
                self.done.push(Done {
                    path: item.path.clone(),
                    action: item.action,
                    records: [
                        self.as_scanned(item, Side::A),
                        self.as_scanned(item, Side::B),
                    ],
                    from: None,
                });
                Ok(None)
            }
            // Directories' properties are set last; deletions are done;
            // conflicts are left alone.
            _ => Ok(None),
        }
    }

    fn start_copy(
        &mut self,
        item: &'a SyncItem,
        from: Side,
        to: Side,
    ) -> Result<Option<Staged<'a>>, SyncError> {
        let source = item.entry(from).expect("a copy has a source");
        match source.kind {
            Kind::Dir => {
                let flight = self.make_directory(item, from, to)?;
                self.in_flight.push(flight);
                Ok(None)
            }
            Kind::File => unreachable!("files go with their chunk (file_copy)"),
            _ => self.make_node(item, source, to, None).map(Some),
        }
    }

    /// A directory where `to` has none: what is there is removed first (an
    /// entry of another kind, which the plan replaces). It is made under a
    /// temp name with its final permissions, owner bits added so it can be
    /// filled (they go when its properties are set, after its contents),
    /// and renamed into place: a run killed at any moment leaves no
    /// directory or one the next run agrees with, where one left at the 0700
    /// `mkdir` gives would look like a permission change and conflict with
    /// the other side's.
    fn make_directory(
        &self,
        item: &'a SyncItem,
        from: Side,
        to: Side,
    ) -> Result<InFlight<'a>, SyncError> {
        let (parent, name) = split(&item.path);
        let dir = self.dir(to, &parent, accord_replica::Action::MakeDir)?;
        if let Some(old) = item.entry(to).filter(|e| e.kind != Kind::Dir) {
            self.back_up(to, Some(old))?;
            self.flush_backups(to)?;
            dir.delete(name, &Expect::entry(old))?;
        }
        let source = item.entry(from).expect("a copy has a source");
        let (mut props, mask) = synced_props(source, self.cfg);
        props.mode |= 0o700;
        let waits = match item.entry(to) {
            // A directory there already (made by a run before): only its
            // properties.
            Some(old) if old.kind == Kind::Dir => {
                vec![dir.start_set_props(name, &Expect::entry(old), Kind::Dir, &props, mask)]
            }
            _ => {
                let node = Entry {
                    props,
                    ..source.clone()
                };
                make_and_commit(&*dir, name, &node, mask)?
            }
        };
        Ok(InFlight {
            item,
            waits,
            record: None,
        })
    }

    /// A symlink, fifo, socket or device node under a temp name (`mode`:
    /// another mode than the source's).
    fn make_node(
        &self,
        item: &'a SyncItem,
        source: &Entry,
        to: Side,
        mode: Option<u32>,
    ) -> Result<Staged<'a>, SyncError> {
        let (parent, name) = split(&item.path);
        let dir = self.dir(to, &parent, accord_replica::Action::MakeNode)?;
        let (mut props, mask) = synced_props(source, self.cfg);
        props.mode = mode.unwrap_or(props.mode);
        let node = Entry {
            props: props.clone(),
            ..source.clone()
        };
        let temp = dir.make_node(name, &node, mask)?;
        let mut taken = source.clone();
        taken.props.mode = props.mode;
        Ok(Staged {
            item,
            to,
            temp,
            taken,
            props_back: None,
        })
    }

    /// Start setting `from`'s synced properties on `to`'s entry.
    fn copy_props(
        &self,
        item: &'a SyncItem,
        from: Side,
        to: Side,
    ) -> Result<InFlight<'a>, SyncError> {
        let (parent, name) = split(&item.path);
        let source = item.entry(from).expect("props come from an entry");
        let target = item.entry(to).expect("props go to an entry");
        let dir = self.dir(to, &parent, accord_replica::Action::SetProps)?;
        let (props, mask) = synced_props(source, self.cfg);
        let set = dir.start_set_props(name, &Expect::entry(target), target.kind, &props, mask);
        let mut taken = target.clone();
        taken.props.mode = props.mode;
        if mask.xattrs.is_some() {
            taken.props.xattrs = props.xattrs.clone();
        }
        if mask.owner {
            (taken.props.uid, taken.props.gid) = (props.uid, props.gid);
        }
        if self.cfg.times && target.kind == Kind::File {
            taken.props.mtime = source.props.mtime;
        }
        Ok(InFlight {
            item,
            waits: vec![set],
            record: Some((from, to, taken)),
        })
    }

    /// Record a path whose `to` side now holds `recorded` and whose `from`
    /// side is as scanned.
    fn done_with(&mut self, item: &SyncItem, from: Side, to: Side, mut recorded: Observed) {
        accord_replica::side::follow::seen_as_written(&mut recorded.entry, item.entry(to));
        let mut records = [
            Record::Remove(item.path.clone()),
            Record::Remove(item.path.clone()),
        ];
        records[index(from)] = self.as_scanned(item, from);
        if let Record::Put(source) = &mut records[index(from)] {
            if self.leaders.leads(to, &item.path) {
                // Its links are made later: in a run stopped before them,
                // the next run must see this name again to lead them (a
                // name the plan does not hold leads no group).
                source.ctime = UNKNOWN_CTIME;
            }
        }
        records[index(to)] = Record::Put(recorded);
        self.done.push(Done {
            path: item.path.clone(),
            action: item.action,
            records,
            from: None,
        });
    }

    // ---- directories' properties, deepest first ----

    // ---- the archives ----
}

/// The items that follow a renamed directory at `top` and move with it.
fn moved_beneath<'i>(after: &'i [SyncItem], top: &RelPath) -> &'i [SyncItem] {
    let count = after
        .iter()
        .take_while(|item| {
            matches!(item.action, Action::MovedWith { .. }) && item.path.starts_with(top)
        })
        .count();
    &after[..count]
}

/// The directories above each rename's source that the plan deletes on
/// the renaming side: deleted after the renames, which empty them.
fn rename_source_directories(items: &[SyncItem]) -> HashSet<(Side, RelPath)> {
    let mut late = HashSet::new();
    for item in items {
        if let (Action::Rename { on }, Some(moved)) = (item.action, &item.moved) {
            let ancestors = std::iter::successors(moved.from.parent(), RelPath::parent);
            late.extend(ancestors.filter(|a| !a.is_root()).map(|a| (on, a)));
        }
    }
    late
}

fn is_dir(entry: Option<&Entry>) -> bool {
    entry.is_some_and(|e| e.kind == Kind::Dir)
}

/// Make `node` under a temp name and commit it at `name`, where nothing
/// is: both sent at once where the replica names its temps before making
/// them, so a new directory costs no round trip of its own.
fn make_and_commit(
    dir: &dyn ReplicaDir,
    name: &[u8],
    node: &Entry,
    mask: PropsMask,
) -> Result<Vec<Pending<Result<(), crate::Error>>>, SyncError> {
    let made = dir.start_make_node(name, node, mask);
    Ok(match made.handle().map(<[u8]>::to_vec) {
        Some(handle) => vec![
            Pending::later(move || made.wait().map(drop)),
            dir.start_commit(&handle, name, &Expect::Absent),
        ],
        None => vec![dir.start_commit(&made.wait()?, name, &Expect::Absent)],
    })
}
