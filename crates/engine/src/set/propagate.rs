//! Propagation of a set's plan. Each replica that must receive something
//! takes it from one replica that holds the settled version (`source_of`:
//! the first of them in the set's order on this host, else the first),
//! through the two-replica propagation
//! (`sync/propagate/`): the same checks before every change, temps and
//! renames, deletions deepest first, the same crash invariant. What it
//! records goes with the settled version's vector, in the same transaction
//! (`Versioned`).
//!
//! Each replica records a path as soon as it holds the settled version:
//! the receivers when their copy is in place, the holders once every
//! receiver has been tried. A receiver that failed keeps its older record,
//! which the holders' newer vector includes: the next run gives it the
//! version again, without a conflict.

use crate::set::places::Places;
use crate::set::renames::Renames;
use crate::set::scan::{Held, Member};
use crate::set::{SetChange, SetFailure, Via};
use crate::sync::propagate::{propagate, Plan, Premerger};
use crate::sync::{SyncConfig, SyncHooks, SyncReport};
use accord_model::{Kind, RelPath, Time};
use accord_plan::{
    plan_links, Action, Outcome, Receive, SetItem, Side, SyncItem, SyncedProps, VersionVector,
};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::{
    ArchiveRecord, Replica, SiblingRoot, SideFailure, SideOptions, SideScan, SideSession, SyncRules,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Records written to a holder's archive per transaction.
const RECORDS_PER_BATCH: usize = 4096;

/// What propagation did.
#[derive(Default)]
pub(crate) struct Carried {
    pub changes: Vec<SetChange>,
    pub failures: Vec<SetFailure>,
    /// Files written (whole or as deltas) on every receiver, and their
    /// bytes.
    pub written: crate::Progress,
}

/// Carry out `items` on the members (`replicas` in the members' order):
/// every receiver at once, each on a thread of its own (a receiver's
/// archive is its own; a source is only read, and its records are written
/// last, by `record_holder`). Each receiver takes its items a chunk at a
/// time (`next_chunk`), so that a first sync of a large tree holds one
/// chunk's plan per receiver rather than the whole of it. A receiver that
/// deletes something first pairs its renames on its whole plan
/// (`renames.rs`; `unread`: paths the scans could not read).
pub(crate) fn carry_out(
    replicas: &[&dyn Replica],
    members: &mut [Member<'_>],
    (items, held): (&[SetItem], &Held),
    places: &Places,
    cfg: &SyncConfig,
    unread: &[RelPath],
) -> Carried {
    let vectors = Vectors(items);
    let names: Vec<Arc<str>> = members.iter().map(|m| m.name.as_str().into()).collect();
    let indexes: Vec<usize> = members.iter().map(|m| m.index).collect();
    let member_places: Vec<usize> = members.iter().map(|m| m.place).collect();
    let written = crate::Progress::default();
    let mut per_receiver: Vec<Carried> = std::thread::scope(|s| {
        let threads: Vec<_> = members
            .iter_mut()
            .enumerate()
            .map(|(receiver, member)| {
                let (names, vectors, written) = (&names, &vectors, &written);
                let (indexes, member_places) = (&indexes, &member_places);
                let takes = Takes {
                    indexes,
                    places,
                    receiver,
                    held,
                };
                s.spawn(move || {
                    let mut carried = Carried::default();
                    let synced = cfg.synced_props();
                    let renames = match cfg.renames && replicas[receiver].can_rename() {
                        true => takes.renames(items, &synced, unread),
                        false => Renames::default(),
                    };
                    let mut rest = items;
                    while !rest.is_empty() {
                        let (groups, taken) = takes.next_chunk(rest, &renames);
                        rest = &rest[taken..];
                        for (source, mut pair_items) in groups {
                            // Hard links as for two replicas, within what one
                            // call propagates (a group's names from one holder
                            // in one chunk).
                            plan_links(&mut pair_items, &synced, cfg.hard_links);
                            let pair = Pair {
                                replicas: [replicas[source], replicas[receiver]],
                                slots: [source, receiver],
                                receiver_name: names[receiver].clone(),
                                places: [member_places[source], member_places[receiver]],
                                sibling: places.sibling(indexes[source], indexes[receiver]),
                            };
                            let context = (held, vectors, cfg, written, &renames);
                            pair.run(member, pair_items, context, &mut carried);
                        }
                        super::release_freed_memory();
                    }
                    carried
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| match thread.join() {
                Ok(carried) => carried,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    // One list of every receiver's changes: the longest one grown once (a
    // large block is moved by the allocator without a copy), rather than a
    // new list the size of them all beside them (a first sync of three
    // roots held two copies of its 200,000 changes at once).
    let longest = (0..per_receiver.len()).max_by_key(|&at| per_receiver[at].changes.len());
    let mut carried = Carried {
        written,
        changes: longest.map_or_else(Vec::new, |at| std::mem::take(&mut per_receiver[at].changes)),
        ..Carried::default()
    };
    let rest = per_receiver.iter().map(|one| one.changes.len()).sum();
    carried.changes.reserve_exact(rest);
    for mut one in per_receiver {
        carried.changes.append(&mut one.changes);
        carried.failures.append(&mut one.failures);
    }
    super::release_freed_memory();
    for holder in 0..members.len() {
        record_holder(members, holder, items, held, &mut carried);
    }
    super::release_freed_memory();
    carried
}

/// The holder whose version this host reads (a merge's input): the first
/// in the set's order of those on this host (`far` false), else the first.
/// (A receiver's source is `Places::source_for`.)
pub(crate) fn source_of(
    holders: impl Iterator<Item = usize>,
    far: impl Fn(usize) -> bool,
) -> usize {
    holders
        .min_by_key(|&holder| (far(holder), holder))
        .expect("a settled version has a holder")
}

/// Items a receiver takes per chunk, at least (a chunk ends only where no
/// directory of it has more of its subtree to come: see `next_chunk`).
const CHUNK_ITEMS: usize = 4096;

/// What one receiver takes: the members' set indexes (by slot), where
/// each is, the receiver's slot, and what each holds.
#[derive(Clone, Copy)]
struct Takes<'t> {
    indexes: &'t [usize],
    places: &'t Places,
    receiver: usize,
    held: &'t Held,
}

impl Takes<'_> {
    /// The slot of the member with set index `index`.
    fn slot_of(&self, index: usize) -> usize {
        self.indexes
            .iter()
            .position(|&at| at == index)
            .expect("the plan names members only")
    }

    /// What the receiver takes of the first items of `items`, grouped by
    /// the member it takes it from, each as an item of a two-replica plan
    /// (A: the source, B: the receiver); and how many items that covers.
    ///
    /// A chunk holds at least `CHUNK_ITEMS` of the receiver's items, and
    /// ends only outside the subtree of every directory it holds: the
    /// two-replica propagation deletes a directory's contents before it,
    /// and sets a directory's properties (a read-only mode, its mtime)
    /// after its contents are in place, within one call. Nor does it end
    /// between the source and the target of a rename (`renames`): the
    /// rename is the source's deletion, made before its directories'.
    fn next_chunk<'i>(
        &self,
        items: &'i [SetItem],
        renames: &'i Renames,
    ) -> (BTreeMap<usize, Vec<SyncItem>>, usize) {
        let mut groups: BTreeMap<usize, Vec<SyncItem>> = BTreeMap::new();
        let mut taken = 0;
        let mut count = 0;
        let mut open: Vec<&RelPath> = Vec::new();
        let mut awaited: Vec<&RelPath> = Vec::new();
        for item in items {
            open.retain(|dir| item.path.starts_with(dir));
            if count >= CHUNK_ITEMS && open.is_empty() && awaited.is_empty() {
                break;
            }
            taken += 1;
            if let Some(partner) = renames.partner(&item.path) {
                match awaited.iter().position(|&p| p == &item.path) {
                    Some(at) => {
                        awaited.swap_remove(at);
                    }
                    None => awaited.push(partner),
                }
            }
            let Some((source, mut sync_item)) = self.take(item) else {
                continue;
            };
            if !renames.apply(&mut sync_item) {
                continue;
            }
            count += 1;
            if [&sync_item.a, &sync_item.b]
                .iter()
                .any(|entry| entry.as_ref().is_some_and(|e| e.kind == Kind::Dir))
            {
                open.push(&item.path);
            }
            groups.entry(source).or_default().push(sync_item);
        }
        (groups, taken)
    }

    /// The renames the receiver makes (`renames.rs`), paired on its whole
    /// plan: built only when it deletes something.
    fn renames(&self, items: &[SetItem], synced: &SyncedProps, unread: &[RelPath]) -> Renames {
        let index = self.indexes[self.receiver];
        let deletes = |item: &SetItem| match &item.outcome {
            Outcome::Settled(settled) => settled.receivers.contains(&(index, Receive::Delete)),
            Outcome::Conflict { .. } => false,
        };
        if !items.iter().any(deletes) {
            return Renames::default();
        }
        let plan = items.iter().filter_map(|item| self.take(item)).collect();
        Renames::pair(plan, synced, unread)
    }

    /// What the receiver takes at `item`, and from which slot.
    fn take(&self, item: &SetItem) -> Option<(usize, SyncItem)> {
        let Outcome::Settled(settled) = &item.outcome else {
            return None;
        };
        let index = self.indexes[self.receiver];
        let &(_, receive) = settled.receivers.iter().find(|(r, _)| *r == index)?;
        let holders = settled.holders.iter().copied();
        let source = self.slot_of(self.places.source_for(holders, index));
        let at = self.held.index_of(&item.path);
        let entry = |slot: usize| self.held.now(at, slot).cloned();
        let action = match receive {
            Receive::Whole => Action::Copy {
                from: Side::A,
                to: Side::B,
            },
            Receive::Props => Action::CopyProps {
                from: Side::A,
                to: Side::B,
            },
            Receive::Delete => Action::Delete { on: Side::B },
        };
        let sync_item = SyncItem {
            path: item.path.clone(),
            action,
            overridden: None,
            a: entry(source),
            b: entry(self.receiver),
            moved: None,
            link: None,
        };
        Some((source, sync_item))
    }
}

/// Two members, as the two-replica propagation takes them.
struct Pair<'a> {
    replicas: [&'a dyn Replica; 2],
    /// The members' slots: the source's, the receiver's.
    slots: [usize; 2],
    /// The receiver's name, for its failures.
    receiver_name: Arc<str>,
    /// The source's and the receiver's places among the roots as given.
    places: [usize; 2],
    /// The source's root on the receiver's host, where the receiver
    /// copies from (`Places::sibling`).
    sibling: Option<&'a SiblingRoot>,
}

/// What every pair of a run reads: the scan, the vectors, the options,
/// the counters of what was written, and the receiver's renames.
type PairContext<'c> = (
    &'c Held,
    &'c Vectors<'c>,
    &'c SyncConfig,
    &'c crate::Progress,
    &'c Renames,
);

impl Pair<'_> {
    fn run(
        &self,
        receiver: &mut Member<'_>,
        items: Vec<SyncItem>,
        (held, vectors, cfg, written, renames): PairContext<'_>,
        carried: &mut Carried,
    ) {
        let pair_scanned =
            crate::sync::scan::Scanned::of_ctimes(receiver_ctimes(&items, held, self.slots[1]));
        let mut sides: [Box<dyn SideSession + '_>; 2] = [
            Box::new(Unrecorded),
            Box::new(Versioned::new(receiver.side.as_mut(), vectors, renames)),
        ];
        let premerger = Premerger::new(self.replicas, cfg);
        let kept = Default::default();
        let plan = Plan {
            items: &items,
            kept: &kept,
            premerged: &premerger,
            sibling: self.sibling,
        };
        let mut report = SyncReport::default();
        let hooks = SyncHooks {
            progress: Some(written),
            ..SyncHooks::default()
        };
        let replicas = self.replicas;
        propagate(
            replicas,
            &mut sides,
            &pair_scanned,
            plan,
            cfg,
            &hooks,
            &mut report,
        );
        let [from, on] = self.places;
        carried
            .changes
            .extend(report.propagated.into_iter().map(|change| {
                let via = match (change.from, change.linked_to) {
                    (Some(renamed_from), _) => Some(Box::new(Via::Renamed(renamed_from))),
                    (None, Some(linked_to)) => Some(Box::new(Via::Linked(linked_to))),
                    (None, None) => None,
                };
                let receive = receive_of(change.action);
                SetChange {
                    via,
                    ..SetChange::new(change.path, (on, from), receive)
                }
            }));
        carried
            .failures
            .extend(report.errors.into_iter().map(|failure| SetFailure {
                replica: self.receiver_name.to_string(),
                failure,
            }));
    }
}

/// The ctimes the receiver (in `slot`) may record: only its records are
/// kept (the source's are written by `record_holder`), and only where it
/// holds an entry that this run may leave as scanned (on a first sync,
/// none), including what a rename moves (found at its source).
fn receiver_ctimes(items: &[SyncItem], held: &Held, slot: usize) -> Vec<(RelPath, [Time; 2])> {
    let at = |path: &RelPath| {
        (
            path.clone(),
            [UNKNOWN_CTIME, held.ctime(held.index_of(path), slot)],
        )
    };
    let mut ctimes: Vec<_> = items
        .iter()
        .filter(|item| item.b.is_some())
        .map(|item| at(&item.path))
        .chain(
            items
                .iter()
                .filter_map(|item| item.moved.as_ref().map(|m| at(&m.from))),
        )
        .collect();
    ctimes.sort_by(|x, y| x.0.cmp(&y.0));
    ctimes
}

/// The source's side in a pair: what it holds is recorded by
/// `record_holder` once every receiver has been tried, not per pair.
struct Unrecorded;

impl SideSession for Unrecorded {
    fn created(&self) -> bool {
        false
    }

    fn forget(&mut self) -> Result<(), SideFailure> {
        Ok(())
    }

    fn set_rules(&mut self, _rules: &SyncRules) -> Result<(), SideFailure> {
        Ok(())
    }

    fn scan(&mut self, _opts: &SideOptions) -> Result<SideScan, SideFailure> {
        Err(SideFailure::said("a source of a pair is not scanned"))
    }

    fn lookup(&mut self, _paths: &[RelPath], _opts: &SideOptions) -> Result<SideScan, SideFailure> {
        Err(SideFailure::said("a source of a pair is not looked up"))
    }

    fn record(&mut self, _records: &[ArchiveRecord]) -> Result<(), SideFailure> {
        Ok(())
    }
}

fn receive_of(action: Action) -> Receive {
    match action {
        Action::Delete { .. } => Receive::Delete,
        Action::CopyProps { .. } => Receive::Props,
        _ => Receive::Whole,
    }
}

/// Record in `holder`'s archive every settled version it holds, with its
/// vector (what it already held, as the scan found it).
fn record_holder(
    members: &mut [Member<'_>],
    holder: usize,
    items: &[SetItem],
    held: &Held,
    carried: &mut Carried,
) {
    let index = members[holder].index;
    let mut records = Vec::new();
    let mut versions = Vec::new();
    for item in items {
        let Outcome::Settled(settled) = &item.outcome else {
            continue;
        };
        if !settled.holders.contains(&index) {
            continue;
        }
        records.push(match held.observed(&item.path, holder) {
            Some(observed) => ArchiveRecord::Put(observed),
            None => ArchiveRecord::Remove(item.path.clone()),
        });
        versions.push((item.path.clone(), settled.vector.clone()));
        if records.len() == RECORDS_PER_BATCH {
            write_records(&mut members[holder], &mut records, &mut versions, carried);
        }
    }
    write_records(&mut members[holder], &mut records, &mut versions, carried);
}

fn write_records(
    member: &mut Member<'_>,
    records: &mut Vec<ArchiveRecord>,
    versions: &mut Vec<(RelPath, VersionVector)>,
    carried: &mut Carried,
) {
    if records.is_empty() {
        return;
    }
    if let Err(failure) = member.side.record_versions(records, versions) {
        // The next run finds these paths as this run did, and settles
        // them again.
        let why = failure.to_string();
        carried
            .failures
            .extend(versions.iter().map(|(path, _)| SetFailure {
                replica: member.name.clone(),
                failure: crate::sync::SyncFailure {
                    path: path.clone(),
                    error: crate::sync::SyncError::Archive(SideFailure::said(why.clone())),
                },
            }));
    }
    records.clear();
    versions.clear();
}

/// The settled versions' vectors, by path (the plan is in path order).
pub(crate) struct Vectors<'i>(pub &'i [SetItem]);

impl Vectors<'_> {
    fn get(&self, path: &RelPath) -> Option<&VersionVector> {
        let index = self.0.binary_search_by(|item| item.path.cmp(path)).ok()?;
        match &self.0[index].outcome {
            Outcome::Settled(settled) => Some(&settled.vector),
            Outcome::Conflict { .. } => None,
        }
    }
}

/// A member's side whose records carry the settled versions' vectors
/// (a rename's source: also those of what moved with it).
pub(crate) struct Versioned<'s, 'v> {
    inner: &'s mut (dyn SideSession + 's),
    vectors: &'v Vectors<'v>,
    renames: &'v Renames,
}

impl<'s, 'v> Versioned<'s, 'v> {
    pub(crate) fn new(
        inner: &'s mut (dyn SideSession + 's),
        vectors: &'v Vectors<'v>,
        renames: &'v Renames,
    ) -> Self {
        Versioned {
            inner,
            vectors,
            renames,
        }
    }
}

impl SideSession for Versioned<'_, '_> {
    fn created(&self) -> bool {
        self.inner.created()
    }

    fn forget(&mut self) -> Result<(), SideFailure> {
        self.inner.forget()
    }

    fn set_rules(&mut self, rules: &SyncRules) -> Result<(), SideFailure> {
        self.inner.set_rules(rules)
    }

    fn scan(&mut self, opts: &SideOptions) -> Result<SideScan, SideFailure> {
        self.inner.scan(opts)
    }

    fn lookup(&mut self, paths: &[RelPath], opts: &SideOptions) -> Result<SideScan, SideFailure> {
        self.inner.lookup(paths, opts)
    }

    fn record(&mut self, records: &[ArchiveRecord]) -> Result<(), SideFailure> {
        let paths = records.iter().flat_map(|record| {
            let (path, below) = match record {
                ArchiveRecord::Put(observed) => (&observed.entry.path, None),
                ArchiveRecord::Remove(path) => (path, Some(self.renames.moved_below(path))),
            };
            std::iter::once(path).chain(below.into_iter().flatten())
        });
        let versions: Vec<(RelPath, VersionVector)> = paths
            .filter_map(|path| self.vectors.get(path).map(|v| (path.clone(), v.clone())))
            .collect();
        self.inner.record_versions(records, &versions)
    }
}
